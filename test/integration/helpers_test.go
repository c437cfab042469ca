package integration_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// waitPodsRunning waits, polling every second until ctx ends, for n pods of namespace ns to be in
// phase Running; it returns ctx's error (framework.WaitFor's) otherwise.
func waitPodsRunning(ctx context.Context, client kubernetes.Interface, ns string, n int) error {
	return framework.WaitFor(ctx, time.Second, func() (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, nil
	})
}

// The shared control plane: one etcd + kube-apiserver (Node,RBAC + NodeRestriction) +
// kube-controller-manager (node lifecycle controller, the framework's default grace) for the whole package,
// started on first use, and one containerd with a CNI config (NetworkReady=true) for the tests that do not
// disturb their runtime. Each test uses its own node name; a control plane only knows the node identities it
// was started with, so every name used against it is listed here.
const (
	nodeRegistration  = "reg-labels-taints" // TestRegistrationInitialNode
	nodeRestart       = "reg-restart"       // TestRegistrationRestartReusesNode
	nodeNoRegister    = "reg-disabled"      // TestRegisterNodeFalse
	nodeStatus        = "status-full"       // TestNodeStatusReportsHost
	nodeImages        = "status-images"     // TestNodeStatusImages
	nodeLease         = "lease-renew"       // TestLeaseRenewal
	nodeRuntimeDown   = "runtime-down"      // TestContainerdDownAndUp
	nodeCNI           = "cni-removed"       // TestCNIConfigRemoved
	nodeLifecycle     = "lifecycle-5m"      // TestStaysReadyUnderNodeLifecycleController
	nodeSigterm       = "sigterm"           // TestSIGTERMExitsCleanly
	nodeMetrics       = "metrics"           // TestMetrics
	nodeMetricsErrors = "metrics-errors"    // TestMetricsErrorsByReason (a ServiceAccount, not a node identity)
	nodeEvents        = "events"            // TestEvents
	nodeBadConfig     = "bad-config"        // TestInvalidConfigRefusesToStart
	nodeSchedDefault  = "sched-default"     // TestSchedulerNoPodsOnStandaloneNode
	nodeSchedMaxPods  = "sched-max-pods"    // TestSchedulerNoPodsOnStandaloneNode
	nodeServiceAcct   = "deploy-sa"         // TestDeployManifestsRBAC (a ServiceAccount, not a node identity)
	nodeHealthz       = "healthz-apiserver" // TestHealthzAPIServerDown (dedicated control plane)
	// TestDaemonSetIdentityOwnNodeOnly: Nodes written as the DaemonSet's ServiceAccount, not node identities.
	nodeIdentityA = "identity-a"
	nodeIdentityB = "identity-b"
	nodeIdentityC = "identity-c"
)

var sharedNodeNames = []string{
	nodeRegistration, nodeRestart, nodeNoRegister, nodeStatus, nodeImages, nodeLease, nodeRuntimeDown, nodeCNI,
	nodeLifecycle, nodeSigterm, nodeMetrics, nodeEvents, nodeBadConfig, nodeSchedDefault, nodeSchedMaxPods,
	fidelityKubeletDefault, fidelityAgentDefault, fidelityKubeletFlags, fidelityAgentFlags,
	fidelityKubeletImageFs, fidelityAgentImageFs, nodeSimIdentity,
	nodeKubeletAPIAgent, nodeKubeletAPIRef, nodeKubeletAPILibrary,
}

// TestKubeletAPIAgent's agent and reference kubelet.
const (
	nodeKubeletAPIAgent = "kubelet-api-agent"
	nodeKubeletAPIRef   = "kubelet-api-kubelet"
	// TestKubeletAPILibrary's library Node.
	nodeKubeletAPILibrary = "kubelet-api-library"
)

// nodeSimIdentity is the node identity TestSimulateRBAC shows nodeagent simulate refusing (its own, so
// that no other test's audit-log checks see its requests).
const nodeSimIdentity = "sim-node-identity"

// sharedEnv is the package's shared control plane and containerd.
type sharedEnv struct {
	dir  string
	cp   *framework.ControlPlane
	ctrd *framework.Containerd
}

var (
	sharedMu      sync.Mutex
	sharedStarted *sharedEnv
	sharedOnce    = sync.OnceValues(startShared)
)

func startShared() (*sharedEnv, error) {
	if _, err := framework.EnsureBinaries(); err != nil {
		return nil, err
	}
	if _, err := framework.BuildAgent(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodeagent-integ-")
	if err != nil {
		return nil, fmt.Errorf("shared env dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := &sharedEnv{dir: dir}
	sharedMu.Lock()
	sharedStarted = e
	sharedMu.Unlock()
	e.cp, err = framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: dir + "/cp", NodeNames: sharedNodeNames, ControllerManager: true,
	})
	if err != nil {
		return nil, fmt.Errorf("shared control plane: %w", err)
	}
	e.ctrd, err = framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: dir + "/containerd", CNI: true})
	if err != nil {
		return nil, fmt.Errorf("shared containerd: %w", err)
	}
	if err := e.ctrd.WaitNetwork(ctx, true); err != nil {
		return nil, fmt.Errorf("shared containerd: %w", err)
	}
	return e, nil
}

// stop tears the shared environment down (whatever part of it was started).
func (e *sharedEnv) stop() {
	if e.ctrd != nil {
		e.ctrd.Close()
	}
	if e.cp != nil {
		e.cp.Stop()
	}
	_ = framework.UnmountAll(e.dir)
	_ = os.RemoveAll(e.dir)
}

// shared returns the package's shared environment, starting it on first use.
func shared(t *testing.T) *sharedEnv {
	t.Helper()
	e, err := sharedOnce()
	if err != nil {
		t.Fatalf("shared environment: %v", err)
	}
	return e
}

// TestMain tears the shared environment down after the tests. Unless -test.parallel was given, it raises
// the number of parallel tests from GOMAXPROCS (2 on CI) to 16: these tests mostly wait on the product's
// timers (status periods, lease renewals, the 30 s runtime threshold, a 5-minute soak), not on CPU, and
// running them side by side keeps the package within its time budget.
func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "16")
	}
	code := m.Run()
	sharedMu.Lock()
	if sharedStarted != nil {
		sharedStarted.stop()
	}
	sharedMu.Unlock()
	removeProxyAddress()
	os.Exit(code)
}

// startContainerd starts a containerd for one test (with a CNI config when cni is true, waiting for
// NetworkReady) and closes it when the test ends.
func startContainerd(t *testing.T, cni bool) *framework.Containerd {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: t.TempDir(), CNI: cni})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if cni {
		if err := c.WaitNetwork(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// startAgent starts nodeagent as node name (its node identity's kubeconfig) on runtime c with the
// extra args, for the duration of the test (framework.StartTestAgent).
func startAgent(t *testing.T, cp *framework.ControlPlane, name string, c *framework.Containerd, args ...string) *framework.Agent {
	t.Helper()
	return framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: name, Kubeconfig: cp.KubeconfigFor(name), RuntimeEndpoint: c.Endpoint, Args: args,
	})
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// kubeletAPIArgs are the flags that serve the kubelet API of an agent's Node, or of a simulation's Nodes
// from port on, at ip (--address, --node-ip, --port), verifying the client certificate of cp's API
// server (its --kubelet-client-certificate's CA as --client-ca-file), so that kubectl logs, exec and
// the node proxy reach them.
func kubeletAPIArgs(cp *framework.ControlPlane, ip string, port int) []string {
	return []string{"--address=" + ip, "--node-ip=" + ip, "--port=" + strconv.Itoa(port), "--client-ca-file=" + cp.KubeletClientCAFile}
}

// startSimulatedNode starts a control plane with the namespace ns and `nodeagent simulate` of one Node,
// <prefix>0000, whose kubelet API the API server reaches (kubeletAPIArgs): the setup of the tests that
// run pods' commands and read them through kubectl logs and exec. ctx bounds the control plane's start.
func startSimulatedNode(ctx context.Context, t *testing.T, ns, prefix string) *framework.ControlPlane {
	t.Helper()
	cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(t.TempDir(), "cp")})
	if err := cp.CreateNamespace(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	ip := hostAddress(t)
	startShard(t, 0, append([]string{"simulate", "--kubeconfig=" + cp.AdminKubeconfig, "--nodes=1", "--node-name-prefix=" + prefix,
		"--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(framework.FreePort())},
		kubeletAPIArgs(cp, ip, framework.FreePort())...), nil, framework.FreePort())
	return cp
}

// startSchedulingControlPlane starts a control plane (opts; Dir, when empty, under t.TempDir()) with
// kube-controller-manager running nodeipam (each Node a podCIDR of 10.244.0.0/16) and the controllers
// named, and kube-scheduler, and creates the namespaces: the setup of the tests whose pods the real
// scheduler binds to simulated Nodes (devices, claims, device plugins). ctx bounds the start.
func startSchedulingControlPlane(ctx context.Context, t *testing.T, opts framework.ControlPlaneOptions, namespaces []string, controllers ...string) *framework.ControlPlane {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(t.TempDir(), "cp")
	}
	opts.ControllerManager = true
	opts.ExtraControllerManagerArgs = []string{"--controllers=" + strings.Join(append([]string{"node-ipam-controller"}, controllers...), ","),
		"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24"}
	cp := framework.StartTestControlPlane(ctx, t, opts)
	if err := cp.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.StopScheduler() })
	for _, ns := range namespaces {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	return cp
}

// writeNodeTemplate writes template, a simulated Node template (docs/simulation.md, --node-template), to
// a file under t.TempDir() and returns its path.
func writeNodeTemplate(t *testing.T, template string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(path, []byte(template), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startTemplatedNodes starts `nodeagent simulate` of n Nodes, <prefix>0000 on, from the Node template
// at tmpl (writeNodeTemplate), against cp's API server as its admin, with args added, and waits up to
// 2 minutes for them to be Ready (ctx bounding the wait).
func startTemplatedNodes(ctx context.Context, t *testing.T, cp *framework.ControlPlane, prefix string, n int, tmpl string, args ...string) *simulator {
	t.Helper()
	sim := startSimulator(t, append([]string{"--kubeconfig=" + cp.AdminKubeconfig, "--nodes=" + strconv.Itoa(n),
		"--node-name-prefix=" + prefix, "--node-template=" + tmpl}, args...)...)
	waitNodesReady(ctx, t, cp.AdminClient, sim, n, 2*time.Minute)
	return sim
}
