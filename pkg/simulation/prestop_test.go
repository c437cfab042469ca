package simulation

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// TestSimulatePreStop: a preStop hook's simulated duration delays the container's SIGTERM as the
// kubelet's killContainer does: the hook gets at most the grace period, the SIGKILL follows after the
// grace period less the hook's whole seconds, at least 2 s; the process takes the SIGTERM as without
// a hook. Without a hook the stop is unchanged.
func TestSimulatePreStop(t *testing.T) {
	const grace = 30 * time.Second
	for _, tc := range []struct {
		name     string
		hook     *PreStopHook
		pause    bool // the run exits 0 at the SIGTERM (/pause)
		shared   bool // shareProcessNamespace
		delay    string
		wantStop time.Duration // from the delete request
		wantCode int32
	}{
		{name: "pause-like, sleep 5: exit 0 at +5 s", hook: &PreStopHook{Duration: 5 * time.Second}, pause: true, wantStop: 5 * time.Second},
		{name: "pause-like, no hook: exit 0 at once", pause: true},
		{name: "pause-like, hook past the grace: exit 0 at the grace period", hook: &PreStopHook{Duration: time.Minute}, pause: true, wantStop: grace},
		{name: "pause-like, failed hook after 1 s: exit 0 at +1 s", hook: &PreStopHook{Duration: time.Second, Failed: true}, pause: true, wantStop: time.Second},
		{name: "shell, sleep 5: killed at the grace period", hook: &PreStopHook{Duration: 5 * time.Second}, wantStop: grace, wantCode: 137},
		{name: "shell, sleep 5.5: killed 25 s after the hook (whole seconds)", hook: &PreStopHook{Duration: 5500 * time.Millisecond}, wantStop: 30500 * time.Millisecond, wantCode: 137},
		{name: "shell, hook longer than the grace: killed 2 s after it", hook: &PreStopHook{Duration: 40 * time.Second}, wantStop: grace + 2*time.Second, wantCode: 137},
		{name: "shell, hook until stopped: killed 2 s after the grace period", hook: &PreStopHook{Forever: true}, wantStop: grace + 2*time.Second, wantCode: 137},
		{name: "shell, no hook: killed at the grace period", wantStop: grace, wantCode: 137},
		{name: "shareProcessNamespace, sleep 5: dies of the SIGTERM at +5 s", hook: &PreStopHook{Duration: 5 * time.Second}, shared: true, wantStop: 5 * time.Second, wantCode: 143},
		{name: "stop-delay 3s after a 5 s hook: exit 0 at +8 s", hook: &PreStopHook{Duration: 5 * time.Second}, delay: "3s", wantStop: 8 * time.Second},
		{name: "stop-delay 28s after a 5 s hook: killed at the grace period", hook: &PreStopHook{Duration: 5 * time.Second}, delay: "28s", wantStop: grace, wantCode: 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			requested := start.Add(time.Minute)
			p := execPod("sleep 3600", nil, map[string]string{})
			if tc.delay != "" {
				p.Annotations[AnnotationStopDelay] = tc.delay
			}
			p.Spec.ShareProcessNamespace = &tc.shared
			p.DeletionGracePeriodSeconds = ptrTo(int64(grace / time.Second))
			p.DeletionTimestamp = &metav1.Time{Time: requested.Add(grace)}
			b, err := PodBehaviour(p, Behaviour{})
			if err != nil {
				t.Fatal(err)
			}
			in := &SimInput{StartTime: start, DeletionSeen: requested, Run: func(*v1.Container, int32, time.Time) (RunOutcome, bool) {
				return RunOutcome{Forever: true, ExitsOnSIGTERM: tc.pause}, true
			}}
			if tc.hook != nil {
				in.PreStop = map[string]PreStopHook{"c": *tc.hook}
			}
			stop := requested.Add(tc.wantStop)
			before, _ := Simulate(p, &b, in, stop.Add(-time.Millisecond))
			if before.Containers[0].State.Running == nil || before.Terminal {
				t.Errorf("just before +%v: %+v, want running", tc.wantStop, before.Containers[0].State)
			}
			rt, _ := Simulate(p, &b, in, stop)
			term := rt.Containers[0].State.Terminated
			if term == nil || !rt.Terminal {
				t.Fatalf("at +%v: %+v terminal %v, want terminated", tc.wantStop, rt.Containers[0].State, rt.Terminal)
			}
			if term.ExitCode != tc.wantCode || !term.FinishedAt.Equal(stop) {
				t.Errorf("exit %d at %v, want %d at +%v", term.ExitCode, term.FinishedAt.Sub(requested), tc.wantCode, tc.wantStop)
			}
		})
	}
}

// TestSimPodsPreStopExec: at the deletion a container's preStop exec hook is interpreted once in its
// sandbox against its files then: its sleeps delay the SIGTERM, its writes are seen by exec during the
// termination, one that exits non-zero is told (Warning FailedPreStopHook "PreStopHook failed", as the
// kubelet, without its output) and the container still stops; the pause image has no program to exec.
func TestSimPodsPreStopExec(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hook     []string // nil: none
		pause    bool
		wantStop time.Duration // from the deletion
		wantCode int32
		wantEvt  bool
		wantFile string // what exec cat /tmp/bye answers at the deletion ("": not asked)
		noGrace  bool   // deleted with a grace period of 0 (else 30 s)
	}{
		{name: "sleep 5: dies of the SIGTERM at +5 s", hook: []string{"sleep", "5"}, wantStop: 5 * time.Second, wantCode: 143},
		{name: "writes a file, then sleeps: exec sees it", hook: []string{"sh", "-c", "echo bye > /tmp/bye; sleep 3"}, wantStop: 3 * time.Second, wantCode: 143, wantFile: "bye\n"},
		{name: "fails after 2 s: told, stops at +2 s", hook: []string{"sh", "-c", "sleep 2; echo secret; exit 3"}, wantStop: 2 * time.Second, wantCode: 143, wantEvt: true},
		{name: "no hook: at once", wantCode: 143},
		{name: "a grace period of 0: not run", hook: []string{"sh", "-c", "sleep 2; exit 1"}, noGrace: true, wantCode: 143},
		{name: "sleep 3600: the whole grace period", hook: []string{"sleep", "3600"}, wantStop: 30 * time.Second, wantCode: 143},
		{name: "sleep infinity: the whole grace period", hook: []string{"sleep", "infinity"}, wantStop: 30 * time.Second, wantCode: 143},
		{name: "a program the sandbox does not know: succeeded at once", hook: []string{"wget", "http://x"}, wantCode: 143},
		{name: "pause image: no program to exec, failed, exit 0 at once", hook: []string{"sleep", "5"}, pause: true, wantEvt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := execPod("sleep 3600", nil, nil)
			p.Spec.ShareProcessNamespace = ptrTo(true)
			if tc.pause {
				p.Spec.Containers[0].Image, p.Spec.Containers[0].Command = "registry.k8s.io/pause:3.10", nil
			}
			if tc.hook != nil {
				p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: tc.hook}}}
			}
			ctx := context.Background()
			s.startPod(t, p)
			s.clk.Step(10 * time.Second)
			p = p.DeepCopy()
			grace := int64(30)
			if tc.noGrace {
				grace = 0
			}
			p.DeletionGracePeriodSeconds = ptrTo(grace)
			p.DeletionTimestamp = &metav1.Time{Time: s.clk.Now().Add(time.Duration(grace) * time.Second)}
			deleted := s.clk.Now()
			if err := s.DeletePod(ctx, p); err != nil {
				t.Fatal(err)
			}
			if tc.wantFile != "" {
				res, _, err := s.execInContainer(ctx, p, "c", []string{"cat", "/tmp/bye"})
				if err != nil || string(res.Stdout) != tc.wantFile {
					t.Errorf("exec cat /tmp/bye during the termination: %q %v, want %q", res.Stdout, err, tc.wantFile)
				}
			}
			if tc.wantStop > 0 {
				s.clk.SetTime(deleted.Add(tc.wantStop - time.Millisecond))
				r, err := s.GetPodStatus(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if r.Status.Containers[0].State.Running == nil {
					t.Errorf("just before +%v: %+v, want running", tc.wantStop, r.Status.Containers[0].State)
				}
			}
			s.clk.SetTime(deleted.Add(tc.wantStop))
			r, err := s.GetPodStatus(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			term := r.Status.Containers[0].State.Terminated
			if term == nil || !r.Status.Terminal || term.ExitCode != tc.wantCode {
				t.Errorf("at +%v: %+v terminal %v, want exit %d", tc.wantStop, r.Status.Containers[0].State, r.Status.Terminal, tc.wantCode)
			}
			var events []string
			for len(s.recorder.Events) > 0 {
				if e := <-s.recorder.Events; strings.Contains(e, "PreStop") {
					events = append(events, e)
				}
			}
			var want []string
			if tc.wantEvt {
				want = []string{"Warning FailedPreStopHook PreStopHook failed"}
			}
			if strings.Join(events, "|") != strings.Join(want, "|") {
				t.Errorf("events %q, want %q", events, want)
			}
		})
	}
}

// BenchmarkSimPodsDeletePreStop: what a deletion costs the simulator (DeletePod, then the status pass
// that sees the containers stopped) for a pod without a preStop hook and one with a preStop exec hook.
func BenchmarkSimPodsDeletePreStop(b *testing.B) {
	for _, hook := range [][]string{nil, {"sh", "-c", "echo bye > /tmp/bye; sleep 3"}} {
		b.Run(map[bool]string{true: "no hook", false: "preStop exec"}[hook == nil], func(b *testing.B) {
			clk := testingclock.NewFakeClock(simStart)
			s := newSimPods(Behaviour{}, "fakeRuntime", &record.FakeRecorder{}, clk) // Events dropped
			s.commands = &commands{}
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				p := execPod("sleep 3600", nil, nil)
				p.UID = types.UID("uid-" + strconv.Itoa(i))
				p.Spec.ShareProcessNamespace = ptrTo(true)
				if hook != nil {
					p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: hook}}}
				}
				_ = s.CreatePod(ctx, p)
				if _, err := s.GetPodStatus(ctx, p); err != nil {
					b.Fatal(err)
				}
				p.DeletionGracePeriodSeconds = ptrTo(int64(30))
				p.DeletionTimestamp = &metav1.Time{Time: clk.Now().Add(30 * time.Second)}
				_ = s.DeletePod(ctx, p)
				if _, err := s.GetPodStatus(ctx, p); err != nil {
					b.Fatal(err)
				}
				p.DeletionTimestamp = nil
				_ = s.DeletePod(ctx, p) // forgotten
			}
		})
	}
}
