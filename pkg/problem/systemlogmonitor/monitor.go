// Package systemlogmonitor is node-problem-detector's system log monitor for nodeagent: it reads
// NPD's system-log-monitor JSON configs (Load), follows a log source, matches NPD's pattern rules
// against the last bufferSize lines, sets the config's conditions on permanent rules and emits
// events on temporary ones, with NPD's semantics.
//
// Sources: "filelog" (package filelog, which follows rotation and truncation) and "kmsg" (NPD's own
// kmsg watcher, k8s.io/node-problem-detector/pkg/systemlogmonitor/logwatchers/kmsg, on
// github.com/euank/go-kmsg-parser). "journald" is refused by Load: NPD reads the journal through
// go-systemd's sdjournal, which needs cgo and libsystemd, and nodeagent is a static binary with no
// maintained pure-Go journal reader to use instead.
//
// As in NPD, a permanent rule's condition stays True once matched until the agent restarts: a log
// line says a problem happened, no line says it went away.
//
//	cfg, err := systemlogmonitor.Load("/etc/nodeagent/kernel-monitor.json")
//	if err != nil { return err }
//	m, err := systemlogmonitor.New("/etc/nodeagent/kernel-monitor.json", cfg, nil)
//	if err != nil { return err }
//	report(m.InitialStatus())
//	go m.Run(ctx, reporter)
package systemlogmonitor

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/node-problem-detector/pkg/systemlogmonitor/logwatchers/kmsg"
	watchertypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/logwatchers/types"
	logtypes "k8s.io/node-problem-detector/pkg/systemlogmonitor/types"
	"k8s.io/node-problem-detector/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/problem/internal/condition"
	"k8s.io/node-problem-detector/pkg/util"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/problem/systemlogmonitor/filelog"
)

// startRetryDelay is the wait between attempts to start a log source that failed (e.g. /dev/kmsg
// not readable): NPD's kmsg retryDelay.
const startRetryDelay = 5 * time.Second

// Reporter receives what a Monitor finds. Its methods are called from the Monitor's goroutine, one
// at a time, and must not block.
type Reporter interface {
	// Report receives a new status: all of the monitor's conditions and the events of one match.
	// The Monitor does not touch the status after the call.
	Report(status *types.Status)
	// Observe is called for each log line read (err nil) and each problem with the log source.
	Observe(at time.Time, err error)
}

// Monitor is one system log monitor: NPD's logMonitor for one config file.
type Monitor struct {
	path       string
	config     Config
	clock      clock.WithTicker
	patterns   []*regexp.Regexp
	buffer     *logBuffer
	conditions []types.Condition // owned by Run once it starts
	// newWatcher creates the log source; tests replace it.
	newWatcher func(onError func(error)) (watchertypes.LogWatcher, error)
	uptime     func() (time.Duration, error)
}

// New returns the monitor of the config loaded from path (see Load), its conditions at their
// defaults. clk drives the filelog polling and stamps conditions; nil means the real clock.
func New(path string, config *Config, clk clock.WithTicker) (*Monitor, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Monitor{
		path:   path,
		config: *config,
		clock:  clk,
		buffer: newLogBuffer(config.BufferSize),
		uptime: util.GetUptimeDuration,
	}
	for i, r := range config.Rules {
		p, err := compilePattern(r.Pattern)
		if err != nil {
			return nil, fmt.Errorf("%s config %s: rules[%d].pattern %q: %w", Kind, path, i, r.Pattern, err)
		}
		m.patterns = append(m.patterns, p)
	}
	switch config.Plugin {
	case PluginFilelog:
		m.newWatcher = m.newFilelogWatcher
	case PluginKmsg:
		m.newWatcher = func(func(error)) (watchertypes.LogWatcher, error) {
			return kmsg.NewKmsgWatcher(m.config.WatcherConfig), nil
		}
	default:
		return nil, fmt.Errorf("%s config %s: plugin %q: unknown log source", Kind, path, config.Plugin)
	}
	m.conditions = condition.Initial(config.DefaultConditions, clk.Now())
	return m, nil
}

func (m *Monitor) newFilelogWatcher(onError func(error)) (watchertypes.LogWatcher, error) {
	tr, err := filelog.NewTranslator(m.config.PluginConfig, m.clock.Now)
	if err != nil {
		return nil, err
	}
	uptime, err := m.uptime()
	if err != nil {
		return nil, fmt.Errorf("failed to get uptime: %w", err)
	}
	start, err := util.GetStartTime(m.clock.Now(), uptime, m.config.Lookback, m.config.Delay)
	if err != nil {
		return nil, err
	}
	return filelog.New(filelog.Config{
		Path:       m.config.LogPath,
		Translator: tr,
		SkipList:   m.config.SkipList,
		StartTime:  start,
		Clock:      m.clock,
		OnError:    onError,
		OnRecover:  func() { onError(nil) }, // a clean run again, for the health check
	})
}

// Path returns the config file's path.
func (m *Monitor) Path() string { return m.path }

// Config returns the monitor's config with NPD's defaults applied. Do not modify it.
func (m *Monitor) Config() *Config { return &m.config }

// Source returns the config's source, the component of its events.
func (m *Monitor) Source() string { return m.config.Source }

// MetricsReporting reports whether the config asks for problem metrics ("metricsReporting").
func (m *Monitor) MetricsReporting() bool {
	return m.config.EnableMetricsReporting == nil || *m.config.EnableMetricsReporting
}

// InitialStatus returns the status NPD sends when the monitor starts: every condition of the
// config at status False with its default reason and message. Mirrors logMonitor.initializeStatus.
// Call it before Run.
func (m *Monitor) InitialStatus() *types.Status {
	return &types.Status{Source: m.config.Source, Conditions: condition.Clone(m.conditions)}
}

// Run follows the log source and reports a status for every rule that matches, until ctx ends.
// A source that cannot start (e.g. /dev/kmsg unreadable) is reported to r and retried every 5 s.
// Mirrors logMonitor.monitorLoop and parseLog.
func (m *Monitor) Run(ctx context.Context, r Reporter) error {
	logger := klog.FromContext(ctx).WithValues("monitor", Kind, "config", m.path)
	onError := func(err error) { r.Observe(m.clock.Now(), err) }
	var (
		w   watchertypes.LogWatcher
		ch  <-chan *logtypes.Log
		err error
	)
	for {
		if w, err = m.newWatcher(onError); err == nil {
			// A clean start for the health check, before the watcher can report a problem.
			r.Observe(m.clock.Now(), nil)
			if ch, err = w.Watch(); err == nil {
				break
			}
		}
		err = fmt.Errorf("starting %s log source: %w", m.config.Plugin, err)
		logger.Error(err, "Log source did not start, retrying", "after", startRetryDelay)
		onError(err)
		select {
		case <-ctx.Done():
			return nil
		case <-m.clock.After(startRetryDelay):
		}
	}
	defer w.Stop()
	logger.V(2).Info("Watching log", "source", m.config.Plugin, "path", m.config.LogPath)
	for {
		select {
		case <-ctx.Done():
			return nil
		case log, ok := <-ch:
			if !ok {
				return errors.New("log watcher stopped")
			}
			r.Observe(m.clock.Now(), nil)
			m.parseLog(ctx, log, r)
		}
	}
}

// parseLog pushes one line into the buffer and reports a status for each rule that matches the
// end of the buffer. Mirrors logMonitor.parseLog.
func (m *Monitor) parseLog(ctx context.Context, log *logtypes.Log, r Reporter) {
	m.buffer.push(log)
	for i, rule := range m.config.Rules {
		matched := m.buffer.match(m.patterns[i])
		if len(matched) == 0 {
			continue
		}
		status := m.generateStatus(matched, rule)
		klog.FromContext(ctx).V(2).Info("Log rule matched", "config", m.path, "reason", rule.Reason, "type", rule.Type, "events", len(status.Events))
		r.Report(status)
	}
}

// generateStatus mirrors NPD's logMonitor.generateStatus: the time is the first matched line's; a
// temporary rule emits a Warning event with the matched lines as message (plus the rule's
// patternGeneratedMessageSuffix); a permanent rule sets its condition True with the rule's reason,
// and when the condition was False or had another reason, takes the new message and emits NPD's
// "Node condition ... is now" event. One deliberate difference: NPD also moves the transition time
// when a True condition's reason changes; here it moves only when the status changes.
func (m *Monitor) generateStatus(logs []*logtypes.Log, rule logtypes.Rule) *types.Status {
	timestamp := logs[0].Timestamp
	message := generateMessage(logs, rule.PatternGeneratedMessageSuffix)
	var events []types.Event
	if rule.Type == types.Temp {
		events = append(events, types.Event{Severity: types.Warn, Timestamp: timestamp, Reason: rule.Reason, Message: message})
	} else {
		for i := range m.conditions {
			c := &m.conditions[i]
			if c.Type != rule.Condition {
				continue
			}
			if c.Status == types.False || c.Reason != rule.Reason {
				if c.Status != types.True {
					c.Transition = timestamp
				}
				c.Message = message
				events = append(events, util.GenerateConditionChangeEvent(c.Type, types.True, rule.Reason, message, timestamp))
			}
			c.Status = types.True
			c.Reason = rule.Reason
			break
		}
	}
	return &types.Status{Source: m.config.Source, Events: events, Conditions: condition.Clone(m.conditions)}
}

// generateMessage mirrors NPD's generateMessage.
func generateMessage(logs []*logtypes.Log, suffix string) string {
	messages := make([]string, 0, len(logs))
	for _, l := range logs {
		messages = append(messages, l.Message)
	}
	msg := strings.Join(messages, "\n")
	if suffix != "" {
		return fmt.Sprintf("%s; %s", msg, suffix)
	}
	return msg
}
