package systemlogmonitor

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	watchertypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/logwatchers/types"
	logtypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/types"
	"k8s.io/node-problem-detector/pkg/types"
)

const testdata = "../../../test/testdata/npd"

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadShippedConfigs(t *testing.T) {
	cfg, err := Load(filepath.Join(testdata, "kernel-monitor-filelog.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Plugin != "filelog" || cfg.LogPath != "/var/log/kern.log" || cfg.Lookback != "5m" || cfg.BufferSize != 10 ||
		cfg.Source != "kernel-monitor" || len(cfg.Rules) != 6 || !*cfg.EnableMetricsReporting {
		t.Errorf("kernel-monitor-filelog.json = %+v", cfg)
	}
	cfg, err = Load(filepath.Join(testdata, "kernel-monitor.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Plugin != "kmsg" || len(cfg.DefaultConditions) != 3 || len(cfg.Rules) != 14 {
		t.Errorf("kernel-monitor.json = %+v", cfg)
	}
}

func TestLoadErrors(t *testing.T) {
	const fl = `"plugin":"filelog","logPath":"/var/log/x","pluginConfig":{"timestamp":"^.{15}","message":"(.*)","timestampFormat":"Jan _2 15:04:05"}`
	for _, tc := range []struct{ name, json, want string }{
		{"syntax", `{"plugin":"kmsg",}`, "invalid JSON at line 1, column 18"},
		{"type", `{"plugin":"kmsg","bufferSize":"10"}`, `bufferSize "\"10\"": cannot decode JSON string into int`},
		{"journald", `{"plugin":"journald","pluginConfig":{"source":"kubelet"}}`, `plugin "journald": not supported`},
		{"unknown", `{"plugin":"syslog"}`, `plugin "syslog": unknown log source`},
		{"no plugin", `{}`, `plugin: unknown log source`},
		{"no logPath", `{"plugin":"filelog"}`, `logPath: must be set for the filelog source`},
		{"no timestamp", `{"plugin":"filelog","logPath":"/x","pluginConfig":{"message":"m","timestampFormat":"f"}}`, `pluginConfig.timestamp: must be set`},
		{"bad message", `{"plugin":"filelog","logPath":"/x","pluginConfig":{"timestamp":"t","message":"(","timestampFormat":"f"}}`, `pluginConfig.message "(": error parsing regexp`},
		{"lookback", `{` + fl + `,"lookback":"5 minutes"}`, `lookback "5 minutes": invalid duration`},
		{"delay", `{` + fl + `,"delay":"x"}`, `delay "x": invalid duration`},
		{"bufferSize", `{"plugin":"kmsg","bufferSize":-1}`, `bufferSize "-1": must be at least 1`},
		{"pattern", `{"plugin":"kmsg","rules":[{"type":"temporary","reason":"R","pattern":"task (\\d+"}]}`, `rules[0].pattern "task (\\d+": error parsing regexp: missing closing )`},
		{"rule type", `{"plugin":"kmsg","rules":[{"type":"Temporary","reason":"R","pattern":"x"}]}`, `rules[0].type "Temporary": must be "temporary" or "permanent"`},
		{"no reason", `{"plugin":"kmsg","rules":[{"type":"temporary","pattern":"x"}]}`, `rules[0].reason: must not be empty`},
		{"no condition", `{"plugin":"kmsg","rules":[{"type":"permanent","condition":"KernelDeadlock","reason":"R","pattern":"x"}]}`, `rules[0].condition "KernelDeadlock": a permanent rule needs a condition listed in conditions`},
		{"condition type", `{"plugin":"kmsg","conditions":[{"reason":"R"}]}`, `conditions[0].type: must not be empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "c.json", tc.json)
			_, err := Load(p)
			want := "system-log-monitor config " + p + ": " + tc.want
			if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error\n%v\nwant one line starting with\n%s", err, want)
			}
		})
	}
}

// TestLogBufferMultiLine checks NPD's matching against the end of the last bufferSize lines.
func TestLogBufferMultiLine(t *testing.T) {
	b := newLogBuffer(3)
	push := func(msgs ...string) {
		for _, m := range msgs {
			b.push(&logtypes.Log{Message: m})
		}
	}
	match := func(expr string) []string {
		re, err := compilePattern(expr)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range b.match(re) {
			out = append(out, l.Message)
		}
		return out
	}
	push("INFO: task foo blocked", "Call Trace:")
	if got := match(`INFO: task \w+ blocked\nCall Trace:`); !slices.Equal(got, []string{"INFO: task foo blocked", "Call Trace:"}) {
		t.Errorf("two-line match = %q", got)
	}
	if got := match(`INFO: task \w+ blocked`); got != nil {
		t.Errorf("a pattern must match to the end of the buffer, got %q", got)
	}
	push("x", "y")
	if got := match(`INFO: task \w+ blocked\nCall Trace:\nx\ny`); got != nil {
		t.Errorf("a match longer than the buffer = %q", got)
	}
	if got := match(`Call Trace:\nx\ny`); !slices.Equal(got, []string{"Call Trace:", "x", "y"}) {
		t.Errorf("three-line match = %q", got)
	}
}

// collector is a Reporter.
type collector struct {
	mu       sync.Mutex
	statuses []*types.Status
	lines    int
	errs     []string
}

func (c *collector) Report(s *types.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, s)
}

func (c *collector) Observe(_ time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs = append(c.errs, err.Error())
	} else {
		c.lines++
	}
}

func (c *collector) take() []*types.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.statuses
	c.statuses = nil
	return s
}

func kernLine(msg string) string {
	return time.Now().In(time.Local).Format("Jan _2 15:04:05") + " node kernel: [ 1234.567890] " + msg + "\n"
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestKernelMonitorFilelog runs NPD's kernel-monitor-filelog.json, with only logPath changed, on a
// temp file: appended lines set KernelDeadlock=True (permanent rule DockerHung) and emit OOMKilling
// and TaskHung events (temporary rules).
func TestKernelMonitorFilelog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(150 * 24 * time.Hour) // away from the new year: syslog timestamps have no year
		dir := t.TempDir()
		data, err := os.ReadFile(filepath.Join(testdata, "kernel-monitor-filelog.json"))
		if err != nil {
			t.Fatal(err)
		}
		logPath := filepath.Join(dir, "kern.log")
		cfgPath := writeFile(t, dir, "kernel-monitor-filelog.json", strings.Replace(string(data), "/var/log/kern.log", logPath, 1))
		cfg, err := Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		appendTo(t, logPath, kernLine("Killed process 1 (old) total-vm:1kB, anon-rss:1kB, file-rss:1kB")) // now: inside the 5m lookback
		m, err := New(cfgPath, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		init := m.InitialStatus()
		start := time.Now()
		if len(init.Conditions) != 1 || init.Conditions[0] != (types.Condition{Type: "KernelDeadlock", Status: types.False, Transition: start, Reason: "KernelHasNoDeadlock", Message: "kernel has no deadlock"}) {
			t.Fatalf("initial status = %+v", init)
		}
		c := &collector{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- m.Run(ctx, c) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if s := c.take(); len(s) != 1 || s[0].Events[0].Reason != "OOMKilling" {
			t.Errorf("line in lookback: %+v", s)
		}

		appendTo(t, logPath, kernLine("Killed process 4242 (stress) total-vm:1048576kB, anon-rss:524288kB, file-rss:4kB, shmem-rss:0kB")+
			kernLine("INFO: task nginx:4243 blocked for more than 120 seconds."))
		time.Sleep(time.Second)
		synctest.Wait()
		st := c.take()
		if len(st) != 2 {
			t.Fatalf("statuses = %+v", st)
		}
		for i, want := range []types.Event{
			{Severity: types.Warn, Reason: "OOMKilling", Message: "Killed process 4242 (stress) total-vm:1048576kB, anon-rss:524288kB, file-rss:4kB, shmem-rss:0kB"},
			{Severity: types.Warn, Reason: "TaskHung", Message: "INFO: task nginx:4243 blocked for more than 120 seconds."},
		} {
			if len(st[i].Events) != 1 || st[i].Events[0].Severity != want.Severity || st[i].Events[0].Reason != want.Reason || st[i].Events[0].Message != want.Message || st[i].Source != "kernel-monitor" {
				t.Errorf("status %d = %+v, want event %+v", i, st[i], want)
			}
			if st[i].Conditions[0].Status != types.False {
				t.Errorf("a temporary rule changed the condition: %+v", st[i].Conditions)
			}
		}

		hungAt := time.Now().Truncate(time.Second)
		appendTo(t, logPath, kernLine("INFO: task docker:4244 blocked for more than 120 seconds."))
		time.Sleep(time.Second)
		synctest.Wait()
		st = c.take()
		var dead *types.Status
		for _, s := range st {
			if s.Conditions[0].Status == types.True {
				dead = s
			}
		}
		if dead == nil {
			t.Fatalf("KernelDeadlock not set: %+v", st)
		}
		if got := dead.Conditions[0]; got.Reason != "DockerHung" || got.Message != "INFO: task docker:4244 blocked for more than 120 seconds." || !got.Transition.Equal(hungAt) {
			t.Errorf("KernelDeadlock = %+v", got)
		}
		if ev := dead.Events; len(ev) != 1 || ev[0].Message != `Node condition KernelDeadlock is now: True, reason: DockerHung, message: "INFO: task docker:4244 blocked for more than 120 seconds."` {
			t.Errorf("condition event = %+v", ev)
		}

		// Matching again keeps the condition, its message and transition time, with no new event.
		appendTo(t, logPath, kernLine("INFO: task docker:9 blocked for more than 240 seconds."))
		time.Sleep(time.Second)
		synctest.Wait()
		for _, s := range c.take() {
			if got := s.Conditions[0]; got.Status != types.True || !got.Transition.Equal(hungAt) || !strings.Contains(got.Message, "docker:4244") {
				t.Errorf("condition after a second match = %+v", got)
			}
			for _, e := range s.Events {
				if e.Reason == "DockerHung" {
					t.Errorf("second condition event: %+v", e)
				}
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// fakeWatcher is a log source the test feeds.
type fakeWatcher struct {
	ch      chan *logtypes.Log
	stopped bool
}

func (f *fakeWatcher) Watch() (<-chan *logtypes.Log, error) { return f.ch, nil }
func (f *fakeWatcher) Stop()                                { f.stopped = true }

// TestKmsgMonitor runs NPD's kernel-monitor.json (kmsg) on a fake log source, with a multi-line
// rule suffix and a retry of a source that did not start.
func TestKmsgMonitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := Load(filepath.Join(testdata, "kernel-monitor.json"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := New("kernel-monitor.json", cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		fw := &fakeWatcher{ch: make(chan *logtypes.Log)}
		var attempts atomic.Int32
		m.newWatcher = func(func(error)) (watchertypes.LogWatcher, error) {
			if attempts.Add(1) == 1 {
				return nil, os.ErrPermission
			}
			return fw, nil
		}
		c := &collector{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- m.Run(ctx, c) }()
		synctest.Wait()
		c.mu.Lock()
		errs := c.errs
		c.mu.Unlock()
		if attempts.Load() != 1 || len(errs) != 1 || !strings.Contains(errs[0], "starting kmsg log source: permission denied") {
			t.Fatalf("attempts %d errs %q", attempts.Load(), errs)
		}
		time.Sleep(startRetryDelay)
		synctest.Wait()
		if n := attempts.Load(); n != 2 {
			t.Fatalf("attempts = %d, want a retry after %v", n, startRetryDelay)
		}
		fw.ch <- &logtypes.Log{Timestamp: time.Now(), Message: "XFS (sda1): Corruption detected. Shutting down filesystem"}
		synctest.Wait()
		st := c.take()
		if len(st) != 1 {
			t.Fatalf("statuses = %+v", st)
		}
		var xfs types.Condition
		for _, cond := range st[0].Conditions {
			if cond.Type == "XfsShutdown" {
				xfs = cond
			}
		}
		if xfs.Status != types.True || xfs.Reason != "XfsHasShutdown" {
			t.Errorf("XfsShutdown = %+v", xfs)
		}
		cancel()
		<-done
		if !fw.stopped {
			t.Error("log source not stopped")
		}
	})
}

func TestPatternSuffix(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.json", `{"plugin":"kmsg","source":"s","rules":[{"type":"temporary","reason":"Two","pattern":"a\\nb","patternGeneratedMessageSuffix":"see runbook"}]}`)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(p, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	for _, msg := range []string{"a", "b"} {
		m.parseLog(t.Context(), &logtypes.Log{Message: msg}, c)
	}
	if st := c.take(); len(st) != 1 || st[0].Events[0].Message != "a\nb; see runbook" {
		t.Errorf("statuses = %+v", st)
	}
	if _, err := regexp.Compile("a\\nb"); err != nil {
		t.Fatal(err)
	}
}

// TestRealKmsg starts NPD's kmsg watcher on the real /dev/kmsg.
func TestRealKmsg(t *testing.T) {
	f, err := os.Open("/dev/kmsg")
	if err != nil {
		t.Fatalf("/dev/kmsg: %v (the tests run as root on Linux, where it is readable)", err)
	}
	f.Close()
	cfg, err := Load(filepath.Join(testdata, "kernel-monitor.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New("kernel-monitor.json", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.newWatcher(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Watch(); err != nil {
		t.Fatal(err)
	}
	w.Stop()
}
