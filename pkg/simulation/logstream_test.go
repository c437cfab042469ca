package simulation

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

// writeCounter counts the writes and bytes it is given, and the largest write.
type writeCounter struct {
	writes, bytes, largest int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	w.bytes += len(p)
	w.largest = max(w.largest, len(p))
	return len(p), nil
}

// TestLogStreamBounded: a huge log (1 000 000 lines, a huge tailLines or limitBytes) goes out in
// writes of at most maxLogChunk bytes, as many as its bytes need, with a bounded heap whatever its
// size: nothing per line is kept or allocated.
func TestLogStreamBounded(t *testing.T) {
	const lines = 1_000_000
	p := logPod(map[string]string{AnnotationLogLines: strconv.Itoa(lines), AnnotationLogText: "x"})
	st := &Streaming{Pods: onePod{p}, Clock: testingclock.NewFakeClock(streamT0.Add(2 * time.Minute))}
	oneLine := len("x container=c restart=1 line=999999\n")
	for _, tc := range []struct {
		name      string
		opts      kubeletserver.ContainerLogOpts
		wantBytes int
	}{
		{"tailLines huge", kubeletserver.ContainerLogOpts{Tail: 1 << 62, TailSet: true}, -1},
		{"limitBytes huge", kubeletserver.ContainerLogOpts{LimitBytes: 1 << 62}, -1},
		{"limitBytes 1 MiB", kubeletserver.ContainerLogOpts{LimitBytes: 1 << 20}, 1 << 20},
		{"timestamps, tailLines huge", kubeletserver.ContainerLogOpts{Tail: 1 << 62, TailSet: true, Timestamps: true}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rc, err := st.GetContainerLogs(ctx, "ns", "p", "c", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var w writeCounter
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			if _, err := io.Copy(&w, rc); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			_ = rc.Close()
			if tc.wantBytes >= 0 && w.bytes != tc.wantBytes {
				t.Errorf("%d bytes, want %d", w.bytes, tc.wantBytes)
			}
			if tc.wantBytes < 0 && w.bytes < lines*len("x container=c restart=1 line=0\n") {
				t.Errorf("%d bytes: not every line of %d", w.bytes, lines)
			}
			if w.largest > maxLogChunk+oneLine+len(time.RFC3339Nano)+1 {
				t.Errorf("largest write %d bytes, want at most a chunk (%d) and a line", w.largest, maxLogChunk)
			}
			if most := w.bytes/maxLogChunk + 1; w.writes > most {
				t.Errorf("%d writes for %d bytes, want at most %d (chunks of %d bytes, not a write per line)", w.writes, w.bytes, most, maxLogChunk)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("%d bytes allocated for %d bytes of log, want at most 1 MiB (nothing per line)", alloc, w.bytes)
			}
		})
	}
}

// blockingWriter is a client that never reads: every Write blocks until release is closed.
type blockingWriter struct{ release chan struct{} }

func (b blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	return 0, io.ErrClosedPipe
}

// TestLogStreamClientNeverReads: a client that never reads holds one write in flight, and the stream
// computes nothing more; when the request ends the stream returns.
func TestLogStreamClientNeverReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := logPod(map[string]string{AnnotationLogLines: "1000000", AnnotationLogPeriod: "1ms"})
		p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(time.Now())
		st := &Streaming{Pods: onePod{p}, Clock: clock.RealClock{}}
		ctx, cancel := context.WithCancel(context.Background())
		rc, err := st.GetContainerLogs(ctx, "ns", "p", "c", kubeletserver.ContainerLogOpts{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		w := blockingWriter{release: make(chan struct{})}
		done := make(chan struct{})
		go func() { _, _ = io.Copy(w, rc); close(done) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		ls := rc.(*logStream)
		if ls.next > maxLogChunk/len("simulated log container=c restart=1 line=0\n")+1 {
			t.Errorf("the stream computed %d lines for a client that read none; want one chunk's", ls.next)
		}
		cancel()
		close(w.release)
		<-done
		_ = rc.Close()
	})
}

// TestLogStreamFollowSharedClock: many follow streams wait on one clock: every line arrives at the
// first followTick at or after its time, the clock keeps at most one channel per tick whatever the
// number of streams, and it stops once no stream waits (synctest: every goroutine ends).
func TestLogStreamFollowSharedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const streams = 200
		start := time.Now()
		pods := make(map[string]*v1.Pod, streams)
		for i := range streams {
			p := logPod(map[string]string{AnnotationLogLines: "0", AnnotationLogPeriod: "1s", AnnotationLogText: "f"})
			p.Name = fmt.Sprintf("p%d", i)
			// Each container starts 1/streams of a second after the previous: their lines fall in
			// every tick.
			p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(start.Add(time.Duration(i) * time.Second / streams))
			pods[p.Name] = p
		}
		st := &Streaming{Pods: podMap(pods), Clock: clock.RealClock{}}
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		late := time.Duration(0)
		var wg sync.WaitGroup
		for i := range streams {
			rc, err := st.GetContainerLogs(ctx, "ns", fmt.Sprintf("p%d", i), "c", kubeletserver.ContainerLogOpts{Follow: true, Timestamps: true})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				b := make([]byte, 4096)
				for {
					n, err := rc.Read(b)
					if err != nil {
						return
					}
					ts, _, _ := cutSpace(string(b[:n]))
					at, err := time.Parse(time.RFC3339Nano, ts)
					if err != nil {
						t.Errorf("line %q: %v", b[:n], err)
						return
					}
					mu.Lock()
					late = max(late, time.Since(at))
					mu.Unlock()
				}
			})
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st.follow.mu.Lock()
		waiting := len(st.follow.due)
		st.follow.mu.Unlock()
		if most := int(followCheckPeriod/followTick) + 1; waiting > most {
			t.Errorf("%d streams wait on %d channels, want at most one a tick (%d)", streams, waiting, most)
		}
		mu.Lock()
		if late > followTick {
			t.Errorf("a line arrived %v after its time, want within a tick (%v)", late, followTick)
		}
		mu.Unlock()
		cancel()
		wg.Wait()
	})
}

func cutSpace(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

type podMap map[string]*v1.Pod

func (m podMap) Get(_, name string) (*v1.Pod, error) {
	if p, ok := m[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("pod %q not found", name)
}
func (m podMap) OnNode(string) ([]*v1.Pod, error) { return nil, nil }

// TestLogStreamFollowNoPeriod: -f on a running container that writes no more lines stays open, as
// the kubelet's, and ends within followCheckPeriod (and a tick) of the container's exit.
func TestLogStreamFollowNoPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := logPod(map[string]string{AnnotationLogLines: "1", AnnotationLogText: "once"})
		p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(start)
		pods := &onePodMut{p: p}
		st := &Streaming{Pods: pods, Clock: clock.RealClock{}}
		rc, err := st.GetContainerLogs(context.Background(), "ns", "p", "c", kubeletserver.ContainerLogOpts{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		ended := make(chan time.Time, 1)
		go func() { _, _ = io.Copy(io.Discard, rc); ended <- time.Now() }()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case <-ended:
			t.Fatal("-f on a running container ended while it ran")
		default:
		}
		exit := time.Now()
		pods.set(func(p *v1.Pod) {
			p.Status.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				StartedAt: metav1.NewTime(start), FinishedAt: metav1.NewTime(exit)}}
		})
		if d := (<-ended).Sub(exit); d > followCheckPeriod+followTick {
			t.Errorf("-f ended %v after the container exited, want within %v", d, followCheckPeriod+followTick)
		}
	})
}
