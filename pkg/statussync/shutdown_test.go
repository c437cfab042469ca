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

	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// TestNoPatchAfterContextEnds checks that a sync running while the agent shuts down (its context
// cancelled, so the setters' CRI calls fail and report "Unknown") posts nothing and reports nothing,
// on the periodic path and on the fast start-up path, while a live context still patches.
func TestNoPatchAfterContextEnds(t *testing.T) {
	const name = "n1"
	// runtimeVersion mimics the VersionInfo setter: the CRI call fails once ctx is cancelled.
	runtimeVersion := func(ctx context.Context, node *v1.Node) error {
		node.Status.NodeInfo.ContainerRuntimeVersion = "containerd://1.6.20"
		if ctx.Err() != nil {
			node.Status.NodeInfo.ContainerRuntimeVersion = "containerd://Unknown"
		}
		return nil
	}
	ready := func(ctx context.Context, node *v1.Node) error {
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
		return nil
	}
	tests := []struct {
		name      string
		cancelled bool
		fast      bool
		wantPatch bool
	}{
		{name: "sync, live context", wantPatch: true},
		{name: "sync, cancelled context", cancelled: true},
		{name: "fast path, live context", fast: true, wantPatch: true},
		{name: "fast path, cancelled context", fast: true, cancelled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelOSStable: "linux"}},
				Status: v1.NodeStatus{
					NodeInfo:   v1.NodeSystemInfo{ContainerRuntimeVersion: "containerd://1.6.19"},
					Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}},
				},
			}
			client := fake.NewClientset(node)
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(node); err != nil {
				t.Fatal(err)
			}
			clk := testingclock.NewFakeClock(time.Unix(1000, 0))
			s, err := New(Config{
				Client: client, Lister: corelisters.NewNodeLister(indexer), Cache: nodecache.New(clk).Node(name), NodeName: name,
				Funcs: nodestatus.NewFuncs(clk, nodestatus.Func{Name: "VersionInfo", Setter: runtimeVersion},
					nodestatus.Func{Name: "ReadyCondition", Setter: ready}),
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
				Clock: clk, Rand: func() float64 { return 0.5 },
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			reported := false // a result with an end time: a finished sync
			if tc.fast {
				_, r := s.FastNodeStatusUpdate(ctx)
				reported = r != nil && !r.Time.IsZero()
			} else {
				reported = !s.SyncNodeStatus(ctx).Time.IsZero()
			}
			patches := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "patch" {
					patches++
				}
			}
			if got := patches > 0; got != tc.wantPatch {
				t.Errorf("patched = %v (%d patches), want %v; actions %v", got, patches, tc.wantPatch, client.Actions())
			}
			if reported != tc.wantPatch {
				t.Errorf("a finished sync reported: %v, want %v (only when patched)", reported, tc.wantPatch)
			}
		})
	}
}
