package sandbox

import (
	"os"
	"sort"
	"time"
)

// Timeline is what happened to a container's own layer (its writable file system, outside its
// volumes) over a run, in simulated time: each change with its time from the run's start, so that
// the layer as it is at any time of the run can be made again (StateAt), as kubectl exec and exec
// probes see it at their times while the run is interpreted at once at its start. Its size (each
// change's data and entryCost bytes) is at most the FS's size bound it records: a change past it
// fails with ENOSPC, as a full disk. Not safe for concurrent use: its holder serializes.
type Timeline struct {
	changes  []change
	bytes    int64
	maxBytes int64
}

type changeOp uint8

const (
	opMkdir changeOp = iota
	opCreate
	opTruncate
	opAppend
	opRemove
	opRemoveAll
	opRename
	opTouch
)

type change struct {
	at     time.Duration
	op     changeOp
	name   string
	target string // opRename
	data   []byte // opAppend
	mod    time.Time
}

// NewTimeline returns an empty Timeline of at most maxBytes of changes (≤ 0: DefaultFSBytes).
func NewTimeline(maxBytes int64) *Timeline {
	if maxBytes <= 0 {
		maxBytes = DefaultFSBytes
	}
	return &Timeline{maxBytes: maxBytes}
}

// Len returns the number of changes recorded.
func (t *Timeline) Len() int {
	if t == nil {
		return 0
	}
	return len(t.changes)
}

// Bytes returns what the timeline holds (its changes' data and entryCost bytes each).
func (t *Timeline) Bytes() int64 {
	if t == nil {
		return 0
	}
	return t.bytes
}

// Until returns how many changes were made at or before d from the run's start.
func (t *Timeline) Until(d time.Duration) int {
	if t == nil {
		return 0
	}
	return sort.Search(len(t.changes), func(i int) bool { return t.changes[i].at > d })
}

// cut forgets the changes made after d (a Cut run is known up to d only).
func (t *Timeline) cut(d time.Duration) {
	if t == nil {
		return
	}
	n := t.Until(d)
	for _, c := range t.changes[n:] {
		t.bytes -= entryCost + int64(len(c.data))
	}
	clear(t.changes[n:])
	t.changes = t.changes[:n]
}

// At returns the time of change i.
func (t *Timeline) At(i int) time.Duration { return t.changes[i].at }

// add records c, unless the timeline is full (false).
func (t *Timeline) add(c change) bool {
	cost := entryCost + int64(len(c.data))
	if t.bytes+cost > t.maxBytes {
		return false
	}
	if n := len(t.changes); n > 0 && c.at < t.changes[n-1].at {
		c.at = t.changes[n-1].at // times never go back
	}
	t.bytes += cost
	t.changes = append(t.changes, c)
	return true
}

// Apply makes changes [from, to) of t again on fs (an FS with the layer as it was after change
// from-1); errors of single changes are ignored (they failed alike when recorded, or fs is smaller).
func (t *Timeline) Apply(fs *FS, from, to int) {
	if t == nil {
		return
	}
	for _, c := range t.changes[from:to] {
		applyChange(fs, c)
	}
}

// ApplyChanges makes the changes of the timelines at or before d on fs, merged by time (at equal
// times, those of ts[0] first): the layer of a run (ts[0], its command's) with the changes made into
// it since (ts[1:], the exec'd commands').
func ApplyChanges(fs *FS, d time.Duration, ts ...*Timeline) {
	idx := make([]int, len(ts))
	for {
		best := -1
		for i, t := range ts {
			if t == nil || idx[i] >= len(t.changes) || t.changes[idx[i]].at > d {
				continue
			}
			if best < 0 || t.changes[idx[i]].at < ts[best].changes[idx[best]].at {
				best = i
			}
		}
		if best < 0 {
			return
		}
		applyChange(fs, ts[best].changes[idx[best]])
		idx[best]++
	}
}

func applyChange(fs *FS, c change) {
	switch c.op {
	case opMkdir:
		_ = fs.MkdirAll(c.name)
	case opCreate, opTruncate:
		flag := os.O_WRONLY | os.O_CREATE
		if c.op == opTruncate {
			flag |= os.O_TRUNC
		}
		if h, err := fs.OpenFile(c.name, flag, 0o644); err == nil {
			_ = h.Close()
		}
	case opAppend:
		if h, err := fs.OpenFile(c.name, os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			_, _ = h.Write(c.data)
		}
	case opRemove, opRemoveAll:
		_ = fs.Remove(c.name, c.op == opRemoveAll)
	case opRename:
		_ = fs.Rename(c.name, c.target)
	case opTouch:
		_ = fs.Touch(c.name, c.mod)
	}
}

// recorder is an FS's record of its changes into a Timeline.
type recorder struct {
	t   *Timeline
	now func() time.Duration
}

// Record makes every later change of f recorded in t at now's time (now() is read under f's lock:
// it must not take it). A change t cannot hold fails with ENOSPC.
func (f *FS) Record(t *Timeline, now func() time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec = &recorder{t: t, now: now}
}

// record records c (f.mu held); false: the timeline is full.
func (f *FS) record(c change) bool {
	if f.rec == nil {
		return true
	}
	c.at = f.rec.now()
	return f.rec.t.add(c)
}

// StateAt returns a new FS of at most maxBytes holding the layer at d from the run's start: the
// changes of ts at or before d (ApplyChanges).
func StateAt(d time.Duration, maxBytes int64, ts ...*Timeline) *FS {
	fs := NewLayer(maxBytes)
	ApplyChanges(fs, d, ts...)
	return fs
}
