package node

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// DynamicResourcesProvider is implemented by a PodProvider whose Node has DRA drivers (pkg/dra's
// Manager does the kubelet's part): the kubelet's PrepareDynamicResources and UnprepareDynamicResources
// (pkg/kubelet/cm/dra/manager.go's PrepareResources and UnprepareResources), called for a pod with
// ResourceClaims (spec.resourceClaims, or status.extendedResourceClaimStatus).
type DynamicResourcesProvider interface {
	// PrepareDynamicResources prepares the pod's claims before its first CreatePod. An error keeps the
	// pod waiting, ContainerCreating: the pod worker records the kubelet's Warning Event
	// FailedPrepareDynamicResources "Failed to prepare dynamic resources: <err>" and tries again after
	// DynamicResourcesRetry, or at once on a change of the pod.
	PrepareDynamicResources(ctx context.Context, pod *v1.Pod) error
	// UnprepareDynamicResources unprepares them once the pod's containers have stopped for good
	// (before it is deleted from the API); an error is tried again with the queue's backoff. It must be
	// idempotent: it may be called again for the same pod, and for a pod never prepared.
	UnprepareDynamicResources(ctx context.Context, pod *v1.Pod) error
}

// ReasonFailedPrepareDynamicResources is the kubelet's Event reason for claims that could not be
// prepared (pkg/kubelet/events).
const ReasonFailedPrepareDynamicResources = "FailedPrepareDynamicResources"

// DynamicResourcesRetry is when a pod whose claims could not be prepared is synced again: the
// kubelet's kuberuntime SyncPod returns without an error then, and its pod worker syncs the pod again at
// its resync interval (--sync-frequency, 1 min by default; jittered by up to half of it there, not here).
const DynamicResourcesRetry = time.Minute

// hasResourceClaims reports whether the kubelet prepares dynamic resources for p.
func hasResourceClaims(p *v1.Pod) bool {
	return len(p.Spec.ResourceClaims) > 0 || p.Status.ExtendedResourceClaimStatus != nil
}

// prepareDynamicResources is the kubelet's PrepareDynamicResources call in kuberuntime's SyncPod, before
// the sandbox is made: ok false when the pod is not to start yet (r: the sync's result).
func (w *podWorkers) prepareDynamicResources(ctx context.Context, key string, p *v1.Pod, st *podSyncStatus) (r result, ok bool) {
	dp, has := w.node.cfg.Pods.(DynamicResourcesProvider)
	if !has || !hasResourceClaims(p) {
		return result{}, true
	}
	err := dp.PrepareDynamicResources(ctx, p)
	if err == nil {
		return result{}, true
	}
	r = w.notStarted(ctx, key, p, st, ReasonFailedPrepareDynamicResources, fmt.Sprintf("Failed to prepare dynamic resources: %v", err))
	if r.err == nil && r.after == PodSyncBackOff {
		r.after = DynamicResourcesRetry
	}
	return r, false
}

// unprepareDynamicResources is the kubelet's UnprepareDynamicResources in SyncTerminatingPod, once the
// pod's containers have stopped: ok false when it failed (r: tried again with the queue's backoff).
func (w *podWorkers) unprepareDynamicResources(ctx context.Context, key string, p *v1.Pod) (r result, ok bool) {
	dp, has := w.node.cfg.Pods.(DynamicResourcesProvider)
	if !has || !hasResourceClaims(p) {
		return result{}, true
	}
	if err := dp.UnprepareDynamicResources(ctx, p); err != nil {
		return result{after: never, err: fmt.Errorf("unpreparing the dynamic resources of pod %s: %w", key, err)}, false
	}
	return result{}, true
}
