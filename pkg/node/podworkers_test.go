package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// blockingCreate is a provider whose CreatePod waits for its context to end, telling entered when
// it starts waiting.
type blockingCreate struct {
	*fakePods
	entered chan struct{}
}

func (b blockingCreate) CreatePod(ctx context.Context, p *v1.Pod) error {
	close(b.entered)
	<-ctx.Done()
	return ctx.Err()
}

// TestPodWorkerDeletionCancelsSync: a deletion arriving while the pod's SyncPod is in flight (here,
// a CreatePod that hangs) cancels it, as the kubelet's UpdatePod cancels a SyncPod when the pod becomes
// terminating; the next pass is the pod's SyncTerminatingPod.
func TestPodWorkerDeletionCancelsSync(t *testing.T) {
	e := newPodEnv(t, testPod("a", "100m", nil))
	entered := make(chan struct{})
	e.ctrl.cfg.Pods = blockingCreate{fakePods: e.provider, entered: entered}
	ctx, end, ok := e.ctrl.beginPod(t.Context(), "default/a", time.Hour)
	if !ok {
		t.Fatal("beginPod: not begun")
	}
	done := make(chan result)
	go func() { done <- e.ctrl.podStep(ctx, "default/a") }()
	<-entered

	deleting := e.pod(t, "a")
	now := metav1.Now()
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &now, new(int64(30))
	if err := e.pods.Update(deleting); err != nil {
		t.Fatal(err)
	}
	e.ctrl.PodEventHandler().OnUpdate(nil, deleting)
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the SyncPod in flight was not cancelled by the deletion")
	}
	end()
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("SyncPod ended with %v, want context.Canceled", r.err)
	}
	e.ctrl.cfg.Pods = e.provider
	if r := e.ctrl.podStep(t.Context(), "default/a"); r.err != nil {
		t.Fatalf("second pass: %v", r.err)
	}
	if got := e.ctrl.pods.statuses["default/a"]; got.state != TerminatedPod || !got.killed {
		t.Errorf("after the second pass: state %s killed %v, want TerminatedPod killed", got.state, got.killed)
	}
	if calls := e.provider.Calls(); len(calls) != 1 || calls[0] != "delete a" {
		t.Errorf("provider calls %q, want [delete a]", calls)
	}
}

// TestPodWorkerStates: the states a pod's worker goes through, named as the kubelet's PodWorkerState:
// a pod runs in SyncPod, one whose containers exited for good is TerminatedPod, one being deleted is
// TerminatingPod until its containers stopped, then TerminatedPod (and deleted from the API).
func TestPodWorkerStates(t *testing.T) {
	deleting := func(p *v1.Pod) {
		now := metav1.Now()
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64(30))
	}
	for _, tc := range []struct {
		name       string
		mutate     func(*v1.Pod)
		want       PodWorkerState
		wantWrites []string
	}{
		{name: "running", want: SyncPod, wantWrites: []string{"patch-status a"}},
		{name: "exited for good", mutate: func(p *v1.Pod) {
			p.Spec.RestartPolicy = v1.RestartPolicyNever
			p.Annotations = map[string]string{"test/exited": "true"}
		}, want: TerminatedPod, wantWrites: []string{"patch-status a"}},
		{name: "deleted before admission", mutate: deleting, want: TerminatedPod, wantWrites: []string{"delete a grace=0 uid=uid-a"}},
		{name: "deleted after admission", mutate: func(p *v1.Pod) {
			deleting(p)
			p.Status.StartTime = &metav1.Time{Time: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}
		}, want: TerminatedPod, wantWrites: []string{"patch-status a", "delete a grace=0 uid=uid-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPodEnv(t, testPod("a", "100m", tc.mutate))
			if r := e.ctrl.podStep(t.Context(), "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			if got := e.ctrl.pods.statuses["default/a"].state; got != tc.want {
				t.Errorf("state %s, want %s", got, tc.want)
			}
			if got := e.writes(); !slices.Equal(got, tc.wantWrites) {
				t.Errorf("writes %q, want %q", got, tc.wantWrites)
			}
		})
	}
}
