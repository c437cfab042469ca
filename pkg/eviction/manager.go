package eviction

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Observation is one measured signal: Available and Capacity in the signal's unit (bytes, inodes, PIDs).
type Observation struct {
	Available int64
	Capacity  int64
}

// Observations maps each measured signal to its observation. A signal that is not measured
// (e.g. imagefs when the runtime's image store is not visible to this process) is absent and never breaches.
type Observations map[Signal]Observation

// Config configures a Manager.
type Config struct {
	// Thresholds are the hard thresholds, from ParseThresholds.
	Thresholds []Threshold
	// Observe measures the host; typically (*HostObserver).Observe.
	Observe func(ctx context.Context) (Observations, error)
	// Period is how often Run observes (the kubelet's evictionMonitoringPeriod, 10 s).
	Period time.Duration
	// PressureTransitionPeriod is how long a pressure condition stays true after the last breach
	// (the kubelet's --eviction-pressure-transition-period, 5 m).
	PressureTransitionPeriod time.Duration
	// Clock is injected for tests; defaults to the real clock.
	Clock clock.Clock
}

// Manager keeps the latest breach times per signal and answers IsUnder*Pressure, as the kubelet's
// eviction manager does for the node-status setters. Safe for concurrent use.
type Manager struct {
	cfg Config

	mu         sync.RWMutex
	lastBreach map[Signal]time.Time
	observed   bool
}

// New validates cfg and returns a Manager. It returns an error when Observe is nil or a period is negative.
func New(cfg Config) (*Manager, error) {
	if cfg.Observe == nil {
		return nil, fmt.Errorf("eviction: Observe must be set")
	}
	if cfg.Period <= 0 {
		cfg.Period = 10 * time.Second
	}
	if cfg.PressureTransitionPeriod < 0 {
		return nil, fmt.Errorf("eviction: PressureTransitionPeriod %v must not be negative", cfg.PressureTransitionPeriod)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Manager{cfg: cfg, lastBreach: map[Signal]time.Time{}}, nil
}

// Run observes every Period until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := m.Synchronize(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Eviction manager: failed to observe signals")
		}
	}, m.cfg.Period)
}

// Synchronize observes the host once and records which thresholds are breached.
// It returns the observation error, if any; signals that were observed are still recorded.
func (m *Manager) Synchronize(ctx context.Context) error {
	obs, err := m.cfg.Observe(ctx)
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observed = true
	for _, t := range m.cfg.Thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		if o.Available < t.Value(o.Capacity) {
			if _, was := m.lastBreach[t.Signal]; !was || now.Sub(m.lastBreach[t.Signal]) >= m.cfg.PressureTransitionPeriod {
				klog.FromContext(ctx).Info("Eviction threshold met", "signal", t.Signal, "available", o.Available, "threshold", t.Value(o.Capacity))
			}
			m.lastBreach[t.Signal] = now
		}
	}
	return err
}

// IsUnderMemoryPressure reports whether memory.available was below its threshold within the transition period.
func (m *Manager) IsUnderMemoryPressure() bool { return m.under(SignalMemoryAvailable) }

// IsUnderDiskPressure reports whether any nodefs or imagefs signal was below its threshold within the transition period.
func (m *Manager) IsUnderDiskPressure() bool {
	return m.under(SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalImageFsInodesFree)
}

// IsUnderPIDPressure reports whether pid.available was below its threshold within the transition period.
func (m *Manager) IsUnderPIDPressure() bool { return m.under(SignalPIDAvailable) }

func (m *Manager) under(signals ...Signal) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	now := m.cfg.Clock.Now()
	for _, s := range signals {
		// As the kubelet's nodeConditionsObservedSince: pressure while duration < period.
		if t, ok := m.lastBreach[s]; ok && now.Sub(t) < m.cfg.PressureTransitionPeriod {
			return true
		}
	}
	return false
}
