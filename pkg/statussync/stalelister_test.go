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
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// TestStaleListerReadsFromAPIServer checks the first try of a sync: from the informer cache normally,
// from the API server while the cache may be stale (after ListerMayBeStale or a failed try, until
// ListerUpdated). The case: the cache still holds Ready=True while the node lifecycle controller
// has set Ready=Unknown on the API server during an outage; only a fresh read sees that the status
// must be posted again.
func TestStaleListerReadsFromAPIServer(t *testing.T) {
	const name = "n1"
	labels := map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}
	ready := func(status v1.ConditionStatus) *v1.Node {
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Status:     v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: status, Reason: "R"}}},
		}
	}
	tests := []struct {
		name      string
		prepare   func(s *Syncer, client *fake.Clientset)
		wantGet   bool
		wantPatch bool
	}{
		{name: "fresh cache: no read, no patch", prepare: func(*Syncer, *fake.Clientset) {}},
		{name: "may be stale: read, patch", prepare: func(s *Syncer, _ *fake.Clientset) { s.ListerMayBeStale() }, wantGet: true, wantPatch: true},
		{name: "stale then updated: no read", prepare: func(s *Syncer, _ *fake.Clientset) { s.ListerMayBeStale(); s.ListerUpdated() }},
		{name: "a failed try marks the cache stale", prepare: func(s *Syncer, client *fake.Clientset) {
			failed := false
			client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
				if failed {
					return false, nil, nil
				}
				failed = true
				return true, nil, errors.New("connection refused")
			})
			s.lastStatusReportTime = time.Time{} // the next sync patches, and its first try fails
			s.SyncNodeStatus(context.Background())
			client.ClearActions()
		}, wantGet: true}, // the retry already posted Ready=True: read, nothing to patch
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(ready(v1.ConditionUnknown))
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(ready(v1.ConditionTrue)); err != nil {
				t.Fatal(err)
			}
			clk := testingclock.NewFakeClock(time.Unix(1000, 0))
			s, err := New(Config{
				Client: client, Lister: corelisters.NewNodeLister(indexer), NodeName: name,
				Setters: []nodestatus.Setter{func(_ context.Context, n *v1.Node) error {
					n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "R"}}
					return nil
				}},
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
				Clock: clk, Rand: func() float64 { return 0.5 },
			})
			if err != nil {
				t.Fatal(err)
			}
			s.lastStatusReportTime = clk.Now() // reported just now: an unchanged status is not patched
			tc.prepare(s, client)
			s.lastStatusReportTime = clk.Now()
			s.SyncNodeStatus(context.Background())
			gets, patches := 0, 0
			for _, a := range client.Actions() {
				switch a.GetVerb() {
				case "get":
					gets++
				case "patch":
					patches++
				}
			}
			if (gets > 0) != tc.wantGet || (patches > 0) != tc.wantPatch {
				t.Errorf("gets %d, patches %d; want a get %v, a patch %v", gets, patches, tc.wantGet, tc.wantPatch)
			}
		})
	}
}

// TestStaleFlagKeptWhileWatchDown: a GET finding the cache at the API server's resourceVersion
// clears the stale flag only while the informer's watch is open (CacheLive), so an unchanged Node
// (which sends no informer events) is not read from the API server on every later sync; with the
// watch down (after an API server restart it reconnects with a backoff of up to a minute), or the
// cache behind, the matching cache would still miss the next change, so every sync keeps reading
// from the API server.
func TestStaleFlagKeptWhileWatchDown(t *testing.T) {
	const name = "n1"
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "7",
			Labels: map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "R"}}},
	}
	tests := []struct {
		name     string
		live     bool
		cachedRV string
		wantGets int // over three syncs
	}{
		{name: "watch open: one GET, then the cache", live: true, cachedRV: "7", wantGets: 1},
		{name: "watch down: GET every sync", live: false, cachedRV: "7", wantGets: 3},
		{name: "watch open, cache behind: GET every sync", live: true, cachedRV: "6", wantGets: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(node.DeepCopy())
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			cached := node.DeepCopy()
			cached.ResourceVersion = tc.cachedRV
			if err := indexer.Add(cached); err != nil {
				t.Fatal(err)
			}
			clk := testingclock.NewFakeClock(time.Unix(1000, 0))
			s, err := New(Config{
				Client: client, Lister: corelisters.NewNodeLister(indexer), NodeName: name,
				Setters: []nodestatus.Setter{func(_ context.Context, n *v1.Node) error {
					n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "R"}}
					return nil
				}},
				CacheLive:       func() bool { return tc.live },
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
				Clock: clk, Rand: func() float64 { return 0.5 },
			})
			if err != nil {
				t.Fatal(err)
			}
			s.lastStatusReportTime = clk.Now()
			s.ListerMayBeStale()
			for range 3 {
				clk.Step(10 * time.Second)
				s.SyncNodeStatus(context.Background())
			}
			gets := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "get" {
					gets++
				}
			}
			if gets != tc.wantGets {
				t.Errorf("%d GETs over three syncs, want %d", gets, tc.wantGets)
			}
		})
	}
}
