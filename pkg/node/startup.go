package node

import (
	"time"

	"github.com/nodeagent/nodeagent/pkg/statussync"
)

// The start-up order of one Node, the kubelet's (pkg/kubelet/kubelet.go Run at v1.37.2: the node
// lease controller and updateRuntimeUp start at once, registerWithAPIServer runs inside the first
// syncNodeStatus, fastStatusUpdateOnce gets the Node Ready within a tick of the runtime), with the
// work queue deciding when each step runs:
//
//  1. Start queues the Lease step, the runtime poll and registration at once (StartupSteps).
//  2. Registration waits for the runtime's first check, so that the Node registers Ready, or NotReady
//     saying why, and not for the Lease: the Node is created while the Lease's first write is in
//     flight, as the kubelet's registerWithAPIServer runs beside its lease controller. The node
//     lifecycle controller judges both orders alike (k8s.io/kubernetes v1.37.2
//     pkg/controller/nodelifecycle, tryUpdateNodeHealth): a Node it sees first gets
//     probeTimestamp = now, whether its Lease exists or not, and a Lease only ever moves that
//     timestamp forward; the Node is marked Unknown only after a grace period (40 s and more) with
//     neither a Ready heartbeat nor a renewal. The wait ends after StartupWait: a runtime that hangs
//     delays the Node by seconds, never for ever.
//  3. Registration done, the status syncs run (every NodeStatusUpdateFrequency) and the fast
//     start-up update starts (every 100 ms until Ready, at most 120 s). With RegisterNode false
//     the first status sync waits for the runtime check instead, and starts the fast update.
//
// A step whose wait is not over returns the time left until StartupWait; the runtime poll, which ends
// the wait, queues it at once (startupProgress).

// StartupWait bounds the start-up wait for the first runtime check, counted from Start:
// StatusCallTimeout + 1 s.
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
	runtimeChecked bool      // the runtime poll ran once
	fastDeadline   time.Time // when the fast start-up update gives up; zero before it starts
}

// startupWait reports whether the runtime was checked, which counts as done once StartupWait has
// passed since Start, and the time left until then.
func (c *Controller) startupWait(now time.Time) (runtimeOK bool, left time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	left = c.started.Add(StartupWait).Sub(now)
	return c.startup.runtimeChecked || left <= 0, left
}

// startupProgress records that the runtime was checked and returns the step that waited for it, the
// first time: registration, or the first status sync without it.
func (c *Controller) startupProgress() steps {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.startup
	if st.runtimeChecked {
		return 0
	}
	st.runtimeChecked = true
	if c.registrar != nil {
		return stepSet(StepRegister)
	}
	return stepSet(StepStatus)
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
