package custompluginmonitor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/node-problem-detector/pkg/custompluginmonitor/plugin"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"
)

// collect runs r's first round and returns its results by rule reason, then stops r.
func collect(t *testing.T, r Runner, n int) map[string]cpmtypes.Result {
	t.Helper()
	go r.Run()
	out := map[string]cpmtypes.Result{}
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case res := <-r.GetResultChan():
			out[res.Rule.Reason] = res
		case <-timeout:
			t.Fatalf("%d of %d results after 20 s", len(out), n)
		}
	}
	go r.Stop() // NPD's Stop waits for its Run; neither is needed here
	return out
}

// TestRunnerMatchesNPD runs the same plugins under NPD v1.36.0's plugin runner and under ours and
// compares the results: exit status and message, for output trimming and cutting, exit codes, a
// plugin killed by a signal, stderr, and a timeout.
func TestRunnerMatchesNPD(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		reason, script string
		// racyNPDMessage: NPD's runner races its own timeout flag against exec.CommandContext's kill,
		// so its message is either the timeout message or the output so far ("").
		racyNPDMessage bool
	}{
		{"Ok", "echo '  all fine  '", false},
		{"Problem", "echo broken; echo more; exit 1", false},
		{"Unknown", "echo strange; exit 2", false},
		{"Long", "head -c 10000 /dev/zero | tr '\\0' x; exit 1", false},
		{"Stderr", "echo out; echo err >&2; exit 1", false},
		{"Killed", "echo before; kill -9 $$", false},
		{"NoOutput", "exit 0", false},
		{"Hang", "echo started; sleep 30", true},
	}
	var rules []string
	for _, c := range cases {
		p := writeFile(t, dir, c.reason+".sh", "#!/bin/sh\n"+c.script+"\n", 0o755)
		rules = append(rules, fmt.Sprintf(`{"type":"temporary","reason":%q,"path":%q}`, c.reason, p))
	}
	_, cfg := loadConfig(t, `{"plugin":"custom","source":"s","pluginConfig":{"invoke_interval":"1h","timeout":"700ms","max_output_length":40,"concurrency":8},
		"conditions":[],"rules":[`+strings.Join(rules, ",")+`]}`)
	npd := collect(t, plugin.NewPlugin(*cfg), len(cases))
	ours := collect(t, newPluginRunner(*cfg, nil), len(cases))
	for _, c := range cases {
		n, o := npd[c.reason], ours[c.reason]
		t.Logf("%-8s NPD %v %q | nodeagent %v %q", c.reason, n.ExitStatus, n.Message, o.ExitStatus, o.Message)
		if n.ExitStatus != o.ExitStatus {
			t.Errorf("%s: exit status %v, NPD's %v", c.reason, o.ExitStatus, n.ExitStatus)
		}
		if n.Message != o.Message && !(c.racyNPDMessage && n.Message == "") {
			t.Errorf("%s: message %q, NPD's %q", c.reason, o.Message, n.Message)
		}
	}
	if m := ours["Hang"].Message; !strings.HasPrefix(m, "Timeout when running plugin") {
		t.Errorf("Hang: message %q, want NPD's timeout message", m)
	}
}

// TestRunnerGrandchildKeepsStdoutOpen: a plugin that exits 1 leaving a setsid'd child holding its
// stdout (NPD issues 1050, 726) is reported NonOK within its 2 s timeout, is reaped (no zombie),
// and the runner's next round runs. NPD's runner, given the same plugin, is logged for the record.
func TestRunnerGrandchildKeepsStdoutOpen(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	script := writeFile(t, dir, "plugin.sh", "#!/bin/sh\necho \"$$\" >>"+pidFile+"\nsetsid sleep 120 &\necho \"$!\" >>"+pidFile+"\necho leaving\nexit 1\n", 0o755)
	t.Cleanup(func() { // the sleeps escaped every process group we could kill
		for _, pid := range readPids(t, pidFile) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	_, cfg := loadConfig(t, `{"plugin":"custom","source":"s","pluginConfig":{"invoke_interval":"300ms","timeout":"2s"},
		"conditions":[{"type":"T","reason":"Fine"}],
		"rules":[{"type":"permanent","condition":"T","reason":"Broken","path":"`+script+`"}]}`)

	r := newPluginRunner(*cfg, nil)
	start := time.Now()
	go r.Run()
	for round := range 2 {
		select {
		case res := <-r.GetResultChan():
			took := time.Since(start)
			t.Logf("round %d: %v %q after %v", round, res.ExitStatus, res.Message, took)
			if res.ExitStatus != cpmtypes.NonOK || res.Message != "leaving" {
				t.Errorf("round %d: result %v %q, want NonOK \"leaving\"", round, res.ExitStatus, res.Message)
			}
			if round == 0 && took > 2*time.Second {
				t.Errorf("first result after %v, want within the 2 s timeout", took)
			}
			pids := readPids(t, pidFile)
			shell := pids[len(pids)-2]
			if state := procState(shell); state != "" {
				t.Errorf("round %d: the plugin (pid %d) is still there, state %s: not reaped", round, shell, state)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: no result within 5 s", round)
		}
		start = time.Now()
	}
	r.Stop()

	// NPD's runner, for the record (docs/npd-migration.md): it waits for the pipes, so it does
	// not report before the sleep exits; we look for 3 s only.
	npd := plugin.NewPlugin(*cfg)
	go npd.Run()
	select {
	case res := <-npd.GetResultChan():
		t.Logf("NPD v1.36.0's runner reported %v %q", res.ExitStatus, res.Message)
	case <-time.After(3 * time.Second):
		pids := readPids(t, pidFile)
		t.Logf("NPD v1.36.0's runner: no result after 3 s (the plugin exited at once); its shell pid %d is in state %q (Z = zombie)",
			pids[len(pids)-2], procState(pids[len(pids)-2]))
	}
	// NPD's Stop waits for its round, that is for the sleep, and its loop may start one more
	// round before it sees the stop: kill the sleeps until it has stopped.
	stopped := make(chan struct{})
	go func() { npd.Stop(); close(stopped) }()
	for {
		for _, pid := range readPids(t, pidFile) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-stopped:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	if len(out) < 2 {
		t.Fatalf("pids %v", out)
	}
	return out
}

// procState is the state letter of /proc/<pid>/stat (R, S, Z, ...), "" when the process is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "?"
	}
	return string(s[i+2])
}
