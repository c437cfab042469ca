package problem

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/node-problem-detector/pkg/types"
	"k8s.io/node-problem-detector/pkg/util"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/problem/custompluginmonitor"
	"github.com/nodeagent/nodeagent/pkg/problem/systemlogmonitor"
)

// restartDelay is the wait before running again a monitor whose Run returned an error.
const restartDelay = 10 * time.Second

// kubeletConditions are the condition types the kubelet (or nodeagent standalone) owns; a monitor
// config may not declare them.
var kubeletConditions = []string{
	string(v1.NodeReady), string(v1.NodeMemoryPressure), string(v1.NodeDiskPressure),
	string(v1.NodePIDPressure), string(v1.NodeNetworkUnavailable),
}

// Config configures a Manager.
type Config struct {
	// CustomPluginMonitors are the paths of NPD custom-plugin-monitor configs
	// (--config.custom-plugin-monitor). A path given twice is loaded once, as NPD.
	CustomPluginMonitors []string
	// SystemLogMonitors are the paths of NPD system-log-monitor configs (--config.system-log-monitor).
	SystemLogMonitors []string
	// Clock stamps conditions and drives the log polling; default the real clock.
	Clock clock.WithTicker
	// Recorder, if set, records each problem event on the Node: the event type (Normal, Warning),
	// the rule's reason, the message (plugin output or matched lines) and the config's source, to
	// use as the event's source component. It must not block.
	Recorder func(eventType, reason, message, source string)
	// Metrics, if set, gets nodeagent_problem_counter and nodeagent_problem_gauge registered.
	Metrics metrics.KubeRegistry
	// OnChange, if set, is called after the conditions changed (e.g. the status syncer's Trigger).
	// It is called from the monitors' goroutines and must not block.
	OnChange func()
}

// Manager runs the problem monitors and keeps their conditions. Build one with New; its methods are
// safe for concurrent use.
type Manager struct {
	cfg      Config
	monitors []*monitor
	counter  *metrics.CounterVec
	gauge    *metrics.GaugeVec
	healthy  *metrics.GaugeVec

	mu          sync.Mutex
	running     bool
	gaugeReason map[string]string // condition type -> reason last set in the gauge
}

// monitor is one loaded config.
type monitor struct {
	kind, path, source, plugin, logPath string
	check                               string // the /healthz check's name
	metrics                             bool
	conditionTypes                      []string // declared in the config
	run                                 func(ctx context.Context, r *reporter) error

	// Guarded by Manager.mu.
	visible       bool
	conditions    []types.Condition
	lastRun       time.Time
	events        int64
	errors        int64
	lastError     string
	lastErrorTime time.Time
}

// New loads and validates every config, sets each config's conditions to their defaults (status
// False with the default reason and message, unless a custom plugin config sets
// skip_initial_status) and registers the metrics. It returns an error joining one line per bad
// file, each naming the file, the field and the value, when a config does not parse or names an
// unknown plugin or source, a bad regular expression or duration, or a plugin that is not an
// executable file; also when two configs declare the same condition type, or a config declares one
// of the kubelet's (Ready, MemoryPressure, DiskPressure, PIDPressure, NetworkUnavailable).
func New(cfg Config) (*Manager, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m := &Manager{
		cfg: cfg,
		counter: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "nodeagent", Name: "problem_counter",
			Help:           "Number of times a specific type of problem has occurred, by reason (node-problem-detector's problem_counter).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"reason"}),
		gauge: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "nodeagent", Name: "problem_gauge",
			Help:           "Whether a specific type of problem is affecting the node (1) or not (0), by condition type and reason (node-problem-detector's problem_gauge).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"type", "reason"}),
		healthy: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "nodeagent", Name: "problem_monitor_healthy",
			Help:           "Whether a problem monitor works (1) or its log source, watcher or plugin is failing (0), by check name, kind and config file: the monitor's /healthz check.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"check", "kind", "config"}),
		gaugeReason: map[string]string{},
	}
	var errs []error
	owner := map[string]string{} // condition type -> config path
	claim := func(kind, path string, conditions []types.Condition) error {
		for i, c := range conditions {
			if slices.Contains(kubeletConditions, c.Type) {
				return fmt.Errorf("%s config %s: conditions[%d].type %q: the kubelet owns this condition", kind, path, i, c.Type)
			}
			if other, ok := owner[c.Type]; ok {
				return fmt.Errorf("%s config %s: conditions[%d].type %q: already declared by %s", kind, path, i, c.Type, other)
			}
		}
		for _, c := range conditions {
			owner[c.Type] = path
		}
		return nil
	}
	type initial struct {
		mon    *monitor
		status *types.Status
		rules  []rule
	}
	var inits []initial
	seen := map[string]bool{}
	// first reports whether path is given for the first time (NPD loads a path given twice once).
	first := func(path string) bool {
		if seen[path] {
			klog.InfoS("Duplicated problem daemon configuration", "path", path)
			return false
		}
		seen[path] = true
		return true
	}
	// add keeps mon, whose config has these default conditions and rules, with its initial status.
	add := func(mon *monitor, defaults []types.Condition, rules []rule, status *types.Status) {
		for _, d := range defaults {
			mon.conditionTypes = append(mon.conditionTypes, d.Type)
		}
		m.monitors = append(m.monitors, mon)
		inits = append(inits, initial{mon, status, rules})
	}
	for _, path := range cfg.CustomPluginMonitors {
		if !first(path) {
			continue
		}
		c, err := custompluginmonitor.Load(path)
		if err == nil {
			err = claim(custompluginmonitor.Kind, path, c.DefaultConditions)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cpm := custompluginmonitor.New(path, c, cfg.Clock)
		var rules []rule
		for _, r := range c.Rules {
			rules = append(rules, rule{permanent: r.Type == types.Perm, condition: r.Condition, reason: r.Reason})
		}
		add(&monitor{
			kind: custompluginmonitor.Kind, path: path, source: cpm.Source(), plugin: c.Plugin, metrics: cpm.MetricsReporting(),
			run: func(ctx context.Context, r *reporter) error { return cpm.Run(ctx, r) },
		}, c.DefaultConditions, rules, cpm.InitialStatus())
	}
	for _, path := range cfg.SystemLogMonitors {
		if !first(path) {
			continue
		}
		c, err := systemlogmonitor.Load(path)
		if err == nil {
			err = claim(systemlogmonitor.Kind, path, c.DefaultConditions)
		}
		var slm *systemlogmonitor.Monitor
		if err == nil {
			slm, err = systemlogmonitor.New(path, c, cfg.Clock)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var rules []rule
		for _, r := range c.Rules {
			rules = append(rules, rule{permanent: r.Type == types.Perm, condition: r.Condition, reason: r.Reason})
		}
		add(&monitor{
			kind: systemlogmonitor.Kind, path: path, source: slm.Source(), plugin: c.Plugin, logPath: c.LogPath, metrics: slm.MetricsReporting(),
			run: func(ctx context.Context, r *reporter) error { return slm.Run(ctx, r) },
		}, c.DefaultConditions, rules, slm.InitialStatus())
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.Metrics != nil {
		for _, c := range []metrics.Registerable{m.counter, m.gauge, m.healthy} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("problem: registering metrics: %w", err)
			}
		}
	}
	m.nameChecks()
	for _, mon := range m.monitors {
		m.healthy.WithLabelValues(mon.check, mon.kind, mon.path).Set(1)
	}
	for _, in := range inits {
		if in.mon.metrics {
			m.initMetrics(in.rules)
		}
		if in.status != nil {
			m.apply(in.mon, in.status)
		}
	}
	return m, nil
}

type rule struct {
	permanent         bool
	condition, reason string
}

// initMetrics creates a problem gauge (0) for each permanent rule and a problem counter (0) for
// each rule. Mirrors NPD's initializeProblemMetricsOrDie.
func (m *Manager) initMetrics(rules []rule) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rules {
		if r.permanent {
			m.setGaugeLocked(r.condition, r.reason, false)
		}
		m.counter.WithLabelValues(r.reason).Add(0)
	}
}

// setGaugeLocked mirrors NPD's ProblemMetricsManager.SetProblemGauge: at most one reason per
// condition type is 1, so the type's previous reason is set to 0 first.
func (m *Manager) setGaugeLocked(conditionType, reason string, value bool) {
	if last, ok := m.gaugeReason[conditionType]; ok {
		m.gauge.WithLabelValues(conditionType, last).Set(0)
	}
	m.gaugeReason[conditionType] = reason
	v := 0.0
	if value {
		v = 1
	}
	m.gauge.WithLabelValues(conditionType, reason).Set(v)
}

// apply stores a monitor's status and updates the metrics; it returns whether the conditions
// changed. Mirrors what NPD's problem detector does with a status: its monitors' metric updates
// and the k8s exporter's condition update.
func (m *Manager) apply(mon *monitor, st *types.Status) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := !mon.visible || !slices.EqualFunc(mon.conditions, st.Conditions, conditionEqual)
	mon.visible = true
	mon.conditions = append([]types.Condition(nil), st.Conditions...)
	mon.events += int64(len(st.Events))
	if mon.metrics {
		for _, ev := range st.Events {
			// NPD counts the problems that just became active: temporary problems and conditions
			// turning True, that is the Warning events.
			if ev.Severity == types.Warn {
				m.counter.WithLabelValues(ev.Reason).Inc()
			}
		}
		for _, c := range st.Conditions {
			m.setGaugeLocked(c.Type, c.Reason, c.Status == types.True)
		}
	}
	return changed
}

func conditionEqual(a, b types.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.Transition.Equal(b.Transition)
}

// Run runs every monitor until ctx ends, then waits for them to stop (a plugin still running is
// waited for, at most its timeout). A monitor whose run fails is logged, shown in Status and run
// again after 10 s; nothing a monitor does stops the others. Run returns nil, or an error if called
// twice.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("problem: Manager.Run called twice")
	}
	m.running = true
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, mon := range m.monitors {
		wg.Go(func() { m.runMonitor(ctx, mon) })
	}
	wg.Wait()
	return nil
}

func (m *Manager) runMonitor(ctx context.Context, mon *monitor) {
	logger := klog.FromContext(ctx).WithValues("monitor", mon.kind, "config", mon.path)
	ctx = klog.NewContext(ctx, logger)
	r := &reporter{m: m, mon: mon}
	logger.Info("Starting problem monitor", "source", mon.source, "plugin", mon.plugin)
	for {
		err := mon.run(ctx, r)
		if ctx.Err() != nil {
			logger.Info("Stopped problem monitor")
			return
		}
		if err == nil {
			err = errors.New("monitor stopped")
		}
		logger.Error(err, "Problem monitor failed, restarting", "after", restartDelay)
		r.Observe(m.cfg.Clock.Now(), err)
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(restartDelay):
		}
	}
}

// reporter receives one monitor's findings; it implements both monitor packages' Reporter.
type reporter struct {
	m   *Manager
	mon *monitor
}

func (r *reporter) Report(st *types.Status) {
	changed := r.m.apply(r.mon, st)
	if r.m.cfg.Recorder != nil {
		for _, ev := range st.Events {
			r.m.cfg.Recorder(util.ConvertToAPIEventType(ev.Severity), ev.Reason, ev.Message, st.Source)
		}
	}
	if changed && r.m.cfg.OnChange != nil {
		r.m.cfg.OnChange()
	}
}

func (r *reporter) Observe(at time.Time, err error) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if err == nil {
		r.mon.lastRun = at
	} else {
		r.mon.errors++
		r.mon.lastError = err.Error()
		r.mon.lastErrorTime = at
	}
	v := 1.0
	if r.mon.healthErrorLocked() != nil {
		v = 0
	}
	r.m.healthy.WithLabelValues(r.mon.check, r.mon.kind, r.mon.path).Set(v)
}

// healthErrorLocked is the monitor's health: nil unless its last problem (a log source that did
// not start or whose file is missing, a watcher that stopped, a plugin that timed out or reported
// Unknown) is not older than its last clean run (a plugin result, a log line read, a watch started).
func (mon *monitor) healthErrorLocked() error {
	if mon.lastErrorTime.IsZero() || mon.lastErrorTime.Before(mon.lastRun) {
		return nil
	}
	return fmt.Errorf("%s %s: %s (since %s)", mon.kind, mon.path, mon.lastError, mon.lastErrorTime.UTC().Format(time.RFC3339))
}

// Check is one monitor's health check, for /healthz.
type Check struct {
	// Name is "problem-monitor-" and the config file's base name without ".json", made of
	// [a-z0-9-] only (so /healthz/<name> is a plain path), with "-2", "-3"... for repeated names.
	Name string
	// Check returns nil while the monitor works, else an error naming the kind, the config file,
	// the last problem and since when.
	Check func() error
}

// Checks returns one health check per monitor, in config order: NPD's users asked for a named
// check per monitor (NPD issues 1168, 1174). The metric nodeagent_problem_monitor_healthy has the
// same value per check.
func (m *Manager) Checks() []Check {
	out := make([]Check, 0, len(m.monitors))
	for _, mon := range m.monitors {
		out = append(out, Check{Name: mon.check, Check: func() error {
			m.mu.Lock()
			defer m.mu.Unlock()
			return mon.healthErrorLocked()
		}})
	}
	return out
}

// nameChecks gives every monitor its check name.
func (m *Manager) nameChecks() {
	seen := map[string]int{}
	for _, mon := range m.monitors {
		base := strings.TrimSuffix(filepath.Base(mon.path), ".json")
		var b strings.Builder
		for _, r := range strings.ToLower(base) {
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
				b.WriteRune(r)
			} else {
				b.WriteByte('-')
			}
		}
		name := "problem-monitor-" + strings.Trim(b.String(), "-")
		seen[name]++
		if n := seen[name]; n > 1 {
			name = fmt.Sprintf("%s-%d", name, n)
		}
		mon.check = name
	}
}

// Conditions returns the current conditions of every monitor, in config order, with
// lastHeartbeatTime left zero for the writer to set. A custom plugin monitor with
// skip_initial_status contributes nothing until its first plugin result.
func (m *Manager) Conditions() []v1.NodeCondition {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []v1.NodeCondition
	for _, mon := range m.monitors {
		out = append(out, mon.apiConditionsLocked()...)
	}
	return out
}

// ConditionTypes returns the condition types the configs declare: the only ones the Manager sets.
func (m *Manager) ConditionTypes() []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, mon := range m.monitors {
		for _, t := range mon.conditionTypes {
			out = append(out, v1.NodeConditionType(t))
		}
	}
	return out
}

func (mon *monitor) apiConditionsLocked() []v1.NodeCondition {
	if !mon.visible {
		return nil
	}
	out := make([]v1.NodeCondition, 0, len(mon.conditions))
	for _, c := range mon.conditions {
		out = append(out, util.ConvertToAPICondition(c))
	}
	return out
}

// Setters returns one nodestatus.Setter per monitor, in config order (custom plugin monitors
// first), to run after the kubelet's setters. Each merges its monitor's conditions into
// node.Status.Conditions by type, with lastHeartbeatTime now; the lastTransitionTime already on the
// Node is kept while the status is the same, so it changes only when the status changes, across
// agent restarts too.
func (m *Manager) Setters() []nodestatus.Setter {
	setters := make([]nodestatus.Setter, 0, len(m.monitors))
	for _, mon := range m.monitors {
		setters = append(setters, func(ctx context.Context, node *v1.Node) error {
			m.mu.Lock()
			conds := mon.apiConditionsLocked()
			m.mu.Unlock()
			MergeConditions(node, conds, metav1.NewTime(m.cfg.Clock.Now()))
			return nil
		})
	}
	return setters
}

// MergeConditions sets each of conds in node.Status.Conditions, replacing the condition of the same
// type or appending it, with lastHeartbeatTime now. The Node's lastTransitionTime is kept when its
// status equals the new one.
func MergeConditions(node *v1.Node, conds []v1.NodeCondition, now metav1.Time) {
	for _, c := range conds {
		c.LastHeartbeatTime = now
		i := slices.IndexFunc(node.Status.Conditions, func(e v1.NodeCondition) bool { return e.Type == c.Type })
		if i < 0 {
			node.Status.Conditions = append(node.Status.Conditions, c)
			continue
		}
		if old := node.Status.Conditions[i]; old.Status == c.Status && !old.LastTransitionTime.IsZero() {
			c.LastTransitionTime = old.LastTransitionTime
		}
		node.Status.Conditions[i] = c
	}
}

// MonitorStatus is a snapshot of one monitor, for /debug/nodestatus.
type MonitorStatus struct {
	// Kind is custom-plugin-monitor or system-log-monitor.
	Kind string `json:"kind"`
	// ConfigPath is the config file.
	ConfigPath string `json:"configPath"`
	// Source is the config's source (the events' component).
	Source string `json:"source"`
	// Plugin is custom, filelog or kmsg.
	Plugin string `json:"plugin"`
	// LogPath is a filelog monitor's file.
	LogPath string `json:"logPath,omitempty"`
	// LastRun is when a plugin last finished or a log line was last read.
	LastRun time.Time `json:"lastRun,omitzero"`
	// Events is the number of events the monitor emitted.
	Events int64 `json:"events"`
	// Errors is the number of problems (Unknown plugin results, log source errors).
	Errors int64 `json:"errors"`
	// Check is the monitor's /healthz check; HealthError its failure ("" when it passes).
	Check       string `json:"check"`
	HealthError string `json:"healthError,omitempty"`
	// LastError is the last of them, at LastErrorTime.
	LastError     string    `json:"lastError,omitempty"`
	LastErrorTime time.Time `json:"lastErrorTime,omitzero"`
	// Conditions are the monitor's current conditions (none before its first report).
	Conditions []v1.NodeCondition `json:"conditions"`
}

// Status returns a snapshot of every monitor, in config order.
func (m *Manager) Status() []MonitorStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MonitorStatus, 0, len(m.monitors))
	for _, mon := range m.monitors {
		out = append(out, MonitorStatus{
			Kind: mon.kind, ConfigPath: mon.path, Source: mon.source, Plugin: mon.plugin, LogPath: mon.logPath,
			LastRun: mon.lastRun, Events: mon.events, Errors: mon.errors, Check: mon.check, HealthError: errString(mon.healthErrorLocked()),
			LastError: mon.lastError, LastErrorTime: mon.lastErrorTime,
			Conditions: mon.apiConditionsLocked(),
		})
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
