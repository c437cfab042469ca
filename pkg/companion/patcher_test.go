package companion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const nodeName = "node-1"

// kubeletNode is a Node as the kubelet keeps it.
func kubeletNode(extra ...v1.NodeCondition) *v1.Node {
	t0 := metav1.NewTime(time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC))
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}},
		Status: v1.NodeStatus{
			Conditions: append([]v1.NodeCondition{
				{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, LastHeartbeatTime: t0, LastTransitionTime: t0, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
				{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: t0, LastTransitionTime: t0, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
			}, extra...),
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
			Capacity:  v1.ResourceList{v1.ResourceCPU: *resourceQuantity("2")},
			NodeInfo:  v1.NodeSystemInfo{KubeletVersion: "v1.36.3"},
		},
	}
}

// patches records the PATCH requests a fake clientset receives.
type patches struct {
	mu    sync.Mutex
	list  []k8stesting.PatchAction
	times []time.Time
	fail  int // fail this many next patches
}

func (p *patches) reactor(action k8stesting.Action) (bool, runtime.Object, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pa := action.(k8stesting.PatchAction)
	p.list = append(p.list, pa)
	p.times = append(p.times, time.Now())
	if p.fail > 0 {
		p.fail--
		return true, nil, errors.New("injected error")
	}
	return false, nil, nil // let the tracker apply it
}

// snapshot returns the patches and their times so far.
func (p *patches) snapshot() ([]k8stesting.PatchAction, []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.list), slices.Clone(p.times)
}

func (p *patches) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.list)
}

func newClient(node *v1.Node) (*fake.Clientset, *patches) {
	c := fake.NewClientset(node)
	p := &patches{}
	c.PrependReactor("patch", "nodes", p.reactor)
	return c, p
}

// conditions is a settable Conditions func.
type conditions struct {
	mu sync.Mutex
	c  []v1.NodeCondition
}

func (c *conditions) get() []v1.NodeCondition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]v1.NodeCondition(nil), c.c...)
}

func (c *conditions) set(cs ...v1.NodeCondition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c = cs
}

func run(t *testing.T, cfg Config) (*Patcher, context.CancelFunc) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return p, cancel
}

// TestPatchCarriesOnlyOwnConditions checks the exact patch body and that the kubelet's fields on
// the Node are untouched by it.
func TestPatchCarriesOnlyOwnConditions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := kubeletNode()
		client, ps := newClient(node)
		start := metav1.NewTime(time.Now())
		conds := &conditions{}
		conds.set(
			v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: start, Reason: "KernelHasNoDeadlock", Message: "kernel has no deadlock"},
			v1.NodeCondition{Type: "ContainerRuntimeUnhealthy", Status: v1.ConditionTrue, LastTransitionTime: start, Reason: "ContainerdUnhealthy", Message: "down"},
		)
		run(t, Config{Client: client, NodeName: nodeName, Conditions: conds.get})
		synctest.Wait()
		if ps.count() != 1 {
			t.Fatalf("%d patches, want 1", ps.count())
		}
		list, _ := ps.snapshot()
		pa := list[0]
		if pa.GetPatchType() != types.StrategicMergePatchType || pa.GetSubresource() != "status" || pa.GetName() != nodeName {
			t.Errorf("patch %s %s/%s", pa.GetPatchType(), pa.GetName(), pa.GetSubresource())
		}
		ts := start.UTC().Format(time.RFC3339)
		want := `{"status":{"conditions":[` +
			`{"type":"KernelDeadlock","status":"False","lastHeartbeatTime":"` + ts + `","lastTransitionTime":"` + ts + `","reason":"KernelHasNoDeadlock","message":"kernel has no deadlock"},` +
			`{"type":"ContainerRuntimeUnhealthy","status":"True","lastHeartbeatTime":"` + ts + `","lastTransitionTime":"` + ts + `","reason":"ContainerdUnhealthy","message":"down"}]}}`
		if string(pa.GetPatch()) != want {
			t.Errorf("patch body\n%s\nwant\n%s", pa.GetPatch(), want)
		}

		// It reads the Node once, from the cache, and writes nothing but nodes/status patches.
		var verbs []string
		for _, a := range client.Actions() {
			verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
		if strings.Join(verbs, ",") != "get nodes/,patch nodes/status" {
			t.Errorf("actions = %v", verbs)
		}

		got, err := client.CoreV1().Nodes().Get(t.Context(), nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantNode := kubeletNode()
		for _, c := range conds.get() {
			c.LastHeartbeatTime = start
			wantNode.Status.Conditions = append(wantNode.Status.Conditions, c)
		}
		byType := func(c []v1.NodeCondition) {
			slices.SortFunc(c, func(a, b v1.NodeCondition) int { return strings.Compare(string(a.Type), string(b.Type)) })
		}
		byType(got.Status.Conditions) // the merge may order them differently; the type identifies them
		byType(wantNode.Status.Conditions)
		if !apiequality.Semantic.DeepEqual(got.Status, wantNode.Status) || !apiequality.Semantic.DeepEqual(got.Spec, wantNode.Spec) ||
			!apiequality.Semantic.DeepEqual(got.Labels, wantNode.Labels) {
			t.Errorf("node after patch\n%+v\nwant\n%+v", got.Status, wantNode.Status)
		}
	})
}

// TestPatchOnChangeAndHeartbeat: nothing is patched while nothing changes, a change is patched
// within one check period (at once with Trigger), and an unchanged condition is patched again
// after the heartbeat period with a new lastHeartbeatTime and the same lastTransitionTime.
func TestPatchOnChangeAndHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, ps := newClient(kubeletNode())
		t0 := metav1.NewTime(time.Now())
		conds := &conditions{}
		conds.set(v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionFalse, LastTransitionTime: t0, Reason: "NTPIsUp"})
		p, _ := run(t, Config{Client: client, NodeName: nodeName, Conditions: conds.get, HeartbeatPeriod: time.Minute})
		synctest.Wait()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := ps.count(); n != 1 {
			t.Fatalf("%d patches in 30 s without change, want 1", n)
		}
		t1 := metav1.NewTime(time.Now())
		conds.set(v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionTrue, LastTransitionTime: t1, Reason: "NTPIsDown", Message: "ntp down"})
		time.Sleep(time.Second)
		synctest.Wait()
		if _, times := ps.snapshot(); len(times) != 2 || times[1].After(t1.Add(time.Second)) {
			t.Fatalf("patches after a change at %v", times)
		}
		conds.set(v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionTrue, LastTransitionTime: t1, Reason: "NTPIsDown", Message: "ntp still down"})
		p.Trigger()
		synctest.Wait()
		if _, times := ps.snapshot(); len(times) != 3 || !times[2].Equal(time.Now()) {
			t.Fatalf("Trigger: patches at %v", times)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := ps.count(); n != 4 {
			t.Fatalf("%d patches after the heartbeat period, want 4", n)
		}
		var body struct {
			Status struct{ Conditions []v1.NodeCondition } `json:"status"`
		}
		list, times := ps.snapshot()
		if err := json.Unmarshal(list[3].GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		c := body.Status.Conditions[0]
		if !c.LastHeartbeatTime.Time.Equal(times[3].Truncate(time.Second)) || !c.LastTransitionTime.Equal(&metav1.Time{Time: t1.Truncate(time.Second)}) {
			t.Errorf("heartbeat patch condition = %+v", c)
		}
		if s := p.Status(); s.Patches != 4 || s.Failures != 0 {
			t.Errorf("status = %+v", s)
		}
	})
}

// TestPatchRetriesWithBackoff: failed patches are retried after 1 s, 2 s, 4 s, ... and never stop
// the patcher.
func TestPatchRetriesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, ps := newClient(kubeletNode())
		ps.fail = 4
		conds := &conditions{}
		conds.set(v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(time.Now()), Reason: "NTPIsUp"})
		var results []error
		var mu sync.Mutex
		start := time.Now()
		p, _ := run(t, Config{Client: client, NodeName: nodeName, Conditions: conds.get, OnPatch: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			results = append(results, err)
		}})
		time.Sleep(time.Minute)
		synctest.Wait()
		var offsets []string
		_, times := ps.snapshot()
		for _, tm := range times {
			offsets = append(offsets, tm.Sub(start).String())
		}
		if got := strings.Join(offsets, " "); got != "0s 1s 3s 7s 15s" {
			t.Errorf("patch times %s, want 0s 1s 3s 7s 15s", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(results) != 5 || results[4] != nil {
			t.Errorf("results = %v", results)
		}
		if s := p.Status(); s.Failures != 4 || s.Patches != 1 || s.LastError != "injected error" {
			t.Errorf("status = %+v", s)
		}
	})
}

// TestKeepsTransitionTimeFromNode: after a restart, a condition whose status is the one on the Node
// keeps the Node's lastTransitionTime; one whose status differs gets its own.
func TestKeepsTransitionTimeFromNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		old := metav1.NewTime(time.Date(1999, 6, 1, 0, 0, 0, 0, time.UTC))
		client, ps := newClient(kubeletNode(
			v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: old, Reason: "KernelHasNoDeadlock"},
			v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionFalse, LastTransitionTime: old, Reason: "NTPIsUp"},
		))
		now := metav1.NewTime(time.Now())
		conds := &conditions{}
		conds.set(
			v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: now, Reason: "KernelHasNoDeadlock"},
			v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionTrue, LastTransitionTime: now, Reason: "NTPIsDown"},
		)
		run(t, Config{Client: client, NodeName: nodeName, Conditions: conds.get})
		synctest.Wait()
		var body struct {
			Status struct{ Conditions []v1.NodeCondition } `json:"status"`
		}
		list, _ := ps.snapshot()
		if err := json.Unmarshal(list[0].GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		c := body.Status.Conditions
		if !c[0].LastTransitionTime.Equal(&old) || c[1].LastTransitionTime.Time.Unix() != now.Unix() {
			t.Errorf("transition times %v %v", c[0].LastTransitionTime, c[1].LastTransitionTime)
		}
		// Later, once KernelDeadlock flips, its own transition time is used.
		t2 := metav1.NewTime(time.Now().Add(time.Hour))
		time.Sleep(time.Hour)
		conds.set(
			v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionTrue, LastTransitionTime: t2, Reason: "DockerHung"},
			v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionTrue, LastTransitionTime: now, Reason: "NTPIsDown"},
		)
		time.Sleep(time.Second)
		synctest.Wait()
		list, _ = ps.snapshot()
		if err := json.Unmarshal(list[len(list)-1].GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		if c := body.Status.Conditions[0]; c.LastTransitionTime.Time.Unix() != t2.Unix() {
			t.Errorf("after flip: %+v", c)
		}
	})
}

// TestNodeNotFound: before the kubelet registers the Node every patch fails; the patcher keeps
// retrying and patches once the Node exists.
func TestNodeNotFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		conds := &conditions{}
		conds.set(v1.NodeCondition{Type: "NTPProblem", Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(time.Now()), Reason: "NTPIsUp"})
		p, _ := run(t, Config{Client: client, NodeName: nodeName, Conditions: conds.get})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if s := p.Status(); s.Patches != 0 || s.Failures == 0 || !strings.Contains(s.LastError, "not found") {
			t.Fatalf("status = %+v", s)
		}
		if _, err := client.CoreV1().Nodes().Create(t.Context(), kubeletNode(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if s := p.Status(); s.Patches != 1 {
			t.Fatalf("status = %+v", s)
		}
		n, _ := client.CoreV1().Nodes().Get(t.Context(), nodeName, metav1.GetOptions{})
		if len(n.Status.Conditions) != 3 || !slices.ContainsFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == "NTPProblem" }) {
			t.Errorf("conditions = %+v", n.Status.Conditions)
		}
	})
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{NodeName: "n", Conditions: func() []v1.NodeCondition { return nil }}); err == nil {
		t.Error("no error without Client")
	}
}

func TestJoinConditions(t *testing.T) {
	a := func() []v1.NodeCondition { return []v1.NodeCondition{{Type: "A"}} }
	b := func() []v1.NodeCondition { return []v1.NodeCondition{{Type: "B"}, {Type: "C"}} }
	if got := fmt.Sprint(JoinConditions(a, b)()); got != fmt.Sprint([]v1.NodeCondition{{Type: "A"}, {Type: "B"}, {Type: "C"}}) {
		t.Errorf("JoinConditions = %s", got)
	}
}

// TestStaleConditionsRemoved: a condition type the Node's owned-conditions annotation lists but the
// configuration no longer has is removed by the first patch, unless the kubelet owns the type or
// another field manager owns a field of the condition; the annotation is set to the configured types.
func TestStaleConditionsRemoved(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	deadlock := v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionTrue, LastHeartbeatTime: t0, LastTransitionTime: t0, Reason: "DockerHung", Message: "task hung"}
	readonly := v1.NodeCondition{Type: "ReadonlyFilesystem", Status: v1.ConditionFalse, LastHeartbeatTime: t0, LastTransitionTime: t0, Reason: "FilesystemIsNotReadOnly"}
	npdOwns := func(typ string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: "node-problem-detector", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"` + typ + `\"}":{".":{},"f:status":{},"f:type":{}}}}}`)}}
	}
	ours := metav1.ManagedFieldsEntry{Manager: DefaultFieldManager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"KernelDeadlock\"}":{".":{}},"k:{\"type\":\"ReadonlyFilesystem\"}":{".":{}}}}}`)}}
	for _, tc := range []struct {
		name       string
		annotation string
		managed    []metav1.ManagedFieldsEntry
		types      []v1.NodeConditionType
		wantTypes  []v1.NodeConditionType // the Node's conditions after the first patch, sorted
		wantAnnot  string
	}{{
		name: "monitor removed: its conditions go", annotation: "ContainerRuntimeUnhealthy,KernelDeadlock,ReadonlyFilesystem",
		managed: []metav1.ManagedFieldsEntry{ours}, types: []v1.NodeConditionType{"ContainerRuntimeUnhealthy"},
		wantTypes: []v1.NodeConditionType{"ContainerRuntimeUnhealthy", "MemoryPressure", "Ready"}, wantAnnot: "ContainerRuntimeUnhealthy",
	}, {
		name: "another writer owns one: it stays", annotation: "ContainerRuntimeUnhealthy,KernelDeadlock,ReadonlyFilesystem",
		managed: []metav1.ManagedFieldsEntry{ours, npdOwns("KernelDeadlock")}, types: []v1.NodeConditionType{"ContainerRuntimeUnhealthy"},
		wantTypes: []v1.NodeConditionType{"ContainerRuntimeUnhealthy", "KernelDeadlock", "MemoryPressure", "Ready"}, wantAnnot: "ContainerRuntimeUnhealthy",
	}, {
		name: "not listed: never ours", annotation: "ContainerRuntimeUnhealthy",
		types:     []v1.NodeConditionType{"ContainerRuntimeUnhealthy"},
		wantTypes: []v1.NodeConditionType{"ContainerRuntimeUnhealthy", "KernelDeadlock", "MemoryPressure", "ReadonlyFilesystem", "Ready"}, wantAnnot: "ContainerRuntimeUnhealthy",
	}, {
		name: "the kubelet's types are never removed", annotation: "Ready,MemoryPressure,KernelDeadlock",
		types:     []v1.NodeConditionType{"ContainerRuntimeUnhealthy", "ReadonlyFilesystem"},
		wantTypes: []v1.NodeConditionType{"ContainerRuntimeUnhealthy", "MemoryPressure", "ReadonlyFilesystem", "Ready"}, wantAnnot: "ContainerRuntimeUnhealthy,ReadonlyFilesystem",
	}, {
		name: "no Types: nothing removed or recorded", annotation: "KernelDeadlock,ReadonlyFilesystem",
		wantTypes: []v1.NodeConditionType{"ContainerRuntimeUnhealthy", "KernelDeadlock", "MemoryPressure", "ReadonlyFilesystem", "Ready"}, wantAnnot: "KernelDeadlock,ReadonlyFilesystem",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := kubeletNode(deadlock, readonly)
				node.Annotations = map[string]string{OwnedConditionsAnnotation: tc.annotation}
				node.ManagedFields = tc.managed
				client, ps := newClient(node)
				conds := &conditions{}
				conds.set(v1.NodeCondition{Type: "ContainerRuntimeUnhealthy", Status: v1.ConditionFalse, Reason: "ContainerRuntimeIsHealthy"})
				if slices.Contains(tc.types, "ReadonlyFilesystem") {
					conds.set(append(conds.get(), readonly)...)
				}
				run(t, Config{Client: client, NodeName: nodeName, Conditions: conds.get, Types: tc.types})
				synctest.Wait()
				if ps.count() != 1 {
					t.Fatalf("%d patches, want 1", ps.count())
				}
				got, err := client.CoreV1().Nodes().Get(t.Context(), nodeName, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var types []v1.NodeConditionType
				for _, c := range got.Status.Conditions {
					types = append(types, c.Type)
				}
				slices.Sort(types)
				if !slices.Equal(types, tc.wantTypes) {
					t.Errorf("conditions after the first patch = %v, want %v", types, tc.wantTypes)
				}
				if a := got.Annotations[OwnedConditionsAnnotation]; a != tc.wantAnnot {
					t.Errorf("annotation = %q, want %q", a, tc.wantAnnot)
				}
				// Later patches neither repeat the removal nor the annotation.
				conds.set(v1.NodeCondition{Type: "ContainerRuntimeUnhealthy", Status: v1.ConditionTrue, Reason: "ContainerdUnhealthy"})
				time.Sleep(DefaultCheckPeriod)
				synctest.Wait()
				list, _ := ps.snapshot()
				if len(list) != 2 || strings.Contains(string(list[1].GetPatch()), "$patch") || strings.Contains(string(list[1].GetPatch()), "annotations") {
					t.Errorf("second patch = %s", list[len(list)-1].GetPatch())
				}
			})
		})
	}
}

func TestNewRefusesKubeletTypes(t *testing.T) {
	_, err := New(Config{Client: fake.NewClientset(), NodeName: nodeName, Conditions: func() []v1.NodeCondition { return nil },
		Types: []v1.NodeConditionType{"KernelDeadlock", v1.NodeReady}})
	if err == nil || !strings.Contains(err.Error(), `Types[1] "Ready"`) {
		t.Errorf("New = %v, want an error naming Types[1] \"Ready\"", err)
	}
}
