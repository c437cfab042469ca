package simulation

import (
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// What a log stream of the simulated pods costs is bounded whatever the request asks (issue 36,
// "bad input and load"): no goroutine, pipe or copy buffer of its own (it runs on the request's
// goroutine, through io.WriterTo), at most maxLogChunk bytes of lines computed ahead of the writer,
// and, while it follows a container, no timer of its own (the Streaming's followClock).
const (
	// maxLogChunk bounds one write of a log stream: the lines due at once (a huge --tail, or many
	// lines since the last wake) go out in writes of at most this many bytes, each one flush of
	// the kubelet's flushwriter (the kubelet's own log reader writes, and flushes, line by line).
	maxLogChunk = 32 << 10
	// followTick is the grain of the clock the follow streams wait on: a line is sent at the first
	// tick at or after its time (its timestamp stays its own time), so that the wake-ups of every
	// open stream come together, at most 1/followTick a second, instead of one timer per stream.
	followTick = 100 * time.Millisecond
	// followCheckPeriod is the longest a follow stream waits before it checks that its container
	// still runs: the kubelet's logForceCheckPeriod (k8s.io/cri-client/pkg/logs), which ends a
	// follow within a second of the container's exit even when no line comes.
	followCheckPeriod = time.Second
)

// followClock is a coarse clock the follow streams of a Streaming share: wait(t) returns at the
// first tick (of followTick, in the clock's time) at or after t. One ticker runs while any stream
// waits, and every stream due in one tick is woken by the close of one channel.
type followClock struct {
	mu   sync.Mutex
	due  map[int64]*tickWaiters // by tick: the clock's Unix nanoseconds / followTick, rounded up
	stop chan struct{}          // non-nil while the ticker runs; closed when no stream waits
}

// tickWaiters are the streams waiting for one tick: ch is closed at the tick.
type tickWaiters struct {
	ch chan struct{}
	n  int
}

// wait returns true at the first tick at or after t, in clk's time, or false as soon as one of
// cancel is closed (the request ended).
func (f *followClock) wait(clk clock.WithTicker, t time.Time, cancel ...<-chan struct{}) bool {
	k := (t.UnixNano() + int64(followTick) - 1) / int64(followTick)
	f.mu.Lock()
	if k <= clk.Now().UnixNano()/int64(followTick) {
		f.mu.Unlock()
		return true
	}
	w, ok := f.due[k]
	if !ok {
		if f.due == nil {
			f.due = map[int64]*tickWaiters{}
		}
		w = &tickWaiters{ch: make(chan struct{})}
		f.due[k] = w
	}
	w.n++
	if f.stop == nil {
		f.stop = make(chan struct{})
		go f.run(clk, f.stop)
	}
	f.mu.Unlock()
	var done1, done2 <-chan struct{}
	switch len(cancel) {
	case 0:
	case 1:
		done1 = cancel[0]
	default:
		done1, done2 = cancel[0], cancel[1]
	}
	select {
	case <-w.ch:
		return true
	case <-done1:
	case <-done2:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.n--; w.n == 0 && f.due[k] == w {
		delete(f.due, k)
	}
	if len(f.due) == 0 && f.stop != nil {
		close(f.stop)
		f.stop = nil
	}
	return false
}

// run ticks until stop is closed or no stream waits: each tick closes the channels due by then.
func (f *followClock) run(clk clock.WithTicker, stop chan struct{}) {
	t := clk.NewTicker(followTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
		}
		now := clk.Now().UnixNano() / int64(followTick)
		f.mu.Lock()
		for k, w := range f.due {
			if k <= now {
				close(w.ch)
				delete(f.due, k)
			}
		}
		if len(f.due) == 0 && f.stop == stop {
			f.stop = nil
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
}

// logStream is a container's log as GetContainerLogs returns it: an io.ReadCloser and io.WriterTo
// that computes its lines as they are read (from line next up to last, then, following, each new
// line as its time comes), in chunks of at most maxLogChunk bytes.
type logStream struct {
	st                        *Streaming
	namespace, pod, container string
	spec                      logSpec
	run                       run
	timestamps, follow        bool
	next, last                int // the next line to send; lines [0, last) are written by now
	limit, sent               int // limitBytes (0: none) and the bytes sent so far
	// done is the request's ctx.Done(): a follow stream ends when the client goes. closed is
	// closed by Close.
	done      <-chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	chunk     []byte // the last chunk computed; pending is what Read has not returned of it
	pending   []byte
}

// errStreamEnd ends a stream: every line sent, the limit reached, the container stopped, or the
// client gone.
var errStreamEnd = io.EOF

// nextChunk returns the next lines to send, at most maxLogChunk bytes (and no more than limitBytes
// allow), waiting for them when the stream follows a running container. It returns io.EOF at the
// end. The chunk is valid until the next call.
func (s *logStream) nextChunk() ([]byte, error) {
	for {
		if s.limit > 0 && s.sent >= s.limit {
			return nil, errStreamEnd
		}
		if s.next < s.last {
			s.chunk = s.chunk[:0]
			for s.next < s.last && len(s.chunk) < maxLogChunk {
				s.chunk = s.spec.appendLine(s.chunk, s.container, s.run, s.next, s.timestamps)
				s.next++
			}
			if s.limit > 0 && len(s.chunk) > s.limit-s.sent {
				s.chunk = s.chunk[:s.limit-s.sent]
			}
			s.sent += len(s.chunk)
			return s.chunk, nil
		}
		if !s.follow {
			return nil, errStreamEnd
		}
		// Wait for the next line's time, and at most followCheckPeriod, on the shared clock.
		now := s.st.Clock.Now()
		wake := now.Add(followCheckPeriod)
		if s.spec.period > 0 || s.next < len(s.spec.recorded) {
			if t := s.spec.lineTime(s.run, s.next); t.Before(wake) {
				wake = t
			}
		}
		if !s.st.follow.wait(s.st.Clock, wake, s.done, s.closed) {
			return nil, errStreamEnd
		}
		// The kubelet's follow ends when the container stops: the run must still be the current
		// one (not exited, not restarted, the pod not gone).
		if !s.st.stillRunning(s.namespace, s.pod, s.container, s.run) {
			return nil, errStreamEnd
		}
		s.last = max(s.last, s.spec.linesUntil(s.run, s.st.Clock.Now()))
	}
}

// WriteTo implements io.WriterTo (io.Copy's path): each chunk is one Write to w.
func (s *logStream) WriteTo(w io.Writer) (int64, error) {
	var n int64
	if len(s.pending) > 0 {
		m, err := w.Write(s.pending)
		n += int64(m)
		s.pending = nil
		if err != nil {
			return n, err
		}
	}
	for {
		c, err := s.nextChunk()
		if errors.Is(err, errStreamEnd) {
			return n, nil
		}
		m, err := w.Write(c)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
}

// Read implements io.Reader.
func (s *logStream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(s.pending) == 0 {
		c, err := s.nextChunk()
		if err != nil {
			return 0, err
		}
		s.pending = c
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Close ends the stream: a Read or WriteTo waiting for a line returns.
func (s *logStream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// appendLine appends line k of run r of container to b.
func (s logSpec) appendLine(b []byte, container string, r run, k int, timestamps bool) []byte {
	if timestamps {
		b = s.lineTime(r, k).UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, ' ')
	}
	if s.recorded != nil {
		l := s.recorded[k]
		b = append(b, l.Text...)
		if l.Partial {
			return b
		}
		return append(b, '\n')
	}
	if s.from != nil {
		b = append(b, s.from.lines[k%len(s.from.lines)]...)
		return append(b, '\n')
	}
	b = append(b, s.text...)
	b = append(b, " container="...)
	b = append(b, container...)
	b = append(b, " restart="...)
	b = strconv.AppendInt(b, int64(r.restart), 10)
	b = append(b, " line="...)
	b = strconv.AppendInt(b, int64(k), 10)
	return append(b, '\n')
}
