package simulation

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// BenchmarkSimPodsStatus: one status pass (GetPodStatus) over a running pod, with command interpretation
// on and off: a pod without a command costs the same either way; a Job pod with the e2e's
// failOddSucceedEven command is interpreted at its first pass only (memoized), so its later passes cost
// about what a pod without a command costs; an exec liveness probe an hour into its run costs one
// sandbox run per state of the container's files its probes met (the first pass, first-pass-µs), then
// about what an annotation's probe costs. BENCHMARKS.md ("Sandbox: one interpreted command").
//
//	go test -run '^$' -bench BenchmarkSimPodsStatus -benchmem ./pkg/simulation
func BenchmarkSimPodsStatus(b *testing.B) {
	plain := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec: v1.PodSpec{NodeName: "sim-0000", Containers: []v1.Container{{Name: "c", Image: "app:1"}}}}
	job := jobPod("j", "2", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c"}, []string{fixtureFailOddSucceedEven})
	for _, bc := range []struct {
		name      string
		p         *v1.Pod
		interpret bool
	}{
		{"no command, interpretation off", plain, false},
		{"no command, interpretation on", plain, true},
		{"command, interpretation on, memoized", job, true},
		{"liveness probe from the annotation, 1 h in", probePod("echo ok >/tmp/health; sleep 100000", map[string]string{AnnotationLivenessProbe: "pass"}), true},
		{"exec liveness probe cat /tmp/health, 1 h in", probePod("echo ok >/tmp/health; sleep 100000", nil), true},
		{"exec liveness probe, the file rewritten every 20 s, 1 h in", probePod("i=0; while [ $i -lt 500 ]; do echo $i > /tmp/health; sleep 20; i=$((i+1)); done", nil), true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			clk := testingclock.NewFakeClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
			s := newSimPods(Behaviour{}, "fakeRuntime", record.NewFakeRecorder(10), clk)
			if bc.interpret {
				s.commands = &commands{}
			}
			ctx := context.Background()
			_ = s.CreatePod(ctx, bc.p)
			_, _ = s.GetPodStatus(ctx, bc.p)
			var firstPass time.Duration
			if bc.p.Spec.Containers[0].LivenessProbe != nil {
				clk.Step(time.Hour)
				first := time.Now() // the real cost of the first pass an hour in (the probes' answers not memoized yet)
				_, _ = s.GetPodStatus(ctx, bc.p)
				firstPass = time.Since(first)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.GetPodStatus(ctx, bc.p); err != nil {
					b.Fatal(err)
				}
			}
			if firstPass > 0 {
				b.ReportMetric(float64(firstPass.Microseconds()), "first-pass-µs")
			}
		})
	}
}

// probePod is a pod whose container runs script with an exec liveness probe cat /tmp/health every 10 s.
func probePod(script string, ann map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pr", Namespace: "ns", UID: "uid-pr", Annotations: ann},
		Spec: v1.PodSpec{NodeName: "sim-0000", Containers: []v1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", script},
			LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/health"}}},
				PeriodSeconds: 10, FailureThreshold: 3, TimeoutSeconds: 1}}}}}
}

// BenchmarkHasCommand: deciding whether a pod's run is interpreted (hasCommand, at every view of every
// pod with command interpretation on), for an image the sandbox does not know and for agnhost
// entrypoint-tester (TestHasCommandAllocs holds it at 0 allocations).
//
//	go test -run '^$' -bench BenchmarkHasCommand -benchmem ./pkg/simulation
func BenchmarkHasCommand(b *testing.B) {
	for _, bc := range []struct {
		name string
		ctr  v1.Container
	}{
		{"registry.example/app:1", v1.Container{Name: "c", Image: "registry.example/app:1"}},
		{"busybox:1.36", v1.Container{Name: "c", Image: "busybox:1.36"}},
		{"agnhost entrypoint-tester", v1.Container{Name: "c", Image: "registry.k8s.io/e2e-test-images/agnhost:2.56", Args: []string{"entrypoint-tester", "override", "arguments"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{bc.ctr}}}
			b.ReportAllocs()
			for b.Loop() {
				hasCommand(p)
			}
		})
	}
}
