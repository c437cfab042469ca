package node

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// recoveryResyncs are the delays after a heartbeat recovers at which every Node's status is synced
// again: at once (Controller.recover queues it) and after 1 s and 3 s (Heartbeats.NextResync). The
// node lifecycle controller may mark the Node Unknown just after the first sync (from a Lease it read
// before the renewal), and the Node should not stay Unknown for a status period.
var recoveryResyncs = []time.Duration{0, time.Second, 3 * time.Second}

// recoveryReadWindow is how long after a heartbeat recovers every sync reads the Node from the API
// server whatever the informer says: the API server's watch cache can lag behind etcd after an
// outage (etcd paused), and the lifecycle controller's Ready=Unknown may come seconds later.
const recoveryReadWindow = time.Minute

// Heartbeats tracks whether a process's heartbeats (Lease writes and status patches of all its
// Nodes) fail as a whole: one policy for the single agent and the simulation. A heartbeat that fails
// counts as an outage only when no heartbeat of the process succeeded since the failed one started:
// for one agent that is every failure; for thousands of simulated Nodes, one Lease write that timed
// out on a busy API server while others succeeded is no outage. The first success after an outage
// is a recovery: Succeeded reports it, and NextResync times the resyncs after it.
type Heartbeats struct {
	clock clock.PassiveClock

	mu          sync.Mutex
	lastSuccess time.Time
	outage      bool
	recoveredAt time.Time // the last recovery; zero before
}

func newHeartbeats(clk clock.PassiveClock) *Heartbeats {
	return &Heartbeats{clock: clk, lastSuccess: clk.Now()}
}

// Succeeded records a heartbeat that succeeded and reports whether it ended an outage (a recovery).
func (h *Heartbeats) Succeeded() (recovered bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastSuccess = h.clock.Now()
	recovered = h.outage
	h.outage = false
	if recovered {
		h.recoveredAt = h.lastSuccess
	}
	return recovered
}

// Failed records a heartbeat, started at start, that failed, and reports whether the process is in
// an outage: no heartbeat succeeded since start.
func (h *Heartbeats) Failed(start time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastSuccess.Before(start) {
		h.outage = true
	}
	return h.outage
}

// Outage reports whether the process's heartbeats fail as a whole now.
func (h *Heartbeats) Outage() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.outage
}

// NextResync returns how long after now the next recovery resync is due (1 s and 3 s after the last
// recovery, see recoveryResyncs; the one at 0 s is Controller.recover's own), and false when none is
// left. now is when the asking sync ended: a recovery during that sync is not one more resync.
func (h *Heartbeats) NextResync(now time.Time) (time.Duration, bool) {
	h.mu.Lock()
	at := h.recoveredAt
	h.mu.Unlock()
	if at.IsZero() {
		return 0, false
	}
	for _, d := range recoveryResyncs {
		if t := at.Add(d); d > 0 && t.After(now) {
			return t.Sub(now), true
		}
	}
	return 0, false
}

// heartbeatFailed runs after each failed Lease write or read, or status patch, started at start: in
// an outage (no heartbeat of the process succeeded since, see Heartbeats) the connection, and so the
// informer's watch, may be gone, so the cache is stale. One failure among many successes says
// nothing of it.
func (c *Controller) heartbeatFailed(reason string, start time.Time) {
	c.mu.Lock()
	s := c.queue
	c.mu.Unlock()
	if s == nil || s.outage.heartbeats.Failed(start) {
		c.cache.MarkStale(reason)
	}
}

// heartbeatSucceeded runs after each successful Lease write or status patch; one that ends the
// process's outage recovers every Node (Queue.recovered).
func (c *Controller) heartbeatSucceeded() {
	c.mu.Lock()
	s := c.queue
	c.mu.Unlock()
	if s != nil && s.outage.heartbeats.Succeeded() {
		s.recovered()
	}
}

// recover runs on every Node when the process's heartbeats succeed again after an outage: read the
// Node from the API server for recoveryReadWindow and sync the status at once (and, from the status
// step's own delay, after 1 s and 3 s), so that a Node the lifecycle controller marked Unknown during
// the outage is Ready again within a round trip instead of one status period.
func (c *Controller) recover() {
	c.cache.MarkStaleUntil("heartbeat recovered after failures", c.deps.Clock.Now().Add(recoveryReadWindow))
	c.add(StepStatus)
}

// closeAllConns is the repeated heartbeat failure hook: the queue closes the connections when
// the process's heartbeats fail as a whole.
func (c *Controller) closeAllConns() {
	c.mu.Lock()
	s := c.queue
	c.mu.Unlock()
	if s != nil {
		s.outage.closeAllConns()
	}
}

// outagePolicy is what a process does about its heartbeats as a whole, for all its Nodes alike: it
// tracks them (Heartbeats) and closes every API connection (QueueConfig.CloseAllConns, the kubelet's
// closeAllConns) on a Node's repeated heartbeat failure only while they fail as a whole, at most once
// per closeAllConnsMinInterval. Recovery (every Node re-syncs) is the Queue's, which knows the Nodes.
type outagePolicy struct {
	heartbeats *Heartbeats
	clock      clock.PassiveClock
	closeAll   func() // nil: nothing to close

	mu        sync.Mutex
	lastClose time.Time
}

func newOutagePolicy(clk clock.PassiveClock, closeAll func()) *outagePolicy {
	return &outagePolicy{heartbeats: newHeartbeats(clk), clock: clk, closeAll: closeAll}
}

// closeAllConns closes every API connection when the process's heartbeats fail as a whole, at most
// once per closeAllConnsMinInterval.
func (o *outagePolicy) closeAllConns() {
	if o.closeAll == nil || !o.heartbeats.Outage() {
		return
	}
	o.mu.Lock()
	now := o.clock.Now()
	if !o.lastClose.IsZero() && now.Sub(o.lastClose) < closeAllConnsMinInterval {
		o.mu.Unlock()
		return
	}
	o.lastClose = now
	o.mu.Unlock()
	o.closeAll()
}

// duplicate runs when another agent, other, renewed this Node's Lease after this process started and
// within its duration: two agents were started with one node name and overwrite each other's Lease
// and status. It records a Warning Event once per other agent; Status().Problems and the /readyz
// check say it while it lasts.
func (c *Controller) duplicate(other string) {
	c.seen.mu.Lock()
	seen := c.seen.duplicates[other]
	if c.seen.duplicates == nil {
		c.seen.duplicates = map[string]bool{}
	}
	c.seen.duplicates[other] = true
	c.seen.mu.Unlock()
	if !seen {
		c.recordEvent(v1.EventTypeWarning, "DuplicateNodeAgent", fmt.Sprintf(
			"Another agent (%s) renews the Lease of node %s: two agents run with one node name and overwrite each other's Lease and status", other, c.cfg.NodeName))
	}
}
