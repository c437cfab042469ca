package node

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/statussync"
)

// The start-up order of one Node, the kubelet's (pkg/kubelet/kubelet.go Run at v1.37.2: the node
// lease controller and updateRuntimeUp start at once, registerWithAPIServer runs inside the first
// syncNodeStatus, fastStatusUpdateOnce gets the Node Ready within a tick of the runtime), with the
// work queue deciding when each step runs:
//
//  1. Start queues the Lease step, the runtime poll and registration at once (StartupSteps).
//  2. Registration waits for the runtime's first check, so that the Node registers Ready, or NotReady
//     saying why; it builds the Node while the Lease's first write is in flight and creates it once
//     that write was attempted, so that a Node is never Ready without its Lease. Each wait ends
//     after StartupWait: a runtime that hangs, or an API server that does not answer, delays the
//     Node by seconds, never for ever.
//  3. Registration done, the status syncs run (every NodeStatusUpdateFrequency) and the fast
//     start-up update starts (every 100 ms until Ready, at most 120 s). With RegisterNode false
//     the first status sync waits for both waits instead, and starts the fast update.
//
// A step whose wait is not over returns the time left until StartupWait; the step that ends the wait
// (the runtime poll, the Lease step) queues it at once (startupProgress).

// StartupWait bounds each start-up wait (the first runtime check, the first Lease write), counted
// from Start: StatusCallTimeout + 1 s.
const StartupWait = StatusCallTimeout + time.Second

// StartupSteps are the steps Start queues, in the kubelet's order.
func (c *Controller) StartupSteps() []Step {
	if c.registrar != nil {
		return []Step{StepLease, StepRuntime, StepRegister}
	}
	return []Step{StepLease, StepRuntime, StepStatus}
}

// startupState is one Node's start-up, guarded by Controller.mu.
type startupState struct {
	leaseAttempted bool      // the Lease's first write succeeded, or a Lease call failed
	runtimeChecked bool      // the runtime poll ran once
	pending        *v1.Node  // built for registration while the Lease's first write is in flight
	fastDeadline   time.Time // when the fast start-up update gives up; zero before it starts
}

// startupWaits reports whether the runtime was checked and the Lease's first write attempted, each
// counting as done once StartupWait has passed since Start, and the time left until then.
func (c *Controller) startupWaits(now time.Time) (runtimeOK, leaseOK bool, left time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	left = c.started.Add(StartupWait).Sub(now)
	return c.startup.runtimeChecked || left <= 0, c.startup.leaseAttempted || left <= 0, left
}

// startupProgress records that the Lease's first write was attempted or the runtime checked, and
// returns the step that waited for it: registration, or the first status sync without it.
func (c *Controller) startupProgress(leaseAttempted, runtimeChecked bool) steps {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.startup
	news := (leaseAttempted && !st.leaseAttempted) || (runtimeChecked && !st.runtimeChecked)
	st.leaseAttempted = st.leaseAttempted || leaseAttempted
	st.runtimeChecked = st.runtimeChecked || runtimeChecked
	switch {
	case !news:
		return 0
	case c.registrar != nil:
		return stepSet(StepRegister)
	default:
		return stepSet(StepStatus)
	}
}

// nodeToRegister returns the Node built while the Lease's first write was in flight, if any.
func (c *Controller) nodeToRegister() *v1.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.startup.pending
	c.startup.pending = nil
	return n
}

// parkNode keeps node, built for registration, until the Lease's first write was attempted.
func (c *Controller) parkNode(node *v1.Node) {
	c.mu.Lock()
	c.startup.pending = node
	c.mu.Unlock()
}

// startFastUpdate starts the fast start-up update once (registration done, or the first status sync
// without registration) and returns it to queue; 0 when it has started before.
func (c *Controller) startFastUpdate(now time.Time) steps {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.startup.fastDeadline.IsZero() {
		return 0
	}
	c.startup.fastDeadline = now.Add(statussync.FastStatusUpdateGrace)
	return stepSet(StepFastUpdate)
}

// fastUpdateDeadline returns when the fast start-up update gives up; zero before it started.
func (c *Controller) fastUpdateDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startup.fastDeadline
}
