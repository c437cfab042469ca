package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
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
	go func() { done <- e.ctrl.pods.podStep(ctx, "default/a") }()
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
	if r := e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
		t.Fatalf("second pass: %v", r.err)
	}
	if got := e.ctrl.pods.statuses["default/a"]; got.state != FinishedPod || !got.killed {
		t.Errorf("after the second pass: state %s killed %v, want FinishedPod killed", got.state, got.killed)
	}
	if calls := e.provider.Calls(); len(calls) != 1 || calls[0] != "delete a" {
		t.Errorf("provider calls %q, want [delete a]", calls)
	}
}

// TestPodWorkerStates: the states a pod's worker goes through, named as the kubelet's PodWorkerState:
// a pod runs in SyncPod, one whose containers exited for good is TerminatedPod, one being deleted is
// TerminatingPod until its containers stopped, then TerminatedPod, and FinishedPod once deleted from the
// API.
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
		{name: "deleted before admission", mutate: deleting, want: FinishedPod, wantWrites: []string{"delete a grace=0 uid=uid-a"}},
		{name: "deleted after admission", mutate: func(p *v1.Pod) {
			deleting(p)
			p.Status.StartTime = &metav1.Time{Time: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}
		}, want: FinishedPod, wantWrites: []string{"patch-status a", "delete a grace=0 uid=uid-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPodEnv(t, testPod("a", "100m", tc.mutate))
			if r := e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
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

// TestPodWorkerTransitions: every state change a pod's worker may make is allowed by setState, and
// every other refused (the state left as it was): a transition removed from podWorkerTransitions, or
// one added, fails here.
func TestPodWorkerTransitions(t *testing.T) {
	allowed := map[[2]PodWorkerState]bool{
		{AdmitPod, SyncPod}:             true, // admitted, or admitted by an earlier run
		{AdmitPod, TerminatedPod}:       true, // terminal, or deleted, before it ever ran here
		{AdmitPod, RejectedPod}:         true, // rejected at admission
		{SyncPod, TerminatingPod}:       true, // deleted, evicted, past its active deadline
		{SyncPod, TerminatedPod}:        true, // its phase turned terminal
		{TerminatingPod, TerminatedPod}: true, // its containers stopped
		{TerminatedPod, FinishedPod}:    true, // deleted from the API
	}
	states := []PodWorkerState{AdmitPod, SyncPod, TerminatingPod, TerminatedPod, FinishedPod, RejectedPod}
	if len(states) != len(podWorkerStateNames) {
		t.Fatalf("the test knows %d states, PodWorkerState has %d", len(states), len(podWorkerStateNames))
	}
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]PodWorkerState{from, to}]
			t.Run(from.String()+"→"+to.String(), func(t *testing.T) {
				st := &podSyncStatus{state: from}
				err := st.setState(to)
				switch {
				case want && err != nil:
					t.Errorf("refused: %v", err)
				case want && st.state != to:
					t.Errorf("state %s after the transition, want %s", st.state, to)
				case !want && err == nil:
					t.Errorf("allowed, want refused")
				case !want && st.state != from:
					t.Errorf("state %s after a refused transition, want %s unchanged", st.state, from)
				}
			})
		}
	}
}

// TestPodActiveDeadline: a pod active on its Node for its spec.activeDeadlineSeconds is failed as the
// kubelet's activeDeadlineHandler fails it (Failed, DeadlineExceeded, the kubelet's message, a Normal
// Event) and its containers are stopped (killed with its grace period, never started when it is past its
// deadline at its first sync here); one within its deadline runs and is synced again at the deadline.
func TestPodActiveDeadline(t *testing.T) {
	started := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, tc := range []struct {
		name      string
		deadline  int64
		wantPhase v1.PodPhase
		wantCalls []string
	}{
		{name: "past its deadline", deadline: 60, wantPhase: v1.PodFailed, wantCalls: []string{"delete a"}},
		{name: "within its deadline", deadline: 2 * 3600, wantPhase: v1.PodRunning, wantCalls: []string{"create a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPodEnv(t, testPod("a", "100m", func(p *v1.Pod) {
				p.Spec.ActiveDeadlineSeconds = &tc.deadline
				p.Status.StartTime = &started
			}))
			r := e.ctrl.pods.podStep(t.Context(), "default/a")
			if r.err != nil {
				t.Fatal(r.err)
			}
			got := e.pod(t, "a")
			if got.Status.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", got.Status.Phase, tc.wantPhase)
			}
			if calls := e.provider.Calls(); !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("provider calls %q, want %q", calls, tc.wantCalls)
			}
			var events []string
			for len(e.recorder.Events) > 0 {
				events = append(events, <-e.recorder.Events)
			}
			if tc.wantPhase == v1.PodFailed {
				if got.Status.Reason != ReasonDeadlineExceeded || got.Status.Message != MessageDeadlineExceeded {
					t.Errorf("reason %q message %q, want %q %q", got.Status.Reason, got.Status.Message, ReasonDeadlineExceeded, MessageDeadlineExceeded)
				}
				if want := []string{"Normal DeadlineExceeded " + MessageDeadlineExceeded}; !slices.Equal(events, want) {
					t.Errorf("Events %q, want %q", events, want)
				}
				if st := e.ctrl.pods.statuses["default/a"].state; st != TerminatedPod {
					t.Errorf("state %s, want TerminatedPod", st)
				}
				return
			}
			if left := started.Add(time.Duration(tc.deadline) * time.Second).Sub(time.Now()); r.after > left || r.after <= 0 {
				t.Errorf("synced again after %s, want by the deadline in %s", r.after, left)
			}
		})
	}
}

// TestPodActiveDeadlineFromOwnWrite (issue 46): a pod whose status.startTime is only its first pass's own
// status write (whose update brings no pass: ownWrite) is synced again at its deadline counted from the
// startTime just written, as the kubelet's activeDeadlineHandler reads its status manager's copy, and is
// failed then (DeadlineExceeded, its containers stopped); not a reconcile period later.
func TestPodActiveDeadlineFromOwnWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline int64
		startAt  time.Time // the clock at the first pass
	}{
		{name: "8 s, first pass within its second", deadline: 8, startAt: time.Date(2026, 11, 27, 12, 0, 0, 400_000_000, time.UTC)},
		{name: "8 s, first pass on its second", deadline: 8, startAt: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)},
		{name: "1 s", deadline: 1, startAt: time.Date(2026, 11, 27, 12, 0, 0, 999_000_000, time.UTC)},
		{name: "past the reconcile period", deadline: 90, startAt: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(tc.startAt)
			e := newPodEnv(t, testPod("a", "100m", func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = &tc.deadline }))
			e.ctrl.deps.Clock = clk
			r := e.ctrl.pods.podStep(t.Context(), "default/a")
			if r.err != nil {
				t.Fatal(r.err)
			}
			written := e.pod(t, "a")
			if written.Status.StartTime == nil || written.Status.Phase != v1.PodRunning {
				t.Fatalf("first pass wrote phase %s startTime %v, want Running with a startTime", written.Status.Phase, written.Status.StartTime)
			}
			deadline := written.Status.StartTime.Add(time.Duration(tc.deadline) * time.Second)
			if want := deadline.Sub(tc.startAt); r.after != min(want, PodReconcilePeriod) {
				t.Fatalf("first pass: synced again after %v, want %v (the deadline from the startTime it wrote, %v)",
					r.after, min(want, PodReconcilePeriod), written.Status.StartTime)
			}
			// The informer delivers the write (an update that brings no pass); the passes come from the
			// results alone.
			if err := e.pods.Update(written); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if r.after == never || clk.Now().After(deadline) {
					break
				}
				clk.Step(r.after)
				if r = e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
					t.Fatal(r.err)
				}
			}
			got := e.pod(t, "a")
			if got.Status.Phase != v1.PodFailed || got.Status.Reason != ReasonDeadlineExceeded || got.Status.Message != MessageDeadlineExceeded {
				t.Fatalf("at %v: phase %s reason %q message %q, want Failed %q %q", clk.Now(), got.Status.Phase, got.Status.Reason,
					got.Status.Message, ReasonDeadlineExceeded, MessageDeadlineExceeded)
			}
			if !clk.Now().Equal(deadline) {
				t.Errorf("failed at %v, want at the deadline %v", clk.Now(), deadline)
			}
			if calls := e.provider.Calls(); !slices.Equal(calls, []string{"create a", "delete a"}) {
				t.Errorf("provider calls %q, want [create a delete a]", calls)
			}
		})
	}
}

// refusals is an Observer that records the refused pod status writes (PodObserver) only.
type refusals struct {
	Observer
	reasons []string
}

func (r *refusals) ObservePodStatusRefused(reason string) { r.reasons = append(r.reasons, reason) }

// TestPodStatusRefused: a pod status write the API server refuses (413, 422) is told in a Warning
// FailedSync Event with a bounded message and counted by reason (PodObserver), and tried again after
// PodStatusRetryPeriod, not on the work queue's growing backoff; a transient failure (500) still takes
// the backoff (an error).
func TestPodStatusRefused(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantReason string // "" for no refusal
	}{
		{name: "413", err: apierrors.NewRequestEntityTooLargeError(strings.Repeat("x", 4096)), wantReason: "RequestEntityTooLarge"},
		{name: "422", err: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "a", nil), wantReason: "Invalid"},
		{name: "500", err: apierrors.NewInternalError(errors.New("etcd"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPodEnv(t, testPod("a", "100m", nil))
			obs := &refusals{}
			e.ctrl.deps.Observer = obs
			e.client.PrependReactor("patch", "pods", func(core.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			r := e.ctrl.pods.podStep(t.Context(), "default/a")
			var events []string
			for len(e.recorder.Events) > 0 {
				if ev := <-e.recorder.Events; strings.Contains(ev, ReasonFailedSync) {
					events = append(events, ev)
				}
			}
			if tc.wantReason == "" {
				if r.err == nil || len(events) > 0 || len(obs.reasons) > 0 {
					t.Errorf("err %v, Events %q, refusals %q: want an error for the backoff, no Event, no refusal", r.err, events, obs.reasons)
				}
				return
			}
			if r.err != nil || r.after != PodStatusRetryPeriod {
				t.Errorf("result err %v after %s, want no error, again after %s", r.err, r.after, PodStatusRetryPeriod)
			}
			if len(events) != 1 || !strings.HasPrefix(events[0], "Warning FailedSync Error updating pod status: ") || len(events[0]) > maxEventMessageBytes+len("Warning FailedSync ") {
				t.Errorf("Events %q, want one Warning FailedSync of at most %d bytes", events, maxEventMessageBytes)
			}
			if !slices.Equal(obs.reasons, []string{tc.wantReason}) {
				t.Errorf("refusals %q, want [%s]", obs.reasons, tc.wantReason)
			}
		})
	}
}

// TestPodIPExhaustion: a pod for which the Node's pod CIDR has no address left is, as on a kubelet whose
// CNI cannot give one, Pending with its startTime and hostIP and its containers waiting
// ContainerCreating, told in a Warning FailedCreatePodSandBox Event, and tried again after
// PodSyncBackOff (not on a backoff growing to 1000 s); it is queued at once when a pod of the Node gives
// its address back, and then runs.
func TestPodIPExhaustion(t *testing.T) {
	done := func(p *v1.Pod) { p.Spec.RestartPolicy = v1.RestartPolicyNever }
	e := newPodEnv(t, testPod("a", "100m", done), testPod("b", "100m", nil))
	node, _, _ := e.nodes.GetByKey(podNode)
	small := node.(*v1.Node).DeepCopy()
	small.Spec.PodCIDR, small.Spec.PodCIDRs = "10.244.1.0/30", []string{"10.244.1.0/30"} // one usable address
	if err := e.nodes.Update(small); err != nil {
		t.Fatal(err)
	}
	q, err := NewQueue(QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.attach(q); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	r := e.ctrl.pods.podStep(ctx, "default/b")
	if r.err != nil || r.after != PodSyncBackOff {
		t.Errorf("pod without an address: err %v, again after %s; want no error, again after %s", r.err, r.after, PodSyncBackOff)
	}
	b := e.pod(t, "b")
	if b.Status.Phase != v1.PodPending || b.Status.StartTime == nil || b.Status.HostIP == "" || b.Status.PodIP != "" ||
		len(b.Status.ContainerStatuses) != 1 || b.Status.ContainerStatuses[0].State.Waiting == nil ||
		b.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("status of the pod without an address: %+v; want Pending, startTime, hostIP, no podIP, waiting ContainerCreating", b.Status)
	}
	var events []string
	for len(e.recorder.Events) > 0 {
		events = append(events, <-e.recorder.Events)
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], "Warning FailedCreatePodSandBox Failed to create pod sandbox: ") || !strings.Contains(events[0], "pod CIDR exhausted") {
		t.Errorf("Events %q, want one Warning FailedCreatePodSandBox naming the exhausted CIDR", events)
	}

	// a's containers exit: it is terminated and gives its address back, which queues b.
	a := e.pod(t, "a")
	a.Annotations = map[string]string{"test/exited": "true"}
	if err := e.pods.Update(a); err != nil {
		t.Fatal(err)
	}
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	if n := q.pods.Len(); n != 1 {
		t.Fatalf("%d pod items queued after the address went back, want 1 (b)", n)
	}
	if key, _ := q.pods.Get(); key.key != "default/b" {
		t.Errorf("queued %q, want default/b", key.key)
	}
	if err := e.pods.Update(e.pod(t, "b")); err != nil {
		t.Fatal(err)
	}
	if r := e.ctrl.pods.podStep(ctx, "default/b"); r.err != nil {
		t.Fatal(r.err)
	}
	if b := e.pod(t, "b"); b.Status.PodIP != "10.244.1.2" || b.Status.Phase != v1.PodRunning {
		t.Errorf("b: phase %s podIP %q, want Running with 10.244.1.2", b.Status.Phase, b.Status.PodIP)
	}
}

// pressureHost is a host under memory pressure.
type pressureHost struct{ fakeHost }

func (pressureHost) IsUnderMemoryPressure() bool { return true }

// TestPressureEviction: under memory pressure, as the kubelet's eviction manager, a new BestEffort pod is
// rejected (Evicted, "The node had condition: [MemoryPressure]. ") and a running BestEffort pod is evicted
// before a Burstable one: a Warning Evicted Event, its containers killed, Failed, Evicted "The node was
// low on resource: memory. ", with the DisruptionTarget condition; the manager looks again after 10 s.
func TestPressureEviction(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	bestEffort := func(p *v1.Pod) { p.Spec.Containers[0].Resources = v1.ResourceRequirements{} }
	admitted := func(p *v1.Pod) { p.Status.StartTime = &started }
	e := newPodEnv(t,
		testPod("burstable", "100m", admitted),
		testPod("besteffort", "100m", func(p *v1.Pod) { bestEffort(p); admitted(p) }),
		testPod("late", "100m", bestEffort))
	ctx := t.Context()
	for _, name := range []string{"burstable", "besteffort"} {
		if r := e.ctrl.pods.podStep(ctx, "default/"+name); r.err != nil {
			t.Fatal(r.err)
		}
		if err := e.pods.Update(e.pod(t, name)); err != nil {
			t.Fatal(err)
		}
	}
	e.ctrl.cfg.Host = pressureHost{}

	if r := e.ctrl.pods.podStep(ctx, "default/late"); r.err != nil {
		t.Fatal(r.err)
	}
	if late := e.pod(t, "late"); late.Status.Phase != v1.PodFailed || late.Status.Reason != "Evicted" ||
		late.Status.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " {
		t.Errorf("late BestEffort pod: %s %q %q, want rejected: Failed Evicted", late.Status.Phase, late.Status.Reason, late.Status.Message)
	}

	if r := e.ctrl.evictionStep(ctx); r.after != EvictionMonitoringPeriod {
		t.Errorf("eviction manager again after %s, want %s", r.after, EvictionMonitoringPeriod)
	}
	if r := e.ctrl.pods.podStep(ctx, "default/besteffort"); r.err != nil {
		t.Fatal(r.err)
	}
	var events []string
	for len(e.recorder.Events) > 0 {
		events = append(events, <-e.recorder.Events)
	}
	if want := "Warning Evicted The node was low on resource: memory. "; !slices.Contains(events, want) {
		t.Errorf("Events %q, want %q", events, want)
	}
	p := e.pod(t, "besteffort")
	if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" || p.Status.Message != "The node was low on resource: memory. " {
		t.Errorf("evicted pod: %s %q %q, want Failed Evicted", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	var disruption *v1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.DisruptionTarget {
			disruption = &p.Status.Conditions[i]
		}
	}
	if disruption == nil || disruption.Status != v1.ConditionTrue || disruption.Reason != "TerminationByKubelet" {
		t.Errorf("DisruptionTarget %+v, want True TerminationByKubelet", disruption)
	}
	if calls := e.provider.Calls(); !slices.Contains(calls, "delete besteffort") || slices.Contains(calls, "delete burstable") {
		t.Errorf("provider calls %q: want the BestEffort pod killed, not the Burstable one", calls)
	}
}

// stuckCreate is a provider whose CreatePod never returns until release is closed, whatever its
// context: a pod worker stuck in it.
type stuckCreate struct {
	*fakePods
	release chan struct{}
}

func (s stuckCreate) CreatePod(context.Context, *v1.Pod) error { <-s.release; return nil }

// TestQueueAliveCoversPodPool: Queue.Alive covers every pool, the pod workers' too: with its only pod
// worker stuck (a provider call that ignores its context), Alive reports the pod pool after the bound,
// while the Lease and Node step pools, served, are not named.
func TestQueueAliveCoversPodPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newPodEnv(t, testPod("a", "100m", nil))
		release := make(chan struct{})
		defer close(release)
		e.ctrl.cfg.Pods = stuckCreate{fakePods: e.provider, release: release}
		s, err := NewQueue(QueueConfig{PodWorkers: 1, StepTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.ctrl.attach(s); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- s.Run(ctx) }()
		s.pods.Add(podKey{e.ctrl, "default/a"})
		time.Sleep(10 * time.Second)
		if err := s.Alive(); err != nil {
			t.Errorf("Alive after 10 s: %v, want nil", err)
		}
		time.Sleep(3 * time.Minute)
		err = s.Alive()
		if err == nil || !strings.Contains(err.Error(), "no pod worker") || strings.Contains(err.Error(), "lease") || strings.Contains(err.Error(), "node step") {
			t.Errorf("Alive with the pod worker stuck: %v, want the pod pool named, and only it", err)
		}
		e.ctrl.Stop()
		release <- struct{}{}
		cancel()
		<-done
	})
}

// TestDeleteDanglingPods: the pods the provider runs on this Node that the API server no longer has (or
// has under another UID) are told to the provider as gone (DeletePod without a deletionTimestamp), as
// Virtual Kubelet's deleteDanglingPods; the pods the API has, and other Nodes' pods, are left alone.
func TestDeleteDanglingPods(t *testing.T) {
	e := newPodEnv(t, testPod("a", "100m", nil), testPod("b", "100m", nil))
	now := metav1.Now()
	e.provider.running = []*v1.Pod{
		testPod("a", "100m", nil),
		testPod("b", "100m", func(p *v1.Pod) { p.UID = "uid-b-before" }),
		testPod("gone", "100m", func(p *v1.Pod) { p.DeletionTimestamp = &now }),
		testPod("elsewhere", "100m", func(p *v1.Pod) { p.Spec.NodeName = "other-node" }),
	}
	if r := e.ctrl.pods.podStep(t.Context(), danglingPodsKey); r.err != nil || r.after != never {
		t.Fatalf("result %+v, want done", r)
	}
	if calls, want := e.provider.Calls(), []string{"delete b", "delete gone"}; !slices.Equal(calls, want) {
		t.Errorf("provider calls %q, want %q", calls, want)
	}
}

// TestPodAdmissionWaitsForNode: a pod bound while the Node is briefly absent from the informer (deleted,
// not registered again yet) is not rejected (the kubelet admits against its own Node object): it is
// admitted once the Node is back.
func TestPodAdmissionWaitsForNode(t *testing.T) {
	e := newPodEnv(t, testPod("a", "100m", nil))
	node, _, _ := e.nodes.GetByKey(podNode)
	if err := e.nodes.Delete(node); err != nil {
		t.Fatal(err)
	}
	r := e.ctrl.pods.podStep(t.Context(), "default/a")
	if r.err != nil || r.after != PodSyncBackOff {
		t.Errorf("without the Node: err %v, again after %s; want again after %s", r.err, r.after, PodSyncBackOff)
	}
	if p := e.pod(t, "a"); p.Status.Phase != v1.PodPending {
		t.Fatalf("without the Node: phase %s %q, want Pending (not rejected)", p.Status.Phase, p.Status.Reason)
	}
	if err := e.nodes.Add(node); err != nil {
		t.Fatal(err)
	}
	if r := e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	if p := e.pod(t, "a"); p.Status.Phase != v1.PodRunning {
		t.Errorf("with the Node back: phase %s, want Running", p.Status.Phase)
	}
}

// TestPodMissingConfigMapVolume: a pod whose ConfigMap volume does not exist waits, as with the kubelet's
// volume manager: ContainerCreating, a Warning FailedMount Event with the kubelet's message, no container
// started, tried again after PodSyncBackOff; it starts once the ConfigMap exists. An identity not allowed
// to read ConfigMaps does not hold pods back.
func TestPodMissingConfigMapVolume(t *testing.T) {
	withVolume := func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}}}
	}
	t.Run("missing, then created", func(t *testing.T) {
		e := newPodEnv(t, testPod("a", "100m", withVolume))
		r := e.ctrl.pods.podStep(t.Context(), "default/a")
		if r.err != nil || r.after != PodSyncBackOff {
			t.Errorf("err %v, again after %s; want again after %s", r.err, r.after, PodSyncBackOff)
		}
		p := e.pod(t, "a")
		if cs := p.Status.ContainerStatuses; p.Status.Phase != v1.PodPending || len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("status %+v, want Pending, ContainerCreating", p.Status)
		}
		var events []string
		for len(e.recorder.Events) > 0 {
			events = append(events, <-e.recorder.Events)
		}
		if want := []string{`Warning FailedMount MountVolume.SetUp failed for volume "cfg" : configmap "settings" not found`}; !slices.Equal(events, want) {
			t.Errorf("Events %q, want %q", events, want)
		}
		if calls := e.provider.Calls(); len(calls) != 0 {
			t.Errorf("provider calls %q, want none before the volume exists", calls)
		}
		if _, err := e.client.CoreV1().ConfigMaps("default").Create(t.Context(), &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := e.pods.Update(e.pod(t, "a")); err != nil {
			t.Fatal(err)
		}
		if r := e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
			t.Fatal(r.err)
		}
		if p := e.pod(t, "a"); p.Status.Phase != v1.PodRunning {
			t.Errorf("with the ConfigMap: phase %s, want Running", p.Status.Phase)
		}
	})
	t.Run("not allowed to read ConfigMaps", func(t *testing.T) {
		e := newPodEnv(t, testPod("a", "100m", withVolume))
		e.client.PrependReactor("get", "configmaps", func(core.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "settings", errors.New("no"))
		})
		if r := e.ctrl.pods.podStep(t.Context(), "default/a"); r.err != nil {
			t.Fatal(r.err)
		}
		if p := e.pod(t, "a"); p.Status.Phase != v1.PodRunning {
			t.Errorf("phase %s, want Running", p.Status.Phase)
		}
	})
}

// TestPodResize: an in-place resize beyond what the Node has left is Deferred, as the kubelet's
// allocation manager defers it: the PodResizePending condition (Deferred, the admission's message), a
// Warning ResizeDeferred Event, the containers' allocatedResources kept, and admission counting the
// allocated, not the desired, resources; a resize that fits is allocated (ResizeStarted, ResizeCompleted)
// and the condition goes.
func TestPodResize(t *testing.T) {
	e := newPodEnv(t, testPod("a", "500m", nil), testPod("b", "400m", nil))
	ctx := t.Context()
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	resize := func(cpu string, generation int64) {
		t.Helper()
		p := e.pod(t, "a")
		p.Generation = generation
		p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
		if err := e.pods.Update(p); err != nil {
			t.Fatal(err)
		}
		if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	events := func() []string {
		var out []string
		for len(e.recorder.Events) > 0 {
			out = append(out, <-e.recorder.Events)
		}
		return out
	}
	events()
	resize("2", 2)
	p := e.pod(t, "a")
	var pending *v1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.PodResizePending {
			pending = &p.Status.Conditions[i]
		}
	}
	if pending == nil || pending.Reason != "Deferred" || pending.Message != "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000" || pending.ObservedGeneration != 2 {
		t.Fatalf("PodResizePending %+v, want True Deferred with the admission's message, generation 2", pending)
	}
	// Where the kubelet's generateAPIPodStatus puts it: before its own conditions; with a lastProbeTime.
	var order []string
	for _, c := range p.Status.Conditions {
		order = append(order, string(c.Type))
	}
	if got, want := strings.Join(order, ","), "PodResizePending,PodReadyToStartContainers,Initialized,Ready,ContainersReady,PodScheduled"; got != want {
		t.Errorf("conditions %s, want %s", got, want)
	}
	if pending.LastProbeTime.IsZero() || !pending.LastProbeTime.Equal(&pending.LastTransitionTime) {
		t.Errorf("PodResizePending lastProbeTime %v, want the deferral's time %v", pending.LastProbeTime, pending.LastTransitionTime)
	}
	if got := p.Status.ContainerStatuses[0].AllocatedResources[v1.ResourceCPU]; got.String() != "500m" {
		t.Errorf("allocatedResources cpu %s, want the allocated 500m", got.String())
	}
	if ev := events(); len(ev) != 1 || !strings.HasPrefix(ev[0], `Warning ResizeDeferred Pod resize Deferred: {"containers":[{"name":"app","resources":{"requests":{"cpu":"2"}}}],"generation":2,"error":"Node didn't have enough resource: cpu`) {
		t.Errorf("Events %q, want one Warning ResizeDeferred with the kubelet's summary", ev)
	}
	// b (400m) fits beside a's allocated 500m, not beside its desired 2 cpu.
	if r := e.ctrl.pods.podStep(ctx, "default/b"); r.err != nil {
		t.Fatal(r.err)
	}
	if b := e.pod(t, "b"); b.Status.Phase != v1.PodRunning {
		t.Errorf("b: %s %q %q, want admitted beside a's allocation", b.Status.Phase, b.Status.Reason, b.Status.Message)
	}
	events()
	resize("100m", 3)
	p = e.pod(t, "a")
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodResizePending {
			t.Errorf("PodResizePending %+v after a resize that fits, want none", c)
		}
	}
	if got := p.Status.ContainerStatuses[0].AllocatedResources[v1.ResourceCPU]; got.String() != "100m" {
		t.Errorf("allocatedResources cpu %s, want 100m", got.String())
	}
	if ev := events(); len(ev) != 2 || !strings.HasPrefix(ev[0], "Normal ResizeStarted Pod resize started: ") || !strings.HasPrefix(ev[1], "Normal ResizeCompleted Pod resize completed: ") {
		t.Errorf("Events %q, want ResizeStarted, ResizeCompleted", ev)
	}
}

// TestEvictionOnePerPeriod: the eviction manager evicts at most one pod per EvictionMonitoringPeriod,
// however often it is queued (every status sync of a Node under pressure queues it).
func TestEvictionOnePerPeriod(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	admitted := func(p *v1.Pod) {
		p.Status.StartTime = &started
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	}
	e := newPodEnv(t, testPod("a", "100m", admitted), testPod("b", "100m", admitted))
	e.ctrl.cfg.Host = pressureHost{}
	ctx := t.Context()
	if r := e.ctrl.evictionStep(ctx); r.after != EvictionMonitoringPeriod {
		t.Fatalf("first run: again after %s, want %s", r.after, EvictionMonitoringPeriod)
	}
	r := e.ctrl.evictionStep(ctx) // queued again at once, e.g. by a status sync
	if r.after <= 0 || r.after > EvictionMonitoringPeriod {
		t.Errorf("second run at once: again after %s, want within the period", r.after)
	}
	evicting := 0
	for _, k := range []string{"default/a", "default/b"} {
		if e.ctrl.pods.evicting(k) {
			evicting++
		}
	}
	if evicting != 1 {
		t.Errorf("%d pods evicted by two runs within one period, want 1", evicting)
	}
}
