package statussync

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// TestStaleListerRecoversWithoutEvents: after ListerMayBeStale, a sync that GETs the Node and finds the
// cache at the same resourceVersion clears the flag, so an unchanged Node (which sends no informer
// events) is not read from the API server on every later sync.
func TestStaleListerRecoversWithoutEvents(t *testing.T) {
	const name = "n1"
	node := func(rv string) *v1.Node {
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv,
				Labels: map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}},
			Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "R"}}},
		}
	}
	tests := []struct {
		name      string
		cachedRV  string
		wantGets  int // over three syncs
		wantStale bool
	}{
		{name: "cache caught up: one GET, then the cache", cachedRV: "7", wantGets: 1},
		{name: "cache behind: GET every sync", cachedRV: "6", wantGets: 3, wantStale: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(node("7"))
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(node(tc.cachedRV)); err != nil {
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
			if gets != tc.wantGets || s.listerStale.Load() != tc.wantStale {
				t.Errorf("gets %d, stale %v; want %d, %v", gets, s.listerStale.Load(), tc.wantGets, tc.wantStale)
			}
		})
	}
}
