package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/benchkit"
	"github.com/nodeagent/nodeagent/test/framework"
)

var (
	nodeClaimsGVR      = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
	nodePoolsGVR       = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	kwokNodeClassesGVR = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

// karpenterUnregisteredTaint is Karpenter's karpenter.sh/unregistered taint (v1.UnregisteredNoExecuteTaint),
// which its kwok provider puts on every Node it creates and Karpenter removes once the Node registered.
const karpenterUnregisteredTaint = "karpenter.sh/unregistered"

// karpenterScenario is one Deployment Karpenter provisions for: replicas pods requesting cpu each, on
// instance types of fewer than maxInstanceCPU CPUs, all Running within running, held so for steady,
// and all gone within gone after the scale to 0, the whole run within total.
type karpenterScenario struct {
	replicas             int32
	cpu, maxInstanceCPU  string
	running, gone, total time.Duration
	steady               time.Duration
	minNodes             int
}

// karpenterTest is TestKarpenter's scenario: at 1500m of CPU each, more than one Node's worth on any
// instance type of 4 CPUs or fewer; held Running for 12 s, more than a Lease renew interval (10 s), so
// that every Lease renews at least once in the window.
var karpenterTest = karpenterScenario{replicas: 6, cpu: "1500m", maxInstanceCPU: "5",
	running: 150 * time.Second, gone: 120 * time.Second, steady: 12 * time.Second, total: 3 * time.Minute, minNodes: 2}

// karpenterRun is what one backend's run of TestKarpenter measured.
type karpenterRun struct {
	backend   string
	running   time.Duration // from the Deployment's create to all its pods Running
	gone      time.Duration // from the scale to 0 to no Node and no NodeClaim left
	cpu       time.Duration // the backend process's CPU from its start to the end
	karpenter time.Duration // Karpenter's CPU over the same run
	rss       int64         // the backend's RSS with every pod Running, bytes
	nodes     int           // Nodes Karpenter created for the pods

	// window is from the Deployment's create to the scale to 0 (scale-up, then steady with every pod
	// Running); leaseIntervals (sorted) are, for each Lease in kube-node-lease, the differences between
	// consecutive spec.renewTimes among the updates the watch received in it (benchkit.LeaseTracker).
	window         time.Duration
	leaseIntervals []time.Duration

	// What was left when the wait after the scale to 0 ended (all 0 unless it timed out).
	nodesLeft, claimsLeft, podsLeft int
}

// TestKarpenter runs Karpenter's kwok provider (sigs.k8s.io/karpenter v1.15.0, hack/build-karpenter.sh)
// against the framework's real API server, scheduler and controller-manager, with `nodeagent simulate
// --nodes=0 --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake` as the backend of the Nodes
// it creates, then with KWOK v0.8.0 (hack/build-kwok.sh, kwokctl's default Stages) with the same flag:
// a Deployment of pending pods makes Karpenter create NodeClaims and their Nodes; the backend runs them;
// Karpenter sees each NodeClaim registered and initialized (its karpenter.sh/unregistered taint removed,
// the Node Ready, its allocatable that of the NodeClaim's instance type); every pod runs; scaled to 0,
// the empty Nodes are consolidated and deleted and no Node, NodeClaim or pod is left. It logs, side by
// side, the time from pending to Running and the backends' CPU. Karpenter runs as the ServiceAccount
// of its chart, with the chart's RBAC (karpenterIdentity).
func TestKarpenter(t *testing.T) {
	t.Parallel()
	bin := karpenterBin(t)
	runKarpenterBackends(t, bin, karpenterTest)
}

// karpenterBin is _output/bin with Karpenter, its CRDs and chart, helm and KWOK in it; it fails the
// test when one is missing.
func karpenterBin(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "_output", "bin")
	for _, f := range []string{"karpenter-kwok", "karpenter-crds", "karpenter-chart", "helm", "kwok", "kwok-node-stages.yaml", "kwok-pod-stages.yaml"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			t.Fatalf("%v: make tools builds it (hack/build-karpenter.sh, hack/build-kwok.sh)", err)
		}
	}
	return bin
}

// runKarpenterBackends runs sc with nodeagent, then KWOK, as the backend, and logs their figures side
// by side.
func runKarpenterBackends(t *testing.T, bin string, sc karpenterScenario) []karpenterRun {
	var runs []karpenterRun
	for _, backend := range []string{"nodeagent", "kwok"} {
		t.Run(backend, func(t *testing.T) {
			runs = append(runs, runKarpenter(t, bin, backend, sc))
		})
	}
	t.Logf("%d pods of %s CPU:", sc.replicas, sc.cpu)
	t.Logf("%-10s %6s %-16s %-22s %-26s %-12s %-34s %s", "backend", "nodes", "pending→Running", "scaled to 0→none left", "backend CPU (Karpenter's)", "backend RSS",
		"Lease renew p50/p99 (n, window)", "Nodes/NodeClaims/pods left")
	for _, r := range runs {
		t.Logf("%-10s %6d %-16s %-22s %-26s %-12s %-34s %d/%d/%d", r.backend, r.nodes, r.running.Round(100*time.Millisecond),
			r.gone.Round(100*time.Millisecond), fmt.Sprintf("%s (%s)", r.cpu.Round(10*time.Millisecond), r.karpenter.Round(10*time.Millisecond)),
			fmt.Sprintf("%.1f MiB", float64(r.rss)/(1<<20)),
			fmt.Sprintf("%.2fs/%.2fs (%d, %v)", benchkit.NearestRank(r.leaseIntervals, 0.5).Seconds(), benchkit.NearestRank(r.leaseIntervals, 0.99).Seconds(),
				len(r.leaseIntervals), r.window.Round(100*time.Millisecond)),
			r.nodesLeft, r.claimsLeft, r.podsLeft)
	}
	return runs
}

func runKarpenter(t *testing.T, bin, backend string, sc karpenterScenario) karpenterRun {
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, sc.total)
	defer cancel()
	dir := t.TempDir()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "cp"), ControllerManager: true, PublishKubeletClientCA: true,
		ExtraControllerManagerArgs: []string{"--controllers=nodelifecycle,ttl,deployment,replicaset,garbagecollector,podgc",
			"--kube-api-qps=1000", "--kube-api-burst=2000"},
	})
	if err := cp.StartScheduler(sctx, "--kube-api-qps=1000", "--kube-api-burst=2000"); err != nil {
		t.Fatal(err)
	}
	admin := cp.AdminClient
	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	// waitFor is framework.WaitFor bounded by d, naming what it waited for; every 500 ms, or every
	// interval[0] for a List of many pods.
	waitFor := func(what string, d time.Duration, cond func() (bool, error), interval ...time.Duration) {
		t.Helper()
		wctx, cancel := context.WithTimeout(sctx, d)
		defer cancel()
		every := 500 * time.Millisecond
		if len(interval) > 0 && sc.replicas > 100 {
			every = interval[0]
		}
		if err := framework.WaitFor(wctx, every, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if out, err := cp.Kubectl(sctx, "apply", "--server-side", "-f", filepath.Join(bin, "karpenter-crds")); err != nil {
		t.Fatalf("kubectl apply Karpenter's CRDs: %v: %s", err, out)
	}
	waitFor("Karpenter's CRDs established", 30*time.Second, func() (bool, error) {
		_, err := dyn.Resource(nodeClaimsGVR).List(sctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		_, err = dyn.Resource(kwokNodeClassesGVR).List(sctx, metav1.ListOptions{})
		return err == nil, err
	})

	// The Leases' renewals, watched from before the backend starts (so that the first renewal in the
	// window has the one before it) and recorded from the Deployment's create to the scale to 0.
	leases := benchkit.NewLeaseTracker()
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(admin, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	if _, err := leaseFactory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { leases.Observe(obj.(*coordinationv1.Lease)) },
		UpdateFunc: func(_, obj any) { leases.Observe(obj.(*coordinationv1.Lease)) },
	}); err != nil {
		t.Fatal(err)
	}
	leaseFactory.Start(sctx.Done())
	t.Cleanup(leaseFactory.Shutdown)
	if !cache.WaitForCacheSync(sctx.Done(), leaseFactory.Coordination().V1().Leases().Informer().HasSynced) {
		t.Fatal("the Lease informer did not sync")
	}

	// The backend: whatever carries the annotation Karpenter's kwok provider sets.
	var backendPID int
	// backendExited is the backend's exit, once it exited (a WaitFor stopper).
	var backendExited func() error
	start := time.Now()
	switch backend {
	case "nodeagent":
		ip := hostAddress(t)
		sim := startSimulator(t, append([]string{"--kubeconfig=" + cp.AdminKubeconfig, "--nodes=0",
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake"},
			kubeletAPIArgs(cp, ip, framework.FreePort())...)...)
		backendPID = sim.pid
		backendExited = func() error {
			select {
			case <-sim.done:
				return fmt.Errorf("nodeagent simulate exited: %v: %w", sim.err, framework.ErrStop)
			default:
				return nil
			}
		}
	case "kwok":
		p, err := framework.StartProcess("kwok", filepath.Join(dir, "kwok.log"), filepath.Join(bin, "kwok"),
			"--kubeconfig="+cp.AdminKubeconfig,
			"--config="+filepath.Join(bin, "kwok-node-stages.yaml"), "--config="+filepath.Join(bin, "kwok-pod-stages.yaml"),
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-lease-duration-seconds=40",
			"--node-name=localhost", "--server-address=")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
		backendPID = p.PID()
		backendExited = p.ExitedErr
	}

	// Karpenter, as its chart runs it (kwok/charts/templates/deployment.yaml) but outside the cluster:
	// under its chart's identity and RBAC, no leader election, its ports free ones, batches short.
	kubeconfig := karpenterIdentity(sctx, t, cp, bin, dir)
	karpenter, err := framework.StartProcessEnv("karpenter", filepath.Join(dir, "karpenter.log"),
		[]string{"KUBECONFIG=" + kubeconfig, "SYSTEM_NAMESPACE=kube-system", "DISABLE_LEADER_ELECTION=true",
			"METRICS_PORT=" + strconv.Itoa(framework.FreePort()), "HEALTH_PROBE_PORT=" + strconv.Itoa(framework.FreePort()),
			"LOG_LEVEL=info", "BATCH_IDLE_DURATION=1s", "BATCH_MAX_DURATION=3s", "FEATURE_GATES=NodeRepair=false"},
		filepath.Join(bin, "karpenter-kwok"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = karpenter.Stop(10 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(karpenter.LogPath())
			t.Logf("karpenter log (tail):\n%s", framework.TailLines(string(b), 40))
		}
	})

	// A KWOKNodeClass, Ready (the kwok provider has no controller that says so), and a NodePool that
	// consolidates empty or underused Nodes at once.
	nc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": map[string]any{"name": "default"}}}
	nc, err = dyn.Resource(kwokNodeClassesGVR).Create(sctx, nc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedSlice(nc.Object, []any{map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "observedGeneration": nc.GetGeneration()}}, "status", "conditions")
	if _, err := dyn.Resource(kwokNodeClassesGVR).UpdateStatus(sctx, nc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": "default"},
		"spec": map[string]any{
			"disruption": map[string]any{"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
				"budgets": []any{map[string]any{"nodes": "100%"}}},
			"limits": map[string]any{"cpu": "100000"},
			"template": map[string]any{"spec": map[string]any{
				"expireAfter": "Never",
				"requirements": []any{
					map[string]any{"key": "kubernetes.io/os", "operator": "In", "values": []any{"linux"}},
					map[string]any{"key": "karpenter.sh/capacity-type", "operator": "In", "values": []any{"on-demand"}},
					map[string]any{"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": []any{sc.maxInstanceCPU}},
				},
				"nodeClassRef": map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
			}},
		},
	}}
	if _, err := dyn.Resource(nodePoolsGVR).Create(sctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A Deployment of pending pods (no Node yet).
	const ns = "karpenter-app"
	if err := cp.CreateNamespace(sctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "inflate"}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "inflate", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(sc.replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "inflate", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(sc.cpu)}}}}}}}}
	leases.Record(true)
	created := time.Now()
	if _, err := admin.AppsV1().Deployments(ns).Create(sctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	listPods := func() ([]corev1.Pod, error) {
		l, err := admin.CoreV1().Pods(ns).List(sctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	waitFor("every pod Running on Karpenter's Nodes", sc.running, func() (bool, error) {
		if err := errors.Join(karpenter.ExitedErr(), backendExited()); err != nil {
			return false, err
		}
		pods, err := listPods()
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == int(sc.replicas), fmt.Errorf("%d of %d pods Running", running, sc.replicas)
	}, 2*time.Second)
	run := karpenterRun{backend: backend, running: time.Since(created)}
	if st, err := framework.ReadProcStats(backendPID); err == nil {
		run.rss = st.RSS
	}

	// Karpenter saw each NodeClaim registered and initialized; its Node is untainted, Ready and has the
	// instance type's allocatable.
	claims, err := dyn.Resource(nodeClaimsGVR).List(sctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) < sc.minNodes {
		t.Errorf("%d NodeClaims for %d pods of %s, want at least %d", len(claims.Items), sc.replicas, sc.cpu, sc.minNodes)
	}
	run.nodes = len(claims.Items)
	waitFor("every NodeClaim Registered and Initialized", 30*time.Second, func() (bool, error) {
		claims, err := dyn.Resource(nodeClaimsGVR).List(sctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range claims.Items {
			for _, cond := range []string{"Registered", "Initialized"} {
				if s := claimCondition(&c, cond); s != "True" {
					return false, fmt.Errorf("NodeClaim %s: %s %q", c.GetName(), cond, s)
				}
			}
		}
		return true, nil
	})
	claims, err = dyn.Resource(nodeClaimsGVR).List(sctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		name, _, _ := unstructured.NestedString(c.Object, "status", "nodeName")
		n, err := admin.CoreV1().Nodes().Get(sctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("NodeClaim %s: its Node: %v", c.GetName(), err)
		}
		if !framework.IsReady(n) {
			t.Errorf("node %s not Ready", n.Name)
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == karpenterUnregisteredTaint {
				t.Errorf("node %s still has %s", n.Name, taint.Key)
			}
		}
		alloc, _, _ := unstructured.NestedStringMap(c.Object, "status", "allocatable")
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
			want, err := resource.ParseQuantity(alloc[string(r)])
			if err != nil {
				t.Fatalf("NodeClaim %s: allocatable %s %q: %v", c.GetName(), r, alloc[string(r)], err)
			}
			if got := n.Status.Allocatable[r]; got.Cmp(want) != 0 {
				t.Errorf("node %s: allocatable %s %s, want the instance type's %s", n.Name, r, got.String(), want.String())
			}
		}
		if n.Labels["node.kubernetes.io/instance-type"] == "" || !strings.HasPrefix(n.Spec.ProviderID, "kwok://") {
			t.Errorf("node %s: instance type %q, providerID %q: not Karpenter's kwok provider's", n.Name, n.Labels["node.kubernetes.io/instance-type"], n.Spec.ProviderID)
		}
	}

	// Steady: every pod Running for sc.steady, the backends exiting ends it.
	if sc.steady > 0 {
		hold, cancel := context.WithTimeout(sctx, sc.steady)
		err := framework.WaitFor(hold, time.Second, func() (bool, error) {
			return false, errors.Join(karpenter.ExitedErr(), backendExited())
		})
		cancel()
		if sctx.Err() != nil || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
			t.Fatalf("steady for %v: %v", sc.steady, err)
		}
	}

	// Scaled to 0: Karpenter consolidates the empty Nodes and deletes them; nothing is left.
	leases.Record(false)
	scaled := time.Now()
	run.window = scaled.Sub(created)
	run.leaseIntervals = leases.Intervals()
	if _, err := admin.AppsV1().Deployments(ns).Patch(sctx, deploy.Name, "application/merge-patch+json",
		[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Not fatal when it times out: what is left is then part of the measurement.
	every := 500 * time.Millisecond
	if sc.replicas > 100 {
		every = 2 * time.Second
	}
	gctx, cancelGone := context.WithTimeout(sctx, sc.gone)
	defer cancelGone()
	if err := framework.WaitFor(gctx, every, func() (bool, error) {
		if err := errors.Join(karpenter.ExitedErr(), backendExited()); err != nil {
			return false, err
		}
		pods, err := listPods()
		if err != nil {
			return false, err
		}
		claims, err := dyn.Resource(nodeClaimsGVR).List(sctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		nodes, err := admin.CoreV1().Nodes().List(sctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		run.podsLeft, run.claimsLeft, run.nodesLeft = len(pods), len(claims.Items), len(nodes.Items)
		return len(pods)+len(claims.Items)+len(nodes.Items) == 0,
			fmt.Errorf("%d pods, %d NodeClaims, %d Nodes left", len(pods), len(claims.Items), len(nodes.Items))
	}); err != nil {
		t.Errorf("no pod, NodeClaim or Node left after the scale to 0: %v", err)
	}
	run.gone = time.Since(scaled)
	if run.cpu, err = framework.ReadProcCPU(backendPID); err != nil {
		t.Fatal(err)
	}
	if run.karpenter, err = framework.ReadProcCPU(karpenter.PID()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d pods Running %v after the Deployment's create on %d Nodes; none left %v after the scale to 0; backend CPU %v over %v; "+
		"Lease renew p50 %v p99 %v over %d intervals in %v",
		backend, sc.replicas, run.running, run.nodes, run.gone, run.cpu, time.Since(start),
		benchkit.NearestRank(run.leaseIntervals, 0.5), benchkit.NearestRank(run.leaseIntervals, 0.99), len(run.leaseIntervals), run.window.Round(100*time.Millisecond))
	// Every Lease renewed within its duration (40 s for both backends): none expired while Running.
	if len(run.leaseIntervals) == 0 {
		t.Errorf("%s: no Lease renewal seen in the %v from the Deployment's create to the scale to 0", backend, run.window)
	} else if p100 := run.leaseIntervals[len(run.leaseIntervals)-1]; p100 > 40*time.Second {
		t.Errorf("%s: a Lease renewed %v after the one before, past its 40s duration", backend, p100)
	}
	return run
}

// karpenterIdentity applies the RBAC of Karpenter's chart (bin/karpenter-chart, rendered by helm
// template for release karpenter in kube-system: its ServiceAccount, ClusterRoles, Roles and their
// bindings) and returns a kubeconfig of that ServiceAccount.
func karpenterIdentity(ctx context.Context, t *testing.T, cp *framework.ControlPlane, bin, dir string) string {
	t.Helper()
	args := []string{"template", "karpenter", filepath.Join(bin, "karpenter-chart"), "--namespace", "kube-system"}
	for _, f := range []string{"serviceaccount", "aggregate-clusterrole", "clusterrole", "clusterrole-kwok", "role", "rolebinding"} {
		args = append(args, "--show-only", "templates/"+f+".yaml")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "helm"), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "helm"), "HELM_CONFIG_HOME="+filepath.Join(dir, "helm"), "HELM_DATA_HOME="+filepath.Join(dir, "helm"))
	rbac, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %v: %v", args, err)
	}
	path := filepath.Join(dir, "karpenter-rbac.yaml")
	if err := os.WriteFile(path, rbac, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply Karpenter's RBAC: %v: %s", err, out)
	}
	kubeconfig, err := cp.ServiceAccountKubeconfig(ctx, "kube-system", "karpenter")
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// claimCondition is the status ("True", "False", "Unknown", or "" when absent) of the condition typ of
// NodeClaim c.
func claimCondition(c *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}
