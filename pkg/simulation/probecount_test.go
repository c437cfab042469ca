package simulation

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/probemetrics"
)

// TestSimProbeCount: count (the probes of a window, from the times alone) agrees with a pass over
// each probe, for every mode, delays, periods, gates and windows.
func TestSimProbeCount(t *testing.T) {
	modes := []ProbeBehaviour{{Mode: ProbePass}, {Mode: ProbeFail}, {Mode: ProbeFailAfter, After: 25 * time.Second},
		{Mode: ProbePassAfter, After: 33 * time.Second}, {Mode: ProbeFlap, After: 20 * time.Second}, {Mode: ProbeFlap, After: 3 * time.Second},
		{Mode: ProbeFlap, After: 70 * time.Second}}
	for _, b := range modes {
		for _, delay := range []int32{0, 5} {
			for _, period := range []int32{1, 10, 7} {
				for _, gate := range []time.Duration{0, 12 * time.Second} {
					for _, w := range [][2]time.Duration{{-1, 0}, {-1, 95 * time.Second}, {30 * time.Second, 95 * time.Second}, {40 * time.Second, 40 * time.Second}, {-1, 3 * time.Hour}} {
						name := fmt.Sprintf("mode %d/%s delay %d period %d gate %s window %v", b.Mode, b.After, delay, period, gate, w)
						sp := newSimProbe(&v1.Probe{InitialDelaySeconds: delay, PeriodSeconds: period}, b, t0, false)
						sp.gate = t0.Add(gate)
						var from time.Time
						if w[0] >= 0 {
							from = t0.Add(w[0])
						}
						until := t0.Add(w[1])
						var wantOK, wantFailed uint64
						for k := sp.firstProbe(); !sp.probeTime(k).After(until); k++ {
							if pt := sp.probeTime(k); from.IsZero() || pt.After(from) {
								if b.succeeds(t0, pt) {
									wantOK++
								} else {
									wantFailed++
								}
							}
						}
						ok, failed := sp.count(from, until)
						if ok != wantOK || failed != wantFailed {
							t.Errorf("%s: %d successful %d failed, want %d %d", name, ok, failed, wantOK, wantFailed)
						}
					}
				}
			}
		}
	}
}

// TestSimulateProbeCounts: the probes each container's probes ran, by type and result, as the kubelet's
// prober workers count them: from initialDelaySeconds after each run's start every periodSeconds while
// it runs, the startup probe until it succeeded, the others from then; a run killed by its liveness
// probe and restarted counts on.
func TestSimulateProbeCounts(t *testing.T) {
	probe := func(delay, period, failure int32) *v1.Probe {
		return &v1.Probe{InitialDelaySeconds: delay, PeriodSeconds: period, FailureThreshold: failure, SuccessThreshold: 1}
	}
	for _, tc := range []struct {
		name                         string
		readiness, liveness, startup *v1.Probe
		annotations                  map[string]string
		at                           time.Duration
		want                         probeTallies
	}{
		{name: "no probe", at: time.Hour, want: probeTallies{}},
		{name: "readiness passes: probes at 5, 15, 25, 35 s", readiness: probe(5, 10, 3), at: 35 * time.Second,
			want: probeTallies{{"c", "Readiness"}: {successful: 4}}},
		{name: "readiness fails", readiness: probe(0, 10, 3), annotations: map[string]string{AnnotationReadinessProbe: "fail"}, at: 95 * time.Second,
			want: probeTallies{{"c", "Readiness"}: {failed: 10}}},
		{name: "startup passes after 12 s, then readiness", startup: probe(0, 5, 5), readiness: probe(0, 10, 3),
			annotations: map[string]string{AnnotationStartupProbe: "pass-after:12s"}, at: 40 * time.Second,
			// startup at 0, 5, 10 (failed), 15 (successful): started at 15; readiness at 15, 25, 35.
			want: probeTallies{{"c", "Startup"}: {successful: 1, failed: 3}, {"c", "Readiness"}: {successful: 3}}},
		{name: "liveness fails after 25 s: killed at 50 s, restarted at once", liveness: probe(0, 10, 3), readiness: probe(0, 10, 3),
			annotations: map[string]string{AnnotationLivenessProbe: "fail-after:25s"}, at: 75 * time.Second,
			// run 1: liveness at 0, 10, 20 (successful), 30, 40, 50 (failed: killed); run 2 from 50: 50, 60, 70.
			want: probeTallies{{"c", "Liveness"}: {successful: 6, failed: 3}, {"c", "Readiness"}: {successful: 9}}},
		{name: "startup fails: killed at its 5th failure, backing off", startup: probe(0, 5, 5),
			annotations: map[string]string{AnnotationStartupProbe: "fail"}, at: 29 * time.Second,
			// run 1: 0..20 (5 failures, killed at 20), restarted at once; run 2 from 20: 20, 25.
			want: probeTallies{{"c", "Startup"}: {failed: 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod(v1.RestartPolicyAlways, "c")
			p.Annotations = tc.annotations
			c := &p.Spec.Containers[0]
			c.ReadinessProbe, c.LivenessProbe, c.StartupProbe = tc.readiness, tc.liveness, tc.startup
			b, err := PodBehaviour(p, Behaviour{})
			if err != nil {
				t.Fatal(err)
			}
			_, _, got := simulateProbes(p, &b, &SimInput{StartTime: t0, RuntimeName: "containerd"}, t0.Add(tc.at))
			if !maps.Equal(got, tc.want) {
				t.Errorf("at %s: %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}

// TestSimPodsProbeCounts: the counts of a pod's probes never go down when its behaviour changes (the
// probes before the change are the record's, those after are simulated from the change on), and a pod
// without a record (never created) has none.
func TestSimPodsProbeCounts(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	s := newSimPods(Behaviour{}, "containerd", record.NewFakeRecorder(100), clk)
	p := basePod(v1.RestartPolicyAlways, "c")
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 10, FailureThreshold: 3, SuccessThreshold: 1}
	ctx := context.Background()
	if got := s.probeCounts(ctx, p); len(got) != 0 {
		t.Fatalf("before CreatePod: %v, want none", got)
	}
	if err := s.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	count := func(at time.Duration) probemetrics.Count {
		t.Helper()
		clk.SetTime(t0.Add(at))
		got := s.probeCounts(ctx, p)
		if len(got) != 1 {
			t.Fatalf("at %s: %v, want one count", at, got)
		}
		return got[0]
	}
	want := probemetrics.Count{ProbeType: "Readiness", Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Container: "c", Successful: 5}
	if got := count(45 * time.Second); got != want {
		t.Errorf("at 45 s: %+v, want %+v", got, want)
	}
	// At 45 s its readiness probe starts failing: 5 successful (0..40 s) and, at 95 s, 5 failed (50..90 s).
	p = p.DeepCopy()
	p.Annotations = map[string]string{AnnotationReadinessProbe: "fail"}
	if err := s.UpdatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	want.Failed = 5
	if got := count(95 * time.Second); got != want {
		t.Errorf("at 95 s, after the change at 45 s: %+v, want %+v", got, want)
	}
	if err := s.DeletePod(ctx, p); err != nil { // forgotten
		t.Fatal(err)
	}
	if got := s.probeCounts(ctx, p); len(got) != 0 {
		t.Errorf("forgotten: %v, want none", got)
	}
}
