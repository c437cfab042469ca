package simulation

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// TestStreamingRecordedLogs: a container whose command wrote lines has them as its log, each at its
// run's start plus its offset, with the options as for the annotations' lines; a run that wrote
// nothing keeps the annotations' lines.
func TestStreamingRecordedLogs(t *testing.T) {
	// now: 25 s into the current run (restart 1, started streamT0+1m); the previous run (restart 0)
	// ran from streamT0 to +30s.
	clk := testingclock.NewFakeClock(streamT0.Add(time.Minute + 25*time.Second))
	output := map[int32][]sandbox.Line{
		1: {{Text: "a"}, {Offset: 10 * time.Second, Stderr: true, Text: "b"}, {Offset: 20 * time.Second, Partial: true, Text: "c"},
			{Offset: 40 * time.Second, Text: "not yet"}},
		0: {{Text: "p1"}, {Offset: 20 * time.Second, Text: "p2"}, {Offset: 45 * time.Second, Text: "after its end"}},
	}
	for _, tc := range []struct {
		name   string
		output map[int32][]sandbox.Line
		opts   kubeletserver.ContainerLogOpts
		want   string
	}{
		{"all written by now", output, kubeletserver.ContainerLogOpts{}, "a\nb\nc"},
		{"tail 2", output, kubeletserver.ContainerLogOpts{Tail: 2, TailSet: true}, "b\nc"},
		{"since 15s", output, kubeletserver.ContainerLogOpts{SinceSeconds: 15}, "b\nc"},
		{"since 5s", output, kubeletserver.ContainerLogOpts{SinceSeconds: 5}, "c"},
		{"since time", output, kubeletserver.ContainerLogOpts{SinceTime: streamT0.Add(time.Minute + 11*time.Second)}, "c"},
		{"limit bytes", output, kubeletserver.ContainerLogOpts{LimitBytes: 3}, "a\nb"},
		{"timestamps", output, kubeletserver.ContainerLogOpts{Timestamps: true},
			"2026-11-27T08:01:00Z a\n2026-11-27T08:01:10Z b\n2026-11-27T08:01:20Z c"},
		{"previous: up to its end", output, kubeletserver.ContainerLogOpts{Previous: true, Timestamps: true},
			"2026-11-27T08:00:00Z p1\n2026-11-27T08:00:20Z p2\n"},
		{"no output: the annotations' lines", map[int32][]sandbox.Line{0: output[0]}, kubeletserver.ContainerLogOpts{},
			"simulated log container=c restart=1 line=0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &Streaming{Pods: onePod{logPod(nil)}, Clock: clk,
				Output: func(p *v1.Pod, container string, restart int32) []sandbox.Line {
					if p.Name != "p" || container != "c" {
						return nil
					}
					return tc.output[restart]
				}}
			if got := readLogs(t, st, tc.opts); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStreamingRecordedFollow: -f sends each recorded line at its time (testing/synctest).
func TestStreamingRecordedFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := logPod(nil)
		p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(start)
		st := &Streaming{Pods: onePod{p}, Clock: clock.RealClock{}, Output: func(*v1.Pod, string, int32) []sandbox.Line {
			return []sandbox.Line{{Text: "first"}, {Offset: 2 * time.Second, Text: "second"}}
		}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rc, err := st.GetContainerLogs(ctx, "ns", "p", "c", kubeletserver.ContainerLogOpts{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		got := reads(rc)
		synctest.Wait()
		if l := <-got; l != "first\n" {
			t.Fatalf("first line %q", l)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case l := <-got:
			t.Fatalf("at +1s got %q, want nothing yet", l)
		default:
		}
		time.Sleep(1100 * time.Millisecond)
		synctest.Wait()
		if l := <-got; l != "second\n" {
			t.Fatalf("at +2.1s got %q, want the second line", l)
		}
		cancel()
		_ = rc.Close()
		synctest.Wait()
	})
}

// TestSimPodsRunOutput: through simPods, a container's terminated state has its termination message
// file's content, or with FallbackToLogsOnError and a failure its log's tail, as the kubelet reads
// them; the run's lines are the Streaming's.
func TestSimPodsRunOutput(t *testing.T) {
	many := `i=0; while [ $i -lt 100 ]; do echo "line $i, long enough that 80 lines pass 2048 bytes"; i=$((i+1)); done; exit 3`
	manyTail := func() string {
		var b strings.Builder
		for i := 20; i < 100; i++ {
			b.WriteString("line " + strconv.Itoa(i) + ", long enough that 80 lines pass 2048 bytes\n")
		}
		s := b.String()
		return s[len(s)-2048:]
	}()
	for _, tc := range []struct {
		name      string
		script    string
		policy    v1.TerminationMessagePolicy
		path      string
		want      string
		wantLines []string
	}{
		{"echo, sleep, echo, exit 1", `echo hello $POD_NAME; sleep 2; echo bye; exit 1`, v1.TerminationMessageReadFile, "/dev/termination-log", "",
			[]string{"0s hello out", "2s bye"}},
		{"the termination file", `echo -n "all done" > /dev/termination-log; exit 0`, v1.TerminationMessageReadFile, "/dev/termination-log", "all done", nil},
		{"a custom termination path", `echo custom > /tmp/term`, v1.TerminationMessageReadFile, "/tmp/term", "custom\n", nil},
		{"FallbackToLogsOnError, failed: the log's tail", `echo one; echo two >&2; exit 2`, v1.TerminationMessageFallbackToLogsOnError,
			"/dev/termination-log", "one\ntwo\n", []string{"0s one", "0s two"}},
		{"FallbackToLogsOnError, succeeded: none", `echo one; exit 0`, v1.TerminationMessageFallbackToLogsOnError, "/dev/termination-log", "", []string{"0s one"}},
		{"FallbackToLogsOnError, the file first", `echo one; echo file > /dev/termination-log; exit 2`, v1.TerminationMessageFallbackToLogsOnError,
			"/dev/termination-log", "file\n", []string{"0s one"}},
		{"FallbackToLogsOnError: the last 80 lines, 2048 bytes", many, v1.TerminationMessageFallbackToLogsOnError, "/dev/termination-log", manyTail, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := jobPod("out", "0", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c", tc.script}, nil)
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, v1.EnvVar{Name: "POD_NAME", Value: "out"})
			p.Spec.Containers[0].TerminationMessagePath = tc.path
			p.Spec.Containers[0].TerminationMessagePolicy = tc.policy
			ctx := context.Background()
			_ = s.CreatePod(ctx, p)
			s.clk.Step(time.Minute)
			r, err := s.GetPodStatus(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			term := r.Status.Containers[0].State.Terminated
			if term == nil || term.Message != tc.want {
				t.Fatalf("terminated %+v, want message %q", term, tc.want)
			}
			if tc.wantLines != nil {
				var got []string
				for _, l := range s.runOutput(p, "c", 0) {
					got = append(got, l.Offset.String()+" "+l.Text)
				}
				if strings.Join(got, "|") != strings.Join(tc.wantLines, "|") {
					t.Errorf("lines %q, want %q", got, tc.wantLines)
				}
			}
		})
	}
}

// TestLogTail: the kubelet's readLastStringFromContainerLogs: the last 80 lines written by then, then
// their last 2048 bytes; a partial line without its newline.
func TestLogTail(t *testing.T) {
	var lines []sandbox.Line
	for i := range 100 {
		lines = append(lines, sandbox.Line{Offset: time.Duration(i) * time.Second, Text: strconv.Itoa(i)})
	}
	long := []sandbox.Line{{Text: strings.Repeat("x", 3000)}, {Text: "p", Partial: true}}
	for _, tc := range []struct {
		name  string
		lines []sandbox.Line
		until time.Duration
		want  string
	}{
		{"written by then", lines, 2 * time.Second, "0\n1\n2\n"},
		{"the last 80", lines, time.Hour, func() string {
			var b strings.Builder
			for i := 20; i < 100; i++ {
				b.WriteString(strconv.Itoa(i) + "\n")
			}
			return b.String()
		}()},
		{"the last 2048 bytes, a partial line", long, 0, strings.Repeat("x", 2046) + "\np"},
		{"none", nil, time.Hour, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := logTail(tc.lines, tc.until); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSimPodsRunOutputRestarts: each run of a restarting container has its own lines (kubectl logs and
// --previous), and a pod keeps those of the current and previous runs only.
func TestSimPodsRunOutputRestarts(t *testing.T) {
	s := newCommandSim()
	p := jobPod("restarts", "0", v1.RestartPolicyOnFailure, emptyDir,
		[]string{"sh", "-c", `n=$(cat /data/n 2>/dev/null || echo 0); echo run $n; echo $((n+1)) > /data/n; [ $n -ge 2 ]`}, nil)
	ctx := context.Background()
	_ = s.CreatePod(ctx, p)
	s.clk.Step(5 * time.Minute)
	r, err := s.GetPodStatus(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Status.Containers[0]; c.RestartCount != 2 || c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
		t.Fatalf("container %+v, want exited 0 after 2 restarts", c)
	}
	for _, tc := range []struct {
		restart int32
		want    string
	}{{0, ""}, {1, "run 1"}, {2, "run 2"}} {
		var got []string
		for _, l := range s.runOutput(p, "c", tc.restart) {
			got = append(got, l.Text)
		}
		if strings.Join(got, "|") != tc.want {
			t.Errorf("run %d: lines %q, want %q", tc.restart, got, tc.want)
		}
	}
}
