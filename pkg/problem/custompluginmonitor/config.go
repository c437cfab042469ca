package custompluginmonitor

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"
	"k8s.io/node-problem-detector/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/problem/internal/npdjson"
)

// Kind is NPD's name for this problem daemon (custompluginmonitor.CustomPluginMonitorName), used in
// errors and status.
const Kind = "custom-plugin-monitor"

// Load reads the custom plugin monitor config at path (NPD's JSON, decoded into NPD's own
// cpmtypes.CustomPluginConfig), checks every field, then applies NPD's defaults with
// ApplyConfiguration and runs NPD's Validate. The first problem is returned as one
// *npdjson.FieldError naming the file, the field and the value.
//
// On top of NPD's checks it rejects what NPD would accept and then misbehave on: a rule type other
// than "temporary" or "permanent", an empty reason or condition type, duplicate condition types,
// a concurrency below 1 (NPD would never run a plugin), a negative max_output_length (NPD would
// panic), a non-positive timeout, a plugin path that is not an executable regular file (NPD checks
// only that it exists), and a per-rule invoke_interval, which NPD v1.36.0 silently ignores.
func Load(path string) (*cpmtypes.CustomPluginConfig, error) {
	data, err := config.ReadFileLimited(path, config.MaxFileSize)
	if err != nil {
		return nil, &npdjson.FieldError{Kind: Kind, File: path, Reason: err.Error()}
	}
	var cfg cpmtypes.CustomPluginConfig
	if err := npdjson.Decode(Kind, path, data, &cfg); err != nil {
		return nil, err
	}
	bad := func(field, value, reason string, args ...any) error {
		return &npdjson.FieldError{Kind: Kind, File: path, Field: field, Value: value, Reason: fmt.Sprintf(reason, args...)}
	}
	if err := checkFields(data, &cfg, bad); err != nil {
		return nil, err
	}
	if err := cfg.ApplyConfiguration(); err != nil {
		return nil, bad("", "", "%v", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, bad("", "", "%v", err)
	}
	return &cfg, nil
}

type badFunc func(field, value, reason string, args ...any) error

func checkFields(data []byte, cfg *cpmtypes.CustomPluginConfig, bad badFunc) error {
	if cfg.Plugin != "custom" {
		return bad("plugin", cfg.Plugin, `unknown plugin: the custom plugin monitor supports only "custom"`)
	}
	g := cfg.PluginGlobalConfig
	global := 5 * time.Second // NPD's defaultGlobalTimeout
	if g.InvokeIntervalString != nil {
		if _, err := positiveDuration(*g.InvokeIntervalString); err != nil {
			return bad("pluginConfig.invoke_interval", *g.InvokeIntervalString, "%v", err)
		}
	}
	if g.TimeoutString != nil {
		d, err := positiveDuration(*g.TimeoutString)
		if err != nil {
			return bad("pluginConfig.timeout", *g.TimeoutString, "%v", err)
		}
		global = d
	}
	if g.MaxOutputLength != nil && *g.MaxOutputLength < 0 {
		return bad("pluginConfig.max_output_length", strconv.Itoa(*g.MaxOutputLength), "must not be negative")
	}
	if g.Concurrency != nil && *g.Concurrency < 1 {
		return bad("pluginConfig.concurrency", strconv.Itoa(*g.Concurrency), "must be at least 1")
	}
	seen := map[string]bool{}
	for i, c := range cfg.DefaultConditions {
		field := fmt.Sprintf("conditions[%d]", i)
		switch {
		case c.Type == "":
			return bad(field+".type", "", "must not be empty")
		case seen[c.Type]:
			return bad(field+".type", c.Type, "duplicate condition type")
		case c.Reason == "":
			return bad(field+".reason", "", "must not be empty (it is the condition's reason while there is no problem)")
		}
		seen[c.Type] = true
	}
	perRuleInterval := rulesWithInvokeInterval(data)
	for i, r := range cfg.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		if r == nil {
			return bad(field, "null", "must be an object")
		}
		switch r.Type {
		case types.Temp:
		case types.Perm:
			if !seen[r.Condition] {
				return bad(field+".condition", r.Condition, "a permanent rule needs a condition listed in conditions")
			}
		default:
			return bad(field+".type", string(r.Type), `must be "temporary" or "permanent"`)
		}
		if r.Reason == "" {
			return bad(field+".reason", "", "must not be empty")
		}
		if r.TimeoutString != nil {
			d, err := positiveDuration(*r.TimeoutString)
			if err != nil {
				return bad(field+".timeout", *r.TimeoutString, "%v", err)
			}
			if d > global {
				return bad(field+".timeout", *r.TimeoutString, "greater than the global timeout %v", global)
			}
		}
		if perRuleInterval[i] != "" {
			return bad(field+".invoke_interval", perRuleInterval[i], "per-rule invoke_interval is not supported (node-problem-detector v1.36.0 ignores it); use pluginConfig.invoke_interval")
		}
		if err := checkExecutable(r.Path); err != nil {
			return bad(field+".path", r.Path, "%v", err)
		}
	}
	return nil
}

// rulesWithInvokeInterval returns, by rule index, the per-rule invoke_interval that NPD's v1.36.0
// types do not decode.
func rulesWithInvokeInterval(data []byte) map[int]string {
	var raw struct {
		Rules []struct {
			InvokeInterval *string `json:"invoke_interval"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil // the typed decode already succeeded; a shape we do not expect here is not ours to judge
	}
	out := map[int]string{}
	for i, r := range raw.Rules {
		if r.InvokeInterval != nil {
			out[i] = *r.InvokeInterval
		}
	}
	return out
}

func positiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration: %w", err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be greater than zero")
	}
	return d, nil
}

// checkExecutable reports whether path is a regular file with an execute bit. As in NPD, a relative
// path is relative to the agent's working directory.
func checkExecutable(path string) error {
	if path == "" {
		return fmt.Errorf("must not be empty")
	}
	fi, err := os.Stat(path)
	if err != nil {
		if os.IsNotExist(err) {
			return fmt.Errorf("does not exist")
		}
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (mode %v)", fi.Mode())
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not executable (mode %v)", fi.Mode().Perm())
	}
	return nil
}
