package custompluginmonitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"
	"k8s.io/node-problem-detector/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/problem/internal/condition"
	"k8s.io/node-problem-detector/pkg/util"
	"k8s.io/utils/clock"
)

// Reporter receives what a Monitor finds. Its methods are called from the Monitor's goroutine, one
// at a time, and must not block.
type Reporter interface {
	// Report receives a new status: all of the monitor's conditions and the events of one plugin
	// result. The Monitor does not touch the status after the call.
	Report(status *types.Status)
	// Observe is called with a nil error after each plugin run, and once more with an error when
	// the result was Unknown.
	Observe(at time.Time, err error)
}

// Runner runs a config's plugins and delivers their results; NPD's *plugin.Plugin is one, and so is
// the runner New uses.
type Runner interface {
	Run()
	Stop()
	GetResultChan() <-chan cpmtypes.Result
}

// Monitor is one custom plugin monitor: NPD's customPluginMonitor for one config file, its plugins
// run as NPD's plugin runner (k8s.io/node-problem-detector/pkg/custompluginmonitor/plugin) runs
// them, except that a plugin that leaves its output open cannot hold the monitor (see pluginRunner).
type Monitor struct {
	path       string
	config     cpmtypes.CustomPluginConfig
	clock      clock.PassiveClock
	newRunner  func(cpmtypes.CustomPluginConfig) Runner
	conditions []types.Condition // owned by Run once it starts
}

// New returns the monitor of the config loaded from path (see Load), its conditions at their
// defaults. clk stamps condition transitions and events; nil means the real clock.
func New(path string, config *cpmtypes.CustomPluginConfig, clk clock.PassiveClock) *Monitor {
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Monitor{
		path:      path,
		config:    *config,
		clock:     clk,
		newRunner: func(c cpmtypes.CustomPluginConfig) Runner { return newPluginRunner(c, clk) },
	}
	m.conditions = condition.Initial(m.config.DefaultConditions, clk.Now())
	return m
}

// Path returns the config file's path.
func (m *Monitor) Path() string { return m.path }

// Config returns the monitor's config with NPD's defaults applied. Do not modify it.
func (m *Monitor) Config() *cpmtypes.CustomPluginConfig { return &m.config }

// Source returns the config's source, the component of its events.
func (m *Monitor) Source() string { return m.config.Source }

// MetricsReporting reports whether the config asks for problem metrics ("metricsReporting").
func (m *Monitor) MetricsReporting() bool {
	return m.config.EnableMetricsReporting == nil || *m.config.EnableMetricsReporting
}

// InitialStatus returns the status NPD sends when the monitor starts: every condition of the
// config at status False with its default reason and message. It returns nil when the config sets
// skip_initial_status, as NPD then sends nothing until the first plugin result. Mirrors
// customPluginMonitor.initializeConditions and sendInitialStatus. Call it before Run.
func (m *Monitor) InitialStatus() *types.Status {
	if s := m.config.PluginGlobalConfig.SkipInitialStatus; s != nil && *s {
		return nil
	}
	return &types.Status{Source: m.config.Source, Conditions: condition.Clone(m.conditions)}
}

// Run runs the plugins (all at once at start, then every invoke_interval, at most concurrency at a
// time, each bounded by its timeout and output limit, as NPD's plugin.Plugin does) and reports a
// status for every result until ctx ends. It then stops the runner, which waits for the plugins
// still running (at most their timeout). Mirrors customPluginMonitor.monitorLoop.
func (m *Monitor) Run(ctx context.Context, r Reporter) error {
	logger := klog.FromContext(ctx).WithValues("monitor", Kind, "config", m.path)
	runner := m.newRunner(m.config)
	go runner.Run()
	results := runner.GetResultChan()
	for {
		select {
		case <-ctx.Done():
			runner.Stop()
			return nil
		case res, ok := <-results:
			if !ok {
				return errors.New("plugin result channel closed")
			}
			status := m.generateStatus(res)
			var err error
			if res.ExitStatus != cpmtypes.OK && res.ExitStatus != cpmtypes.NonOK {
				err = fmt.Errorf("rule %s (%s): status unknown: %s", res.Rule.Reason, res.Rule.Path, res.Message)
			}
			logger.V(4).Info("Plugin result", "reason", res.Rule.Reason, "path", res.Rule.Path, "exitStatus", res.ExitStatus, "message", res.Message)
			if len(status.Events) > 0 {
				logger.V(2).Info("Problem status changed", "source", status.Source, "events", status.Events)
			}
			now := m.clock.Now()
			r.Observe(now, nil)
			if err != nil {
				r.Observe(now, err)
			}
			r.Report(status)
		}
	}
}

// generateStatus turns one plugin result into a status, mirroring NPD's
// customPluginMonitor.generateStatus: a temporary rule emits a Warning event when its plugin
// reports a problem (exit 1) or an unknown state (any other exit, or a timeout); a permanent rule
// sets its condition (exit 0 False, 1 True, else Unknown) with the rule's reason and the plugin's
// output while True, the default reason and message while False, and the default reason with the
// output while Unknown, and emits NPD's "Node condition ... is now" event when it changes. A True
// condition whose reason changes, or whose message changes under
// enable_message_change_based_condition_update, is updated and reported too.
//
// One deliberate difference: NPD also moves the transition time when a True condition's reason or
// message changes; here it moves only when the status changes, as a NodeCondition's
// lastTransitionTime means.
func (m *Monitor) generateStatus(result cpmtypes.Result) *types.Status {
	now := m.clock.Now()
	var active, inactive []types.Event
	if result.Rule.Type == types.Temp {
		if result.ExitStatus >= cpmtypes.NonOK {
			active = append(active, types.Event{Severity: types.Warn, Timestamp: now, Reason: result.Rule.Reason, Message: result.Message})
		}
	} else {
		for i := range m.conditions {
			c := &m.conditions[i]
			if c.Type != result.Rule.Condition {
				continue
			}
			defReason, defMessage := m.defaultCondition(c.Type)
			messageBased := m.config.PluginGlobalConfig.EnableMessageChangeBasedConditionUpdate
			status := toConditionStatus(result.ExitStatus)
			var reason, message string
			switch {
			case c.Status == types.True && status != types.True,
				c.Status != types.True && status != types.True && c.Status != status:
				// True to False/Unknown, or False to Unknown and back: the default reason, and the
				// output while Unknown because it is what explains it.
				reason, message = defReason, result.Message
				if status == types.False {
					message = defMessage
				}
			case c.Status != types.True && status == types.True:
				reason, message = result.Rule.Reason, result.Message
			case c.Status == types.True && (c.Reason != result.Rule.Reason ||
				(messageBased != nil && *messageBased && c.Message != result.Message)):
				reason, message = result.Rule.Reason, result.Message
			default:
				continue // unchanged
			}
			if c.Status != status {
				c.Transition = now
			}
			c.Status, c.Reason, c.Message = status, reason, message
			ev := util.GenerateConditionChangeEvent(c.Type, status, reason, message, now)
			if status == types.True {
				active = append(active, ev)
			} else {
				inactive = append(inactive, ev)
			}
			break
		}
	}
	return &types.Status{
		Source:     m.config.Source,
		Events:     append(active, inactive...),
		Conditions: condition.Clone(m.conditions),
	}
}

func (m *Monitor) defaultCondition(conditionType string) (reason, message string) {
	for _, d := range m.config.DefaultConditions {
		if d.Type == conditionType {
			return d.Reason, d.Message
		}
	}
	return "", ""
}

// toConditionStatus mirrors NPD's custompluginmonitor.toConditionStatus.
func toConditionStatus(s cpmtypes.Status) types.ConditionStatus {
	switch s {
	case cpmtypes.OK:
		return types.False
	case cpmtypes.NonOK:
		return types.True
	default:
		return types.Unknown
	}
}
