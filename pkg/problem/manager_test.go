package problem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
)

const testdata = "../../test/testdata/npd"

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// kernelMonitorFilelog writes NPD's kernel-monitor-filelog.json with only its logPath changed.
func kernelMonitorFilelog(t *testing.T, dir string) (cfgPath, logPath string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdata, "kernel-monitor-filelog.json"))
	if err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(dir, "kern.log")
	return writeFile(t, dir, "kernel-monitor-filelog.json", strings.Replace(string(data), "/var/log/kern.log", logPath, 1), 0o644), logPath
}

// gatherAndCompare is component-base's testutil.GatherAndCompare without its promlint pass, which
// rejects NPD's metric names (problem_counter has no _total suffix and names its type); the names
// are kept so that NPD's dashboards and alerts carry over with the nodeagent_ prefix.
func gatherAndCompare(reg metrics.KubeRegistry, expected *strings.Reader, names ...string) error {
	return promtestutil.GatherAndCompare(reg, expected, names...)
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok.sh", "#!/bin/sh\nexit 0\n", 0o755)
	badRegex := writeFile(t, dir, "bad-regex.json", `{"plugin":"kmsg","rules":[{"type":"temporary","reason":"R","pattern":"("}]}`, 0o644)
	noexec := writeFile(t, dir, "noexec.sh", "#!/bin/sh\n", 0o644)
	badPlugin := writeFile(t, dir, "bad-plugin.json", `{"plugin":"custom","rules":[{"type":"temporary","reason":"R","path":"`+noexec+`"}]}`, 0o644)
	ready := writeFile(t, dir, "ready.json", `{"plugin":"kmsg","conditions":[{"type":"Ready","reason":"R"}]}`, 0o644)
	a := writeFile(t, dir, "a.json", `{"plugin":"custom","conditions":[{"type":"NTPProblem","reason":"R"}],"rules":[{"type":"permanent","condition":"NTPProblem","reason":"X","path":"`+ok+`"}]}`, 0o644)
	b := writeFile(t, dir, "b.json", `{"plugin":"kmsg","conditions":[{"type":"NTPProblem","reason":"R"}]}`, 0o644)
	_, err := New(Config{CustomPluginMonitors: []string{badPlugin, a}, SystemLogMonitors: []string{badRegex, ready, b}})
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`custom-plugin-monitor config ` + badPlugin + `: rules[0].path "` + noexec + `": not executable (mode -rw-r--r--)`,
		`system-log-monitor config ` + badRegex + `: rules[0].pattern "(": error parsing regexp: missing closing ): ` + "`(`",
		`system-log-monitor config ` + ready + `: conditions[0].type "Ready": the kubelet owns this condition`,
		`system-log-monitor config ` + b + `: conditions[0].type "NTPProblem": already declared by ` + a,
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("error lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A path given twice is loaded once (NPD skips duplicates).
	m, err := New(Config{CustomPluginMonitors: []string{a, a}})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Status()) != 1 {
		t.Errorf("monitors = %+v", m.Status())
	}
}

type event struct{ eventType, reason, message, source string }

type recorder struct {
	mu     sync.Mutex
	events []event
	added  chan struct{} // if made, signalled (without blocking) after each event
}

func (r *recorder) record(eventType, reason, message, source string) {
	r.mu.Lock()
	r.events = append(r.events, event{eventType, reason, message, source})
	r.mu.Unlock()
	if r.added != nil {
		select {
		case r.added <- struct{}{}:
		default:
		}
	}
}

func (r *recorder) take() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
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

// TestManagerKernelMonitor runs NPD's kernel-monitor-filelog.json through the Manager: default
// condition at start, setters, OnChange, events, metrics and status.
func TestManagerKernelMonitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(150 * 24 * time.Hour) // away from the new year: syslog timestamps have no year
		cfgPath, logPath := kernelMonitorFilelog(t, t.TempDir())
		reg := metrics.NewKubeRegistry()
		rec := &recorder{}
		var changes atomic.Int32
		m, err := New(Config{SystemLogMonitors: []string{cfgPath}, Recorder: rec.record, Metrics: reg, OnChange: func() { changes.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		start := metav1.NewTime(time.Now())
		def := v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: start, Reason: "KernelHasNoDeadlock", Message: "kernel has no deadlock"}
		if got := m.Conditions(); !slices.Equal(got, []v1.NodeCondition{def}) {
			t.Errorf("initial conditions = %+v", got)
		}
		if got := m.ConditionTypes(); !slices.Equal(got, []v1.NodeConditionType{"KernelDeadlock"}) {
			t.Errorf("condition types = %v", got)
		}
		if err := gatherAndCompare(reg, strings.NewReader(`
# HELP nodeagent_problem_counter [ALPHA] Number of times a specific type of problem has occurred, by reason (node-problem-detector's problem_counter).
# TYPE nodeagent_problem_counter counter
nodeagent_problem_counter{reason="DockerHung"} 0
nodeagent_problem_counter{reason="KernelOops"} 0
nodeagent_problem_counter{reason="OOMKilling"} 0
nodeagent_problem_counter{reason="TaskHung"} 0
nodeagent_problem_counter{reason="UnregisterNetDevice"} 0
# HELP nodeagent_problem_gauge [ALPHA] Whether a specific type of problem is affecting the node (1) or not (0), by condition type and reason (node-problem-detector's problem_gauge).
# TYPE nodeagent_problem_gauge gauge
nodeagent_problem_gauge{reason="DockerHung",type="KernelDeadlock"} 0
nodeagent_problem_gauge{reason="KernelHasNoDeadlock",type="KernelDeadlock"} 0
`), "nodeagent_problem_counter", "nodeagent_problem_gauge"); err != nil {
			t.Error(err)
		}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait()
		if err := m.Run(ctx); err == nil {
			t.Error("second Run did not fail")
		}

		appendTo(t, logPath, kernLine("Killed process 4242 (stress) total-vm:1048576kB, anon-rss:524288kB, file-rss:4kB, shmem-rss:0kB"))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := rec.take(); !slices.Equal(got, []event{{"Warning", "OOMKilling", "Killed process 4242 (stress) total-vm:1048576kB, anon-rss:524288kB, file-rss:4kB, shmem-rss:0kB", "kernel-monitor"}}) {
			t.Errorf("events = %+v", got)
		}
		if n := changes.Load(); n != 0 {
			t.Errorf("OnChange called %d times for an event", n)
		}

		hungAt := metav1.NewTime(time.Now())
		appendTo(t, logPath, kernLine("task docker:4244 blocked for more than 120 seconds."))
		time.Sleep(time.Second)
		synctest.Wait()
		if n := changes.Load(); n != 1 {
			t.Errorf("OnChange called %d times, want 1", n)
		}
		dead := v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionTrue, LastTransitionTime: hungAt, Reason: "DockerHung", Message: "task docker:4244 blocked for more than 120 seconds."}
		if got := m.Conditions(); !slices.Equal(got, []v1.NodeCondition{dead}) {
			t.Errorf("conditions = %+v", got)
		}
		if got := rec.take(); !slices.Equal(got, []event{
			{"Warning", "TaskHung", "task docker:4244 blocked for more than 120 seconds.", "kernel-monitor"},
			{"Warning", "DockerHung", `Node condition KernelDeadlock is now: True, reason: DockerHung, message: "task docker:4244 blocked for more than 120 seconds."`, "kernel-monitor"},
		}) {
			t.Errorf("events = %+v", got)
		}
		if err := gatherAndCompare(reg, strings.NewReader(`
# HELP nodeagent_problem_counter [ALPHA] Number of times a specific type of problem has occurred, by reason (node-problem-detector's problem_counter).
# TYPE nodeagent_problem_counter counter
nodeagent_problem_counter{reason="DockerHung"} 1
nodeagent_problem_counter{reason="KernelOops"} 0
nodeagent_problem_counter{reason="OOMKilling"} 1
nodeagent_problem_counter{reason="TaskHung"} 1
nodeagent_problem_counter{reason="UnregisterNetDevice"} 0
# HELP nodeagent_problem_gauge [ALPHA] Whether a specific type of problem is affecting the node (1) or not (0), by condition type and reason (node-problem-detector's problem_gauge).
# TYPE nodeagent_problem_gauge gauge
nodeagent_problem_gauge{reason="DockerHung",type="KernelDeadlock"} 1
nodeagent_problem_gauge{reason="KernelHasNoDeadlock",type="KernelDeadlock"} 0
`), "nodeagent_problem_counter", "nodeagent_problem_gauge"); err != nil {
			t.Error(err)
		}

		// Standalone: the monitor's setter merges its condition into the Node by type.
		node := &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"},
		}}}
		setters := m.Setters()
		if len(setters) != 1 {
			t.Fatalf("%d setters", len(setters))
		}
		if err := setters[0](t.Context(), node); err != nil {
			t.Fatal(err)
		}
		withHeartbeat := dead
		withHeartbeat.LastHeartbeatTime = metav1.NewTime(time.Now())
		if want := []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}, withHeartbeat}; !slices.EqualFunc(node.Status.Conditions, want, func(a, b v1.NodeCondition) bool {
			return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
				a.LastTransitionTime.Equal(&b.LastTransitionTime) && a.LastHeartbeatTime.Equal(&b.LastHeartbeatTime)
		}) {
			t.Errorf("node conditions = %+v", node.Status.Conditions)
		}

		st := m.Status()
		if len(st) != 1 || st[0].Kind != "system-log-monitor" || st[0].ConfigPath != cfgPath || st[0].Source != "kernel-monitor" ||
			st[0].Plugin != "filelog" || st[0].LogPath != logPath || st[0].Events != 3 || st[0].LastRun.Before(hungAt.Time) || len(st[0].Conditions) != 1 ||
			st[0].Errors != 1 || !strings.Contains(st[0].LastError, "no such file or directory (waiting for it)") {
			t.Errorf("status = %+v", st)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func TestMergeConditions(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Hour))
	now := metav1.NewTime(t1.Add(2 * time.Hour))
	node := &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
		{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: t1, Reason: "KernelHasNoDeadlock"},
		{Type: v1.NodeReady, Status: v1.ConditionTrue},
		{Type: "NTPProblem", Status: v1.ConditionFalse, LastTransitionTime: t1},
	}}}
	MergeConditions(node, []v1.NodeCondition{
		{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: t2, Reason: "KernelHasNoDeadlock"}, // same status: keeps t1
		{Type: "NTPProblem", Status: v1.ConditionTrue, LastTransitionTime: t2, Reason: "NTPIsDown"},                // flipped: t2
		{Type: "New", Status: v1.ConditionFalse, LastTransitionTime: t2},
	}, now)
	want := []v1.NodeCondition{
		{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: t1, LastHeartbeatTime: now, Reason: "KernelHasNoDeadlock"},
		{Type: v1.NodeReady, Status: v1.ConditionTrue},
		{Type: "NTPProblem", Status: v1.ConditionTrue, LastTransitionTime: t2, LastHeartbeatTime: now, Reason: "NTPIsDown"},
		{Type: "New", Status: v1.ConditionFalse, LastTransitionTime: t2, LastHeartbeatTime: now},
	}
	if fmt.Sprint(node.Status.Conditions) != fmt.Sprint(want) {
		t.Errorf("conditions\n%+v\nwant\n%+v", node.Status.Conditions, want)
	}
}

// TestHangingPluginDoesNotBlockOthers runs, in real time, a config whose plugin hangs until its
// timeout beside one whose plugin reports every 100 ms, and a config with skip_initial_status.
func TestHangingPluginDoesNotBlockOthers(t *testing.T) {
	dir := t.TempDir()
	hang := writeFile(t, dir, "hang.sh", "#!/bin/sh\nsleep 30\n", 0o755)
	fail := writeFile(t, dir, "fail.sh", "#!/bin/sh\necho flaky\nexit 1\n", 0o755)
	hangCfg := writeFile(t, dir, "hang.json", `{"plugin":"custom","source":"hang","pluginConfig":{"invoke_interval":"1h","timeout":"2s"},
		"conditions":[{"type":"Hung","reason":"NotHung"}],
		"rules":[{"type":"permanent","condition":"Hung","reason":"IsHung","path":"`+hang+`"}]}`, 0o644)
	quickCfg := writeFile(t, dir, "quick.json", `{"plugin":"custom","source":"quick","pluginConfig":{"invoke_interval":"100ms","skip_initial_status":true},
		"conditions":[{"type":"Flaky","reason":"NotFlaky"}],
		"rules":[{"type":"temporary","reason":"Flake","path":"`+fail+`"},
		         {"type":"permanent","condition":"Flaky","reason":"IsFlaky","path":"`+fail+`"}]}`, 0o644)
	rec := &recorder{added: make(chan struct{}, 1)}
	m, err := New(Config{CustomPluginMonitors: []string{hangCfg, quickCfg}, Recorder: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Conditions(); len(got) != 1 || got[0].Type != "Hung" {
		t.Errorf("initial conditions = %+v (skip_initial_status hides Flaky)", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	// The plugins are real processes, so this waits in real time, on the recorder's signal; the
	// deadline only bounds a quick monitor that the hanging one blocks.
	deadline := time.After(1500 * time.Millisecond)
	flakes := 0
	var all []event
	for waiting := true; flakes < 3 && waiting; {
		select {
		case <-rec.added:
		case <-deadline:
			waiting = false
		}
		for _, e := range rec.take() {
			all = append(all, e)
			if e.reason == "Flake" && e.source == "quick" {
				flakes++
			}
		}
	}
	if flakes < 3 {
		t.Errorf("quick monitor's events while the other hangs: %+v", all)
	}
	if got := m.Conditions(); len(got) != 2 || got[0].Status != v1.ConditionFalse || got[1].Type != "Flaky" || got[1].Status != v1.ConditionTrue || got[1].Message != "flaky" {
		t.Errorf("conditions = %+v", got)
	}
	if st := m.Status(); !st[0].LastRun.IsZero() || st[1].LastRun.IsZero() {
		t.Errorf("status = %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestChecks: one named health check per monitor, failing with the config's path and the problem
// for a plugin reporting Unknown and for a log monitor whose file is missing, passing for the
// others; nodeagent_problem_monitor_healthy says the same.
func TestChecks(t *testing.T) {
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok.sh", "#!/bin/sh\necho fine\n", 0o755)
	unknown := writeFile(t, dir, "unknown.sh", "#!/bin/sh\necho cannot tell\nexit 3\n", 0o755)
	plugin := func(name, path string) string {
		return writeFile(t, dir, name, `{"plugin":"custom","source":"`+name+`","pluginConfig":{"invoke_interval":"1h"},
		"conditions":[{"type":"`+strings.TrimSuffix(name, ".json")+`","reason":"Fine"}],
		"rules":[{"type":"permanent","condition":"`+strings.TrimSuffix(name, ".json")+`","reason":"Broken","path":"`+path+`"}]}`, 0o644)
	}
	okCfg, unknownCfg := plugin("Ok.json", ok), plugin("Unknown.json", unknown)
	presentCfg, logPath := kernelMonitorFilelog(t, filepath.Join(dir))
	appendTo(t, logPath, "")
	missingDir := filepath.Join(dir, "missing")
	if err := os.Mkdir(missingDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(testdata, "kernel-monitor-filelog.json"))
	if err != nil {
		t.Fatal(err)
	}
	missingCfg := writeFile(t, missingDir, "kernel monitor.json", strings.NewReplacer("/var/log/kern.log", filepath.Join(missingDir, "nope.log"),
		"KernelDeadlock", "KernelDeadlock2", "ReadonlyFilesystem", "ReadonlyFilesystem2").Replace(string(data)), 0o644)

	reg := metrics.NewKubeRegistry()
	m, err := New(Config{CustomPluginMonitors: []string{okCfg, unknownCfg}, SystemLogMonitors: []string{presentCfg, missingCfg}, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	want := []struct {
		name, failure string // failure: "" passes, else a substring of the error
	}{
		{"problem-monitor-ok", ""},
		{"problem-monitor-unknown", unknownCfg + ": rule Broken"},
		{"problem-monitor-kernel-monitor-filelog", ""},
		{"problem-monitor-kernel-monitor", missingCfg + ": log file " + filepath.Join(missingDir, "nope.log")},
	}
	// The monitors run real processes and files: wait, in real time, for every check to settle.
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got = got[:0]
		settled := true
		for i, c := range m.Checks() {
			err := c.Check()
			got = append(got, fmt.Sprintf("%s=%v", c.Name, err))
			if i >= len(want) || c.Name != want[i].name || (err == nil) != (want[i].failure == "") ||
				(err != nil && !strings.Contains(err.Error(), want[i].failure)) {
				settled = false
			}
		}
		if settled && len(got) == len(want) && !m.Status()[0].LastRun.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checks = %q, want %+v", got, want)
		}
	}
	expected := `# HELP nodeagent_problem_monitor_healthy [ALPHA] Whether a problem monitor works (1) or its log source, watcher or plugin is failing (0), by check name, kind and config file: the monitor's /healthz check.
# TYPE nodeagent_problem_monitor_healthy gauge
`
	for i, w := range want {
		v, kind := 1, "custom-plugin-monitor"
		if w.failure != "" {
			v = 0
		}
		if i >= 2 {
			kind = "system-log-monitor"
		}
		cfg := []string{okCfg, unknownCfg, presentCfg, missingCfg}[i]
		expected += fmt.Sprintf("nodeagent_problem_monitor_healthy{check=%q,config=%q,kind=%q} %d\n", w.name, cfg, kind, v)
	}
	if err := gatherAndCompare(reg, strings.NewReader(expected), "nodeagent_problem_monitor_healthy"); err != nil {
		t.Error(err)
	}
}
