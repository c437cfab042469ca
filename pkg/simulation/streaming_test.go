package simulation

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	utilexec "k8s.io/utils/exec"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

type onePod struct{ p *v1.Pod }

func (o onePod) Get(ns, name string) (*v1.Pod, error) {
	if o.p.Namespace == ns && o.p.Name == name {
		return o.p, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
}
func (o onePod) OnNode(string) ([]*v1.Pod, error) { return []*v1.Pod{o.p}, nil }

var streamT0 = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)

func logPod(ann map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: ann},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c", RestartCount: 1,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(streamT0.Add(time.Minute))}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				StartedAt: metav1.NewTime(streamT0), FinishedAt: metav1.NewTime(streamT0.Add(30 * time.Second))}},
		}}}}
}

func readLogs(t *testing.T, st *Streaming, opts kubeletserver.ContainerLogOpts) string {
	t.Helper()
	rc, err := st.GetContainerLogs(context.Background(), "ns", "p", "c", opts)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	return string(b)
}

func TestStreamingLogs(t *testing.T) {
	ann := map[string]string{AnnotationLogLines: "2", AnnotationLogPeriod: "10s", AnnotationLogText: "hello"}
	// now: 25 s into the current run (started streamT0+1m): lines 0,1 at start, 2 at +10s, 3 at +20s.
	clk := testingclock.NewFakeClock(streamT0.Add(time.Minute + 25*time.Second))
	st := &Streaming{Pods: onePod{logPod(ann)}, Clock: clk}
	line := func(restart, k int) string {
		return "hello container=c restart=" + string(rune('0'+restart)) + " line=" + string(rune('0'+k)) + "\n"
	}
	for _, tc := range []struct {
		name string
		opts kubeletserver.ContainerLogOpts
		want string
	}{
		{"all", kubeletserver.ContainerLogOpts{}, line(1, 0) + line(1, 1) + line(1, 2) + line(1, 3)},
		{"tail 1", kubeletserver.ContainerLogOpts{Tail: 1, TailSet: true}, line(1, 3)},
		{"tail 0", kubeletserver.ContainerLogOpts{Tail: 0, TailSet: true}, ""},
		{"tail huge", kubeletserver.ContainerLogOpts{Tail: 1 << 40, TailSet: true}, line(1, 0) + line(1, 1) + line(1, 2) + line(1, 3)},
		{"since 10s", kubeletserver.ContainerLogOpts{SinceSeconds: 10}, line(1, 3)},
		{"since 15s", kubeletserver.ContainerLogOpts{SinceSeconds: 15}, line(1, 2) + line(1, 3)},
		{"limit bytes", kubeletserver.ContainerLogOpts{LimitBytes: 5}, "hello"},
		// previous run: started streamT0, ended streamT0+30s: lines 0,1 then +10s, +20s, +30s.
		{"previous", kubeletserver.ContainerLogOpts{Previous: true}, line(0, 0) + line(0, 1) + line(0, 2) + line(0, 3) + line(0, 4)},
		{"timestamps", kubeletserver.ContainerLogOpts{Tail: 1, TailSet: true, Timestamps: true}, "2026-11-27T08:01:20Z " + line(1, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readLogs(t, st, tc.opts); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

type bufIO struct {
	out, err strings.Builder
}

type wc struct{ *strings.Builder }

func (wc) Close() error { return nil }

func (b *bufIO) Stdin() io.Reader                      { return nil }
func (b *bufIO) Stdout() io.WriteCloser                { return wc{&b.out} }
func (b *bufIO) Stderr() io.WriteCloser                { return wc{&b.err} }
func (b *bufIO) TTY() bool                             { return false }
func (b *bufIO) Resize() <-chan kubeletserver.TermSize { return nil }

func TestStreamingExec(t *testing.T) {
	st := &Streaming{Pods: onePod{logPod(map[string]string{AnnotationExec: `{"date": {"stdout": "today\n"}, "false": {"stderr": "no\n", "exitCode": 1}}`})},
		Clock: testingclock.NewFakeClock(streamT0)}
	for _, tc := range []struct {
		cmd            []string
		stdout, stderr string
		code           int
	}{
		{[]string{"date"}, "today\n", "", 0},
		{[]string{"false"}, "", "no\n", 1},
		{[]string{"ls", "-l"}, "", `nodeagent simulate: command "ls -l" is not simulated in container "c" of pod ns/p (no answer for it in annotation nodeagent.io/exec)` + "\n", 126},
	} {
		var b bufIO
		err := st.RunInContainer(context.Background(), "ns", "p", "c", tc.cmd, &b)
		code := 0
		if e, ok := err.(utilexec.ExitError); ok {
			code = e.ExitStatus()
		} else if err != nil {
			t.Fatal(err)
		}
		if b.out.String() != tc.stdout || b.err.String() != tc.stderr || code != tc.code {
			t.Errorf("%v: got %q %q %d, want %q %q %d", tc.cmd, b.out.String(), b.err.String(), code, tc.stdout, tc.stderr, tc.code)
		}
	}
}

// TestStreamingFollow: -f sends each new line at its time, and ends when the container stops
// (testing/synctest: the bubble's clock).
func TestStreamingFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := logPod(map[string]string{AnnotationLogLines: "0", AnnotationLogPeriod: "10s", AnnotationLogText: "f"})
		p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(start)
		pods := &onePodMut{p: p}
		st := &Streaming{Pods: pods, Clock: clock.RealClock{}}
		rc, err := st.GetContainerLogs(context.Background(), "ns", "p", "c", kubeletserver.ContainerLogOpts{Follow: true, Timestamps: true})
		if err != nil {
			t.Fatal(err)
		}
		got := reads(rc)
		time.Sleep(15 * time.Second)
		synctest.Wait()
		want := start.Add(10*time.Second).UTC().Format(time.RFC3339Nano) + " f container=c restart=1 line=0\n"
		if l := <-got; l != want {
			t.Fatalf("first followed line %q, want %q", l, want)
		}
		pods.set(func(p *v1.Pod) { // the container exits at +16s
			p.Status.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				StartedAt: metav1.NewTime(start), FinishedAt: metav1.NewTime(start.Add(16 * time.Second))}}
		})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if l, ok := <-got; ok {
			t.Errorf("after the container stopped, got %q; want the stream ended", l)
		}
	})
}

// reads sends each read of r, closed at its first error (the stream's end): the chunks a
// kubectl logs -f reader sees.
func reads(r io.Reader) <-chan string {
	got := make(chan string, 10)
	go func() {
		b := make([]byte, 100)
		for {
			n, err := r.Read(b)
			if err != nil {
				close(got)
				return
			}
			got <- string(b[:n])
		}
	}()
	return got
}

type onePodMut struct {
	mu sync.Mutex
	p  *v1.Pod
}

func (o *onePodMut) Get(string, string) (*v1.Pod, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.p, nil
}
func (o *onePodMut) OnNode(string) ([]*v1.Pod, error) { return nil, nil }
func (o *onePodMut) set(f func(*v1.Pod)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.p.DeepCopy()
	f(c)
	o.p = c
}
