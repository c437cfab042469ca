package nodestatus

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Func is one named Setter of an ordered list, e.g. {"ReadyCondition", ReadyCondition(...)}.
type Func struct {
	Name   string
	Setter Setter
}

// SetterStats is what the last run of one setter did, for /debug/nodestatus.
type SetterStats struct {
	// Name is the Func's name.
	Name string `json:"name"`
	// LastRun is when it last started; zero before its first run.
	LastRun time.Time `json:"lastRun,omitzero"`
	// Duration is how long its last run took.
	Duration time.Duration `json:"duration"`
	// LastError is its last run's error ("" when it succeeded).
	LastError string `json:"lastError,omitempty"`
}

// Funcs is the ordered setter list of one Node and the one function that applies it, for both the
// initial Node at registration and every status update: the kubelet's setNodeStatusFuncs and
// setNodeStatus. It records each setter's last run. Safe for concurrent use: Apply runs one at a
// time (the kubelet holds syncNodeStatusMux around every setNodeStatus), so that setters that keep
// state between runs (the condition setters' transition times, SchedulableEvent's last value) never
// run twice at once for one Node.
type Funcs struct {
	clock clock.PassiveClock
	funcs []Func

	apply sync.Mutex // held for a whole Apply

	mu    sync.Mutex // guards stats, read by Stats while an Apply runs
	stats []setterRun
}

// setterRun is what Funcs keeps of a setter's last run: SetterStats without the name (the Func has
// it) and with the start in Unix nanoseconds (0: never run), 32 bytes where SetterStats takes 64, for
// every setter of every Node (a simulation keeps thousands).
type setterRun struct {
	start     int64
	duration  time.Duration
	lastError string
}

// NewFuncs returns the list funcs, run in order by Apply; clk times the runs (nil: the real clock).
func NewFuncs(clk clock.PassiveClock, funcs ...Func) *Funcs {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Funcs{clock: clk, funcs: funcs, stats: make([]setterRun, len(funcs))}
}

// Apply runs every setter in order on node, in place; a second Apply of the same Funcs waits for
// the first to end. A setter's error is logged with the setter's name and the rest still run, as
// the kubelet's setNodeStatus.
func (f *Funcs) Apply(ctx context.Context, node *v1.Node) {
	f.apply.Lock()
	defer f.apply.Unlock()
	logger := klog.FromContext(ctx)
	for i, fn := range f.funcs {
		start := f.clock.Now()
		err := fn.Setter(ctx, node)
		st := setterRun{start: start.UnixNano(), duration: f.clock.Since(start)}
		if err != nil {
			st.lastError = err.Error()
			logger.Error(err, "Failed to set some node status fields", "node", klog.KObj(node), "setter", fn.Name)
		}
		f.mu.Lock()
		f.stats[i] = st
		f.mu.Unlock()
	}
}

// Names returns the setters' names in order.
func (f *Funcs) Names() []string {
	names := make([]string, len(f.funcs))
	for i, fn := range f.funcs {
		names[i] = fn.Name
	}
	return names
}

// Stats returns a copy of every setter's last run, in order.
func (f *Funcs) Stats() []SetterStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]SetterStats, len(f.stats))
	for i, st := range f.stats {
		out[i] = SetterStats{Name: f.funcs[i].Name, Duration: st.duration, LastError: st.lastError}
		if st.start != 0 {
			out[i].LastRun = time.Unix(0, st.start)
		}
	}
	return out
}
