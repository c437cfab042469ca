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
// about what a pod without a command costs. BENCHMARKS.md ("Sandbox: one interpreted command").
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
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.GetPodStatus(ctx, bc.p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
