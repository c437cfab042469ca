package custompluginmonitor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/node-problem-detector/pkg/types"
)

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadShippedConfigs(t *testing.T) {
	t.Chdir("../../../test/testdata/npd")
	cfg, err := Load("custom-plugin-monitor.json")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.PluginGlobalConfig
	if *g.InvokeInterval != 30*time.Second || *g.Timeout != 5*time.Second || *g.MaxOutputLength != 80 || *g.Concurrency != 3 ||
		*g.EnableMessageChangeBasedConditionUpdate || *g.SkipInitialStatus {
		t.Errorf("global config = %+v", g)
	}
	if cfg.Source != "ntp-custom-plugin-monitor" || len(cfg.Rules) != 2 || *cfg.Rules[1].Timeout != 3*time.Second || cfg.Rules[1].Type != types.Perm {
		t.Errorf("config = %+v", cfg)
	}

	// health-checker-containerd.json with only its plugin path changed.
	data, err := os.ReadFile("health-checker-containerd.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hc := writeFile(t, dir, "health-checker", "#!/bin/sh\nexit 0\n", 0o755)
	p := writeFile(t, dir, "hc.json", strings.Replace(string(data), "/home/kubernetes/bin/health-checker", hc, 1), 0o644)
	cfg, err = Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.PluginGlobalConfig.Timeout != 3*time.Minute || cfg.DefaultConditions[0].Type != "ContainerRuntimeUnhealthy" {
		t.Errorf("config = %+v", cfg)
	}
}

func TestLoadDefaults(t *testing.T) {
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok.sh", "#!/bin/sh\nexit 0\n", 0o755)
	p := writeFile(t, dir, "c.json", `{"plugin":"custom","source":"s","conditions":[{"type":"T","reason":"R","message":"m"}],
		"rules":[{"type":"permanent","condition":"T","reason":"Bad","path":"`+ok+`"}]}`, 0o644)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.PluginGlobalConfig
	// NPD's defaults.
	if *g.InvokeInterval != 30*time.Second || *g.Timeout != 5*time.Second || *g.MaxOutputLength != 80 || *g.Concurrency != 3 ||
		*g.EnableMessageChangeBasedConditionUpdate || *g.SkipInitialStatus || !*cfg.EnableMetricsReporting {
		t.Errorf("defaults = %+v", g)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok.sh", "#!/bin/sh\nexit 0\n", 0o755)
	noexec := writeFile(t, dir, "noexec.sh", "#!/bin/sh\nexit 0\n", 0o644)
	rule := func(extra string) string {
		return `{"plugin":"custom","source":"s","conditions":[{"type":"T","reason":"R"}],"rules":[{"type":"permanent","condition":"T","reason":"X","path":"` + ok + `"` + extra + `}]}`
	}
	for _, tc := range []struct {
		name, json string
		want       string // substring after "custom-plugin-monitor config <file>: "
	}{
		{"syntax", "{\n  \"plugin\": \"custom\",\n  oops\n}", "invalid JSON at line 3, column 3"},
		{"type", `{"plugin":"custom","pluginConfig":{"max_output_length":"80"}}`, `pluginConfig.max_output_length "\"80\"": cannot decode JSON string into int`},
		{"unknown plugin", `{"plugin":"exec"}`, `plugin "exec": unknown plugin`},
		{"bad interval", `{"plugin":"custom","pluginConfig":{"invoke_interval":"30"}}`, `pluginConfig.invoke_interval "30": invalid duration`},
		{"zero interval", `{"plugin":"custom","pluginConfig":{"invoke_interval":"0s"}}`, `pluginConfig.invoke_interval "0s": must be greater than zero`},
		{"bad timeout", `{"plugin":"custom","pluginConfig":{"timeout":"5x"}}`, `pluginConfig.timeout "5x": invalid duration`},
		{"concurrency", `{"plugin":"custom","pluginConfig":{"concurrency":0}}`, `pluginConfig.concurrency "0": must be at least 1`},
		{"max output", `{"plugin":"custom","pluginConfig":{"max_output_length":-1}}`, `pluginConfig.max_output_length "-1": must not be negative`},
		{"rule timeout", rule(`,"timeout":"1y"`), `rules[0].timeout "1y": invalid duration`},
		{"rule timeout over global", rule(`,"timeout":"6s"`), `rules[0].timeout "6s": greater than the global timeout 5s`},
		{"rule interval", rule(`,"invoke_interval":"10s"`), `rules[0].invoke_interval "10s": per-rule invoke_interval is not supported`},
		{"rule type", `{"plugin":"custom","rules":[{"type":"perm","reason":"X","path":"` + ok + `"}]}`, `rules[0].type "perm": must be "temporary" or "permanent"`},
		{"no condition", `{"plugin":"custom","rules":[{"type":"permanent","condition":"T","reason":"X","path":"` + ok + `"}]}`, `rules[0].condition "T": a permanent rule needs a condition listed in conditions`},
		{"missing path", `{"plugin":"custom","rules":[{"type":"temporary","reason":"X","path":"` + dir + `/nope.sh"}]}`, `rules[0].path "` + dir + `/nope.sh": does not exist`},
		{"not executable", `{"plugin":"custom","rules":[{"type":"temporary","reason":"X","path":"` + noexec + `"}]}`, `rules[0].path "` + noexec + `": not executable (mode -rw-r--r--)`},
		{"directory", `{"plugin":"custom","rules":[{"type":"temporary","reason":"X","path":"` + dir + `"}]}`, `rules[0].path "` + dir + `": not a regular file`},
		{"empty reason", `{"plugin":"custom","rules":[{"type":"temporary","path":"` + ok + `"}]}`, `rules[0].reason: must not be empty`},
		{"duplicate condition", `{"plugin":"custom","conditions":[{"type":"T","reason":"R"},{"type":"T","reason":"R"}]}`, `conditions[1].type "T": duplicate condition type`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "c.json", tc.json, 0o644)
			_, err := Load(p)
			if err == nil {
				t.Fatal("no error")
			}
			want := "custom-plugin-monitor config " + p + ": " + tc.want
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error\n%s\ndoes not start with\n%s", err, want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has more than one line: %q", err)
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json: open ") {
		t.Errorf("missing file: %v", err)
	}
}
