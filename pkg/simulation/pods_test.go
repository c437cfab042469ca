package simulation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// TestSimPodsBehaviour: a pod's behaviour annotations are read when it is created and again when
// UpdatePod tells of a change, never at a status pass (a pass over a pod whose annotations changed
// without UpdatePod keeps the behaviour read before); a bad one is told once per read in a Warning
// Event InvalidAnnotation naming the key and the value, and its default used; a pod asked about without
// having been created here (the simulator restarted while it was terminal or being deleted) has its
// annotations read then, without an Event.
func TestSimPodsBehaviour(t *testing.T) {
	const (
		slow    = "10s"
		badWhen = "soon"
		badMsg  = `Warning InvalidAnnotation bad annotation nodeagent.io/readiness-delay: "soon" is not a non-negative duration such as 2s or 1m30s`
	)
	// step is one call, with the pod's readiness-delay annotation at that call ("" for none).
	type step struct {
		call, delay string
		wantReady   bool   // GetPodStatus: the container's readiness
		wantEvent   string // the Event the call records, if any
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"read at creation", []step{
			{call: "create", delay: slow},
			{call: "status", delay: slow, wantReady: false},
		}},
		{"not read again at a status pass", []step{
			{call: "create", delay: slow},
			{call: "status", delay: "", wantReady: false},
			{call: "status", delay: badWhen, wantReady: false},
		}},
		{"read again by UpdatePod", []step{
			{call: "create", delay: slow},
			{call: "update", delay: ""},
			{call: "status", delay: "", wantReady: true},
		}},
		{"bad at creation: one Event, the default used", []step{
			{call: "create", delay: badWhen, wantEvent: badMsg},
			{call: "status", delay: badWhen, wantReady: true},
			{call: "status", delay: badWhen, wantReady: true},
		}},
		{"bad after an update: one Event, the default used", []step{
			{call: "create", delay: slow},
			{call: "update", delay: badWhen, wantEvent: badMsg},
			{call: "status", delay: badWhen, wantReady: true},
		}},
		{"not created here: read at the first pass, silently", []step{
			{call: "status", delay: badWhen, wantReady: true},
			{call: "status", delay: "", wantReady: true},
		}},
		{"not created here: its annotations used", []step{
			{call: "status", delay: slow, wantReady: false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			clk := testingclock.NewFakeClock(start)
			recorder := record.NewFakeRecorder(10)
			s := newSimPods(Behaviour{}, "fakeRuntime", recorder, clk)
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
				Spec: v1.PodSpec{NodeName: "sim-0000", Containers: []v1.Container{{Name: "c", Image: "app:1"}}}}
			for i, st := range tc.steps {
				p = p.DeepCopy() // as the informer hands a changed pod: a new object
				p.Annotations = nil
				if st.delay != "" {
					p.Annotations = map[string]string{AnnotationReadinessDelay: st.delay}
				}
				var err error
				switch st.call {
				case "create":
					err = s.CreatePod(context.Background(), p)
				case "update":
					err = s.UpdatePod(context.Background(), p)
				case "status":
					var r node.PodRuntimeStatus
					r, err = s.GetPodStatus(context.Background(), p)
					if err == nil {
						cs := r.Status.Containers
						if len(cs) != 1 || cs[0].State.Running == nil || cs[0].Ready != st.wantReady {
							t.Errorf("step %d (%s, delay %q): containers %+v, want running, ready %v", i, st.call, st.delay, cs, st.wantReady)
						}
					}
				}
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, st.call, err)
				}
				var events []string // the container Events (podevents_test.go) left out
				for len(recorder.Events) > 0 {
					if e := <-recorder.Events; strings.Contains(e, "InvalidAnnotation") {
						events = append(events, e)
					}
				}
				var want []string
				if st.wantEvent != "" {
					want = []string{st.wantEvent}
				}
				if !slices.Equal(events, want) {
					t.Errorf("step %d (%s, delay %q): Events %q, want %q", i, st.call, st.delay, events, want)
				}
			}
		})
	}
}

// TestSetPodContainerRefusesNoOps: the control API refuses, naming why, a change that would do nothing:
// {"stop": false}, and a crash or stop of a container that is not running (not started yet, or exited).
func TestSetPodContainerRefusesNoOps(t *testing.T) {
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, node.PodIndexers())
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p",
		Annotations: map[string]string{AnnotationStartDelay + ".late": "1h", AnnotationRunDuration + ".done": "0s"}},
		Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{Name: "c", Image: "app:1"}, {Name: "late", Image: "app:1"}, {Name: "done", Image: "app:1"}}}}
	if err := pods.Add(p); err != nil {
		t.Fatal(err)
	}
	s := &Simulator{pods: newSimPods(Behaviour{}, "containerd", record.NewFakeRecorder(100), clk),
		byName: map[string]*simNode{"sim-0000": {name: "sim-0000"}}}
	s.cfg.Dependencies.Pods = node.IndexedPodLister{Indexer: pods}
	s.cfg.Dependencies.Clock = clk
	if err := s.pods.CreatePod(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		change  ContainerChange
		wantErr string // "" for accepted
	}{
		{change: ContainerChange{Container: "c", Stop: ptr.To(false)}, wantErr: "stop false changes nothing"},
		{change: ContainerChange{Container: "late", Crash: ptr.To[int32](1)}, wantErr: `container "late" of pod ns/p is waiting, not running`},
		{change: ContainerChange{Container: "done", Stop: ptr.To(true)}, wantErr: `container "done" of pod ns/p is terminated, not running`},
		{change: ContainerChange{Container: "c", Crash: ptr.To[int32](1)}},
	} {
		_, err := s.SetPodContainer(t.Context(), "ns", "p", tc.change)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%+v: %v, want accepted", tc.change, err)
		case tc.wantErr != "" && (!errors.Is(err, ErrBadChange) || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%+v: error %v, want ErrBadChange with %q", tc.change, err, tc.wantErr)
		}
	}
}

// TestSimPodsShareBehaviour: the records of pods whose annotations parse alike hold one behaviour (most
// pods: the simulation's defaults), a pod with its own annotations one of its own, unchanged by the
// pods after it; at most maxSharedBehaviours are held for sharing.
func TestSimPodsShareBehaviour(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	s := newSimPods(Behaviour{}, "fakeRuntime", record.NewFakeRecorder(100), clk)
	mk := func(name, delay string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "uid-" + types.UID(name)},
			Spec: v1.PodSpec{NodeName: "n", Containers: []v1.Container{{Name: "c", Image: "i"}}}}
		if delay != "" {
			p.Annotations = map[string]string{"nodeagent.io/readiness-delay": delay}
		}
		if err := s.CreatePod(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name       string
		delayA     string
		delayB     string
		wantShared bool
		wantDelayA time.Duration
		wantDelayB time.Duration
	}{
		{"both the defaults", "", "", true, 0, 0},
		{"the same annotation", "3s", "3s", true, 3 * time.Second, 3 * time.Second},
		{"one annotated", "3s", "", false, 3 * time.Second, 0},
		{"two annotations", "3s", "5s", false, 3 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mk(tc.name+"-a", tc.delayA), mk(tc.name+"-b", tc.delayB)
			s.mu.Lock()
			ba, bb := s.pods[a.UID].behaviour, s.pods[b.UID].behaviour
			s.mu.Unlock()
			if (ba == bb) != tc.wantShared {
				t.Errorf("shared: %v, want %v", ba == bb, tc.wantShared)
			}
			if got := ba.Default.ReadinessDelay; got != tc.wantDelayA {
				t.Errorf("first pod's readiness delay %v, want %v", got, tc.wantDelayA)
			}
			if got := bb.Default.ReadinessDelay; got != tc.wantDelayB {
				t.Errorf("second pod's readiness delay %v, want %v", got, tc.wantDelayB)
			}
		})
	}
	for i := range 3 * maxSharedBehaviours {
		mk(fmt.Sprintf("many-%d", i), fmt.Sprintf("%ds", i+10))
	}
	if n := len(s.behaviours); n > maxSharedBehaviours {
		t.Errorf("%d behaviours held for sharing, bound %d", n, maxSharedBehaviours)
	}
}
