package criruntime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// PollerConfig configures a Poller.
type PollerConfig struct {
	// Runtime is asked for Status; required.
	Runtime Runtime
	// State receives the results; required.
	State *State
	// Period between Status calls; default 5 s, as the kubelet's updateRuntimeUp loop.
	Period time.Duration
	// Timeout bounds each Status call; default 5 s. (The kubelet's call is bounded by
	// --runtime-request-timeout, 2 m; a runtime that does not answer within 5 s is reported down
	// after the 30 s threshold instead of after two minutes.)
	Timeout time.Duration
	// Clock is injected for tests; default the real clock.
	Clock clock.Clock
	// OnChange, if set, is called by Run after State has been updated whenever the runtime's
	// reachability, RuntimeReady or NetworkReady changed (so that a status can be posted at once).
	// A caller of UpdateRuntimeUp gets the same answer as its result.
	OnChange func()
	// Observer, if set, is told the result of every Status call (metrics).
	Observer Observer
}

// The kubelet's runtime-health timings, shared by every user of the poller (the agent's Node, the
// simulation's, companion mode).
const (
	// StatusCallTimeout bounds each CRI Status call (and every CRI call on the status path).
	StatusCallTimeout = 5 * time.Second
	// MaxWaitForContainerRuntime is the kubelet's threshold after which a runtime that has not
	// answered counts as down (runtimeState's 30 s).
	MaxWaitForContainerRuntime = 30 * time.Second
)

// Observer is told the result of each CRI Status call: its error, and on success whether
// RuntimeReady and NetworkReady were true.
type Observer interface {
	ObserveRuntimeStatus(err error, runtimeReady, networkReady bool)
}

// Poller asks the runtime for its Status and records it in State: the kubelet's updateRuntimeUp
// (pkg/kubelet/kubelet.go) run every Period. It holds no lock across a CRI call, so a runtime that
// hangs delays only the caller.
type Poller struct {
	cfg PollerConfig
	// readyExpected switches "not ready" logs from V(4) to Info once the node has been Ready,
	// as the kubelet's containerRuntimeReadyExpected.
	readyExpected atomic.Bool

	mu   sync.Mutex // guards last
	last readiness
}

// readiness is what UpdateRuntimeUp compares between two Status calls.
type readiness struct{ known, reachable, runtimeReady, networkReady bool }

// NewPoller validates cfg, fills defaults and returns a Poller. It errors when Runtime or State is nil.
func NewPoller(cfg PollerConfig) (*Poller, error) {
	if cfg.Runtime == nil || cfg.State == nil {
		return nil, fmt.Errorf("criruntime: PollerConfig needs Runtime and State")
	}
	if cfg.Period <= 0 {
		cfg.Period = 5 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = StatusCallTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Poller{cfg: cfg}, nil
}

// Run calls UpdateRuntimeUp at once and then every Period (sliding) until ctx ends, and OnChange
// after each call that found a change.
func (p *Poller) Run(ctx context.Context) {
	t := p.cfg.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if p.UpdateRuntimeUp(ctx) && p.cfg.OnChange != nil {
			p.cfg.OnChange()
		}
		t.Reset(p.cfg.Period)
	}
}

// SetReadyExpected makes "runtime not ready" logs visible at the default verbosity from now on.
func (p *Poller) SetReadyExpected() { p.readyExpected.Store(true) }

// UpdateRuntimeUp calls CRI Status once, bounded by Timeout, and updates State, as the kubelet's
// updateRuntimeUp: a failed call records the error (the state ages into "container runtime is down:
// <error>"); NetworkReady false or missing sets the network error "container runtime network not
// ready: ..."; RuntimeReady false or missing sets the runtime error "container runtime not ready: ..."
// and returns; otherwise the errors are cleared, handlers and features stored, and the sync time set.
// It returns whether the runtime's reachability, RuntimeReady or NetworkReady differ from the last
// call's (always true for the first answer; false when ctx ended, as nothing was recorded). Safe
// for concurrent use.
func (p *Poller) UpdateRuntimeUp(ctx context.Context) (changed bool) {
	logger := klog.FromContext(ctx)
	info := logger.V(4).Info
	if p.readyExpected.Load() {
		info = logger.Info
	}

	callCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	resp, err := p.cfg.Runtime.Status(callCtx, false)
	cancel()
	if ctx.Err() != nil {
		return false // shutting down: the call failed because of that, not because of the runtime
	}
	if err == nil && (resp == nil || resp.Status == nil) {
		err = fmt.Errorf("container runtime status is nil")
	}
	if err != nil {
		logger.Error(err, "Container runtime sanity check failed")
		p.cfg.State.SetStatusError(err)
		return p.report(err, false, false)
	}
	p.cfg.State.SetStatusError(nil)
	networkReady := condition(resp.Status, runtimeapi.NetworkReady)
	if networkReady == nil || !networkReady.Status {
		info("Container runtime network not ready", "networkReady", conditionString(networkReady))
		p.cfg.State.SetNetworkState(fmt.Errorf("container runtime network not ready: %s", conditionString(networkReady)))
	} else {
		p.cfg.State.SetNetworkState(nil)
	}
	runtimeReady := condition(resp.Status, runtimeapi.RuntimeReady)
	if runtimeReady == nil || !runtimeReady.Status {
		info("Container runtime not ready", "runtimeReady", conditionString(runtimeReady))
		p.cfg.State.SetRuntimeState(fmt.Errorf("container runtime not ready: %s", conditionString(runtimeReady)))
		return p.report(nil, false, networkReady != nil && networkReady.Status)
	}
	p.cfg.State.SetRuntimeState(nil)
	handlers := make([]Handler, 0, len(resp.RuntimeHandlers))
	for _, h := range resp.RuntimeHandlers {
		handlers = append(handlers, Handler{
			Name:                            h.Name,
			SupportsRecursiveReadOnlyMounts: h.Features.GetRecursiveReadOnlyMounts(),
			SupportsUserNamespaces:          h.Features.GetUserNamespaces(),
		})
	}
	p.cfg.State.SetRuntimeHandlers(handlers)
	if resp.Features != nil {
		p.cfg.State.SetRuntimeFeatures(&Features{SupplementalGroupsPolicy: resp.Features.SupplementalGroupsPolicy})
	}
	p.cfg.State.SetRuntimeSync(p.cfg.Clock.Now())
	return p.report(nil, true, networkReady != nil && networkReady.Status)
}

// report runs after State is updated: it tells the Observer and returns whether the readiness changed.
func (p *Poller) report(err error, runtimeReady, networkReady bool) bool {
	if p.cfg.Observer != nil {
		p.cfg.Observer.ObserveRuntimeStatus(err, runtimeReady, networkReady)
	}
	now := readiness{known: true, reachable: err == nil, runtimeReady: runtimeReady, networkReady: networkReady}
	p.mu.Lock()
	changed := now != p.last
	p.last = now
	p.mu.Unlock()
	return changed
}

func condition(s *runtimeapi.RuntimeStatus, t string) *runtimeapi.RuntimeCondition {
	for _, c := range s.GetConditions() {
		if c.Type == t {
			return c
		}
	}
	return nil
}

// conditionString formats a runtime condition as kubecontainer.RuntimeCondition.String does, so that
// node messages read as the kubelet's: "NetworkReady=false reason:X message:Y", or "<nil>".
func conditionString(c *runtimeapi.RuntimeCondition) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s=%t reason:%s message:%s", c.Type, c.Status, c.Reason, c.Message)
}
