package filelog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	logtypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/types"
)

// kernLog is NPD's kernel-monitor-filelog.json translator config.
var kernLog = map[string]string{
	KeyTimestamp:       "^.{15}",
	KeyMessage:         `kernel: \[.*\] (.*)`,
	KeyTimestampFormat: "Jan _2 15:04:05",
}

func line(at time.Time, msg string) string {
	return at.In(time.Local).Format("Jan _2 15:04:05") + " host kernel: [ 12.345678] " + msg + "\n"
}

// midYear moves the bubble's clock (which starts on 1 January) to June the first time, away from
// the new year: syslog timestamps have no year and get the current one, as in NPD.
func midYear() {
	if time.Now().Month() == time.January {
		time.Sleep(150 * 24 * time.Hour)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

type harness struct {
	t    *testing.T
	path string
	w    *Watcher
	ch   <-chan *logtypes.Log
	mu   sync.Mutex
	errs []string
}

// start runs a Watcher on path inside the current synctest bubble; StartTime is start.
func start(t *testing.T, path string, startTime time.Time, skip ...string) *harness {
	h := &harness{t: t, path: path}
	midYear()
	tr, err := NewTranslator(kernLog, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.w, err = New(Config{Path: path, Translator: tr, StartTime: startTime, SkipList: skip, OnError: func(err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.errs = append(h.errs, err.Error())
	}})
	if err != nil {
		t.Fatal(err)
	}
	h.ch, _ = h.w.Watch()
	t.Cleanup(h.w.Stop)
	return h
}

// poll lets one poll interval pass and returns the messages read since the last call.
func (h *harness) poll() []string {
	time.Sleep(DefaultPollInterval)
	synctest.Wait()
	var out []string
	for {
		select {
		case l := <-h.ch:
			out = append(out, l.Message)
		default:
			return out
		}
	}
}

func (h *harness) expect(want ...string) {
	h.t.Helper()
	if got := h.poll(); !slices.Equal(got, want) {
		h.t.Errorf("read %q, want %q", got, want)
	}
}

func TestFollowAppendAndPartialLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kern.log")
		midYear()
		now := time.Now()
		appendTo(t, path, line(now.Add(-10*time.Minute), "too old")+line(now.Add(-time.Minute), "in lookback")+"garbage line\n")
		h := start(t, path, now.Add(-5*time.Minute), "skip me")
		h.expect("in lookback")
		appendTo(t, path, line(time.Now(), "first"))
		h.expect("first")
		l := line(time.Now(), "split line")
		appendTo(t, path, l[:20])
		h.expect()
		appendTo(t, path, l[20:]+line(time.Now(), "skip me please")+line(time.Now(), "after"))
		h.expect("split line", "after")
		h.expect()
	})
}

// TestFollowRotation: the writer keeps writing to the renamed file for a while, then a new file
// appears; every line of both is read once, in order.
func TestFollowRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "kern.log")
		appendTo(t, path, line(time.Now(), "a"))
		h := start(t, path, time.Now().Add(-time.Minute))
		h.expect("a")
		old, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		fmt.Fprint(old, line(time.Now(), "b"))
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(old, line(time.Now(), "c (to the rotated file)"))
		h.expect("b", "c (to the rotated file)")
		fmt.Fprint(old, line(time.Now(), "d (to the rotated file)"))
		fmt.Fprint(old, strings.TrimSuffix(line(time.Now(), "e (no newline)"), "\n"))
		appendTo(t, path, line(time.Now(), "f (new file)"))
		h.expect("d (to the rotated file)", "e (no newline)", "f (new file)")
		appendTo(t, path, line(time.Now(), "g"))
		h.expect("g")
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.errs) != 1 || !strings.Contains(h.errs[0], "reading the open file until a new one appears") {
			t.Errorf("errors = %q", h.errs)
		}
	})
}

// TestFollowTruncation: copytruncate empties the file in place; the watcher starts again at the top.
func TestFollowTruncation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kern.log")
		appendTo(t, path, line(time.Now(), "one")+line(time.Now(), "two"))
		h := start(t, path, time.Now().Add(-time.Minute))
		h.expect("one", "two")
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		h.expect()
		appendTo(t, path, line(time.Now(), "three"))
		h.expect("three")
		// Truncated and rewritten shorter than before between two polls. (Rewritten as long or
		// longer cannot be told from a file that grew: the documented blind spot.)
		if err := os.WriteFile(path, []byte(line(time.Now(), "x")), 0o644); err != nil {
			t.Fatal(err)
		}
		h.expect("x")
	})
}

// TestFollowDisappearAndComeBack: the file is deleted, stays away for many polls, and comes back;
// a file missing at start is waited for.
func TestFollowDisappearAndComeBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kern.log")
		h := start(t, path, time.Now().Add(-time.Minute))
		h.expect()
		appendTo(t, path, line(time.Now(), "appeared"))
		h.expect("appeared")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		for range 200 { // 100 s away: NPD's tail would have given up
			h.expect()
		}
		appendTo(t, path, line(time.Now(), "back"))
		h.expect("back")
		appendTo(t, path, line(time.Now(), "more"))
		h.expect("more")
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.errs) != 2 || !strings.Contains(h.errs[0], "(waiting for it)") {
			t.Errorf("errors = %q", h.errs)
		}
	})
}

func TestStopBeforeAndAfterWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, _ := NewTranslator(kernLog, nil)
		w, err := New(Config{Path: filepath.Join(t.TempDir(), "x"), Translator: tr})
		if err != nil {
			t.Fatal(err)
		}
		w.Stop() // never started: returns at once
		w2, _ := New(Config{Path: filepath.Join(t.TempDir(), "x"), Translator: tr})
		ch, _ := w2.Watch()
		w2.Stop()
		if _, ok := <-ch; ok {
			t.Error("channel not closed after Stop")
		}
	})
}

func TestTranslatorErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  map[string]string
		want string
	}{
		{map[string]string{KeyMessage: "m", KeyTimestampFormat: "f"}, `pluginConfig.timestamp "": must be set`},
		{map[string]string{KeyTimestamp: "(", KeyMessage: "m", KeyTimestampFormat: "f"}, `pluginConfig.timestamp "(": error parsing regexp`},
		{map[string]string{KeyTimestamp: "t", KeyMessage: "[", KeyTimestampFormat: "f"}, `pluginConfig.message "[": error parsing regexp`},
		{map[string]string{KeyTimestamp: "t", KeyMessage: "m"}, `pluginConfig.timestampFormat "": must be set`},
	} {
		if _, err := NewTranslator(tc.cfg, nil); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("NewTranslator(%v) = %v, want %s", tc.cfg, err, tc.want)
		}
	}
	tr, _ := NewTranslator(kernLog, func() time.Time { return time.Date(2031, 5, 5, 0, 0, 0, 0, time.Local) })
	l, err := tr.Translate("Mar  4 05:06:07 host kernel: [   1.000000] hello world")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2031, 3, 4, 5, 6, 7, 0, time.Local); !l.Timestamp.Equal(want) || l.Message != "hello world" {
		t.Errorf("Translate = %+v", l)
	}
}
