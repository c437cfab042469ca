package companion

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
)

// Defaults of ModeConfig.
const (
	// patchFailureGrace is how long condition patches may keep failing before Healthy fails (the
	// syncloop check).
	patchFailureGrace = 30 * time.Second
)

// ModeConfig configures a Mode.
type ModeConfig struct {
	// NodeName is the kubelet's Node; required.
	NodeName string
	// Client patches nodes/status (the heartbeat client); required.
	Client kubernetes.Interface
	// Runtime is the CRI connection polled for ContainerRuntimeUnhealthy; required.
	Runtime criruntime.Runtime
	// HeartbeatPeriod is NPD's --k8s-exporter-heartbeat-period; default 5 m (see Config).
	HeartbeatPeriod time.Duration
	// StatusCallTimeout bounds each CRI Status call; default 5 s.
	StatusCallTimeout time.Duration
	// MaxWaitForRuntime is how long a runtime that does not answer stays healthy; default 30 s.
	MaxWaitForRuntime time.Duration
	// Problems, if set, returns the problem monitors' conditions (problem.Manager.Conditions), and
	// ProblemTypes every condition type their configs declare (problem.Manager.ConditionTypes).
	Problems     func() []v1.NodeCondition
	ProblemTypes []v1.NodeConditionType
	// Recorder, if set, records the runtime condition's events (see RuntimeHealthConfig).
	Recorder func(eventType, reason, message, source string)
	// Observer, if set, is told the result of every CRI Status call (metrics).
	Observer criruntime.Observer
	// OnPatch, if set, is told the result of every patch (metrics).
	OnPatch func(err error)
	// Clock is injected for tests; default the real clock.
	Clock clock.WithTicker
}

// Mode is what nodeagent runs beside the node's own kubelet (--companion): a CRI poller whose
// runtime state feeds the ContainerRuntimeUnhealthy condition, the problem monitors' conditions, and
// a Patcher that keeps exactly those on the kubelet's Node (and removes those of monitors no longer
// configured, see Config.Types). Nothing registers the Node, renews its Lease or writes a field the
// kubelet writes. Build one with NewMode; it makes no API or CRI call before Run.
type Mode struct {
	cfg     ModeConfig
	state   *criruntime.State
	poller  *criruntime.Poller
	runtime *RuntimeHealth
	patcher *Patcher
	started time.Time
}

// NewMode validates cfg, fills its defaults and composes companion mode. It returns an error naming
// the missing field.
func NewMode(cfg ModeConfig) (*Mode, error) {
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("companion: ModeConfig.NodeName is empty")
	case cfg.Client == nil:
		return nil, errors.New("companion: ModeConfig.Client is nil")
	case cfg.Runtime == nil:
		return nil, errors.New("companion: ModeConfig.Runtime is nil")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.StatusCallTimeout <= 0 {
		cfg.StatusCallTimeout = criruntime.StatusCallTimeout
	}
	if cfg.MaxWaitForRuntime <= 0 {
		cfg.MaxWaitForRuntime = criruntime.MaxWaitForContainerRuntime
	}
	m := &Mode{cfg: cfg, state: criruntime.NewState(cfg.Clock, cfg.MaxWaitForRuntime), started: cfg.Clock.Now()}
	var err error
	if m.runtime, err = NewRuntimeHealth(RuntimeHealthConfig{Errors: m.RuntimeError, Clock: cfg.Clock, Recorder: cfg.Recorder}); err != nil {
		return nil, err
	}
	conditions := []func() []v1.NodeCondition{m.runtime.Conditions}
	types := []v1.NodeConditionType{RuntimeConditionType}
	if cfg.Problems != nil {
		conditions = append(conditions, cfg.Problems)
		types = append(types, cfg.ProblemTypes...)
	}
	if m.patcher, err = New(Config{
		Client: cfg.Client, NodeName: cfg.NodeName, Conditions: JoinConditions(conditions...), Types: types,
		HeartbeatPeriod: cfg.HeartbeatPeriod, Clock: cfg.Clock, OnPatch: cfg.OnPatch,
	}); err != nil {
		return nil, err
	}
	if m.poller, err = criruntime.NewPoller(criruntime.PollerConfig{
		Runtime: cfg.Runtime, State: m.state, Timeout: cfg.StatusCallTimeout, Clock: cfg.Clock,
		Observer: cfg.Observer, OnChange: m.patcher.Trigger,
	}); err != nil {
		return nil, fmt.Errorf("companion: %w", err)
	}
	return m, nil
}

// RuntimeError is the ContainerRuntimeUnhealthy input: why the last CRI Status call failed, or, once
// the runtime has answered, the kubelet's runtimeState errors (not ready, or no answer for
// MaxWaitForRuntime). Before the first answer it is nil: not known to be unhealthy.
func (m *Mode) RuntimeError() error {
	if err := m.state.StatusError(); err != nil {
		return err
	}
	if m.state.LastRuntimeSync().IsZero() {
		return nil
	}
	return m.state.RuntimeErrors()
}

// Run runs the poller and the patcher until ctx ends. It returns nil when ctx ends.
func (m *Mode) Run(ctx context.Context) error {
	go m.poller.Run(ctx)
	return m.patcher.Run(ctx)
}

// Trigger makes the patcher compare the conditions now (a problem condition changed). It never blocks.
func (m *Mode) Trigger() { m.patcher.Trigger() }

// Healthy is the syncloop check: it fails while condition patches keep failing for longer than 30 s.
func (m *Mode) Healthy() error {
	st := m.patcher.Status()
	last := st.LastPatch
	if last.IsZero() {
		last = m.started
	}
	if st.LastErrorTime.After(st.LastPatch) && m.cfg.Clock.Since(last) > patchFailureGrace {
		return fmt.Errorf("node condition patches failing since %s: %s", last.Format(time.RFC3339), st.LastError)
	}
	return nil
}

// Patched is /readyz's check: it fails until the conditions have been patched once.
func (m *Mode) Patched() error {
	if m.patcher.Status().LastPatch.IsZero() {
		return errors.New("node conditions not patched yet")
	}
	return nil
}

// PatcherStatus returns a snapshot of the patcher, for /debug/nodestatus.
func (m *Mode) PatcherStatus() PatcherStatus { return m.patcher.Status() }
