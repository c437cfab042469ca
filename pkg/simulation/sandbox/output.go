package sandbox

import (
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// MaxOutputBytes bounds what one run's recorded output (Result.Output) holds: its last lines, each
// counted as its text and lineCost bytes more, up to 64 KiB; older lines are dropped (Result.Dropped).
// A tenant's command may write without end; the kubelet's container runtime keeps far more (10 MiB
// per log file by default, containerLogMaxSize), but the simulator holds every run's output in memory
// for thousands of containers per process, and 64 KiB is more than any conformance spec reads (a
// termination message's tail is at most 2 KiB, 80 lines) and what a person reads of a log. It is
// counted against Limits.Memory with the rest of what the run holds.
const MaxOutputBytes = 64 << 10

// MaxLineBytes is the longest line recorded as one: a longer one is cut into lines of this size, each
// but the last partial, as containerd cuts a line at its max_container_log_line_size (16 KiB) and
// tags the pieces P (partial) in the CRI log.
const MaxLineBytes = 16 << 10

// MaxTerminationMessageBytes is how much of the termination message file the kubelet reads: its last
// 4096 bytes (kubecontainer.MaxContainerTerminationMessageLength, read with tail.ReadAtMost).
const MaxTerminationMessageBytes = 4 << 10

// DefaultTerminationMessagePath is the termination message file of a container whose spec names none
// (v1.TerminationMessagePathDefault).
const DefaultTerminationMessagePath = "/dev/termination-log"

// lineCost is what one recorded Line costs beyond its text (its offset, flags and string header).
const lineCost = 40

// Line is one line a run wrote to its standard output or error, as the container runtime records it
// in the CRI log: its text without the newline, when it was written, and its stream.
type Line struct {
	// Offset is the simulated time from the run's start to the write that ended the line (the sum of
	// the sleeps before it).
	Offset time.Duration
	// Stderr: written to the standard error (else the standard output).
	Stderr bool
	// Partial: the line has no newline (cut at MaxLineBytes, or the run's last write ended without
	// one), as the CRI log's P tag; the kubelet's log reader writes it without a newline.
	Partial bool
	Text    string
}

// output records what a run writes to its standard output and error: its lines with their times, the
// last MaxOutputBytes of them (counted with lineCost each). Safe for concurrent use.
type output struct {
	mu      sync.Mutex
	now     func() time.Duration // the run's simulated time
	lines   []Line               // lines[head:] are kept
	head    int
	held    int64     // the cost of lines[head:]
	partial [2][]byte // each stream's line being written (at most MaxLineBytes)
	dropped int       // lines dropped from the head

	// The lines kept when the output first passed MaxOutputBytes (its first lines, for a run that is
	// Cut), the time of the first line that did not fit, and their cost.
	first     []Line
	firstEnd  time.Duration
	firstHeld int64
	overflown bool
}

// write records b written to the stream (stderr or stdout).
func (o *output) write(stderr bool, b []byte) {
	at := o.now() // before o.mu: the run's lock is taken before o.mu (memUse), never after
	o.mu.Lock()
	defer o.mu.Unlock()
	i := 0
	if stderr {
		i = 1
	}
	for len(b) > 0 {
		n := len(b)
		nl := -1
		for j, c := range b {
			if c == '\n' {
				nl = j
				break
			}
		}
		room := MaxLineBytes - len(o.partial[i])
		switch {
		case nl >= 0 && nl <= room:
			o.partial[i] = append(o.partial[i], b[:nl]...)
			o.add(Line{Offset: at, Stderr: stderr, Text: string(o.partial[i])})
			o.partial[i], b = o.partial[i][:0], b[nl+1:]
		case n < room && nl < 0:
			o.partial[i] = append(o.partial[i], b...)
			b = nil
		default:
			o.partial[i] = append(o.partial[i], b[:room]...)
			o.add(Line{Offset: at, Stderr: stderr, Partial: true, Text: string(o.partial[i])})
			o.partial[i], b = o.partial[i][:0], b[room:]
		}
	}
}

// add keeps l, dropping the oldest lines past MaxOutputBytes.
func (o *output) add(l Line) {
	o.lines = append(o.lines, l)
	o.held += int64(len(l.Text)) + lineCost
	if o.held > MaxOutputBytes && !o.overflown {
		o.overflown = true
		o.first = slices.Clone(o.lines[o.head : len(o.lines)-1])
		o.firstEnd = l.Offset
		o.firstHeld = o.held - int64(len(l.Text)) - lineCost
	}
	for o.held > MaxOutputBytes && o.head < len(o.lines) {
		o.held -= int64(len(o.lines[o.head].Text)) + lineCost
		o.lines[o.head] = Line{}
		o.head++
		o.dropped++
	}
	if o.head > len(o.lines)/2 && o.head > 64 { // compact: what is dropped is not held
		o.lines = append(o.lines[:0], o.lines[o.head:]...)
		o.head = 0
	}
}

// bytes is what the output holds now (counted against Limits.Memory).
func (o *output) bytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held + o.firstHeld + int64(cap(o.partial[0])+cap(o.partial[1]))
}

// firstLines returns the lines kept when the output first passed MaxOutputBytes and the time of the
// first line that did not fit; ok false when it never did.
func (o *output) firstLines() (first []Line, end time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first, o.firstEnd, o.overflown
}

// result ends the output at the run's exit: the lines being written are recorded as partial lines.
func (o *output) result() ([]Line, int) {
	at := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, p := range o.partial {
		if len(p) > 0 {
			o.add(Line{Offset: at, Stderr: i == 1, Partial: true, Text: string(p)})
			o.partial[i] = nil
		}
	}
	if o.head == len(o.lines) {
		return nil, o.dropped
	}
	return append([]Line(nil), o.lines[o.head:]...), o.dropped
}

// topOut is the run's standard output: its writes are recorded (output). A type of its own, so that a
// guard knows a statement writing there is at the run's top.
type topOut struct{ o *output }

func (t topOut) Write(b []byte) (int, error) {
	if t.o != nil {
		t.o.write(false, b)
	}
	return len(b), nil
}

func (topOut) Read([]byte) (int, error) { return 0, io.EOF }
func (topOut) Close() error             { return nil }

// topErr is the run's standard error.
type topErr struct{ o *output }

func (topErr) Read([]byte) (int, error) { return 0, io.EOF }
func (topErr) Close() error             { return nil }

func (t topErr) Write(b []byte) (int, error) {
	if t.o != nil {
		t.o.write(true, b)
	}
	return len(b), nil
}

// terminationMessage returns the last MaxTerminationMessageBytes of the run's termination message
// file, as the kubelet reads it (getTerminationMessage); "" when the file is empty or gone.
func (r *run) terminationMessage() string {
	if r.termPath == "" || !r.rootfs.Exists(r.termPath) {
		return ""
	}
	f, err := r.rootfs.OpenFile(r.termPath, os.O_RDONLY, 0)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	info, err := r.rootfs.Stat(r.termPath)
	if err != nil {
		return ""
	}
	if skip := info.Size() - MaxTerminationMessageBytes; skip > 0 {
		if _, err := io.CopyN(io.Discard, f, skip); err != nil {
			return ""
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxTerminationMessageBytes))
	if err != nil {
		return ""
	}
	return string(b)
}
