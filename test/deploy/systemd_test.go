package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeagent/nodeagent/pkg/config"
)

const (
	unitPath   = "deploy/systemd/nodeagent.service"
	configPath = "deploy/systemd/config.yaml"
	binaryPath = "/usr/local/bin/nodeagent"
)

// unit is a parsed systemd unit file: section → key → values, in order.
type unit map[string]map[string][]string

// parseUnit parses the subset of the unit file syntax the project uses:
// [Section] headers, Key=Value lines, and # or ; comments. It fails on a
// continuation line (trailing backslash) or a line outside any section.
func parseUnit(text string) (unit, error) {
	u := unit{}
	section := ""
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasSuffix(line, `\`):
			return nil, fmt.Errorf("line %d: continuation lines are not supported", i+1)
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		case section == "":
			return nil, fmt.Errorf("line %d: %q outside a section", i+1, line)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not Key=Value", i+1, line)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	return u, nil
}

func loadUnit(t *testing.T) unit {
	t.Helper()
	u, err := parseUnit(readRepoFile(t, unitPath))
	if err != nil {
		t.Fatalf("%s: %v", unitPath, err)
	}
	return u
}

func TestUnitDirectives(t *testing.T) {
	u := loadUnit(t)
	tests := []struct {
		section, key, want string
	}{
		{"Unit", "After", "containerd.service network-online.target"},
		{"Unit", "Wants", "network-online.target"},
		{"Service", "Type", "notify"},
		{"Service", "NotifyAccess", "main"},
		{"Service", "WatchdogSec", "60s"},
		{"Service", "Restart", "always"},
		{"Service", "RestartSec", "5"},
		{"Service", "ExecStart", binaryPath + " --config=/etc/nodeagent/config.yaml --kubeconfig=/etc/nodeagent/kubeconfig"},
		{"Service", "KillMode", "mixed"},
		{"Service", "KillSignal", "SIGTERM"},
		{"Service", "TimeoutStopSec", "30s"},
		{"Install", "WantedBy", "multi-user.target"},
	}
	for _, tc := range tests {
		t.Run(tc.section+"."+tc.key, func(t *testing.T) {
			got := u[tc.section][tc.key]
			if !slices.Equal(got, []string{tc.want}) {
				t.Errorf("[%s] %s=%q, want exactly %q", tc.section, tc.key, got, tc.want)
			}
		})
	}
}

// TestUnitTimeouts checks the timeouts against each other and the agent: the
// watchdog is fed every WatchdogSec/2 (pkg/systemd), and the agent must get
// to exit cleanly before SIGKILL.
func TestUnitTimeouts(t *testing.T) {
	u := loadUnit(t)
	dur := func(key string) time.Duration {
		t.Helper()
		v := u["Service"][key]
		if len(v) != 1 {
			t.Fatalf("[Service] %s=%q, want one value", key, v)
		}
		d, err := time.ParseDuration(v[0])
		if err != nil {
			t.Fatalf("[Service] %s=%q: %v", key, v[0], err)
		}
		return d
	}
	watchdog, stop := dur("WatchdogSec"), dur("TimeoutStopSec")
	if watchdog < 20*time.Second {
		t.Errorf("WatchdogSec=%v: a ping every %v leaves little slack for a busy node", watchdog, watchdog/2)
	}
	if stop <= 0 || stop > 2*time.Minute {
		t.Errorf("TimeoutStopSec=%v, want a bounded, positive stop timeout", stop)
	}
}

// TestUnitExecStart checks that the unit runs the binary where the image puts
// it, with documented flags and the example config's path.
func TestUnitExecStart(t *testing.T) {
	u := loadUnit(t)
	fields := strings.Fields(u["Service"]["ExecStart"][0])
	if fields[0] != binaryPath {
		t.Errorf("ExecStart runs %s, want %s", fields[0], binaryPath)
	}
	flags := documentedFlags(t)
	for _, arg := range fields[1:] {
		if !flags[flagName(arg)] {
			t.Errorf("ExecStart flag %s is not in docs/flags.md", arg)
		}
	}
}

// verify runs `systemd-analyze verify` on a copy of the unit text in a temp
// directory, with the agent binary's path replaced by a dummy executable
// there (verify fails on an ExecStart that does not exist, and the tests must
// not install anything in /usr/local/bin). It returns the combined output and
// whether the command failed. A clean unit gives no output and success:
// systemd-analyze reports unknown keys and unparsable values as warnings on
// stderr while still exiting 0.
func verify(t *testing.T, text string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	dummy := filepath.Join(dir, "nodeagent")
	if err := os.WriteFile(dummy, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatalf("write dummy binary: %v", err)
	}
	text = strings.ReplaceAll(text, binaryPath, dummy)
	path := filepath.Join(dir, "nodeagent.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatalf("write unit: %v", err)
	}
	cmd := exec.Command("systemd-analyze", "verify", "--man=no", path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("run systemd-analyze: %v", err)
		}
	}
	return out.String(), err != nil
}

// TestSystemdAnalyzeVerify runs systemd's own parser over the unit. It needs no
// running systemd: verify loads the unit into a throw-away manager and checks
// every directive's name, syntax and value, that ExecStart is an absolute path
// to an executable, and that units it Requires= exist (a missing Wants= or
// After= target is not an error, as for systemd itself). It does not start the
// service, so Type=notify, the watchdog and the sandboxing options are not
// exercised. The broken variants prove that it does catch such mistakes.
func TestSystemdAnalyzeVerify(t *testing.T) {
	shipped := readRepoFile(t, unitPath)
	if !strings.Contains(shipped, "ExecStart="+binaryPath+" ") {
		t.Fatalf("%s: no ExecStart=%s to substitute", unitPath, binaryPath)
	}
	tests := []struct {
		name      string
		text      string
		wantClean bool
	}{
		{name: "shipped unit", text: shipped, wantClean: true},
		{name: "unknown key", text: strings.Replace(shipped, "[Service]", "[Service]\nWatchDogSec=60s", 1)},
		{name: "bad Type", text: strings.Replace(shipped, "Type=notify", "Type=notifyy", 1)},
		{name: "bad NotifyAccess", text: strings.Replace(shipped, "NotifyAccess=main", "NotifyAccess=mian", 1)},
		{name: "bad WatchdogSec", text: strings.Replace(shipped, "WatchdogSec=60s", "WatchdogSec=sixty", 1)},
		{name: "relative ExecStart", text: strings.Replace(shipped, "ExecStart="+binaryPath, "ExecStart=nodeagent/bin", 1)},
		{name: "bad After", text: strings.Replace(shipped, "After=containerd.service", "After=containerd", 1)},
		{name: "missing required unit", text: strings.Replace(shipped, "[Unit]", "[Unit]\nRequires=no-such-thing.target", 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.text == shipped && !tc.wantClean {
				t.Fatal("the broken variant is identical to the shipped unit: its replacement no longer matches")
			}
			out, failed := verify(t, tc.text)
			clean := !failed && strings.TrimSpace(out) == ""
			if clean != tc.wantClean {
				t.Errorf("systemd-analyze verify: clean=%t, want %t; failed=%t, output:\n%s", clean, tc.wantClean, failed, out)
			}
		})
	}
}

// TestExampleConfig loads deploy/systemd/config.yaml exactly as the agent
// loads --config (strict decoding, defaults, validation) and checks that it
// spells out the settings an operator is most likely to change.
func TestExampleConfig(t *testing.T) {
	path := filepath.Join(repoRoot(t), configPath)
	c, err := config.LoadFile(path)
	if err != nil {
		t.Fatalf("load %s: %v", configPath, err)
	}
	if err := config.Validate(c); err != nil {
		t.Fatalf("validate %s: %v", configPath, err)
	}

	var raw map[string]any
	if err := yaml.Unmarshal([]byte(readRepoFile(t, configPath)), &raw); err != nil {
		t.Fatalf("parse %s: %v", configPath, err)
	}
	for _, key := range []string{
		"apiVersion", "kind",
		"containerRuntimeEndpoint", "nodeStatusUpdateFrequency", "nodeStatusReportFrequency",
		"nodeLeaseDurationSeconds", "healthzBindAddress", "healthzPort", "maxPods",
		"evictionHard", "systemReserved", "kubeReserved", "registerNode", "registerWithTaints",
		"nodeLabels", "rootDir", "kubeAPIQPS", "kubeAPIBurst", "nodeStatusMaxImages",
		"enableProfilingHandler",
	} {
		if _, ok := raw[key]; !ok {
			t.Errorf("%s does not set %s", configPath, key)
		}
	}

	tests := []struct {
		field     string
		got, want any
	}{
		{"containerRuntimeEndpoint", c.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock"},
		{"nodeStatusUpdateFrequency", c.NodeStatusUpdateFrequency.Duration, 10 * time.Second},
		{"nodeStatusReportFrequency", c.NodeStatusReportFrequency.Duration, 5 * time.Minute},
		{"nodeLeaseDurationSeconds", c.NodeLeaseDurationSeconds, int32(40)},
		{"healthzBindAddress", c.HealthzBindAddress, "127.0.0.1"},
		{"rootDir", c.RootDir, "/var/lib/nodeagent"},
		{"registerWithTaints", len(c.RegisterWithTaints), 1},
	}
	for _, tc := range tests {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s = %v, want %v", tc.field, tc.got, tc.want)
		}
	}
}
