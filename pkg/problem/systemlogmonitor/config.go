package systemlogmonitor

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	watchertypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/logwatchers/types"
	logtypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/types"
	"k8s.io/node-problem-detector/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/problem/internal/npdjson"
	"github.com/nodeagent/nodeagent/pkg/problem/systemlogmonitor/filelog"
)

// Kind is NPD's name for this problem daemon (systemlogmonitor.SystemLogMonitorName), used in
// errors and status.
const Kind = "system-log-monitor"

// The log sources ("plugin") of NPD's system log monitor.
const (
	PluginFilelog  = "filelog"
	PluginKmsg     = "kmsg"
	PluginJournald = "journald"
)

// NPD's defaults (pkg/systemlogmonitor/config.go).
const (
	defaultBufferSize = 10
	defaultLookback   = "0"
)

// Config is NPD's system log monitor config, systemlogmonitor.MonitorConfig, with the same JSON
// fields, made of NPD's own types: the log watcher's WatcherConfig, the rules and the conditions.
// (NPD's MonitorConfig itself is not imported because its package registers NPD's problem daemons
// and opencensus metrics in init.)
type Config struct {
	// WatcherConfig is the log watcher's configuration: plugin, pluginConfig, logPath, lookback,
	// delay, skipList.
	watchertypes.WatcherConfig
	// BufferSize is the number of lines a pattern is matched against; default 10.
	BufferSize int `json:"bufferSize"`
	// Source is the component of the monitor's events.
	Source string `json:"source"`
	// DefaultConditions are the conditions the monitor owns, at their default (no problem) state.
	DefaultConditions []types.Condition `json:"conditions"`
	// Rules are the patterns matched against the log.
	Rules []logtypes.Rule `json:"rules"`
	// EnableMetricsReporting reports problems as metrics; default true.
	EnableMetricsReporting *bool `json:"metricsReporting,omitempty"`
}

// ApplyDefaultConfiguration applies NPD's defaults: bufferSize 10, metricsReporting true, lookback
// "0". Mirrors MonitorConfig.ApplyDefaultConfiguration.
func (c *Config) ApplyDefaultConfiguration() {
	if c.BufferSize == 0 {
		c.BufferSize = defaultBufferSize
	}
	if c.EnableMetricsReporting == nil {
		t := true
		c.EnableMetricsReporting = &t
	}
	if c.Lookback == "" {
		c.Lookback = defaultLookback
	}
}

// Load reads the system log monitor config at path, applies NPD's defaults and checks every field.
// The first problem is returned as one *npdjson.FieldError naming the file, the field and the
// value: an unknown source (plugin), journald (not supported: see the package doc), a filelog
// source without logPath or with a missing or bad timestamp, message or timestampFormat, a bad
// lookback or delay, a non-positive bufferSize, a rule with a bad type, an empty reason, a pattern
// that does not compile, or a permanent rule whose condition is not listed in conditions.
func Load(path string) (*Config, error) {
	var cfg Config
	if err := npdjson.ReadFile(Kind, path, &cfg); err != nil {
		return nil, err
	}
	cfg.ApplyDefaultConfiguration()
	bad := func(field, value, reason string, args ...any) error {
		return &npdjson.FieldError{Kind: Kind, File: path, Field: field, Value: value, Reason: fmt.Sprintf(reason, args...)}
	}
	switch cfg.Plugin {
	case PluginFilelog:
		if cfg.LogPath == "" {
			return nil, bad("logPath", "", "must be set for the filelog source")
		}
		if _, err := filelog.NewTranslator(cfg.PluginConfig, nil); err != nil {
			var fe *filelog.ConfigError
			if errors.As(err, &fe) {
				return nil, bad("pluginConfig."+fe.Key, fe.Value, "%s", fe.Reason)
			}
			return nil, bad("pluginConfig", "", "%v", err)
		}
	case PluginKmsg:
	case PluginJournald:
		return nil, bad("plugin", cfg.Plugin, "not supported: NPD reads the journal through libsystemd (cgo), "+
			"nodeagent is a static binary and there is no maintained pure-Go journal reader; "+
			"use the kmsg or filelog source, or keep node-problem-detector for journald monitors")
	default:
		return nil, bad("plugin", cfg.Plugin, `unknown log source: must be "filelog" or "kmsg"`)
	}
	if _, err := time.ParseDuration(cfg.Lookback); err != nil {
		return nil, bad("lookback", cfg.Lookback, "invalid duration: %v", err)
	}
	if cfg.Delay != "" {
		if _, err := time.ParseDuration(cfg.Delay); err != nil {
			return nil, bad("delay", cfg.Delay, "invalid duration: %v", err)
		}
	}
	if cfg.BufferSize < 1 {
		return nil, bad("bufferSize", strconv.Itoa(cfg.BufferSize), "must be at least 1")
	}
	seen := map[string]bool{}
	for i, c := range cfg.DefaultConditions {
		field := fmt.Sprintf("conditions[%d]", i)
		switch {
		case c.Type == "":
			return nil, bad(field+".type", "", "must not be empty")
		case seen[c.Type]:
			return nil, bad(field+".type", c.Type, "duplicate condition type")
		case c.Reason == "":
			return nil, bad(field+".reason", "", "must not be empty (it is the condition's reason while there is no problem)")
		}
		seen[c.Type] = true
	}
	for i, r := range cfg.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		switch r.Type {
		case types.Temp:
		case types.Perm:
			if !seen[r.Condition] {
				return nil, bad(field+".condition", r.Condition, "a permanent rule needs a condition listed in conditions")
			}
		default:
			return nil, bad(field+".type", string(r.Type), `must be "temporary" or "permanent"`)
		}
		if r.Reason == "" {
			return nil, bad(field+".reason", "", "must not be empty")
		}
		if _, err := compilePattern(r.Pattern); err != nil {
			return nil, bad(field+".pattern", r.Pattern, "%v", err)
		}
	}
	return &cfg, nil
}

// compilePattern compiles a rule's pattern anchored to the end of the buffered log, as NPD's
// logBuffer.Match does (expr + `\z`).
func compilePattern(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(expr + `\z`)
}
