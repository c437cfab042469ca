package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/statussync"
)

// Step is one of a Node's steps: each does one round of one of the kubelet's loops and returns what
// happened (a result): when it wants to run again, and which steps of its Node to run now. The
// Queue's work queue runs every Node's steps.
type Step uint8

// A Node's steps.
const (
	// StepLease renews the Node's Lease: one run of the component-helpers lease controller's sync, up
	// to its next backoff sleep (lease.Renewer.Step).
	StepLease Step = iota
	// StepRuntime is the runtime-health poll: one CRI Status call into runtimeState (the kubelet's
	// updateRuntimeUp), every RuntimePollPeriod; a change queues StepStatus.
	StepRuntime
	// StepRegister is one attempt of the kubelet's registerWithAPIServer, after the start-up waits
	// (startup.go), again after a failure (100 ms doubling to 7 s), and when a sync found the Node
	// deleted. It is done once the Node is registered.
	StepRegister
	// StepStatus syncs the registered Node's status (the kubelet's syncNodeStatus with its 5 tries),
	// every NodeStatusUpdateFrequency with 0.04 jitter, and at once when queued by a change.
	StepStatus
	// StepFastUpdate is one tick of the fast start-up update (the kubelet's fastNodeStatusUpdate),
	// every 100 ms from registration until the Node is Ready or 120 s have passed.
	StepFastUpdate
	numSteps
)

var stepNames = [numSteps]string{"lease", "runtime", "register", "status", "fastupdate"}

// String returns the step's name: lease, runtime, register, status or fastupdate.
func (s Step) String() string {
	if s < numSteps {
		return stepNames[s]
	}
	return fmt.Sprintf("step(%d)", uint8(s))
}

// steps is a set of Steps, one bit each.
type steps uint8

func stepSet(s ...Step) steps {
	var set steps
	for _, step := range s {
		set |= 1 << step
	}
	return set
}

func (set steps) has(s Step) bool { return set&(1<<s) != 0 }

// never is a result's after for a step that does not want to run again until queued.
const never time.Duration = -1

// result is what one run of a step did, for the work queue: run it again after `after` (never:
// not until something queues it), or after the queue's backoff when err is set; and queue `wake`,
// other steps of the same Node, now.
type result struct {
	after time.Duration
	err   error
	wake  steps
}

// runStep runs one round of step.
func (c *Controller) runStep(ctx context.Context, step Step) result {
	switch step {
	case StepLease:
		return c.leaseStep(ctx)
	case StepRuntime:
		return c.runtimeStep(ctx)
	case StepRegister:
		return c.registerStep(ctx)
	case StepStatus:
		return c.statusStep(ctx)
	case StepFastUpdate:
		return c.fastUpdateStep(ctx)
	}
	return result{after: never, err: fmt.Errorf("node: unknown step %d", step)}
}

// leaseStep renews the Lease and tells the heartbeat tracker and the duplicate check what it saw.
// A renewal that comes late (after a stall of the process or an API outage, when every Node's
// renewal comes at once) spreads the next one over the renew interval (spreadAfterLate).
func (c *Controller) leaseStep(ctx context.Context) result {
	prev := c.renewer.LastRenew()
	r := c.renewer.Step(ctx, c.registered.Load())
	if r.Renewed {
		r.Next = spreadAfterLate(prev, c.deps.Clock.Now(), c.renewer.RenewInterval(), r.Next)
	}
	if r.Failure != nil {
		c.heartbeatFailed(r.Failure.Reason, r.Failure.Start)
	}
	if r.Renewed {
		c.heartbeatSucceeded()
	}
	if r.Duplicate != "" {
		c.duplicate(r.Duplicate)
	}
	return result{after: r.Next, wake: c.startupProgress(r.Attempted(), false)}
}

// runtimeStep polls the runtime once; a change in its readiness queues a status sync.
func (c *Controller) runtimeStep(ctx context.Context) result {
	changed := c.poller.UpdateRuntimeUp(ctx)
	res := result{after: c.cfg.RuntimePollPeriod}
	if ctx.Err() != nil {
		return res
	}
	if changed {
		res.wake |= stepSet(StepStatus)
	}
	res.wake |= c.startupProgress(false, true)
	return res
}

// registerStep makes one registration attempt once the start-up waits allow it (startup.go). Done,
// it queues the status sync and starts the fast start-up update; failed, it returns the error for
// the queue's backoff.
func (c *Controller) registerStep(ctx context.Context) result {
	if c.registered.Load() {
		return result{after: never}
	}
	logger := klog.FromContext(ctx)
	runtimeOK, leaseOK, left := c.startupWaits(c.deps.Clock.Now())
	if !runtimeOK {
		return result{after: left} // the runtime poll queues this step as soon as it ran
	}
	node := c.nodeToRegister()
	if node == nil {
		node = c.registrar.InitialNode(ctx)
	}
	if !leaseOK {
		c.parkNode(node) // built while the Lease's first write is in flight; created once it was attempted
		return result{after: left}
	}
	logger.Info("Attempting to register node", "node", klog.KObj(node))
	res, err := c.registrar.TryRegister(ctx, node)
	c.observeRegistration(res)
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "Unable to register node with API server", "node", klog.KObj(node))
		}
		return result{after: never, err: err}
	}
	logger.Info("Successfully registered node", "node", klog.KObj(node))
	c.registered.Store(true)
	c.queueAllPods() // bound before the Node's controller started, or while it was stopped
	return result{after: never, wake: stepSet(StepStatus) | c.startFastUpdate(c.deps.Clock.Now())}
}

// statusStep syncs the status of the registered Node (without registration: once the start-up waits
// are over). A Node found deleted queues registration, which queues the status again.
func (c *Controller) statusStep(ctx context.Context) result {
	now := c.deps.Clock.Now()
	if c.registrar != nil {
		if !c.registered.Load() {
			return result{after: never} // registration queues the status once done
		}
	} else if runtimeOK, leaseOK, left := c.startupWaits(now); !runtimeOK || !leaseOK {
		return result{after: left}
	}
	prev := c.syncer.LastSync()
	r := c.syncer.SyncNodeStatus(ctx)
	c.observeSync(r)
	if c.registrar != nil && errors.Is(r.Err, statussync.ErrNodeGone) {
		klog.FromContext(ctx).Info("Node object was deleted; registering it again", "node", c.cfg.NodeName)
		c.registered.Store(false)
		return result{after: never, wake: stepSet(StepRegister)}
	}
	next := wait.Jitter(c.cfg.NodeStatusUpdateFrequency, 0.04)
	if r.Err == nil {
		next = spreadAfterLate(prev, now, c.cfg.NodeStatusUpdateFrequency, next)
	}
	res := result{after: c.nextStatusSync(c.deps.Clock.Now(), next)}
	c.wakeEvictionManager()
	if c.registrar == nil {
		res.wake = c.startFastUpdate(now)
	}
	return res
}

// lateFactor is how late, in periods since the previous success, a Lease renewal or status sync is
// taken for a sign that every Node's came at once: a stall of the process (SIGSTOP, a VM paused) or
// an API outage, after which the delaying queue pops every overdue step in the same instant.
const lateFactor = 1.5

// spreadAfterLate returns next, the step's own delay, unless this success (at now) came more than
// lateFactor periods after the previous one (prev; zero: the first, which is paced by the start):
// then a delay drawn uniformly from (0, period], so that the Nodes' next runs spread over a period
// as at the first start instead of staying bunched (their 4 % jitter takes many minutes to spread
// them). At most one run per Node comes early, once.
func spreadAfterLate(prev, now time.Time, period, next time.Duration) time.Duration {
	if prev.IsZero() || now.Sub(prev) <= time.Duration(lateFactor*float64(period)) {
		return next
	}
	return time.Duration(rand.Int64N(int64(period))) + 1
}

// nextStatusSync returns when the status is synced next: after next (the update frequency with 0.04
// jitter, or spread after a late sync), or sooner when one of the process's recovery resyncs
// (Heartbeats.NextResync) comes first.
func (c *Controller) nextStatusSync(now time.Time, next time.Duration) time.Duration {
	c.mu.Lock()
	s := c.queue
	c.mu.Unlock()
	if s != nil {
		if d, ok := s.outage.heartbeats.NextResync(now); ok && d < next {
			return d
		}
	}
	return next
}

// fastUpdateStep is one tick of the fast start-up update, in the order of the kubelet's
// fastNodeStatusUpdate: give up after its deadline; done once the cached Node is Ready; wait while it
// has no Ready condition; else refresh the runtime (holding no lock) and let the syncer patch once
// Ready is no longer False.
func (c *Controller) fastUpdateStep(ctx context.Context) result {
	deadline := c.fastUpdateDeadline()
	if deadline.IsZero() {
		return result{after: never}
	}
	tick := result{after: statussync.FastStatusUpdateTick}
	done := result{after: never}
	if !c.deps.Clock.Now().Before(deadline) {
		klog.FromContext(ctx).Error(nil, "Node not becoming ready in time after startup")
		c.poller.SetReadyExpected()
		return done
	}
	ready, ok := c.syncer.CachedReady()
	switch {
	case !ok:
		return tick
	case ready:
		c.poller.SetReadyExpected()
		return done
	}
	if c.poller.UpdateRuntimeUp(ctx) {
		tick.wake, done.wake = stepSet(StepStatus), stepSet(StepStatus)
	}
	if ctx.Err() != nil {
		return done
	}
	finished, r := c.syncer.FastNodeStatusUpdate(ctx)
	if r != nil {
		c.observeSync(*r)
	}
	if !finished {
		return tick
	}
	if ctx.Err() == nil {
		// From now on a runtime that is not ready is news: log it at the default level (the
		// kubelet's containerRuntimeReadyExpected).
		c.poller.SetReadyExpected()
	}
	return done
}
