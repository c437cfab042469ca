// Package filelog follows a log file as `tail -F` does and turns its lines into
// node-problem-detector's Log values: NPD's filelog log watcher, rewritten to survive rotation,
// truncation and a file that disappears and comes back.
//
// NPD's own watcher (k8s.io/node-problem-detector/pkg/systemlogmonitor/logwatchers/filelog, on a
// fork of cadvisor's tail) is not used: on a rename it reopens the path without reading what was
// left in the old file, it never notices a truncation (copytruncate), it gives up for good when the
// file stays missing for about a minute, and it sleeps in real time, so it cannot be tested with a
// fake clock. This one polls the path every PollInterval (NPD's 500 ms): it reads the open file to
// its end, then stats the path; a different file there means rotation, so it reads the old file to
// its end (keeping a last line without newline as a line) and starts at the top of the new one; a
// smaller size means truncation, so it starts again at the top; no file means it keeps reading the
// open one until a file is back. A file truncated and written past the old offset between two polls
// cannot be told from one that grew; `tail -F` has the same blind spot.
package filelog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	logtypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/types"
	"k8s.io/utils/clock"
)

// DefaultPollInterval is how often the file is checked for new lines: NPD's watchPollInterval.
const DefaultPollInterval = 500 * time.Millisecond

// maxLineBytes bounds a line without newline; past it the bytes so far are taken as a line.
const maxLineBytes = 256 << 10

// Config configures a Watcher.
type Config struct {
	// Path is the log file (the config's logPath); required.
	Path string
	// Translator parses each line; required.
	Translator *Translator
	// SkipList drops the lines containing any of these strings before they are parsed (skipList).
	SkipList []string
	// StartTime drops the lines stamped before it, as NPD does with its lookback and delay.
	StartTime time.Time
	// Clock drives the polling; default the real clock.
	Clock clock.WithTicker
	// PollInterval defaults to DefaultPollInterval.
	PollInterval time.Duration
	// OnError, if set, receives problems following the file (missing, unreadable, rotated away).
	OnError func(error)
	// OnRecover, if set, is called when a missing file has appeared and is followed again.
	OnRecover func()
}

// Watcher follows one log file. It implements NPD's LogWatcher interface
// (k8s.io/node-problem-detector/pkg/systemlogmonitor/logwatchers/types).
type Watcher struct {
	cfg      Config
	logCh    chan *logtypes.Log
	stop     chan struct{}
	done     chan struct{}
	startMu  sync.Mutex
	started  bool
	stopOnce sync.Once

	// Owned by the loop.
	f       *os.File
	fi      os.FileInfo
	off     int64
	partial []byte
	buf     []byte
	missing bool // the path could not be opened
	gone    bool // the path vanished while a file was open
}

// New validates cfg and returns a Watcher; Watch starts it.
func New(cfg Config) (*Watcher, error) {
	if cfg.Path == "" || cfg.Translator == nil {
		return nil, errors.New("filelog: Config needs Path and Translator")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	return &Watcher{
		cfg:   cfg,
		logCh: make(chan *logtypes.Log, 1000), // NPD's capacity
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		buf:   make([]byte, 32<<10),
	}, nil
}

// Watch starts following the file and returns the channel of its parsed lines, which is closed
// after Stop. The file need not exist yet. It never returns an error; the signature is NPD's.
func (w *Watcher) Watch() (<-chan *logtypes.Log, error) {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if !w.started {
		w.started = true
		go w.loop()
	}
	return w.logCh, nil
}

// Stop stops following the file and waits until the file is closed.
func (w *Watcher) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.startMu.Lock()
	started := w.started
	w.startMu.Unlock()
	if started {
		<-w.done
	}
}

func (w *Watcher) loop() {
	defer close(w.done)
	defer close(w.logCh)
	defer func() {
		if w.f != nil {
			_ = w.f.Close()
		}
	}()
	ticker := w.cfg.Clock.NewTicker(w.cfg.PollInterval)
	defer ticker.Stop()
	for {
		if !w.poll() {
			return
		}
		select {
		case <-w.stop:
			return
		case <-ticker.C():
		}
	}
}

// poll reads what is new and follows a rotation or truncation. It returns false when stopping.
func (w *Watcher) poll() bool {
	if w.f == nil && !w.open() {
		return true
	}
	if !w.drain() {
		return false
	}
	fi, err := os.Stat(w.cfg.Path)
	switch {
	case err != nil:
		if !w.gone {
			w.gone = true
			w.report(fmt.Errorf("log file %s: %w (reading the open file until a new one appears)", w.cfg.Path, err))
		}
		return true
	case !os.SameFile(fi, w.fi):
		klog.V(2).Info("Log file rotated, following the new file", "path", w.cfg.Path)
		if !w.drain() || !w.flushPartial() {
			return false
		}
		_ = w.f.Close()
		w.f, w.gone = nil, false
		if !w.open() {
			return true
		}
		return w.drain()
	case fi.Size() < w.off:
		klog.V(2).Info("Log file truncated, reading it from the top", "path", w.cfg.Path, "size", fi.Size(), "offset", w.off)
		w.partial = w.partial[:0]
		if _, err := w.f.Seek(0, io.SeekStart); err != nil {
			w.report(fmt.Errorf("log file %s: %w", w.cfg.Path, err))
			_ = w.f.Close()
			w.f = nil
			return true
		}
		w.off = 0
		return w.drain()
	}
	w.gone = false
	return true
}

func (w *Watcher) open() bool {
	f, err := os.Open(w.cfg.Path)
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil {
			if w.missing {
				klog.V(2).Info("Log file appeared", "path", w.cfg.Path)
				if w.cfg.OnRecover != nil {
					w.cfg.OnRecover()
				}
			}
			w.f, w.fi, w.off, w.missing = f, fi, 0, false
			w.partial = w.partial[:0]
			return true
		}
		_ = f.Close()
	}
	if !w.missing {
		w.missing = true
		w.report(fmt.Errorf("log file %s: %w (waiting for it)", w.cfg.Path, err))
	}
	return false
}

// drain reads the open file to its end. It returns false when stopping.
func (w *Watcher) drain() bool {
	for {
		n, err := w.f.Read(w.buf)
		if n > 0 {
			w.off += int64(n)
			if !w.consume(w.buf[:n]) {
				return false
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				w.report(fmt.Errorf("log file %s: %w", w.cfg.Path, err))
			}
			return true
		}
		if n == 0 {
			return true
		}
	}
}

func (w *Watcher) consume(b []byte) bool {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.partial = append(w.partial, b...)
			if len(w.partial) >= maxLineBytes {
				return w.flushPartial()
			}
			return true
		}
		var line string
		if len(w.partial) > 0 {
			line = string(append(w.partial, b[:i]...))
			w.partial = w.partial[:0]
		} else {
			line = string(b[:i])
		}
		if !w.emit(line) {
			return false
		}
		b = b[i+1:]
	}
	return true
}

// flushPartial takes the bytes after the last newline as a line.
func (w *Watcher) flushPartial() bool {
	if len(w.partial) == 0 {
		return true
	}
	line := string(w.partial)
	w.partial = w.partial[:0]
	return w.emit(line)
}

// emit filters and parses one line and sends it, as NPD's filelogWatcher.watchLoop: skipList
// first, then the translator, then the start time.
func (w *Watcher) emit(line string) bool {
	for _, s := range w.cfg.SkipList {
		if strings.Contains(line, s) {
			return true
		}
	}
	log, err := w.cfg.Translator.Translate(line)
	if err != nil {
		klog.V(5).Info("Unable to parse log line", "path", w.cfg.Path, "err", err)
		return true
	}
	if log.Timestamp.Before(w.cfg.StartTime) {
		return true
	}
	select {
	case w.logCh <- log:
		return true
	case <-w.stop:
		return false
	}
}

func (w *Watcher) report(err error) {
	klog.ErrorS(err, "Following log file")
	if w.cfg.OnError != nil {
		w.cfg.OnError(err)
	}
}
