package statussync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// TestOwnPatchNotUndoneByLaggingLister: the informer has not delivered the syncer's own last patch
// (MemoryPressure=True, resourceVersion 6) when the pressure clears and a sync is triggered. Read
// against the lister's older copy (MemoryPressure=False), the status would look unchanged and the
// Node would say MemoryPressure=True for a status period; the syncer must use the newer Node its
// patch returned. A lister at or past the patch, a Node created again (another UID), or a
// resourceVersion that is not an integer leave the lister's copy in use.
func TestOwnPatchNotUndoneByLaggingLister(t *testing.T) {
	const uid = types.UID("uid-1")
	node := func(rv string, uid types.UID, pressure v1.ConditionStatus) *v1.Node {
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: staleNodeName, UID: uid, ResourceVersion: rv,
				Labels: map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}},
			Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeMemoryPressure, Status: pressure}}},
		}
	}
	tests := []struct {
		name      string
		patchRV   string // the resourceVersion the patch to MemoryPressure=True returns
		lister    *v1.Node
		wantPatch bool
	}{
		{name: "lister behind the patch: the patch's Node is used, the clearing is posted",
			patchRV: "6", lister: node("5", uid, v1.ConditionFalse), wantPatch: true},
		{name: "lister at the patch",
			patchRV: "6", lister: node("6", uid, v1.ConditionTrue), wantPatch: true},
		{name: "lister past the patch: the lister is used",
			patchRV: "6", lister: node("7", uid, v1.ConditionFalse), wantPatch: false},
		{name: "Node created again (another UID): the lister is used",
			patchRV: "6", lister: node("5", "uid-2", v1.ConditionFalse), wantPatch: false},
		{name: "resourceVersion not an integer: the lister is used",
			patchRV: "b", lister: node("a", uid, v1.ConditionFalse), wantPatch: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			clk := testingclock.NewFakeClock(time.Unix(1000, 0))
			client := fake.NewClientset(node("5", uid, v1.ConditionFalse))
			tracked := clienttesting.ObjectReaction(client.Tracker())
			client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
				handled, obj, err := tracked(a)
				if n, ok := obj.(*v1.Node); ok && err == nil {
					n = n.DeepCopy()
					n.ResourceVersion = tc.patchRV
					return handled, n, nil
				}
				return handled, obj, err
			})
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(node("5", uid, v1.ConditionFalse)); err != nil {
				t.Fatal(err)
			}
			var pressure atomic.Bool
			s, err := New(Config{
				Client: client, Lister: corelisters.NewNodeLister(indexer), Cache: nodecache.New(clk).Node(staleNodeName), NodeName: staleNodeName,
				Funcs: nodestatus.NewFuncs(clk, nodestatus.Func{Name: "MemoryPressure", Setter: func(_ context.Context, n *v1.Node) error {
					status := v1.ConditionFalse
					if pressure.Load() {
						status = v1.ConditionTrue
					}
					n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeMemoryPressure, Status: status}}
					return nil
				}}),
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
				Clock: clk, Rand: func() float64 { return 0.5 },
			})
			if err != nil {
				t.Fatal(err)
			}
			s.lastStatusReportTime = clk.Now()

			pressure.Store(true)
			s.SyncNodeStatus(ctx)
			if r := s.LastResult(); r == nil || r.Result != ResultPatched {
				t.Fatalf("setting MemoryPressure=True: %+v, want a patch", r)
			}
			if err := indexer.Update(tc.lister); err != nil {
				t.Fatal(err)
			}
			client.ClearActions()
			pressure.Store(false)
			s.SyncNodeStatus(ctx)
			patched := false
			for _, a := range client.Actions() {
				patched = patched || a.GetVerb() == "patch"
			}
			if patched != tc.wantPatch {
				t.Errorf("clearing MemoryPressure: patched %v, want %v (actions %v)", patched, tc.wantPatch, client.Actions())
			}
		})
	}
}
