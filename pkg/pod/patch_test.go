package pod

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/nodeagent/nodeagent/pkg/apiequal/apiequaltest"
)

// wholeStatusPatch is StatusPatch as it was, and as the kubelet's status manager writes: nothing when
// the statuses are semantically equal, else both statuses marshalled and diffed whole.
func wholeStatusPatch(old, new *v1.PodStatus) ([]byte, error) {
	if StatusEqual(old, new) {
		return nil, nil
	}
	return statusPatch("uid-1", old, new)
}

// comparePatches fails t unless got and want (two patches of old) have the same content, and apply
// to old to the same status.
func comparePatches(t *testing.T, name string, old, new *v1.PodStatus, got, want []byte, exact bool) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: StatusPatch = %s, the whole-status patch %s", name, got, want)
	}
	if got == nil {
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: StatusPatch %s: %v", name, got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if exact && !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: StatusPatch\n%s\nthe whole-status patch\n%s", name, got, want)
	}
	oldPod, err := json.Marshal(v1.Pod{Status: *old})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(patch []byte) v1.PodStatus {
		b, err := strategicpatch.StrategicMergePatch(oldPod, patch, v1.Pod{})
		if err != nil {
			t.Fatalf("%s: apply %s: %v", name, patch, err)
		}
		var p v1.Pod
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		return p.Status
	}
	if gs, ws := apply(got), apply(want); !apiequality.Semantic.DeepEqual(gs, ws) {
		t.Fatalf("%s: StatusPatch %s applied gives\n%#v\nthe whole-status patch %s gives\n%#v", name, got, gs, want, ws)
	}
}

// withoutEqualFields returns patch without the fields of PodStatus that are semantically equal in old
// and new (and their directives): the whole-status patch sends those when they serialize differently
// (a quantity in another format, an empty list for a nil one), a no-op StatusPatch leaves out.
func withoutEqualFields(t *testing.T, patch []byte, old, new *v1.PodStatus) any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		t.Fatal(err)
	}
	status, _ := p["status"].(map[string]any)
	for i := range statusFields {
		if f := &statusFields[i]; f.equal(old, new) {
			delete(status, f.name)
			delete(status, "$setElementOrder/"+f.name)
		}
	}
	if len(status) == 0 {
		delete(p, "status")
	}
	return p
}

// TestStatusPatchAgreesOnRandomStatuses: StatusPatch, built from the fields that changed, against the
// whole-status patch on random statuses and copies with up to three fields changed at any depth: the
// same content but for fields semantically equal in both, and the same status once applied.
func TestStatusPatchAgreesOnRandomStatuses(t *testing.T) {
	var patches, sameAsWhole int
	apiequaltest.Pairs[v1.PodStatus](2500, 3, func(i int, old, new *v1.PodStatus) bool {
		got, err := StatusPatch("uid-1", old, new)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want, err := wholeStatusPatch(old, new)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if got == nil && want != nil {
			// Only semantically equal fields changed their serialization.
			if w := withoutEqualFields(t, want, old, new); len(w.(map[string]any)) != 1 {
				t.Fatalf("case %d: StatusPatch made no patch, the whole-status patch %s", i, want)
			}
			return true
		}
		comparePatches(t, "random case", old, new, got, want, false)
		if got == nil {
			return true
		}
		patches++
		var g, w any
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal(want, &w)
		if reflect.DeepEqual(g, w) {
			sameAsWhole++
		} else if w := withoutEqualFields(t, want, old, new); !reflect.DeepEqual(g, w) {
			t.Fatalf("case %d: StatusPatch\n%s\nthe whole-status patch\n%s", i, got, want)
		}
		return !t.Failed()
	})
	t.Logf("%d patches, %d of them the whole-status patch's content exactly", patches, sameAsWhole)
	if patches < 1500 {
		t.Errorf("only %d of 2500 pairs gave a patch: the generator tests too little", patches)
	}
}

// TestStatusPatchAgreesOnPodLives: the patches of a pod's life as GenerateStatus writes it (pending,
// running, ready, a container crashed and restarted, terminated, evicted; the informer's copy, through
// JSON, as the old status) are exactly the whole-status patch's content.
func TestStatusPatchAgreesOnPodLives(t *testing.T) {
	generated, informer := runningStatus(t)
	crashed := generated.DeepCopy()
	crashed.ContainerStatuses[1].Ready = false
	crashed.ContainerStatuses[1].RestartCount = 1
	crashed.ContainerStatuses[1].LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		ExitCode: 2, Reason: "Error", StartedAt: *generated.StartTime, FinishedAt: *generated.StartTime}}
	for i := range crashed.Conditions {
		if c := &crashed.Conditions[i]; c.Type == v1.PodReady || c.Type == v1.ContainersReady {
			c.Status, c.Reason = v1.ConditionFalse, "ContainersNotReady"
		}
	}
	evicted := generated.DeepCopy()
	evicted.Phase, evicted.Reason, evicted.Message = v1.PodFailed, "Evicted", "The node was low on resource: memory."
	evicted.Conditions = append(evicted.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
		Reason: "TerminationByKubelet", LastTransitionTime: *generated.StartTime})
	noIPs := generated.DeepCopy()
	noIPs.PodIP, noIPs.PodIPs = "", nil
	deleted := deletedStatus(t, &informer)
	pending := v1.PodStatus{Phase: v1.PodPending, QOSClass: generated.QOSClass}
	for _, tc := range []struct {
		name     string
		old, new *v1.PodStatus
	}{
		{"first status of a running pod", &pending, &generated},
		{"unchanged", &informer, &generated},
		{"a container crashed", &informer, crashed},
		{"back from the crash", crashed, &generated},
		{"evicted", &informer, evicted},
		{"IPs released", &informer, noIPs},
		{"stopped at its deletion", &informer, &deleted},
		{"phase only", &v1.PodStatus{Phase: v1.PodPending}, &v1.PodStatus{Phase: v1.PodRunning}},
		{"everything removed", &informer, &v1.PodStatus{}},
	} {
		got, err := StatusPatch("uid-1", tc.old, tc.new)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want, err := wholeStatusPatch(tc.old, tc.new)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		comparePatches(t, tc.name, tc.old, tc.new, got, want, true)
	}
}

// TestStatusFieldsCoverPodStatus fails when PodStatus gains a field statusFields does not name.
func TestStatusFieldsCoverPodStatus(t *testing.T) {
	typ := reflect.TypeFor[v1.PodStatus]()
	if typ.NumField() != len(statusFields) {
		t.Fatalf("PodStatus has %d fields, statusFields %d", typ.NumField(), len(statusFields))
	}
	for i := range statusFields {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != statusFields[i].name {
			t.Errorf("PodStatus field %d is %q, statusFields has %q", i, name, statusFields[i].name)
		}
		if statusFields[i].value == nil || statusFields[i].merge != (statusFields[i].copy != nil) {
			t.Errorf("statusFields %q: every field has value, a merged one copy", statusFields[i].name)
		}
	}
}

// deletedStatus is the status GenerateStatus writes for runningStatus's pod (its informer copy
// running) once its deletion stopped its containers (exit 0) and its sandbox: the patch of each
// simulated pod deletion (terminal phase, three conditions False, the containers terminated).
func deletedStatus(t testing.TB, running *v1.PodStatus) v1.PodStatus {
	p := runningPod()
	p.Status = *running.DeepCopy()
	rt := RuntimeStatus{RuntimeName: "containerd", Sandbox: SandboxNotReady, PodIPs: ip, HostIPs: host, Terminal: true,
		Containers: []ContainerStatus{exited("a", 0), exited("b", 0)}}
	s, err := GenerateStatus(p, &rt, t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != v1.PodSucceeded {
		t.Fatalf("deleted status: phase %s, want Succeeded", s.Phase)
	}
	return s
}

// BenchmarkStatusPatch: three patches as StatusPatch builds them, against the whole statuses marshalled
// and diffed: a container crashed (the container statuses and two conditions change), and a pod's
// first running status over the scheduler's (PodScheduled only; every field is new), the patch of each
// simulated pod start, and the status written when a deletion stopped the pod (deletedStatus).
func BenchmarkStatusPatch(b *testing.B) {
	generated, informer := runningStatus(b)
	crashed := generated.DeepCopy()
	crashed.ContainerStatuses[1].Ready = false
	crashed.ContainerStatuses[1].RestartCount = 1
	for i := range crashed.Conditions {
		if c := &crashed.Conditions[i]; c.Type == v1.PodReady || c.Type == v1.ContainersReady {
			c.Status, c.Reason = v1.ConditionFalse, "ContainersNotReady"
		}
	}
	scheduled := v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue,
		LastTransitionTime: *generated.StartTime}}}
	deleted := deletedStatus(b, &informer)
	for _, pc := range []struct {
		name     string
		old, new *v1.PodStatus
	}{{"crashed", &informer, crashed}, {"first status", &scheduled, &generated}, {"deleted", &informer, &deleted}} {
		for _, bc := range []struct {
			name  string
			patch func(uid types.UID, old, new *v1.PodStatus) ([]byte, error)
		}{{"from the fields that changed", StatusPatch}, {"whole statuses", statusPatch}} {
			b.Run(pc.name+"/"+bc.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if p, err := bc.patch("uid-1", pc.old, pc.new); p == nil || err != nil {
						b.Fatal(string(p), err)
					}
				}
			})
		}
	}
}

// TestAppendObjectAsMarshal: appendObject and appendArray write what json.Marshal writes for the same
// map and list of json.Marshal's output, byte for byte (the members in the order of their names).
func TestAppendObjectAsMarshal(t *testing.T) {
	generated, _ := runningStatus(t)
	for _, tc := range []struct {
		name string
		m    map[string]json.RawMessage
	}{
		{"empty", map[string]json.RawMessage{}},
		{"one", map[string]json.RawMessage{"phase": json.RawMessage(`"Running"`)}},
		{"directives and fields", map[string]json.RawMessage{
			"$setElementOrder/conditions": json.RawMessage(`[{"type":"Ready"},{"type":"PodScheduled"}]`),
			"phase":                       json.RawMessage(`"Succeeded"`), "podIP": json.RawMessage("null"),
			"conditions": json.RawMessage(`[{"status":"False","type":"Ready"}]`), "$patch": json.RawMessage(`"delete"`)}},
		{"a status's fields", func() map[string]json.RawMessage {
			m := map[string]json.RawMessage{}
			for i := range statusFields {
				if v := statusFields[i].value(&generated); v != nil {
					b, err := json.Marshal(v)
					if err != nil {
						t.Fatal(err)
					}
					m[statusFields[i].name] = b
				}
			}
			return m
		}()},
	} {
		want, err := json.Marshal(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendObject(nil, tc.m); string(got) != string(want) {
			t.Errorf("%s: appendObject = %s, want json.Marshal's %s", tc.name, got, want)
		}
		values := []json.RawMessage{}
		for _, v := range tc.m {
			values = append(values, v)
		}
		want, err = json.Marshal(values)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendArray(nil, values); string(got) != string(want) {
			t.Errorf("%s: appendArray = %s, want json.Marshal's %s", tc.name, got, want)
		}
	}
}

// TestStatusPatchAllocs bounds the allocations of the two patches every simulated pod makes (the first
// running status of its start, the stopped status of its deletion): conditions that did not change
// and fields of a condition that did not are not marshalled, and the patch is assembled once
// (appendObject), not marshalled again, and a field known to differ once serialized is not compared
// (exact, containerStatusesDiffer). Before: 151 and 236 allocations; now 100 and 92.
func TestStatusPatchAllocs(t *testing.T) {
	generated, informer := runningStatus(t)
	deleted := deletedStatus(t, &informer)
	scheduled := v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue,
		LastTransitionTime: *generated.StartTime}}}
	for _, tc := range []struct {
		name     string
		old, new *v1.PodStatus
		max      float64
	}{
		{"first status", &scheduled, &generated, 110},
		{"deleted", &informer, &deleted, 100},
	} {
		var patch []byte
		var err error
		allocs := testing.AllocsPerRun(50, func() { patch, err = StatusPatch("uid-1", tc.old, tc.new) })
		if patch == nil || err != nil {
			t.Fatalf("%s: StatusPatch = %s, %v", tc.name, patch, err)
		}
		if raceEnabled {
			tc.max *= 1.5 // sync.Pool drops encoder states under -race (race_test.go)
		}
		if allocs > tc.max {
			t.Errorf("%s: StatusPatch made %v allocations, want at most %v", tc.name, allocs, tc.max)
		}
	}
}

// TestDiffersOnlyWhenJSONDoes: where StatusPatch sends a field without comparing the two values'
// JSON (an exact field not equal, or a container status list containerStatusesDiffer tells apart),
// their JSON differs, on random pairs whose times and quantities often differ in form only.
func TestDiffersOnlyWhenJSONDoes(t *testing.T) {
	marshal := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	differing := map[string]int{}
	apiequaltest.Pairs[v1.PodStatus](3000, 3, func(i int, a, b *v1.PodStatus) bool {
		for j := range statusFields {
			f := &statusFields[j]
			sends := f.exact && !f.equal(a, b) || f.differs != nil && f.differs(a, b)
			if !sends {
				continue
			}
			differing[f.name]++
			if marshal(f.value(a)) == marshal(f.value(b)) {
				t.Fatalf("case %d: %s sent as changed, but both serialize as %s", i, f.name, marshal(f.value(a)))
			}
		}
		return true
	})
	for _, name := range []string{"phase", "containerStatuses", "initContainerStatuses"} {
		if differing[name] < 50 {
			t.Errorf("%s told apart in only %d pairs: the generator tests too little", name, differing[name])
		}
	}
}
