package statussync

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
)

// TestOnUnchanged: a sync that patches nothing hands OnUnchanged the Node as read (the status the API
// server has), so that callers tracking the posted status (the Ready gauge) need no patch to stay
// current; a sync that patches calls OnPatched only.
func TestOnUnchanged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5})
	var unchanged []*v1.Node
	w.syncer.cfg.OnUnchanged = func(n *v1.Node) { unchanged = append(unchanged, n) }

	for i, step := range []struct {
		desc          string
		wantPatched   int
		wantUnchanged int
	}{
		{desc: "first sync: patched", wantPatched: 1, wantUnchanged: 0},
		{desc: "10s later, heartbeat only: unchanged", wantPatched: 1, wantUnchanged: 1},
		{desc: "20s later, heartbeat only: unchanged", wantPatched: 1, wantUnchanged: 2},
	} {
		if i > 0 {
			w.clock.Step(10 * time.Second)
		}
		w.syncer.SyncNodeStatus(ctx)
		w.syncInformer()
		if len(w.patched) != step.wantPatched || len(unchanged) != step.wantUnchanged {
			t.Fatalf("step %d (%s): OnPatched %d times, OnUnchanged %d times, want %d and %d",
				i, step.desc, len(w.patched), len(unchanged), step.wantPatched, step.wantUnchanged)
		}
	}
	last := unchanged[len(unchanged)-1]
	if _, ready := getReady(last); ready == nil || ready.Status != v1.ConditionTrue {
		t.Errorf("OnUnchanged node Ready = %+v, want True", ready)
	}
	if last.Status.NodeInfo.KernelVersion != "6.1.0" {
		t.Errorf("OnUnchanged node kernel = %q, want the posted 6.1.0", last.Status.NodeInfo.KernelVersion)
	}
}
