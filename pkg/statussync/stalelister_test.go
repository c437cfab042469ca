package statussync

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// staleWorld is a Syncer whose only setter posts Ready=True reason R, over a fake clock, with its
// Node in the API server and in the informer cache, and the nodecache Tracker the agent feeds.
type staleWorld struct {
	client  *fake.Clientset
	clock   *testingclock.FakeClock
	tracker *nodecache.Tracker
	syncer  *Syncer
}

const staleNodeName = "n1"

func newStaleWorld(t *testing.T, inAPI, inCache *v1.Node) *staleWorld {
	t.Helper()
	w := &staleWorld{client: fake.NewClientset(inAPI), clock: testingclock.NewFakeClock(time.Unix(1000, 0))}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(inCache); err != nil {
		t.Fatal(err)
	}
	w.tracker = nodecache.New(w.clock)
	s, err := New(Config{
		Client: w.client, Lister: corelisters.NewNodeLister(indexer), Cache: w.tracker.Node(staleNodeName), NodeName: staleNodeName,
		Funcs: nodestatus.NewFuncs(w.clock, nodestatus.Func{Name: "Ready", Setter: func(_ context.Context, n *v1.Node) error {
			n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "R"}}
			return nil
		}}),
		UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
		Clock: w.clock, Rand: func() float64 { return 0.5 },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.syncer = s
	s.lastStatusReportTime = w.clock.Now() // reported just now: an unchanged status is not patched
	return w
}

// calls counts the GETs and PATCHes made, and resets the record.
func (w *staleWorld) calls() (gets, patches int) {
	for _, a := range w.client.Actions() {
		switch a.GetVerb() {
		case "get":
			gets++
		case "patch":
			patches++
		}
	}
	w.client.ClearActions()
	return gets, patches
}

func readyNode(status v1.ConditionStatus, rv string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: staleNodeName, ResourceVersion: rv,
			Labels: map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: status, Reason: "R"}}},
	}
}

// TestStaleCacheReadsFromAPIServer checks the first try of a sync: from the informer cache normally,
// from the API server while the nodecache says the cache is stale (a heartbeat failure, a failed
// watch, a failed try), until an informer event marks it current. The case: the cache still holds
// Ready=True while the node lifecycle controller has set Ready=Unknown on the API server during an
// outage; only a fresh read sees that the status must be posted again.
func TestStaleCacheReadsFromAPIServer(t *testing.T) {
	tests := []struct {
		name      string
		prepare   func(w *staleWorld)
		wantGet   bool
		wantPatch bool
	}{
		{name: "current cache: no read, no patch", prepare: func(*staleWorld) {}},
		{name: "marked stale (heartbeat failure): read, patch",
			prepare: func(w *staleWorld) { w.tracker.Node(staleNodeName).MarkStale("lease Timeout: i/o timeout") }, wantGet: true, wantPatch: true},
		{name: "watch failed (all Nodes stale): read, patch",
			prepare: func(w *staleWorld) { w.tracker.MarkAllStale("node watch failed: EOF") }, wantGet: true, wantPatch: true},
		{name: "stale, then an informer event for the Node: no read",
			prepare: func(w *staleWorld) {
				w.tracker.MarkAllStale("node watch failed: EOF")
				w.tracker.EventHandler().OnUpdate(readyNode(v1.ConditionTrue, ""), readyNode(v1.ConditionTrue, ""))
			}},
		{name: "a failed try marks the cache stale",
			prepare: func(w *staleWorld) {
				failed := false
				w.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
					if failed {
						return false, nil, nil
					}
					failed = true
					return true, nil, errors.New("connection refused")
				})
				w.syncer.lastStatusReportTime = time.Time{} // the next sync patches, and its first try fails
				_, ctx := ktesting.NewTestContext(t)
				w.syncer.SyncNodeStatus(ctx)
				w.client.ClearActions()
				w.syncer.lastStatusReportTime = w.clock.Now()
			}, wantGet: true}, // the retry already posted Ready=True: read, nothing to patch
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			w := newStaleWorld(t, readyNode(v1.ConditionUnknown, ""), readyNode(v1.ConditionTrue, ""))
			tc.prepare(w)
			w.syncer.SyncNodeStatus(ctx)
			gets, patches := w.calls()
			if (gets > 0) != tc.wantGet || (patches > 0) != tc.wantPatch {
				t.Errorf("gets %d, patches %d; want a get %v, a patch %v", gets, patches, tc.wantGet, tc.wantPatch)
			}
		})
	}
}

// TestStaleCacheClearedOnlyByAnEvent: a GET finding the cache at the API server's resourceVersion
// does not make a stale cache current (the watch may still be down and miss the next change, such as
// the lifecycle controller's Ready=Unknown right after an outage); every sync reads the API server
// until the informer delivers an event for the Node, and then reads the cache again.
func TestStaleCacheClearedOnlyByAnEvent(t *testing.T) {
	for _, cachedRV := range []string{"7", "6"} {
		t.Run("cached resourceVersion "+cachedRV, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			w := newStaleWorld(t, readyNode(v1.ConditionTrue, "7"), readyNode(v1.ConditionTrue, cachedRV))
			w.tracker.Node(staleNodeName).MarkStale("node status update failed: EOF")
			for i, want := range []int{1, 1, 1} {
				w.clock.Step(10 * time.Second)
				w.syncer.SyncNodeStatus(ctx)
				if gets, patches := w.calls(); gets != want || patches != 0 {
					t.Errorf("sync %d: %d GETs, %d patches; want %d GETs, no patch", i, gets, patches, want)
				}
			}
			if w.tracker.Stale(staleNodeName) == nil {
				t.Fatal("a GET made the stale cache current")
			}
			// The informer's event handler sees the Node: the cache is current again.
			w.tracker.EventHandler().OnUpdate(nil, readyNode(v1.ConditionTrue, "7"))
			w.clock.Step(10 * time.Second)
			w.syncer.SyncNodeStatus(ctx)
			if gets, _ := w.calls(); gets != 0 {
				t.Errorf("after an informer event: %d GETs, want the cache read", gets)
			}
		})
	}
}
