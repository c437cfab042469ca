package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
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

// caKwokNode is a Node as the cluster autoscaler's kwok provider creates it: the annotation
// kwok.x-k8s.io/node=fake, providerID kwok:<name>, its node group's labels, a taint and capacity; with
// allocatable and an address when given.
func caKwokNode(name string, capacity, allocatable corev1.ResourceList, addresses []corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"node.kubernetes.io/instance-type": "m5.large", "kubernetes.io/hostname": name,
				"autoscaler.example.com/nodegroup": "pool-a"},
		},
		Spec: corev1.NodeSpec{ProviderID: "kwok:" + name,
			Taints: []corev1.Taint{{Key: "example.com/pool", Value: "a", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable, Addresses: addresses},
	}
}

// TestSimulateAdopt runs `nodeagent simulate --nodes=0 --manage-nodes-with-annotation-selector=
// kwok.x-k8s.io/node=fake` against Nodes created as the cluster autoscaler's kwok provider creates
// them: each is adopted (Ready, its Lease renewed, nodeInfo filled from the template) while what its
// creator wrote stays (labels, taints, providerID, capacity, allocatable, addresses); a pod bound to one
// runs; a label and a capacity changed by the creator are kept; a Node deleted stays deleted and its
// controller stops; a Node without the annotation is left alone.
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
	addr := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.0.1"}}
	nodes := []*corev1.Node{
		caKwokNode("ca-pool-a-1", rl("cpu", "2", "memory", "8Gi", "pods", "20"), rl("cpu", "1900m", "memory", "7Gi", "pods", "20"), addr),
		caKwokNode("ca-pool-a-2", rl("cpu", "3", "memory", "6Gi", "pods", "30"), nil, nil),
	}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "not-adopted", Labels: map[string]string{"node.kubernetes.io/instance-type": "m5.large"}}}
	for _, n := range append(nodes, other) {
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes=0", "--node-name-prefix=adopt-",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-status-update-frequency=1s", "--node-status-report-frequency=2s")

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
	if len(b.Status.Addresses) == 0 {
		t.Errorf("node %s: no address filled", b.Name)
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
		Spec: corev1.PodSpec{NodeName: nodes[0].Name, Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}},
			Tolerations: []corev1.Toleration{{Key: "example.com/pool", Operator: corev1.TolerationOpExists}}}}
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
		t.Fatalf("pod on adopted node %s not Running with an IP: %v", nodes[0].Name, err)
	}

	// The creator changes a label and the capacity: both stay through the next heartbeats.
	patch := `{"metadata":{"labels":{"autoscaler.example.com/nodegroup":"pool-b"}}}`
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
	if got := a.Labels["autoscaler.example.com/nodegroup"]; got != "pool-b" {
		t.Errorf("node %s: label changed by its creator is %q, want pool-b", a.Name, got)
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
