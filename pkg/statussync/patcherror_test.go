package statussync

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// TestPatchErrorKeepsAPIReason checks that a failed status patch reports the API error's reason to
// ObservePatch (the nodeagent_node_status_patch_errors_total label), and that a NotFound patch
// counts as the Node being gone (it is registered again), although component-helpers'
// PatchNodeStatus formats the API error with %v.
func TestPatchErrorKeepsAPIReason(t *testing.T) {
	const name = "n1"
	gr := schema.GroupResource{Resource: "nodes"}
	tests := []struct {
		name         string
		err          error
		wantReason   string
		wantRegister bool
	}{
		{name: "conflict", err: apierrors.NewConflict(gr, name, errors.New("stale")), wantReason: "Conflict"},
		{name: "too many requests", err: apierrors.NewTooManyRequests("slow down", 0), wantReason: "TooManyRequests"},
		{name: "internal error", err: apierrors.NewInternalError(errors.New("boom")), wantReason: "InternalError"},
		{name: "service unavailable", err: apierrors.NewServiceUnavailable("down"), wantReason: "ServiceUnavailable"},
		{name: "timeout", err: apierrors.NewTimeoutError("slow", 1), wantReason: "Timeout"},
		{name: "forbidden", err: apierrors.NewForbidden(gr, name, errors.New("no")), wantReason: "Forbidden"},
		{name: "not found", err: apierrors.NewNotFound(gr, name), wantReason: "NotFound", wantRegister: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}},
				Status:     v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}}},
			}
			client := fake.NewSimpleClientset(node)
			client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(node); err != nil {
				t.Fatal(err)
			}
			var reasons []string
			registers := 0
			s, err := New(Config{
				Client: client, Lister: corelisters.NewNodeLister(indexer), NodeName: name,
				Setters: []nodestatus.Setter{func(_ context.Context, n *v1.Node) error {
					n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
					return nil
				}},
				Register:        func(context.Context) error { registers++; return nil },
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
				ObservePatch: func(_ time.Duration, reason string) { reasons = append(reasons, reason) },
				Clock:        testingclock.NewFakeClock(time.Unix(1000, 0)), Rand: func() float64 { return 0.5 },
			})
			if err != nil {
				t.Fatal(err)
			}
			s.registered.Store(true)
			s.SyncNodeStatus(context.Background())
			if len(reasons) != NodeStatusUpdateRetry {
				t.Fatalf("ObservePatch called %d times, want %d (one per try)", len(reasons), NodeStatusUpdateRetry)
			}
			for i, r := range reasons {
				if r != tc.wantReason {
					t.Errorf("try %d: ObservePatch reason %q, want %q", i, r, tc.wantReason)
				}
			}
			if got := registers > 0; got != tc.wantRegister {
				t.Errorf("registered again: %v (%d times), want %v", got, registers, tc.wantRegister)
			}
		})
	}
}
