package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/pkg/simulation"
	"github.com/nodeagent/nodeagent/test/framework"
)

// The simulation overlay's names (deploy/kubernetes/simulate).
const (
	simOverlay     = "deploy/kubernetes/simulate"
	simNamespace   = "nodeagent-simulation"
	simStatefulSet = "nodeagent-simulate"
	simAccount     = "nodeagent-simulator"
	labelShard     = "nodeagent.io/simulation-shard"
)

// renderSimOverlay renders deploy/kubernetes/simulate with `kubectl kustomize` and returns its objects.
func renderSimOverlay(t *testing.T, cp *framework.ControlPlane) []*unstructuredObject {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cp.Kubectl(t.Context(), "kustomize", filepath.Join(root, simOverlay))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructuredObject
	for _, doc := range strings.Split(out, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("rendered %s: %v\n%s", simOverlay, err, doc)
		}
		objs = append(objs, &unstructuredObject{kind: gvk.Kind, obj: obj})
	}
	return objs
}

type unstructuredObject struct {
	kind string
	obj  any
}

// simStatefulSetOf returns the StatefulSet among the rendered objects.
func simStatefulSetOf(t *testing.T, objs []*unstructuredObject) *appsv1.StatefulSet {
	t.Helper()
	for _, o := range objs {
		if sts, ok := o.obj.(*appsv1.StatefulSet); ok && sts.Name == simStatefulSet {
			return sts
		}
	}
	t.Fatalf("%s renders no StatefulSet %s", simOverlay, simStatefulSet)
	return nil
}

// shardProcess is one shard started as a pod of the StatefulSet would be.
type shardProcess struct {
	*simulator
	index int
	args  []string
	env   []string
}

// simSelector selects the overlay's simulation (--node-name-prefix=sim-), not the Node the shard pods
// are bound to in TestShards (another simulation, shardhost-).
var simSelector = simulation.LabelSimulation + "=" + simulation.SimulationID("sim-")

// podArgs returns the pod template's command line for the nodeagent container, with the values a pod
// on this test machine gets differently: the binary (the image's /usr/local/bin/nodeagent), the
// kubeconfig (a pod uses its ServiceAccount's token through the in-cluster config; here the same
// account's token in a kubeconfig), the port (pods have a network namespace each; these processes
// share the host's), and --nodes (the test's size, 300 per shard, instead of the overlay's). Everything
// else is the template's, verbatim. It also returns the container's environment for pod name.
func podArgs(t *testing.T, sts *appsv1.StatefulSet, kubeconfig string, port, nodes int, podName string) (args, env []string) {
	t.Helper()
	var c *corev1.Container
	for i := range sts.Spec.Template.Spec.Containers {
		if sts.Spec.Template.Spec.Containers[i].Name == "nodeagent" {
			c = &sts.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatal("the StatefulSet has no nodeagent container")
	}
	if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "nodeagent" {
		t.Fatalf("the container's command %q is not nodeagent", c.Command)
	}
	replaced := map[string]bool{}
	for _, a := range c.Args {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--healthz-port":
			a = "--healthz-port=" + strconv.Itoa(port)
		case "--nodes":
			a = "--nodes=" + strconv.Itoa(nodes)
		case "--kubeconfig":
			t.Fatalf("the pod template sets %s: pods use the in-cluster config", a)
		}
		replaced[name] = true
		args = append(args, a)
	}
	for _, want := range []string{"--healthz-port", "--nodes", "--shards", "--shard-index-from-pod-name", "--delete-nodes-on-exit"} {
		if !replaced[want] {
			t.Fatalf("the pod template's args %q lack %s", c.Args, want)
		}
	}
	args = append(args, "--kubeconfig="+kubeconfig)
	// The pod IP (--node-ip=$(POD_IP), the kubelet API's listeners): one loopback address per shard, as
	// each pod has an IP of its own, so the shards' Nodes take the same ports without sharing them.
	ordinal, err := simulation.ShardFromPodName(podName)
	if err != nil {
		t.Fatal(err)
	}
	podIP := fmt.Sprintf("127.0.0.%d", 10+ordinal)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			env = append(env, e.Name+"="+podIP)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "$("+e.Name+")", podIP)
			}
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+podName)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+sts.Namespace)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Fatalf("env %s: a source this test does not provide", e.Name)
		}
	}
	return args, env
}

// startShard runs `nodeagent <args>` with env added, logging to a file; it is SIGKILLed (process
// group) when the test ends if still running.
func startShard(t *testing.T, index int, args, env []string, port int) *shardProcess {
	t.Helper()
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	s := &simulator{base: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: filepath.Join(t.TempDir(), fmt.Sprintf("shard-%d.log", index)), done: make(chan struct{})}
	logf, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, append(args, "-v=2")...)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.pid = s.cmd.Process.Pid
	go func() { s.err = s.cmd.Wait(); logf.Close(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = syscall.Kill(-s.pid, syscall.SIGKILL)
			<-s.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(s.logPath)
			t.Logf("shard %d log (tail):\n%s", index, framework.TailLines(string(b), 20))
		}
	})
	return &shardProcess{simulator: s, index: index, args: args, env: env}
}

// exited reports whether the process has exited.
func (s *shardProcess) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// shardNodes lists the simulated Nodes of shard (all shards when shard < 0), by name.
func shardNodes(ctx context.Context, c kubernetes.Interface, shard int) (map[string]*corev1.Node, error) {
	sel := "nodeagent.io/simulated=true," + simSelector // not the shard pods' own Node (shardhost-)
	if shard >= 0 {
		sel += "," + labelShard + "=" + strconv.Itoa(shard)
	}
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Node{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// waitShardReady waits until shard's nodes Nodes (sim-<first>...) all exist with ready status, and
// returns them.
func waitShardReady(t *testing.T, c kubernetes.Interface, shard, nodes int, status corev1.ConditionStatus, timeout time.Duration, running ...*shardProcess) map[string]*corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var got map[string]*corev1.Node
	var last string
	var n int
	err := framework.WaitFor(ctx, time.Second, func() (bool, error) {
		for _, p := range running {
			if p.exited() {
				return false, fmt.Errorf("shard %d exited: %v: %w", p.index, p.err, framework.ErrStop)
			}
		}
		var err error
		if got, err = shardNodes(ctx, c, shard); err != nil {
			return false, err
		}
		n = 0
		for i := shard * nodes; i < (shard+1)*nodes; i++ {
			node := got[fmt.Sprintf("sim-%04d", i)]
			if node == nil {
				last = fmt.Sprintf("sim-%04d missing", i)
				continue
			}
			if r := framework.NodeCondition(node, corev1.NodeReady); r != nil && r.Status == status {
				n++
			} else {
				last = node.Name + ": " + framework.DescribeReady(node)
			}
		}
		return n == nodes && len(got) == nodes, nil
	})
	if err != nil {
		t.Fatalf("shard %d: %d of %d Nodes Ready=%s within %v (e.g. %s): %v", shard, n, nodes, status, timeout, last, err)
	}
	return got
}

// expectRefused waits up to 60 s for the shard process p, started as what, to exit, and checks that
// it exited 1 with want in its log.
func expectRefused(t *testing.T, what string, p *shardProcess, want string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit within 60 s", what)
	}
	log, _ := os.ReadFile(p.logPath)
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(log), want) {
		t.Errorf("%s: %v, want exit 1 and %q; log:\n%s", what, p.err, want, framework.TailLines(string(log), 5))
	}
}

// hostAddress returns an IPv4 address of this machine that is not loopback, for the API server's node
// and pod proxies (which refuse loopback addresses): a global unicast address of an interface other
// than lo, else proxyAddress, added to lo once per test process and removed when the tests end
// (TestMain), not when one test ends: tests running in parallel share it. An address another test
// package added to lo (and may remove at any time) is never chosen.
func hostAddress(t *testing.T) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagLoopback != 0 || iface.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	if err := addProxyAddress(); err != nil {
		t.Fatal(err)
	}
	return proxyAddress
}

// addProxyAddress adds proxyAddress to lo once per process ("File exists": a run killed before its
// cleanup left it; it serves as well); removeProxyAddress removes it at the end of TestMain.
var addProxyAddress = sync.OnceValue(func() error {
	if out, err := exec.Command("ip", "addr", "add", proxyAddress+"/32", "dev", "lo").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
		return fmt.Errorf("no global unicast IPv4 address for the API server's proxies, and adding %s to lo failed (the tests run as root, with iproute2): %w: %s", proxyAddress, err, out)
	}
	proxyAddressAdded.Store(true)
	return nil
})

var proxyAddressAdded atomic.Bool

func removeProxyAddress() {
	if proxyAddressAdded.Load() {
		_ = exec.Command("ip", "addr", "del", proxyAddress+"/32", "dev", "lo").Run()
	}
}

// TestHostAddressNotFromLoopback: an address another test package added to lo (test/quickstart's
// 198.18.0.47, removed when its test ends) is never hostAddress's choice. TestKubeletAPIFlood's
// `kubectl logs` of a pod on Node 1 hung its whole 20 s with no byte when its Nodes' --node-ip was
// such an address and it was removed mid-test: the API server's dial to the Node then left through
// the default route and was never answered, while everything on 127.0.0.1 (the flood, the healthz
// port, the Leases) went on.
func TestHostAddressNotFromLoopback(t *testing.T) {
	const other = "198.18.0.251"
	if out, err := exec.Command("ip", "addr", "add", other+"/32", "dev", "lo").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
		t.Fatalf("adding %s to lo (the tests run as root, with iproute2): %v: %s", other, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", other+"/32", "dev", "lo").Run() })
	ip := hostAddress(t)
	if ip == proxyAddress {
		return // this process's own, removed at its end
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range ifaces {
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.String() == ip && iface.Flags&net.FlagLoopback != 0 {
				t.Errorf("hostAddress chose %s of %s, which another package may remove at any time", ip, iface.Name)
			}
		}
	}
}

// proxyAddress is in 198.18.0.0/15 (RFC 2544, benchmarking): on no real network.
const proxyAddress = "198.18.0.1"

// TestShards runs the simulation as the StatefulSet of deploy/kubernetes/simulate would, on its own
// control plane with kube-controller-manager (node lifecycle controller, 20 s grace; garbage collector):
//   - the overlay is applied with `kubectl apply -k`; three shard processes are started with the pod
//     template's own arguments and environment (read from the rendered overlay, see podArgs), each as
//     its pod with that pod's name, with the overlay's ServiceAccount; 300 Nodes each;
//   - all 900 are Ready, each labelled with its shard, with Leases renewed by its shard's instance;
//   - `nodeagent simulate ctl` flips a Node of shard 1 and lists all 900, through port-forward to pods
//     whose (simulated) kubelet forwards to the shard processes' loopback; a request to a shard from a
//     peer that is not loopback, with the API server proxy's X-Forwarded-Uri forged, is refused;
//   - a second process with index 1 refuses to start (naming the other instance), and so does one with
//     --shards 1 while Nodes of shard 1 exist;
//   - shard 1 is killed (SIGKILL): exactly its 300 Nodes go Unknown through the node lifecycle
//     controller, and none of the other 600 changes; restarted, the same 300 Nodes (same UIDs) are Ready;
//   - shard 2 stops cleanly (SIGTERM, --delete-nodes-on-exit=true from the template): its 300 Nodes are
//     deleted and their Leases go with them (garbage collector), the others stay; a simulation without
//     the flag leaves its Nodes.
//
// "None of the other 600 changes" is a timing under load: `make test` runs it alone, after every
// other test (the Makefile's ALONE_TESTS).
func TestShards(t *testing.T) {
	t.Parallel()
	const (
		shards = 3
		nodes  = 300
	)
	ctx := t.Context()
	dir := t.TempDir()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "cp"), ControllerManager: true, NodeMonitorGracePeriod: 20 * time.Second,
		// The node lifecycle controller writes each Node that stops (status, then the unreachable taint);
		// at its default 20 QPS, 300 at once take minutes. The garbage collector deletes the Leases of
		// deleted Nodes (their owner). (--controllers repeated: the list appends.)
		ExtraControllerManagerArgs: []string{"--kube-api-qps=200", "--kube-api-burst=400", "--controllers=garbagecollector"},
	})
	admin := cp.AdminClient
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The server-side dry run needs the namespace the objects go to (a dry-run Namespace is not created).
	if _, err := cp.Kubectl(ctx, "create", "namespace", simNamespace); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "--dry-run=server", "-k", filepath.Join(root, simOverlay)); err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k %s: %v", simOverlay, err)
	} else {
		t.Logf("dry run:\n%s", out)
	}
	if _, err := cp.Kubectl(ctx, "apply", "-k", filepath.Join(root, simOverlay)); err != nil {
		t.Fatal(err)
	}
	sts := simStatefulSetOf(t, renderSimOverlay(t, cp))
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != shards {
		t.Fatalf("the overlay's replicas %v; this test runs %d shards", sts.Spec.Replicas, shards)
	}
	kubeconfig, err := cp.ServiceAccountKubeconfig(ctx, simNamespace, sts.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}

	// The pods, as the StatefulSet controller makes them, bound to a Node of their own whose kubelet is a
	// simulated one (a `nodeagent simulate` of one Node with the kubelet API): the operator names each shard
	// process's port as a port-forward target there, and each pod's annotation picks its shard's, so that a
	// port-forward to pod I (as ctl makes) reaches shard I's loopback, as a kubelet's reaches a pod's.
	ip := hostAddress(t)
	ports := make([]int, shards)
	hostArgs := []string{"simulate", "--kubeconfig=" + cp.AdminKubeconfig, "--nodes=1", "--node-name-prefix=shardhost-",
		"--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(framework.FreePort()),
	}
	hostArgs = append(hostArgs, kubeletAPIArgs(cp, ip, framework.FreePort())...)
	for i := range shards {
		ports[i] = framework.FreePort()
		hostArgs = append(hostArgs, fmt.Sprintf("--port-forward-target=shard-%d=127.0.0.1:%d", i, ports[i]))
	}
	startShard(t, shards, hostArgs, nil, framework.FreePort())
	for i := range shards {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", simStatefulSet, i), Namespace: simNamespace, Labels: sts.Spec.Template.Labels,
				Annotations: map[string]string{"nodeagent.io/port-forward": fmt.Sprintf(`{"*": {"target": "shard-%d"}}`, i)}},
			Spec: *sts.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = "shardhost-0000"
		if _, err := admin.CoreV1().Pods(simNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	checkOverlayRBAC(t, cp, simStatefulSet+"-0")

	start := time.Now()
	procs := make([]*shardProcess, shards)
	for i := range shards {
		args, env := podArgs(t, sts, kubeconfig, ports[i], nodes, fmt.Sprintf("%s-%d", simStatefulSet, i))
		if i == 0 {
			t.Logf("shard command line (from the pod template): %q, env %q", args, env)
		}
		procs[i] = startShard(t, i, args, env, ports[i])
	}
	uids := map[string]types.UID{}
	for i := range shards {
		for name, n := range waitShardReady(t, admin, i, nodes, corev1.ConditionTrue, 3*time.Minute, procs...) {
			uids[name] = n.UID
		}
	}
	t.Logf("all %d Nodes Ready %v after start", len(uids), time.Since(start).Round(time.Second))
	// Every Lease renewed since start by the instance of its own shard, owned by its Node (the owner
	// reference is set at the first renewal after the Node exists).
	var leaseProblem string
	lctx, lcancel := context.WithTimeout(ctx, time.Minute)
	defer lcancel()
	err = framework.WaitFor(lctx, 2*time.Second, func() (bool, error) {
		leases, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(lctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		instances := map[int]map[string]bool{}
		renewed := 0
		leaseProblem = ""
		for _, l := range leases.Items {
			if _, ok := uids[l.Name]; !ok {
				continue
			}
			i, _ := strconv.Atoi(strings.TrimPrefix(l.Name, "sim-"))
			if instances[i/nodes] == nil {
				instances[i/nodes] = map[string]bool{}
			}
			instances[i/nodes][l.Annotations["nodeagent.io/instance"]] = true
			if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(start) && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == uids[l.Name] {
				renewed++
			} else if leaseProblem == "" {
				leaseProblem = fmt.Sprintf("e.g. %s: renewed %v, owners %v", l.Name, l.Spec.RenewTime, l.OwnerReferences)
			}
		}
		for i := range shards {
			if len(instances[i]) != 1 {
				leaseProblem = fmt.Sprintf("shard %d's Leases written by instances %v, want one", i, instances[i])
				return false, nil
			}
		}
		if renewed != shards*nodes {
			leaseProblem = fmt.Sprintf("%d of %d Leases renewed since start and owned by their Node; %s", renewed, shards*nodes, leaseProblem)
		}
		return renewed == shards*nodes, nil
	})
	if err != nil {
		t.Errorf("Leases: %s: %v", leaseProblem, err)
	}

	// Control across shards, from outside the cluster: ctl finds sim-0450's shard (1) and reaches its
	// pod through port-forward.
	ctl := func(args ...string) (string, error) {
		bin, err := framework.BuildAgent()
		if err != nil {
			return "", err
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, bin, append([]string{"simulate", "ctl", "--kubeconfig=" + cp.AdminKubeconfig, "--nodes=" + strconv.Itoa(nodes)}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := ctl("sim-0450", "--memory-pressure=true")
	if err != nil || !strings.Contains(out, `"name": "sim-0450"`) || !strings.Contains(out, `"memoryPressure": true`) {
		t.Fatalf("ctl sim-0450 --memory-pressure=true: %v\n%s", err, out)
	}
	framework.WaitNode(ctx, t, admin, "sim-0450", 30*time.Second, "MemoryPressure=True", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeMemoryPressure)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "KubeletHasInsufficientMemory"
	})
	if out, err := ctl("sim-0450", "--memory-pressure=false"); err != nil {
		t.Fatalf("ctl sim-0450 --memory-pressure=false: %v\n%s", err, out)
	}
	framework.WaitNode(ctx, t, admin, "sim-0450", 30*time.Second, "MemoryPressure=False", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeMemoryPressure)
		return c != nil && c.Status == corev1.ConditionFalse
	})
	// The Node's simulated usage (issue 37), through the same pod proxy.
	if out, err := ctl("sim-0450", "--cpu=1", "--memory=1Gi"); err != nil || !strings.Contains(out, `"baseCPU": "1"`) || !strings.Contains(out, `"baseMemory": "1Gi"`) {
		t.Errorf("ctl sim-0450 --cpu=1 --memory=1Gi: %v\n%s", err, out)
	}
	out, err = ctl("--list")
	var list struct {
		Summary struct{ Total, Running, Ready int }
		Nodes   []struct{ Name string }
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("ctl --list: %v\n%.500s", err, out)
	}
	if list.Summary.Total != shards*nodes || list.Summary.Ready != shards*nodes || len(list.Nodes) != shards*nodes {
		t.Errorf("ctl --list: summary %+v, %d nodes; want %d Ready", list.Summary, len(list.Nodes), shards*nodes)
	}
	if out, err := ctl("sim-0900", "--stopped=true"); err == nil || !strings.Contains(out, "index 900 is beyond the simulation's 900 Nodes") {
		t.Errorf("ctl sim-0900: %v\n%s", err, out)
	}
	// Issue 45, item 3: another pod (a peer that is not loopback: this machine's address ip) forges the
	// API server proxy's X-Forwarded-Uri for shard 1's pod; the shard serves on 0.0.0.0 as in the
	// StatefulSet, and refuses it.
	forged := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s:%d/simulation/nodes/sim-0450", ip, ports[1]), strings.NewReader(`{"runtimeReady":false}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-Uri", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s-1/proxy/simulation/nodes/sim-0450", simNamespace, simStatefulSet))
	if resp, err := forged.Do(req); err != nil {
		t.Errorf("forged request: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a forged X-Forwarded-Uri from %s: %s %s, want 403", ip, resp.Status, body)
		}
	}

	// A second process with index 1 while the first runs: refused, naming the other instance.
	dupPort := framework.FreePort()
	dupArgs, dupEnv := podArgs(t, sts, kubeconfig, dupPort, nodes, simStatefulSet+"-1")
	expectRefused(t, "a second process with index 1", startShard(t, 1, dupArgs, dupEnv, dupPort), "nodeagent: --shard-index 1: another instance, ")
	// K lowered while Nodes of shard 1 exist: refused before any write.
	lowPort := framework.FreePort()
	lowArgs, lowEnv := podArgs(t, sts, kubeconfig, lowPort, nodes, simStatefulSet+"-0")
	lowArgs = append(lowArgs, "--shards=1")
	expectRefused(t, "--shards 1 with Nodes of shards 1 and 2", startShard(t, 0, lowArgs, lowEnv, lowPort), "nodeagent: --shards 1: node sim-0")

	// Kill shard 1: exactly its 300 Nodes go Unknown through the node lifecycle controller.
	others := map[string]*corev1.Node{}
	for _, s := range []int{0, 2} {
		m, err := shardNodes(ctx, admin, s)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			others[k] = v
		}
	}
	otherList, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: simSelector + "," + labelShard + " in (0,2)"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	rec := recordConditions(rctx, admin, simSelector+","+labelShard+" in (0,2)", otherList)
	killed := time.Now()
	if err := syscall.Kill(-procs[1].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[1].done
	unknown := waitShardReady(t, admin, 1, nodes, corev1.ConditionUnknown, 2*time.Minute, procs[0], procs[2])
	t.Logf("shard 1's %d Nodes Unknown %v after SIGKILL", len(unknown), time.Since(killed).Round(time.Second))
	for name, n := range unknown {
		if r := framework.NodeCondition(n, corev1.NodeReady); r.Reason != "NodeStatusUnknown" {
			t.Errorf("%s: Ready %s %s, want NodeStatusUnknown", name, r.Status, r.Reason)
		}
	}
	// Restart it with the same command line: the same Nodes, Ready again.
	procs[1] = startShard(t, 1, procs[1].args, procs[1].env, ports[1])
	restarted := waitShardReady(t, admin, 1, nodes, corev1.ConditionTrue, 2*time.Minute, procs...)
	for name, n := range restarted {
		if n.UID != uids[name] {
			t.Errorf("%s: UID %s after the restart, was %s", name, n.UID, uids[name])
		}
	}
	t.Logf("shard 1 Ready again %v after its SIGKILL", time.Since(killed).Round(time.Second))
	rcancel()
	changes, err := rec.result()
	if err != nil {
		t.Error(err)
	}
	for _, c := range changes {
		t.Errorf("a Node of another shard changed while shard 1 was down: %s", c)
	}
	for _, s := range []int{0, 2} {
		now, err := shardNodes(ctx, admin, s)
		if err != nil {
			t.Fatal(err)
		}
		for name, n := range now {
			if n.UID != others[name].UID || !framework.IsReady(n) {
				t.Errorf("%s: %s %s, was %s", name, n.UID, framework.DescribeReady(n), others[name].UID)
			}
		}
	}

	// A clean exit of shard 2 (SIGTERM; --delete-nodes-on-exit=true from the template): its Nodes and
	// their Leases are deleted, the other shards' stay.
	if err := procs[2].stop(90 * time.Second); err != nil {
		t.Errorf("shard 2 did not exit cleanly: %v", err)
	}
	err = framework.WaitFor(ctx, time.Second, func() (bool, error) {
		m, err := shardNodes(ctx, admin, 2)
		return len(m) == 0, err
	})
	if err != nil {
		t.Errorf("shard 2's Nodes not deleted: %v", err)
	}
	// Their Leases go with them: each is owned by its Node (checked above), and the garbage collector
	// deletes it.
	gctx, gcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer gcancel()
	err = framework.WaitFor(gctx, time.Second, func() (bool, error) {
		leases, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(gctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		left := 0
		for _, l := range leases.Items {
			if i, err := strconv.Atoi(strings.TrimPrefix(l.Name, "sim-")); err == nil && strings.HasPrefix(l.Name, "sim-") && i/nodes == 2 {
				left++
			}
		}
		return left == 0, nil
	})
	if err != nil {
		t.Errorf("the Leases of shard 2's deleted Nodes were not garbage collected: %v", err)
	}
	for _, s := range []int{0, 1} {
		if m, err := shardNodes(ctx, admin, s); err != nil || len(m) != nodes {
			t.Errorf("shard %d: %d Nodes after shard 2 left, want %d (%v)", s, len(m), nodes, err)
		}
	}

	// Without --delete-nodes-on-exit (the binary's default), a clean exit leaves the Nodes.
	keepPort := framework.FreePort()
	keep := startShard(t, 9, []string{"simulate", "--kubeconfig=" + kubeconfig, "--nodes=3", "--node-name-prefix=keep-",
		"--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(keepPort), "--port=0"}, nil, keepPort)
	kctx, kcancel := context.WithTimeout(ctx, time.Minute)
	defer kcancel()
	for i := range 3 {
		framework.WaitReady(kctx, t, admin, fmt.Sprintf("keep-%04d", i), time.Minute)
	}
	if err := keep.stop(30 * time.Second); err != nil {
		t.Errorf("keep- simulation did not exit cleanly: %v", err)
	}
	time.Sleep(2 * time.Second) // a deletion, if any, would be done within this
	for i := range 3 {
		if _, err := admin.CoreV1().Nodes().Get(ctx, fmt.Sprintf("keep-%04d", i), metav1.GetOptions{}); err != nil {
			t.Errorf("keep-%04d after a clean exit without --delete-nodes-on-exit: %v", i, err)
		}
	}
}

// checkOverlayRBAC: the overlay's ServiceAccount may do what a shard does (register, label and
// delete Nodes, patch their status, write Leases in kube-node-lease, Events in default) and nothing
// else: a Pod cannot be deleted nor proxied to, a Secret neither read nor written, a Lease elsewhere
// not written. victim is a pod of the simulation's namespace.
func checkOverlayRBAC(t *testing.T, cp *framework.ControlPlane, victim string) {
	t.Helper()
	ctx := t.Context()
	kubeconfig, err := cp.ServiceAccountKubeconfig(ctx, simNamespace, simAccount)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	const name = "rbac-sim-0000"
	t.Cleanup(func() { _ = framework.DeleteNode(context.Background(), cp.AdminClient, name) })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nodeagent.io/simulated": "true"}}}
	created, err := sa.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("service account: registering a Node: %v", err)
	}
	for what, err := range map[string]error{
		"labelling its Node": func() error {
			_, err := sa.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"`+labelShard+`":"0"}}}`), metav1.PatchOptions{})
			return err
		}(),
		"patching its status": func() error {
			_, err := sa.CoreV1().Nodes().PatchStatus(ctx, name, []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`))
			return err
		}(),
		"creating its Lease": func() error {
			l := newNodeLease(name)
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: created.UID}}
			_, err := sa.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, l, metav1.CreateOptions{})
			return err
		}(),
		"reading its Lease": func() error {
			_, err := sa.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			return err
		}(),
		"recording an Event": func() error {
			_, err := sa.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: name + "."},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: name}, Reason: "Starting", Type: corev1.EventTypeNormal,
			}, metav1.CreateOptions{})
			return err
		}(),
	} {
		if err != nil {
			t.Errorf("service account %s: %v", what, err)
		}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for what, err := range map[string]error{
		// Deleting pods is granted (a deleted pod's containers stopped, the simulation deletes it with grace
		// 0, as a kubelet does); creating or changing them is not.
		"creating a Pod": func() error {
			_, err := sa.CoreV1().Pods(simNamespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, dryRun)
			return err
		}(),
		"changing a Pod's spec": func() error {
			_, err := sa.CoreV1().Pods(simNamespace).Patch(ctx, victim, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`),
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}(),
		"writing a Secret": func() error {
			_, err := sa.CoreV1().Secrets(simNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, dryRun)
			return err
		}(),
		"reading Secrets": func() error {
			_, err := sa.CoreV1().Secrets(simNamespace).List(ctx, metav1.ListOptions{})
			return err
		}(),
		"writing a Lease outside kube-node-lease": func() error {
			l := newNodeLease(name)
			l.Namespace = simNamespace
			_, err := sa.CoordinationV1().Leases(simNamespace).Create(ctx, l, dryRun)
			return err
		}(),
		"proxying to its pods": func() error {
			// The pod's own port, where nothing listens yet: an allowed request would get 503, not 403.
			_, err := sa.CoreV1().Pods(simNamespace).ProxyGet("", victim, "", "/simulation/nodes", nil).DoRaw(ctx)
			return err
		}(),
	} {
		// A proxied answer's body is not decoded as a Status: only its code says Forbidden.
		if !apierrors.IsForbidden(err) || (!strings.Contains(err.Error(), "cannot ") && what != "proxying to its pods") {
			var status apierrors.APIStatus
			if errors.As(err, &status) {
				t.Errorf("service account %s: %v (%+v), want Forbidden by RBAC", what, err, status.Status())
				continue
			}
			t.Errorf("service account %s: %v, want Forbidden by RBAC", what, err)
		}
	}
	// Delete, last (--delete-nodes-on-exit).
	if err := sa.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("service account: deleting its Node: %v", err)
	}
}
