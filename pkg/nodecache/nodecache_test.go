package nodecache

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

func node(name string) *v1.Node { return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

// TestTracker runs a sequence of calls on a Tracker over a fake clock, one second apart, and checks
// every Node's staleness after each.
func TestTracker(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type op func(tr *Tracker)
	stale := func(name, reason string) op { return func(tr *Tracker) { tr.MarkStale(name, reason) } }
	allStale := func(reason string) op { return func(tr *Tracker) { tr.MarkAllStale(reason) } }
	fresh := func(name string) op { return func(tr *Tracker) { tr.MarkFresh(name) } }
	cases := []struct {
		desc string
		ops  []op // op i runs at t0 + i s
		want map[string]*Staleness
	}{
		{desc: "new: every Node current", want: map[string]*Staleness{"a": nil, "b": nil}},
		{desc: "MarkStale marks one Node",
			ops:  []op{stale("a", "lease Timeout")},
			want: map[string]*Staleness{"a": {Reason: "lease Timeout", Since: at(0)}, "b": nil}},
		{desc: "MarkStale keeps the first reason and time",
			ops:  []op{stale("a", "lease Timeout"), stale("a", "node status update failed: EOF")},
			want: map[string]*Staleness{"a": {Reason: "lease Timeout", Since: at(0)}}},
		{desc: "MarkFresh clears MarkStale; a later MarkStale starts again",
			ops:  []op{stale("a", "first"), fresh("a"), stale("a", "second")},
			want: map[string]*Staleness{"a": {Reason: "second", Since: at(2)}}},
		{desc: "MarkFresh clears MarkStale",
			ops:  []op{stale("a", "first"), fresh("a")},
			want: map[string]*Staleness{"a": nil}},
		{desc: "MarkAllStale marks every Node, known or not",
			ops:  []op{fresh("a"), allStale("node watch failed: EOF")},
			want: map[string]*Staleness{"a": {Reason: "node watch failed: EOF", Since: at(1)}, "never-seen": {Reason: "node watch failed: EOF", Since: at(1)}}},
		{desc: "MarkAllStale: a Node with a later event is current, the others stay stale",
			ops:  []op{allStale("node watch failed: EOF"), fresh("a")},
			want: map[string]*Staleness{"a": nil, "b": {Reason: "node watch failed: EOF", Since: at(0)}}},
		{desc: "a second MarkAllStale marks again a Node fresh since the first, with the new reason",
			ops:  []op{allStale("first watch failure"), fresh("a"), allStale("second watch failure")},
			want: map[string]*Staleness{"a": {Reason: "second watch failure", Since: at(2)}, "b": {Reason: "second watch failure", Since: at(2)}}},
		{desc: "a Node's own staleness wins over MarkAllStale's",
			ops:  []op{stale("a", "lease Timeout"), allStale("node watch failed: EOF")},
			want: map[string]*Staleness{"a": {Reason: "lease Timeout", Since: at(0)}, "b": {Reason: "node watch failed: EOF", Since: at(1)}}},
		{desc: "MarkFresh clears both its own and MarkAllStale's staleness",
			ops:  []op{stale("a", "lease Timeout"), allStale("node watch failed: EOF"), fresh("a")},
			want: map[string]*Staleness{"a": nil, "b": {Reason: "node watch failed: EOF", Since: at(1)}}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			tr := New(clk)
			for _, o := range tc.ops {
				o(tr)
				clk.Step(time.Second)
			}
			for name, want := range tc.want {
				got := tr.Stale(name)
				if (got == nil) != (want == nil) || (got != nil && (got.Reason != want.Reason || !got.Since.Equal(want.Since))) {
					t.Errorf("Stale(%q) = %+v, want %+v", name, got, want)
				}
				if viaNode := tr.Node(name).Stale(); (viaNode == nil) != (got == nil) || (viaNode != nil && *viaNode != *got) {
					t.Errorf("Node(%q).Stale() = %+v, Tracker.Stale = %+v", name, viaNode, got)
				}
			}
		})
	}
}

// TestStaleReturnsACopy: changing what Stale returned does not change the Tracker.
func TestStaleReturnsACopy(t *testing.T) {
	tr := New(testingclock.NewFakeClock(time.Unix(0, 0)))
	tr.MarkStale("a", "mine")
	tr.MarkAllStale("all")
	tr.Stale("a").Reason = "changed"
	tr.Stale("b").Reason = "changed"
	if got := tr.Stale("a").Reason; got != "mine" {
		t.Errorf("Stale(a).Reason = %q after changing a returned copy", got)
	}
	if got := tr.Stale("b").Reason; got != "all" {
		t.Errorf("Stale(b).Reason = %q after changing a returned copy", got)
	}
}

// TestNodeView: Node(name) marks and reads that one Node only.
func TestNodeView(t *testing.T) {
	tr := New(nil)
	a := tr.Node("a")
	a.MarkStale("lease Timeout")
	if s := tr.Stale("a"); s == nil || s.Reason != "lease Timeout" {
		t.Errorf("Stale(a) = %+v after Node(a).MarkStale", s)
	}
	if s := tr.Stale("b"); s != nil {
		t.Errorf("Stale(b) = %+v after Node(a).MarkStale", s)
	}
	a.MarkFresh()
	if s := a.Stale(); s != nil {
		t.Errorf("Node(a).Stale() = %+v after MarkFresh", s)
	}
}

// TestEventHandler: every informer event for a Node marks that Node current, including a delete
// whose final state is unknown (a tombstone); other objects and other Nodes are left alone.
func TestEventHandler(t *testing.T) {
	cases := []struct {
		desc    string
		deliver func(h cache.ResourceEventHandler)
		fresh   bool // whether Node a is current afterwards
	}{
		{desc: "add", deliver: func(h cache.ResourceEventHandler) { h.OnAdd(node("a"), false) }, fresh: true},
		{desc: "add in the initial list", deliver: func(h cache.ResourceEventHandler) { h.OnAdd(node("a"), true) }, fresh: true},
		{desc: "update (also a re-list's)", deliver: func(h cache.ResourceEventHandler) { h.OnUpdate(node("a"), node("a")) }, fresh: true},
		{desc: "delete", deliver: func(h cache.ResourceEventHandler) { h.OnDelete(node("a")) }, fresh: true},
		{desc: "delete with a tombstone", deliver: func(h cache.ResourceEventHandler) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "a", Obj: node("a")})
		}, fresh: true},
		{desc: "another Node's event", deliver: func(h cache.ResourceEventHandler) { h.OnUpdate(node("b"), node("b")) }},
		{desc: "a tombstone without a Node", deliver: func(h cache.ResourceEventHandler) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "a", Obj: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}}})
		}},
		{desc: "not a Node", deliver: func(h cache.ResourceEventHandler) { h.OnAdd(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, false) }},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			tr := New(nil)
			tr.MarkStale("a", "lease Timeout")
			tr.MarkAllStale("node watch failed: EOF")
			tc.deliver(tr.EventHandler())
			if got := tr.Stale("a") == nil; got != tc.fresh {
				t.Errorf("Node a current = %v (%+v), want %v", got, tr.Stale("a"), tc.fresh)
			}
			if tr.Stale("c") == nil {
				t.Error("an unrelated Node became current")
			}
		})
	}
}

// TestWatchErrorHandler: a failed watch of the shared Node informer marks every Node stale, saying
// why, and still logs as client-go's default handler.
func TestWatchErrorHandler(t *testing.T) {
	for _, err := range []error{io.EOF, errors.New("very short watch: connection refused")} {
		t.Run(err.Error(), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			clk := testingclock.NewFakeClock(time.Unix(100, 0))
			tr := New(clk)
			tr.MarkFresh("a")
			r := cache.NewNamedReflector("nodes", &cache.ListWatch{}, &v1.Node{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
			tr.WatchErrorHandler()(ctx, r, err)
			for _, name := range []string{"a", "b"} {
				s := tr.Stale(name)
				if s == nil || s.Reason != "node watch failed: "+err.Error() || !s.Since.Equal(clk.Now()) {
					t.Errorf("Stale(%q) = %+v, want node watch failed: %v at %v", name, s, err, clk.Now())
				}
			}
			// The re-list after the watch failed delivers an event per Node: each is current again.
			tr.EventHandler().OnUpdate(node("a"), node("a"))
			if s := tr.Stale("a"); s != nil {
				t.Errorf("Stale(a) = %+v after the re-list's event", s)
			}
			if s := tr.Stale("b"); s == nil {
				t.Error("Stale(b) = nil without an event for b")
			}
		})
	}
}

// TestReadAtThenAnyEventPast: a Node read from the API server at resourceVersion 100 while stale is
// current again once the informer delivers any Node's event at or past 100 (the watch is past its last
// change), not before, not after a watch failure, and not before MarkStaleUntil's bound.
func TestReadAtThenAnyEventPast(t *testing.T) {
	rvNode := func(name, rv string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	for _, tc := range []struct {
		desc      string
		steps     func(tr *Tracker, h cache.ResourceEventHandler, clk *testingclock.FakeClock)
		wantStale bool
		node      string // the Node checked; "a" (read at 100) when empty
	}{
		{"an older event of another Node: still stale", func(tr *Tracker, h cache.ResourceEventHandler, _ *testingclock.FakeClock) {
			h.OnUpdate(nil, rvNode("b", "99"))
		}, true, ""},
		{"an event of another Node at the read: current", func(tr *Tracker, h cache.ResourceEventHandler, _ *testingclock.FakeClock) {
			h.OnUpdate(nil, rvNode("b", "100"))
		}, false, ""},
		{"an event of another Node past the read: current", func(tr *Tracker, h cache.ResourceEventHandler, _ *testingclock.FakeClock) {
			h.OnUpdate(nil, rvNode("b", "250"))
		}, false, ""},
		{"past the read, but the watch failed after: stale", func(tr *Tracker, h cache.ResourceEventHandler, _ *testingclock.FakeClock) {
			h.OnUpdate(nil, rvNode("b", "250"))
			tr.MarkAllStale("watch failed")
		}, true, ""},
		{"past the read within MarkStaleUntil's bound: stale", func(tr *Tracker, h cache.ResourceEventHandler, _ *testingclock.FakeClock) {
			tr.MarkStaleUntil("a", "heartbeat recovered", tr.clock.Now().Add(time.Minute))
			tr.ReadAt("a", "100")
			h.OnUpdate(nil, rvNode("b", "250"))
		}, true, ""},
		{"past the read and the bound: current", func(tr *Tracker, h cache.ResourceEventHandler, clk *testingclock.FakeClock) {
			tr.MarkStaleUntil("a", "heartbeat recovered", clk.Now().Add(time.Minute))
			tr.ReadAt("a", "100")
			h.OnUpdate(nil, rvNode("b", "250"))
			clk.Step(time.Minute)
		}, false, ""},
		{"never read: an event of another Node proves nothing", func(tr *Tracker, h cache.ResourceEventHandler, _ *testingclock.FakeClock) {
			tr.MarkStale("c", "heartbeat failed")
			h.OnUpdate(nil, rvNode("b", "250"))
		}, true, "c"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			tr := New(clk)
			h := tr.EventHandler()
			tr.MarkStale("a", "heartbeat failed")
			tr.MarkStale("c", "heartbeat failed")
			tr.ReadAt("a", "100")
			tc.steps(tr, h, clk)
			name := tc.node
			if name == "" {
				name = "a"
			}
			if got := tr.Stale(name) != nil; got != tc.wantStale {
				t.Errorf("Stale(%s) = %v, want stale %v", name, tr.Stale(name), tc.wantStale)
			}
		})
	}
}

func TestStripManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "nodeagent", Operation: metav1.ManagedFieldsOperationUpdate}}
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: managed}}}
	for _, tc := range []struct {
		name string
		in   any
		want any
	}{
		{"a Node loses its managedFields and keeps the rest",
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7", Labels: map[string]string{"a": "b"}, ManagedFields: managed}},
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7", Labels: map[string]string{"a": "b"}}}},
		{"a Node without managedFields is unchanged",
			&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}},
		{"a tombstone passes through", tomb, tomb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StripManagedFields(tc.in)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("StripManagedFields = %#v, %v; want %#v", got, err, tc.want)
			}
		})
	}
}

// TestTrimNode: the trimmed Node equals the original without managedFields, and two Nodes decoded
// apart share one copy of each common string afterwards.
func TestTrimNode(t *testing.T) {
	mk := func() *v1.Node {
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{strings.Clone("kubernetes.io/os"): strings.Clone("linux")},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}},
			Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: strings.Clone("k"), Value: strings.Clone("v"), Effect: v1.TaintEffectNoSchedule}}},
			Status: v1.NodeStatus{
				Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: strings.Clone("KubeletReady"), Message: strings.Clone("kubelet is posting ready status")}},
				Capacity:   v1.ResourceList{v1.ResourceName(strings.Clone("cpu")): resource.MustParse("4")},
				NodeInfo:   v1.NodeSystemInfo{KubeletVersion: strings.Clone("v1.37.2")},
				Images:     []v1.ContainerImage{{Names: []string{strings.Clone("registry.k8s.io/pause:3.10")}, SizeBytes: 1}},
			},
		}
	}
	a, b := mk(), mk()
	want := a.DeepCopy()
	want.ManagedFields = nil
	ta, _ := TrimNode(a)
	tb, _ := TrimNode(b)
	if !apiequality.Semantic.DeepEqual(ta, want) {
		t.Errorf("TrimNode changed the Node:\n%#v\nwant\n%#v", ta, want)
	}
	na, nb := ta.(*v1.Node), tb.(*v1.Node)
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(na.Status.Conditions[0].Message, nb.Status.Conditions[0].Message) || !same(na.Status.NodeInfo.KubeletVersion, nb.Status.NodeInfo.KubeletVersion) ||
		!same(na.Labels["kubernetes.io/os"], nb.Labels["kubernetes.io/os"]) || !same(na.Status.Images[0].Names[0], nb.Status.Images[0].Names[0]) {
		t.Error("common strings are not shared after TrimNode")
	}
	if _, err := TrimNode(cache.DeletedFinalStateUnknown{Key: "n"}); err != nil {
		t.Errorf("tombstone: %v", err)
	}
}
