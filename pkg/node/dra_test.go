package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// draPods is fakePods with the kubelet's DRA calls: prepare fails with err while it is set.
type draPods struct {
	*fakePods
	mu  sync.Mutex
	err error
}

func (d *draPods) PrepareDynamicResources(_ context.Context, p *v1.Pod) error {
	d.record("prepare", p)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// GetPodStatus is fakePods' with each container's allocatedResourcesStatus, as a provider computes it
// while the claims are prepared (pkg/dra's Manager).
func (d *draPods) GetPodStatus(ctx context.Context, p *v1.Pod) (PodRuntimeStatus, error) {
	r, err := d.fakePods.GetPodStatus(ctx, p)
	if err == nil && r.Status != nil && len(p.Spec.ResourceClaims) > 0 {
		for i := range r.Status.Containers {
			r.Status.Containers[i].AllocatedResourcesStatus = []v1.ResourceStatus{{Name: "claim:gpu",
				Resources: []v1.ResourceHealth{{ResourceID: "gpu.example.com/node/gpu-0", Health: v1.ResourceHealthStatusHealthy}}}}
		}
	}
	return r, err
}

func (d *draPods) UnprepareDynamicResources(_ context.Context, p *v1.Pod) error {
	d.record("unprepare", p)
	return nil
}

// TestPodDynamicResources (issue 49): a pod with ResourceClaims on a Node whose provider is a
// DynamicResourcesProvider starts only once its claims are prepared: a failure leaves it Pending,
// ContainerCreating, with the kubelet's Warning Event FailedPrepareDynamicResources and another try
// after DynamicResourcesRetry, and no CreatePod; prepared, it starts; its containers stopped for good,
// its claims are unprepared before the pod leaves. A pod without claims is never prepared.
func TestPodDynamicResources(t *testing.T) {
	withClaim := func(p *v1.Pod) {
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared-gpu")}}
	}
	for _, tc := range []struct {
		name      string
		mutate    func(*v1.Pod)
		wantCalls []string // after the failed try, the successful one and the exit (update: the annotation that makes it exit)
	}{
		{"with a claim", withClaim, []string{"prepare a", "prepare a", "create a", "update a", "unprepare a"}},
		{"without claims", func(*v1.Pod) {}, []string{"create a", "update a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPodEnv(t, testPod("a", "100m", tc.mutate))
			dp := &draPods{fakePods: e.provider, err: errors.New("prepare dynamic resources: boom")}
			e.ctrl.cfg.Pods = dp
			r := e.ctrl.pods.podStep(t.Context(), "default/a")
			var events []string
			for len(e.recorder.Events) > 0 {
				events = append(events, <-e.recorder.Events)
			}
			if len(e.pod(t, "a").Spec.ResourceClaims) > 0 {
				if r.err != nil || r.after != DynamicResourcesRetry {
					t.Errorf("err %v, again after %s; want again after %s", r.err, r.after, DynamicResourcesRetry)
				}
				p := e.pod(t, "a")
				if cs := p.Status.ContainerStatuses; p.Status.Phase != v1.PodPending || len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != "ContainerCreating" {
					t.Errorf("status %+v, want Pending, ContainerCreating", p.Status)
				}
				// No sandbox before the claims are prepared: the kubelet's PodSandboxChanged message.
				i := slices.IndexFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.PodReadyToStartContainers })
				if i < 0 || p.Status.Conditions[i].Status != v1.ConditionFalse || p.Status.Conditions[i].Message != "no pod sandbox exists" {
					t.Errorf("conditions %+v, want PodReadyToStartContainers False \"no pod sandbox exists\"", p.Status.Conditions)
				}
				if want := []string{"Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: prepare dynamic resources: boom"}; !slices.Equal(events, want) {
					t.Errorf("Events %q, want %q", events, want)
				}
				dp.mu.Lock()
				dp.err = nil
				dp.mu.Unlock()
				if err := e.pods.Update(e.pod(t, "a")); err != nil {
					t.Fatal(err)
				}
				if r := e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
					t.Fatal(r.err)
				}
			}
			running := e.pod(t, "a")
			if running.Status.Phase != v1.PodRunning {
				t.Fatalf("phase %s, want Running", running.Status.Phase)
			}
			if hasClaims := len(running.Spec.ResourceClaims) > 0; hasClaims != (len(running.Status.ContainerStatuses[0].AllocatedResourcesStatus) > 0) {
				t.Errorf("running: allocatedResourcesStatus %+v; want one only with claims", running.Status.ContainerStatuses[0].AllocatedResourcesStatus)
			}
			// The containers exit for good (restartPolicy Never): Succeeded, then unprepared.
			p := e.pod(t, "a")
			p.Annotations = map[string]string{"test/exited": "true"}
			p.Spec.RestartPolicy = v1.RestartPolicyNever
			if err := e.pods.Update(p); err != nil {
				t.Fatal(err)
			}
			if r := e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			// The stopped pod's status is generated after the unprepare, as SyncTerminatingPod's: no
			// allocatedResourcesStatus (claims no longer prepared for it).
			if p := e.pod(t, "a"); p.Status.Phase != v1.PodSucceeded || len(p.Status.ContainerStatuses[0].AllocatedResourcesStatus) > 0 {
				t.Errorf("stopped: phase %s, allocatedResourcesStatus %+v; want Succeeded, none", p.Status.Phase, p.Status.ContainerStatuses[0].AllocatedResourcesStatus)
			}
			if got := dp.Calls(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("provider calls %q, want %q", got, tc.wantCalls)
			}
		})
	}
}
