package criruntime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
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
	// Clock is injected for tests; default the real clock.
	Clock clock.Clock
	// OnStatus, if set, is called after each Status call with its error and, on success,
	// whether RuntimeReady and NetworkReady were true (for metrics).
	OnStatus func(err error, runtimeReady, networkReady bool)
}

// Poller asks the runtime for its Status and records it in State: the kubelet's updateRuntimeUp
// (pkg/kubelet/kubelet.go) run every Period.
type Poller struct {
	cfg PollerConfig
	mu  sync.Mutex
	// readyExpected switches "not ready" logs from V(4) to Info once the node has been Ready,
	// as the kubelet's containerRuntimeReadyExpected.
	readyExpected bool
}

// NewPoller validates cfg, fills defaults and returns a Poller. It errors when Runtime or State is nil.
func NewPoller(cfg PollerConfig) (*Poller, error) {
	if cfg.Runtime == nil || cfg.State == nil {
		return nil, fmt.Errorf("criruntime: PollerConfig needs Runtime and State")
	}
	if cfg.Period <= 0 {
		cfg.Period = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Poller{cfg: cfg}, nil
}

// Run calls UpdateRuntimeUp every Period until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, p.UpdateRuntimeUp, p.cfg.Period)
}

// SetReadyExpected makes "runtime not ready" logs visible at the default verbosity from now on.
func (p *Poller) SetReadyExpected() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readyExpected = true
}

// UpdateRuntimeUp calls CRI Status once and updates State, as the kubelet's updateRuntimeUp:
// a failed call only logs (the state ages into "container runtime is down"); NetworkReady false or
// missing sets the network error "container runtime network not ready: ..."; RuntimeReady false or
// missing sets the runtime error "container runtime not ready: ..." and returns; otherwise the errors
// are cleared, handlers and features stored, and the sync time set. Safe for concurrent use.
func (p *Poller) UpdateRuntimeUp(ctx context.Context) {
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	info := logger.V(4).Info
	if p.readyExpected {
		info = logger.Info
	}

	resp, err := p.cfg.Runtime.Status(ctx)
	if err == nil && (resp == nil || resp.Status == nil) {
		err = fmt.Errorf("container runtime status is nil")
	}
	if err != nil {
		logger.Error(err, "Container runtime sanity check failed")
		p.report(err, false, false)
		return
	}
	networkReady := condition(resp.Status, runtimeapi.NetworkReady)
	if networkReady == nil || !networkReady.Status {
		info("Container runtime network not ready", "networkReady", conditionString(networkReady))
		p.cfg.State.SetNetworkState(fmt.Errorf("container runtime network not ready: %s", conditionString(networkReady)))
	} else {
		p.cfg.State.SetNetworkState(nil)
	}
	runtimeReady := condition(resp.Status, runtimeapi.RuntimeReady)
	p.report(nil, runtimeReady != nil && runtimeReady.Status, networkReady != nil && networkReady.Status)
	if runtimeReady == nil || !runtimeReady.Status {
		info("Container runtime not ready", "runtimeReady", conditionString(runtimeReady))
		p.cfg.State.SetRuntimeState(fmt.Errorf("container runtime not ready: %s", conditionString(runtimeReady)))
		return
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
}

func (p *Poller) report(err error, runtimeReady, networkReady bool) {
	if p.cfg.OnStatus != nil {
		p.cfg.OnStatus(err, runtimeReady, networkReady)
	}
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
