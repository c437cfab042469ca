package statussync

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
)

// FastStatusUpdateTick is the fast start-up update's period, and FastStatusUpdateGrace how long it
// goes on (the kubelet's 100 ms and nodeReadyGracePeriod, 120 s).
const (
	FastStatusUpdateTick  = 100 * time.Millisecond
	FastStatusUpdateGrace = 120 * time.Second
)

// FastNodeStatusUpdate makes the rest of one attempt of the fast start-up update, after the caller
// has seen the cached Node not Ready (CachedReady) and refreshed the runtime state (holding no lock,
// so that a runtime that hangs cannot hold up the status sync; the kubelet calls updateRuntimeUp
// under syncNodeStatusMux). It reads the Node from the lister, runs the setters and, once Ready is no
// longer False, patches once, falling back to a full sync (SyncNodeStatus) if that patch fails. It
// returns whether the fast path is finished and, when it posted (or tried the full sync), that
// sync's result; nil otherwise. Mirrors the body of the kubelet's fastNodeStatusUpdate.
func (s *Syncer) FastNodeStatusUpdate(ctx context.Context) (done bool, r *SyncResult) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.cfg.Clock.Now()
	original, err := s.cachedNode()
	if err != nil {
		return false, nil
	}
	if _, ready := nodeutil.GetNodeCondition(&original.Status, v1.NodeReady); ready == nil {
		return false, nil
	} else if ready.Status == v1.ConditionTrue {
		return true, nil
	}
	node, changed := s.updateNode(ctx, original)
	if ctx.Err() != nil {
		return true, nil // shutting down: the setters saw a cancelled context; post nothing
	}
	if !changed {
		return false, nil
	}
	if _, ready := nodeutil.GetNodeCondition(&node.Status, v1.NodeReady); ready == nil || ready.Status == v1.ConditionFalse {
		return false, nil
	}
	logger.Info("Fast updating node status as it just became ready")
	s.delayAfterNodeStatusChange = s.calculateDelay()
	fast := s.patchNodeStatus(ctx, original, node)
	fast.Patches = []PatchAttempt{{Duration: fast.PatchDuration, Reason: fast.PatchReason}}
	if fast.Err != nil {
		logger.Error(fast.Err, "Error updating node status, will retry with syncNodeStatus")
		full := s.syncLocked(ctx, start, fast.Patches...) // the failed fast patch is reported with the full sync
		return true, &full
	}
	fast.Try, fast.Fast = 1, true
	fast = s.finish(start, fast)
	return true, &fast
}

// CachedReady reads the Node's Ready condition from the lister: ok is false when the Node or its
// Ready condition is not there yet. The fast start-up update asks it first on every tick: a Node
// already Ready ends the fast path, one not there yet waits for the next tick.
func (s *Syncer) CachedReady() (ready, ok bool) {
	node, err := s.cachedNode()
	if err != nil {
		return false, false
	}
	_, cond := nodeutil.GetNodeCondition(&node.Status, v1.NodeReady)
	if cond == nil {
		return false, false
	}
	return cond.Status == v1.ConditionTrue, true
}
