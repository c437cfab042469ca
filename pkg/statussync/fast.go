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

// FastNodeStatusUpdate makes one attempt of the fast start-up update and reports whether the fast
// path is finished; the caller runs it every FastStatusUpdateTick until it is, with timedOut true
// once FastStatusUpdateGrace has passed. One attempt refreshes the runtime state (holding no lock),
// reads the Node from the lister, runs the setters and, once Ready is no longer False, patches once
// (falling back to a full sync if that patch fails). Mirrors fastStatusUpdateOnce's loop body,
// fastNodeStatusUpdate, whose updateRuntimeUp call runs under syncNodeStatusMux: here a runtime that
// hangs cannot hold up the status sync.
func (s *Syncer) FastNodeStatusUpdate(ctx context.Context, timedOut bool) bool {
	return s.fastNodeStatusUpdate(ctx, timedOut)
}

// fastNodeStatusUpdate makes one fast-path attempt and reports whether the fast path is finished.
func (s *Syncer) fastNodeStatusUpdate(ctx context.Context, timeout bool) bool {
	logger := klog.FromContext(ctx)
	if timeout {
		logger.Error(nil, "Node not becoming ready in time after startup")
		return true
	}
	if ready, ok := s.cachedReady(); !ok {
		return false
	} else if ready {
		return true
	}
	s.cfg.UpdateRuntimeUp(ctx)
	if ctx.Err() != nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.cfg.Clock.Now()
	original, err := s.cachedNode()
	if err != nil {
		return false
	}
	if _, ready := nodeutil.GetNodeCondition(&original.Status, v1.NodeReady); ready == nil {
		return false
	} else if ready.Status == v1.ConditionTrue {
		return true
	}
	node, changed := s.updateNode(ctx, original)
	if ctx.Err() != nil {
		return true // shutting down: the setters saw a cancelled context; post nothing
	}
	if !changed {
		return false
	}
	if _, ready := nodeutil.GetNodeCondition(&node.Status, v1.NodeReady); ready == nil || ready.Status == v1.ConditionFalse {
		return false
	}
	logger.Info("Fast updating node status as it just became ready")
	s.delayAfterNodeStatusChange = s.calculateDelay()
	r := s.patchNodeStatus(ctx, original, node)
	r.Patches = []PatchAttempt{{Duration: r.PatchDuration, Reason: r.PatchReason}}
	if r.Err != nil {
		logger.Error(r.Err, "Error updating node status, will retry with syncNodeStatus")
		s.syncLocked(ctx, start, r.Patches...) // the failed fast patch is reported with the full sync
		return true
	}
	r.Try, r.Fast = 1, true
	s.finish(start, r)
	return true
}

// cachedReady reads the Node's Ready condition from the lister: ok is false when the Node or its
// Ready condition is not there yet.
func (s *Syncer) cachedReady() (ready, ok bool) {
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
