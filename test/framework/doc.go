// Package framework starts the real components nodeagent is tested against, for integration tests,
// benchmarks and hack/localup: etcd + kube-apiserver (+ kube-controller-manager), a private containerd
// with its CRI plugin, and the nodeagent binary itself.
//
// Every component is a child process started with os/exec in its own process group, listening on
// 127.0.0.1 (ports picked free at run time) or on a unix socket under the caller's directory, logging to
// a file in that directory. Each Start function returns a handle that stops its process by PID (SIGTERM,
// wait, SIGKILL fallback) and unmounts whatever it left mounted under its directory. Callers own cleanup:
// ControlPlane.Stop, Agent.Stop, and Containerd.Close (Containerd.Stop only stops it for a later Start):
//
//	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir(), NodeNames: []string{"n1"}})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(cp.Stop)
//	rt, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: t.TempDir()})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(rt.Close)
//	agent, err := framework.StartAgent(ctx, framework.AgentOptions{Dir: t.TempDir(), NodeName: "n1",
//		Kubeconfig: cp.KubeconfigFor("n1"), RuntimeEndpoint: rt.Endpoint})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(func() { _ = agent.Stop() })
//
// Tests use the helpers built on these: StartTestAgent (an agent stopped, and its log shown on failure, when
// the test ends); StartTestControlPlane (likewise, with the tail of kube-controller-manager's log);
// ControlPlane.CreateNamespace (a namespace with its default ServiceAccount, for pods); WaitNode, WaitReady, WaitLease and WaitLeaseRenewals (poll the API server until a condition
// holds, failing the test with the last state seen); NodeCondition, IsReady, DescribeReady, LeaseOwnedBy,
// LeaseRenewedAfter and DescribeLease for conditions and messages; ListNodeEvents and EventCount; Metrics
// (a /metrics scrape parsed with expfmt: Agent.Metrics, WaitMetrics); ReadAuditEventsBy. Each waits by polling
// against a deadline, never by sleeping. ListenNotify (ListenTestNotify) is a NOTIFY_SOCKET as systemd
// listens on it, recording the agent's READY=1, WATCHDOG=1 and STOPPING=1 messages.
//
// StartKubelet (NewKubelet, then Start) runs the reference kubelet for a node name against the control plane
// and a containerd, with the KubeletConfiguration known to work on these machines (cgroup v1, cgroupfs, no QoS
// cgroups); StartTestKubelet stops it when the test ends. test/bench compares nodeagent with it, and
// test/integration runs nodeagent --companion beside it.
//
// StartHollowNode runs kubemark's hollow node (the kubelet's code over a fake runtime: a second pod reference
// that needs no container runtime, 80 to 90 MiB of RSS per Node) for a node name against the control plane, in a mount
// namespace whose /tmp is under the caller's directory, with a --kubelet-port of its own; HollowNode.PID is
// for /proc measurements, StartTestHollowNode stops it when the test ends. TestPodFidelity compares simulated
// pods with its pods as with the kubelet's.
//
// StartDRATestDriver runs the e2e suite's DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver's
// kubelet-plugin, built from hack/dra-test-driver by EnsureDRATestDriver) as the reference kubelet's DRA
// driver, registered through the kubelet's plugin registration directory, with the identity
// ControlPlane.DRATestDriverKubeconfig gives it (the suite's own RBAC and admission policy, a token bound to a
// pod on the kubelet's Node); StartTestDRATestDriver stops it when the test ends. TestDRAFidelity compares a
// simulated pod with a claim with its pod.
//
// ControlPlane.StartScheduler adds the real kube-scheduler to a running control plane, ControlPlane.Kubectl runs
// kubectl as admin, and PodServiceAccountKubeconfig mints a service-account token bound to a pod on a node.
//
// StartCloudNodeController (NewCloudNodeController, then Start; NewTestCloudNodeController and
// StartTestCloudNodeController stop it when the test ends) runs an external cloud provider against a control plane: k8s.io/cloud-provider's cloud node
// controller and cloud node lifecycle controller over its fake cloud, which initialise Nodes registered with
// --cloud-provider=external (providerID CloudProviderID(name), instance type, zone, region, ExternalIP).
//
// For benchmarks: StartProcess runs any other binary the same way (test/benchscale runs KWOK with it);
// ControlPlane.PIDs, ReadProcCPU and ReadProcStats give what each process costs the machine; AuditLogSize and
// ReadAuditEventsRange read the audit log written during a window.
//
// Binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl,
// cloud-node-controller, kubemark) come from
// hack/install-deps.sh, which builds them from the hack/tools module into _output/bin once; call
// EnsureBinaries first (Start functions call it themselves). A program that runs only some of them
// (hack/localup) calls UseBinarySet first, so that only those are built.
package framework
