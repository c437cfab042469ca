package custompluginmonitor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"
	"k8s.io/node-problem-detector/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// statusReporter collects what a Monitor reports.
type statusReporter struct {
	ch   chan *types.Status
	mu   sync.Mutex
	runs int
	errs []error
}

func newReporter() *statusReporter { return &statusReporter{ch: make(chan *types.Status, 100)} }

func (r *statusReporter) Report(s *types.Status) { r.ch <- s }
func (r *statusReporter) Observe(_ time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.runs++
	} else {
		r.errs = append(r.errs, err)
	}
}

// fakeRunner delivers the results the test sends.
type fakeRunner struct {
	results chan cpmtypes.Result
	stopped chan struct{}
}

func (f *fakeRunner) Run()                                  {}
func (f *fakeRunner) Stop()                                 { close(f.stopped) }
func (f *fakeRunner) GetResultChan() <-chan cpmtypes.Result { return f.results }

func loadConfig(t *testing.T, json string) (string, *cpmtypes.CustomPluginConfig) {
	t.Helper()
	p := writeFile(t, t.TempDir(), "c.json", json, 0o644)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, cfg
}

// TestGenerateStatus walks a permanent rule's condition through NPD's scenarios and checks the
// events, reasons, messages and transition times.
func TestGenerateStatus(t *testing.T) {
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok.sh", "#!/bin/sh\nexit 0\n", 0o755)
	for _, messageBased := range []bool{false, true} {
		t.Run(fmt.Sprintf("messageBased=%v", messageBased), func(t *testing.T) {
			path, cfg := loadConfig(t, fmt.Sprintf(`{"plugin":"custom","source":"src",
				"pluginConfig":{"enable_message_change_based_condition_update":%v},
				"conditions":[{"type":"NTPProblem","reason":"NTPIsUp","message":"ntp service is up"}],
				"rules":[
					{"type":"temporary","reason":"NTPIsDown","path":%q},
					{"type":"permanent","condition":"NTPProblem","reason":"NTPIsDown","path":%q},
					{"type":"permanent","condition":"NTPProblem","reason":"NTPIsSlow","path":%q}]}`, messageBased, ok, ok, ok))
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := testingclock.NewFakeClock(t0)
			m := New(path, cfg, clk)
			init := m.InitialStatus()
			if len(init.Conditions) != 1 || init.Conditions[0] != (types.Condition{Type: "NTPProblem", Status: types.False, Transition: t0, Reason: "NTPIsUp", Message: "ntp service is up"}) {
				t.Fatalf("initial = %+v", init)
			}
			temp, down, slow := cfg.Rules[0], cfg.Rules[1], cfg.Rules[2]
			type want struct {
				status            types.ConditionStatus
				reason, message   string
				transition        int // seconds after t0
				events            []string
				eventSeverityWarn bool
			}
			steps := []struct {
				rule *cpmtypes.CustomRule
				exit cpmtypes.Status
				out  string
				want want
			}{
				{temp, cpmtypes.OK, "fine", want{types.False, "NTPIsUp", "ntp service is up", 0, nil, false}},
				{temp, cpmtypes.NonOK, "down", want{types.False, "NTPIsUp", "ntp service is up", 0, []string{"NTPIsDown: down"}, true}},
				{temp, cpmtypes.Unknown, "?", want{types.False, "NTPIsUp", "ntp service is up", 0, []string{"NTPIsDown: ?"}, true}},
				{down, cpmtypes.OK, "fine", want{types.False, "NTPIsUp", "ntp service is up", 0, nil, false}},
				{down, cpmtypes.NonOK, "ntp down", want{types.True, "NTPIsDown", "ntp down", 5, []string{`NTPIsDown: Node condition NTPProblem is now: True, reason: NTPIsDown, message: "ntp down"`}, true}},
				// Same reason, new message: updated only with message-based updates.
				{down, cpmtypes.NonOK, "ntp still down", func() want {
					if messageBased {
						return want{types.True, "NTPIsDown", "ntp still down", 5, []string{`NTPIsDown: Node condition NTPProblem is now: True, reason: NTPIsDown, message: "ntp still down"`}, true}
					}
					return want{types.True, "NTPIsDown", "ntp down", 5, nil, false}
				}()},
				// New reason while True: updated, transition time kept (NPD moves it).
				{slow, cpmtypes.NonOK, "ntp slow", want{types.True, "NTPIsSlow", "ntp slow", 5, []string{`NTPIsSlow: Node condition NTPProblem is now: True, reason: NTPIsSlow, message: "ntp slow"`}, true}},
				// True to Unknown: default reason, the output as message.
				{down, cpmtypes.Unknown, "timeout", want{types.Unknown, "NTPIsUp", "timeout", 35, []string{`NTPIsUp: Node condition NTPProblem is now: Unknown, reason: NTPIsUp, message: "timeout"`}, false}},
				{down, cpmtypes.Unknown, "timeout again", want{types.Unknown, "NTPIsUp", "timeout", 35, nil, false}},
				// Unknown to False: the defaults.
				{down, cpmtypes.OK, "fine", want{types.False, "NTPIsUp", "ntp service is up", 45, []string{`NTPIsUp: Node condition NTPProblem is now: False, reason: NTPIsUp, message: "ntp service is up"`}, false}},
			}
			for i, s := range steps {
				if i == 4 {
					clk.SetTime(t0.Add(5 * time.Second))
				}
				if i == 7 {
					clk.SetTime(t0.Add(35 * time.Second))
				}
				if i == 9 {
					clk.SetTime(t0.Add(45 * time.Second))
				}
				st := m.generateStatus(cpmtypes.Result{Rule: s.rule, ExitStatus: s.exit, Message: s.out})
				c := st.Conditions[0]
				w := s.want
				if c.Status != w.status || c.Reason != w.reason || c.Message != w.message || !c.Transition.Equal(t0.Add(time.Duration(w.transition)*time.Second)) {
					t.Errorf("step %d: condition = %+v, want %+v", i, c, w)
				}
				var evs []string
				for _, e := range st.Events {
					evs = append(evs, e.Reason+": "+e.Message)
					if (e.Severity == types.Warn) != w.eventSeverityWarn {
						t.Errorf("step %d: event %+v severity", i, e)
					}
				}
				if strings.Join(evs, "|") != strings.Join(w.events, "|") {
					t.Errorf("step %d: events = %q, want %q", i, evs, w.events)
				}
				if st.Source != "src" {
					t.Errorf("source = %q", st.Source)
				}
			}
		})
	}
}

func TestSkipInitialStatus(t *testing.T) {
	ok := writeFile(t, t.TempDir(), "ok.sh", "#!/bin/sh\nexit 0\n", 0o755)
	path, cfg := loadConfig(t, `{"plugin":"custom","pluginConfig":{"skip_initial_status":true},"conditions":[{"type":"T","reason":"R"}],
		"rules":[{"type":"permanent","condition":"T","reason":"X","path":"`+ok+`"}]}`)
	m := New(path, cfg, nil)
	if s := m.InitialStatus(); s != nil {
		t.Errorf("initial status = %+v, want none", s)
	}
}

// TestRunStopsRunner checks Run's loop with a fake runner: results become statuses and the runner
// is stopped when the context ends.
func TestRunStopsRunner(t *testing.T) {
	ok := writeFile(t, t.TempDir(), "ok.sh", "#!/bin/sh\nexit 0\n", 0o755)
	path, cfg := loadConfig(t, `{"plugin":"custom","source":"s","conditions":[{"type":"T","reason":"R"}],
		"rules":[{"type":"permanent","condition":"T","reason":"X","path":"`+ok+`"}]}`)
	m := New(path, cfg, nil)
	fr := &fakeRunner{results: make(chan cpmtypes.Result, 1), stopped: make(chan struct{})}
	m.newRunner = func(cpmtypes.CustomPluginConfig) Runner { return fr }
	ctx, cancel := context.WithCancel(context.Background())
	r := newReporter()
	done := make(chan error)
	go func() { done <- m.Run(ctx, r) }()
	fr.results <- cpmtypes.Result{Rule: cfg.Rules[0], ExitStatus: cpmtypes.Unknown, Message: "weird"}
	st := <-r.ch
	if st.Conditions[0].Status != types.Unknown || st.Conditions[0].Message != "weird" {
		t.Errorf("status = %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	<-fr.stopped
	if r.runs != 1 || len(r.errs) != 1 || !strings.Contains(r.errs[0].Error(), "status unknown: weird") {
		t.Errorf("runs %d errs %v", r.runs, r.errs)
	}
}

// The tests below run real plugins with NPD's runner, in real time: short intervals and timeouts,
// each wait bounded.

const waitLimit = 10 * time.Second

func waitFor(t *testing.T, r *statusReporter, what string, pred func(*types.Status) bool) *types.Status {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case s := <-r.ch:
			if pred(s) {
				return s
			}
		case <-deadline:
			t.Fatalf("no status with %s within %v", what, waitLimit)
		}
	}
}

func startMonitor(t *testing.T, json string) (*Monitor, *statusReporter) {
	t.Helper()
	path, cfg := loadConfig(t, json)
	m := New(path, cfg, nil)
	r := newReporter()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx, r); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, r
}

// TestPluginExitCodes switches a plugin's exit code 0 → 1 → 2 → 0 and checks that its condition
// follows False → True → Unknown → False with the plugin's output as message.
func TestPluginExitCodes(t *testing.T) {
	dir := t.TempDir()
	codeFile := filepath.Join(dir, "code")
	setCode := func(c int) {
		if err := os.WriteFile(codeFile, []byte(fmt.Sprint(c)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setCode(0)
	plugin := writeFile(t, dir, "plugin.sh", "#!/bin/sh\nc=$(cat "+codeFile+")\necho \"exit code $c\"\nexit $c\n", 0o755)
	_, r := startMonitor(t, `{"plugin":"custom","source":"test-plugin","pluginConfig":{"invoke_interval":"100ms","timeout":"2s"},
		"conditions":[{"type":"TestProblem","reason":"TestIsFine","message":"all fine"}],
		"rules":[{"type":"permanent","condition":"TestProblem","reason":"TestIsBroken","path":"`+plugin+`"},
		         {"type":"temporary","reason":"TestHiccup","path":"`+plugin+`"}]}`)
	cond := func(s *types.Status) types.Condition { return s.Conditions[0] }
	waitFor(t, r, "a first result", func(s *types.Status) bool { return true })
	setCode(1)
	s := waitFor(t, r, "True", func(s *types.Status) bool { return cond(s).Status == types.True })
	if c := cond(s); c.Reason != "TestIsBroken" || c.Message != "exit code 1" {
		t.Errorf("True condition = %+v", c)
	}
	waitFor(t, r, "the temporary rule's event", func(s *types.Status) bool {
		return len(s.Events) == 1 && s.Events[0].Reason == "TestHiccup" && s.Events[0].Message == "exit code 1"
	})
	setCode(2)
	s = waitFor(t, r, "Unknown", func(s *types.Status) bool { return cond(s).Status == types.Unknown })
	if c := cond(s); c.Reason != "TestIsFine" || c.Message != "exit code 2" {
		t.Errorf("Unknown condition = %+v", c)
	}
	setCode(0)
	s = waitFor(t, r, "False", func(s *types.Status) bool { return cond(s).Status == types.False })
	if c := cond(s); c.Reason != "TestIsFine" || c.Message != "all fine" {
		t.Errorf("False condition = %+v", c)
	}
}

// TestMisbehavingPlugins: a plugin that hangs, one that floods stdout forever, one that floods and
// exits 1, one killed by a signal and one with exit code 3 are each bounded and reported.
func TestMisbehavingPlugins(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		status       types.ConditionStatus
		check        func(msg string) bool
	}{
		// NPD's runner races its own timeout flag against exec.CommandContext's kill, so the message
		// is either its timeout message or the output so far; the status is Unknown either way.
		{"hang", "sleep 30", types.Unknown, func(m string) bool { return strings.HasPrefix(m, "Timeout when running plugin") || m == "" }},
		{"flood forever", "exec yes", types.Unknown, func(m string) bool {
			return strings.HasPrefix(m, "Timeout when running plugin") || strings.Trim(m, "y\n") == ""
		}},
		{"flood then fail", "head -c 1000000 /dev/zero | tr '\\0' x\nexit 1", types.True, func(m string) bool { return m == strings.Repeat("x", 40) }},
		{"killed", "kill -9 $$", types.Unknown, func(m string) bool { return m == "" }},
		{"exit 3", "echo strange; exit 3", types.Unknown, func(m string) bool { return m == "strange" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plugin := writeFile(t, t.TempDir(), "plugin.sh", "#!/bin/sh\n"+tc.script+"\n", 0o755)
			start := time.Now()
			_, r := startMonitor(t, `{"plugin":"custom","source":"s","pluginConfig":{"invoke_interval":"1h","timeout":"500ms","max_output_length":40},
				"conditions":[{"type":"T","reason":"Fine"}],
				"rules":[{"type":"permanent","condition":"T","reason":"Broken","path":"`+plugin+`"}]}`)
			s := waitFor(t, r, "a result", func(*types.Status) bool { return true })
			c := s.Conditions[0]
			if c.Status != tc.status || !tc.check(c.Message) || len(c.Message) > 40 {
				t.Errorf("condition = %+v", c)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v, want the 500ms timeout to bound it", d)
			}
		})
	}
}
