package statussync

import (
	"context"
	"errors"
	"strings"
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
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// TestPatchErrorKeepsAPIReason checks that a failed status patch reports the API error's reason in
// the SyncResult (the nodeagent_node_status_patch_errors_total label) and keeps the API error in Err,
// and that a NotFound patch counts as the Node being gone (ErrNodeGone: the sync ends at that try,
// and the caller registers it again), although component-helpers' PatchNodeStatus formats the API
// error with %v.
func TestPatchErrorKeepsAPIReason(t *testing.T) {
	const name = "n1"
	gr := schema.GroupResource{Resource: "nodes"}
	tests := []struct {
		name       string
		err        error
		wantReason string
		wantGone   bool
	}{
		{name: "conflict", err: apierrors.NewConflict(gr, name, errors.New("stale")), wantReason: "Conflict"},
		{name: "too many requests", err: apierrors.NewTooManyRequests("slow down", 0), wantReason: "TooManyRequests"},
		{name: "internal error", err: apierrors.NewInternalError(errors.New("boom")), wantReason: "InternalError"},
		{name: "service unavailable", err: apierrors.NewServiceUnavailable("down"), wantReason: "ServiceUnavailable"},
		{name: "timeout", err: apierrors.NewTimeoutError("slow", 1), wantReason: "Timeout"},
		{name: "forbidden", err: apierrors.NewForbidden(gr, name, errors.New("no")), wantReason: "Forbidden"},
		{name: "not found", err: apierrors.NewNotFound(gr, name), wantReason: "NotFound", wantGone: true},
		{name: "not an API error", err: errors.New("connection reset by peer"), wantReason: "Unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64"}},
				Status:     v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}}},
			}
			client := fake.NewClientset(node)
			patches := 0
			client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
				patches++
				return true, nil, tc.err
			})
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := indexer.Add(node); err != nil {
				t.Fatal(err)
			}
			clk := testingclock.NewFakeClock(time.Unix(1000, 0))
			s, err := New(Config{
				Client: client, Lister: corelisters.NewNodeLister(indexer), Cache: nodecache.New(clk).Node(name), NodeName: name,
				Funcs: nodestatus.NewFuncs(clk, nodestatus.Func{Name: "Ready", Setter: func(_ context.Context, n *v1.Node) error {
					n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
					return nil
				}}),
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
				Clock: clk, Rand: func() float64 { return 0.5 },
			})
			if err != nil {
				t.Fatal(err)
			}
			r := s.SyncNodeStatus(ctx)
			tries := NodeStatusUpdateRetry
			if tc.wantGone {
				tries = 1 // the Node is gone: the other tries would find it gone too
			}
			if patches != tries {
				t.Errorf("%d patches, want %d (one per try)", patches, tries)
			}
			if r.Result != ResultError || !r.Patched || r.Try != tries || r.PatchReason != tc.wantReason {
				t.Errorf("result %s patched %v try %d reason %q, want error, patched, try %d, reason %q",
					r.Result, r.Patched, r.Try, r.PatchReason, tries, tc.wantReason)
			}
			// Every PATCH of the sync is reported, each with its reason (the metrics count them all).
			if len(r.Patches) != tries {
				t.Errorf("result lists %d PATCHes, want %d", len(r.Patches), tries)
			}
			for i, p := range r.Patches {
				if p.Reason != tc.wantReason {
					t.Errorf("PATCH %d reason %q, want %q", i+1, p.Reason, tc.wantReason)
				}
			}
			if !strings.Contains(r.Patch, `"status":"True"`) {
				t.Errorf("failed patch body %q, want the patch sent", r.Patch)
			}
			if got := string(apierrors.ReasonForError(r.Err)); got != tc.wantReason && tc.wantReason != "Unknown" {
				t.Errorf("reason of the sync's Err %q, want %q (the API error is wrapped, not formatted): %v", got, tc.wantReason, r.Err)
			}
			if !errors.Is(r.Err, tc.err) {
				t.Errorf("Err %v does not wrap %v", r.Err, tc.err)
			}
			if got := errors.Is(r.Err, ErrNodeGone); got != tc.wantGone {
				t.Errorf("errors.Is(Err, ErrNodeGone) = %v, want %v: %v", got, tc.wantGone, r.Err)
			}
		})
	}
}
