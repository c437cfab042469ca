package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// caKwokNode is a Node exactly as the cluster autoscaler's kwok provider (kubernetes/autoscaler
// cluster-autoscaler/cloudprovider/kwok) creates it in node group ngName from template, a Node of its
// templates ConfigMap: prepareNode (kwok_helpers.go) adds the annotations kwok.x-k8s.io/node=fake and
// cluster-autoscaler.kwok.nodegroup/name=<ngName>; BuildKwokProvider (kwok_provider.go) the taint
// kwok-provider=true:NoSchedule unless skipTaint; sanitizeNode sets status.nodeInfo.kubeletVersion
// "fake"; IncreaseSize (kwok_nodegroups.go) names it <ngName>-<5 random characters>, adds the annotation
// metrics.k8s.io/resource-metrics-path and sets providerID kwok:<name>. Everything else (labels, among
// them a stale kubernetes.io/hostname, podCIDRs, status: capacity, allocatable, addresses) is the
// template's, the same on every Node of the group.
func caKwokNode(template *corev1.Node, ngName, suffix string) *corev1.Node {
	n := template.DeepCopy()
	n.Name = ngName + "-" + suffix
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations["kwok.x-k8s.io/node"] = "fake"
	n.Annotations["cluster-autoscaler.kwok.nodegroup/name"] = ngName
	n.Annotations["metrics.k8s.io/resource-metrics-path"] = "/metrics/nodes/" + n.Name + "/metrics/resource"
	n.Spec.ProviderID = "kwok:" + n.Name
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "kwok-provider", Value: "true", Effect: corev1.TaintEffectNoSchedule})
	n.Status.NodeInfo.KubeletVersion = "fake"
	return n
}

// caTemplates are two templates of the cluster autoscaler's kwok provider: kind-worker, a kind Node as
// its tests' templates ConfigMap holds it (kwok_constants.go, testTemplates: grouped by the label
// kwok-nodegroup, with capacity, allocatable, addresses and podCIDRs), and a minimal one with a
// capacity only.
func caTemplates(rl func(kv ...string) corev1.ResourceList) (full, minimal *corev1.Node) {
	full = &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kind-worker", Annotations: map[string]string{},
			Labels: map[string]string{"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"kubernetes.io/hostname": "kind-worker", "kwok-nodegroup": "kind-worker", "kubernetes.io/os": "linux",
				"k8s.amazonaws.com/accelerator": "nvidia-tesla-k80"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.2.0/24", PodCIDRs: []string{"10.244.2.0/24"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.3"}, {Type: corev1.NodeHostName, Address: "kind-worker"}},
			Capacity:  rl("cpu", "12", "ephemeral-storage", "959786032Ki", "hugepages-1Gi", "0", "hugepages-2Mi", "0", "memory", "32781516Ki", "pods", "110"),
			Allocatable: rl("cpu", "11900m", "ephemeral-storage", "959786032Ki", "hugepages-1Gi", "0", "hugepages-2Mi", "0",
				"memory", "31781516Ki", "pods", "110"),
		},
	}
	minimal = &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node2", Labels: map[string]string{"kwok-nodegroup": "ng2"}},
		Status:     corev1.NodeStatus{Capacity: rl("cpu", "3", "memory", "6Gi", "pods", "30")},
	}
	return full, minimal
}

// TestSimulateAdopt runs `nodeagent simulate --nodes=0 --manage-nodes-with-annotation-selector=
// kwok.x-k8s.io/node=fake` with the kubelet API on against Nodes created exactly as the cluster
// autoscaler's kwok provider creates them (caKwokNode): each is adopted (Ready, its Lease renewed,
// nodeInfo filled from the template) while what its creator wrote stays (labels, taints, providerID,
// capacity, allocatable, addresses); each serves the kubelet API on a port of its own (daemonEndpoints),
// through which the API server's node proxy lists its pod and reads its resource metrics; a pod bound
// to one runs; a label, a taint and a capacity changed by the creator are kept; a Node deleted stays
// deleted, its controller stops and its kubelet API port closes; a Node without the annotation is left
// alone.
func TestSimulateAdopt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(t.TempDir(), "cp")})
	admin := cp.AdminClient
	const ns = "adopt"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// waitFor is framework.WaitFor bounded by 30 s, so that a broken adoption fails rather than hangs.
	waitFor := func(cond func() (bool, error)) error {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return framework.WaitFor(wctx, 500*time.Millisecond, cond)
	}
	rl := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	full, minimal := caTemplates(rl)
	nodes := []*corev1.Node{
		caKwokNode(full, "kind-worker-1764370000", "x7k2q"),
		caKwokNode(minimal, "ng2-1764370000", "b9d4m"),
	}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "not-adopted", Labels: map[string]string{"kwok-nodegroup": "kind-worker"}}}
	for _, n := range append(nodes, other) {
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The kubelet API on: each adopted Node on a port of its own past the (no) template Nodes', at
	// this machine's address, which the API server's node proxy accepts.
	ip := hostAddress(t)
	apiPort := framework.FreePort()
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes=0", "--node-name-prefix=adopt-",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-status-update-frequency=1s", "--node-status-report-frequency=2s",
		"--address="+ip, "--node-ip="+ip, "--port="+strconv.Itoa(apiPort), "--client-ca-file="+cp.KubeletClientCAFile)

	// Both adopted Nodes turn Ready with their Lease, whatever else their creator wrote.
	waitAdopted := func(name string) *corev1.Node {
		t.Helper()
		var got *corev1.Node
		err := waitFor(func() (bool, error) {
			select {
			case <-sim.done:
				return false, fmt.Errorf("nodeagent simulate exited: %v: %w", sim.err, framework.ErrStop)
			default:
			}
			n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
			got = n
			return framework.IsReady(n), nil
		})
		if err != nil {
			t.Fatalf("adopted node %s not Ready with a Lease: %v", name, err)
		}
		return got
	}
	for _, want := range nodes {
		got := waitAdopted(want.Name)
		checkCreatorKept(t, want, got)
		if got.Status.NodeInfo.KubeletVersion == "" || got.Status.NodeInfo.KernelVersion == "" {
			t.Errorf("node %s: nodeInfo not filled from the template: %+v", got.Name, got.Status.NodeInfo)
		}
		for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
			if cond := nodeCondition(got, c); cond == nil || cond.Status != corev1.ConditionFalse {
				t.Errorf("node %s: condition %s %+v, want False", got.Name, c, cond)
			}
		}
	}
	// Where the creator set no allocatable, it is the creator's capacity (KWOK's default), and where
	// it set no address, the template's: an InternalIP and the Hostname.
	b, err := admin.CoreV1().Nodes().Get(ctx, nodes[1].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		if a, c := b.Status.Allocatable[r], nodes[1].Status.Capacity[r]; a.Cmp(c) != 0 {
			t.Errorf("node %s: allocatable %s %s, want the creator's capacity %s", b.Name, r, a.String(), c.String())
		}
	}
	if len(b.Status.Addresses) == 0 || b.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}) {
		t.Errorf("node %s: addresses %v, want first the InternalIP %s (--node-ip)", b.Name, b.Status.Addresses, ip)
	}

	// Each adopted Node serves the kubelet API on a port of its own, which its daemonEndpoints give.
	ports := map[string]int32{}
	for _, n := range nodes {
		got, err := admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		port := got.Status.DaemonEndpoints.KubeletEndpoint.Port
		if port < int32(apiPort) || port > int32(apiPort)+1 || slices.Contains(slices.Collect(maps.Values(ports)), port) {
			t.Errorf("node %s: daemonEndpoints.kubeletEndpoint.Port %d, want one of its own in %d-%d", n.Name, port, apiPort, apiPort+1)
		}
		ports[n.Name] = port
	}

	// The Lease is renewed.
	lease0 := getLease(ctx, t, admin, nodes[0].Name)
	if err := waitFor(func() (bool, error) {
		l := getLease(ctx, t, admin, nodes[0].Name)
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(lease0.Spec.RenewTime.Time), nil
	}); err != nil {
		t.Fatalf("lease of %s not renewed: %v", nodes[0].Name, err)
	}

	// A pod bound to an adopted Node runs, with an IP.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: nodes[1].Name, Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}},
			Tolerations: []corev1.Toleration{{Key: "kwok-provider", Operator: corev1.TolerationOpExists}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() (bool, error) {
		got, err := admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "", nil
	}); err != nil {
		t.Fatalf("pod on adopted node %s not Running with an IP: %v", nodes[1].Name, err)
	}
	// Through the API server's node proxy (the Node without a creator's address: at --node-ip), its
	// kubelet API lists the pod, and its resource metrics count it.
	raw := func(path string) (string, error) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, err := admin.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(rctx)
		return string(b), err
	}
	if out, err := raw("/api/v1/nodes/" + nodes[1].Name + "/proxy/pods"); err != nil || !strings.Contains(out, `"name":"web"`) {
		t.Errorf("node %s: /proxy/pods: %v: %s, want the pod web", nodes[1].Name, err, framework.TailLines(out, 3))
	}
	if err := waitFor(func() (bool, error) {
		out, err := raw("/api/v1/nodes/" + nodes[1].Name + "/proxy/metrics/resource")
		return err == nil && strings.Contains(out, `pod_cpu_usage_seconds_total{namespace="adopt",pod="web"}`), nil
	}); err != nil {
		t.Errorf("node %s: /metrics/resource never counted the pod web: %v", nodes[1].Name, err)
	}

	// The creator changes a label and the capacity: both stay through the next heartbeats.
	patch := `{"metadata":{"labels":{"kwok-nodegroup":"pool-b"}},"spec":{"taints":[{"key":"kwok-provider","value":"true","effect":"NoSchedule"},{"key":"example.com/drain","effect":"NoExecute"}]}}`
	if _, err := admin.CoreV1().Nodes().Patch(ctx, nodes[0].Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	statusPatch := `{"status":{"capacity":{"cpu":"4"},"allocatable":{"cpu":"3900m"}}}`
	if _, err := admin.CoreV1().Nodes().Patch(ctx, nodes[0].Name, types.MergePatchType, []byte(statusPatch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	if err := waitFor(func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, nodes[0].Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		// Two heartbeats after the change (report frequency 2 s, second-granular times).
		ready := nodeCondition(n, corev1.NodeReady)
		return ready != nil && ready.LastHeartbeatTime.After(changed.Add(3*time.Second)), nil
	}); err != nil {
		t.Fatalf("no heartbeat of %s after the creator's change: %v", nodes[0].Name, err)
	}
	a, err := admin.CoreV1().Nodes().Get(ctx, nodes[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Labels["kwok-nodegroup"]; got != "pool-b" {
		t.Errorf("node %s: label changed by its creator is %q, want pool-b", a.Name, got)
	}
	if !slices.ContainsFunc(a.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == "example.com/drain" }) {
		t.Errorf("node %s: taint added by its creator gone: %v", a.Name, a.Spec.Taints)
	}
	if c, al := a.Status.Capacity[corev1.ResourceCPU], a.Status.Allocatable[corev1.ResourceCPU]; c.String() != "4" || al.String() != "3900m" {
		t.Errorf("node %s: cpu capacity %s allocatable %s after its creator's change, want 4 and 3900m", a.Name, c.String(), al.String())
	}

	// The creator deletes a Node: its controller stops, and it is not created again.
	if err := admin.CoreV1().Nodes().Delete(ctx, nodes[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(func() (bool, error) {
		return !simulatedNodeListed(ctx, t, sim, nodes[0].Name), nil
	}); err != nil {
		t.Fatalf("deleted node %s still run: %v", nodes[0].Name, err)
	}
	deleted := time.Now()
	for time.Since(deleted) < 5*time.Second { // five status syncs and Lease renewals' worth
		if _, err := admin.CoreV1().Nodes().Get(ctx, nodes[0].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("node %s deleted by its creator: get %v, want NotFound (re-created?)", nodes[0].Name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !simulatedNodeListed(ctx, t, sim, nodes[1].Name) {
		t.Errorf("node %s no longer run after another was deleted", nodes[1].Name)
	}
	// Its kubelet API is closed with it; the other Node's still answers.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(int(ports[nodes[0].Name]))), 2*time.Second); err == nil {
		_ = c.Close()
		t.Errorf("node %s deleted by its creator: its kubelet API port %d still accepts", nodes[0].Name, ports[nodes[0].Name])
	}
	if _, err := raw("/api/v1/nodes/" + nodes[1].Name + "/proxy/healthz"); err != nil {
		t.Errorf("node %s: kubelet API after another adopted Node went: %v", nodes[1].Name, err)
	}

	// The Node without the annotation is left alone: no status, no Lease.
	o, err := admin.CoreV1().Nodes().Get(ctx, other.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Status.Conditions) > 0 || o.Status.NodeInfo.KubeletVersion != "" {
		t.Errorf("node %s without the annotation was written: %+v", o.Name, o.Status)
	}
	if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, other.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("lease of %s without the annotation: %v, want NotFound", other.Name, err)
	}
	if simulatedNodeListed(ctx, t, sim, other.Name) {
		t.Errorf("node %s without the annotation is run", other.Name)
	}
}

// checkCreatorKept checks that got (an adopted Node) still has what its creator wrote in want.
func checkCreatorKept(t *testing.T, want, got *corev1.Node) {
	t.Helper()
	for k, v := range want.Labels {
		if got.Labels[k] != v {
			t.Errorf("node %s: label %s=%q, want the creator's %q", got.Name, k, got.Labels[k], v)
		}
	}
	if _, ok := got.Labels["nodeagent.io/simulated"]; ok {
		t.Errorf("node %s: adopted Node labelled nodeagent.io/simulated", got.Name)
	}
	// The creator's taints and none of nodeagent's (the API server's TaintNodesByCondition admission adds
	// node.kubernetes.io/not-ready at creation, which the node lifecycle controller, not run here, removes).
	var taints []corev1.Taint
	for _, tt := range got.Spec.Taints {
		if !strings.HasPrefix(tt.Key, "node.kubernetes.io/") {
			taints = append(taints, tt)
		}
	}
	if len(taints) != len(want.Spec.Taints) || (len(want.Spec.Taints) > 0 && !taints[0].MatchTaint(&want.Spec.Taints[0])) {
		t.Errorf("node %s: taints %v, want the creator's %v", got.Name, got.Spec.Taints, want.Spec.Taints)
	}
	if got.Spec.ProviderID != want.Spec.ProviderID {
		t.Errorf("node %s: providerID %q, want %q", got.Name, got.Spec.ProviderID, want.Spec.ProviderID)
	}
	for _, l := range []struct {
		what      string
		want, got corev1.ResourceList
	}{{"capacity", want.Status.Capacity, got.Status.Capacity}, {"allocatable", want.Status.Allocatable, got.Status.Allocatable}} {
		for r, q := range l.want {
			if g := l.got[r]; g.Cmp(q) != 0 {
				t.Errorf("node %s: %s %s %s, want the creator's %s", got.Name, l.what, r, g.String(), q.String())
			}
		}
	}
	if len(want.Status.Addresses) > 0 && fmt.Sprint(got.Status.Addresses) != fmt.Sprint(want.Status.Addresses) {
		t.Errorf("node %s: addresses %v, want the creator's %v", got.Name, got.Status.Addresses, want.Status.Addresses)
	}
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func getLease(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// simulatedNodeListed reports whether the simulator's control API lists Node name (GET
// /simulation/nodes) as running.
func simulatedNodeListed(ctx context.Context, t *testing.T, sim *simulator, name string) bool {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sim.base+"/simulation/nodes", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Nodes []struct {
			Name  string `json:"name"`
			Phase string `json:"phase"`
		} `json:"nodes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Nodes {
		if n.Name == name && n.Phase == "running" {
			return true
		}
	}
	return false
}
