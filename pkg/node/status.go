package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/registration"
	"github.com/nodeagent/nodeagent/pkg/statussync"
)

// Status is what one Controller knows about its Node and its own loops: the JSON of
// GET /debug/nodestatus (one element of "nodes"). Times are RFC 3339, durations nanoseconds.
type Status struct {
	// Node is the Node's name.
	Node string `json:"node"`
	// Ready is the Ready condition as last posted (nil before the first successful sync).
	Ready *v1.NodeCondition `json:"ready,omitempty"`
	// Conditions are all conditions as last posted.
	Conditions []v1.NodeCondition `json:"conditions,omitempty"`
	// Problems say, in a sentence each, why the Node is not Ready or the agent is not healthy; empty
	// when all is well.
	Problems []string `json:"problems,omitempty"`
	// Setters are the setter list's last runs, in order.
	Setters []nodestatus.SetterStats `json:"setters"`
	// Runtime is runtimeState.
	Runtime RuntimeStatus `json:"runtime"`
	// LastSync is the last status sync; LastSuccessfulSync when one last succeeded.
	LastSync           *statussync.SyncResult `json:"lastSync,omitempty"`
	LastSuccessfulSync time.Time              `json:"lastSuccessfulSync,omitzero"`
	// LastPatch is the last sync that sent a PATCH (successful or not).
	LastPatch *statussync.SyncResult `json:"lastPatch,omitempty"`
	// Lease is the Lease renewer's status; LeaseAge the time since the last renewal.
	Lease    lease.Status  `json:"lease"`
	LeaseAge time.Duration `json:"leaseAge,omitempty"`
	// Registered says whether the Node is registered now; Registration what registration did.
	Registered   bool                 `json:"registered"`
	Registration *registration.Status `json:"registration,omitempty"`
	// NodeCache says whether the informer cache is trusted for this Node and, if not, why.
	NodeCache NodeCacheStatus `json:"nodeCache"`
	// StartedAt is when the Controller was built; FirstReadyAt when a sync first found the Node Ready.
	StartedAt    time.Time `json:"startedAt"`
	FirstReadyAt time.Time `json:"firstReadyAt,omitzero"`
}

// RuntimeStatus is runtimeState as the Ready setter reads it.
type RuntimeStatus struct {
	RuntimeError    string               `json:"runtimeError,omitempty"`
	NetworkError    string               `json:"networkError,omitempty"`
	StorageError    string               `json:"storageError,omitempty"`
	LastRuntimeSync time.Time            `json:"lastRuntimeSync,omitzero"`
	Age             time.Duration        `json:"age,omitempty"`
	Handlers        []criruntime.Handler `json:"handlers,omitempty"`
	Features        *criruntime.Features `json:"features,omitempty"`
}

// NodeCacheStatus says whether the Node informer's cache is current for this Node.
type NodeCacheStatus struct {
	Current bool                 `json:"current"`
	Stale   *nodecache.Staleness `json:"stale,omitempty"`
}

// Status returns a snapshot of the Node's status and the Controller's loops, with Problems filled.
func (c *Controller) Status() Status {
	now := c.deps.Clock.Now()
	st := Status{
		Node:       c.cfg.NodeName,
		Setters:    c.funcs.Stats(),
		LastSync:   c.syncer.LastResult(),
		Lease:      c.renewer.Status(),
		Registered: c.registered.Load(),
		StartedAt:  c.started,
	}
	st.LastSuccessfulSync = c.syncer.LastSync()
	if !st.Lease.LastRenew.IsZero() {
		st.LeaseAge = now.Sub(st.Lease.LastRenew)
	}
	if c.registrar != nil {
		r := c.registrar.Status()
		st.Registration = &r
	}
	st.NodeCache.Stale = c.cache.Stale()
	st.NodeCache.Current = st.NodeCache.Stale == nil
	rs := c.runtimeState
	st.Runtime = RuntimeStatus{
		RuntimeError: errString(rs.RuntimeErrors()), NetworkError: errString(rs.NetworkErrors()),
		StorageError: errString(rs.StorageErrors()), LastRuntimeSync: rs.LastRuntimeSync(),
		Handlers: rs.RuntimeHandlers(), Features: rs.RuntimeFeatures(),
	}
	if !st.Runtime.LastRuntimeSync.IsZero() {
		st.Runtime.Age = now.Sub(st.Runtime.LastRuntimeSync)
	}
	c.seen.mu.Lock()
	if c.seen.posted != nil {
		st.Conditions = slices.Clone(c.seen.posted.conditions)
		for i := range st.Conditions {
			if st.Conditions[i].Type == v1.NodeReady {
				st.Ready = &st.Conditions[i]
			}
		}
	}
	st.FirstReadyAt = c.seen.firstReady
	st.LastPatch = c.seen.lastPatch
	c.seen.mu.Unlock()
	st.Problems = c.problems(now, st)
	return st
}

// problems explains, one sentence each, what keeps the Node from being Ready or the agent from being
// healthy: registration, the runtime, the network, failing setters, failing syncs, a stale Lease.
func (c *Controller) problems(now time.Time, st Status) []string {
	var out []string
	if !st.Registered {
		msg := "node not registered yet"
		if st.Registration != nil && st.Registration.LastError != "" {
			msg = fmt.Sprintf("node not registered after %d attempts: %s", st.Registration.Attempts, st.Registration.LastError)
		}
		out = append(out, msg)
	}
	if st.Runtime.RuntimeError != "" {
		out = append(out, "runtime: "+st.Runtime.RuntimeError)
	}
	if st.Runtime.NetworkError != "" {
		out = append(out, "network: "+st.Runtime.NetworkError)
	}
	if st.Runtime.StorageError != "" {
		out = append(out, "storage: "+st.Runtime.StorageError)
	}
	for _, s := range st.Setters {
		if s.LastError != "" {
			out = append(out, fmt.Sprintf("setter %s failed: %s", s.Name, s.LastError))
		}
	}
	if st.Ready != nil && st.Ready.Status != v1.ConditionTrue && st.Runtime.RuntimeError == "" && st.Runtime.NetworkError == "" {
		out = append(out, fmt.Sprintf("Ready=%s as last posted: %s: %s", st.Ready.Status, st.Ready.Reason, st.Ready.Message))
	}
	if err := c.Healthy(); err != nil {
		out = append(out, err.Error())
	}
	if err := c.Late(); err != nil {
		out = append(out, err.Error())
	}
	if st.LastSync != nil && st.LastSync.Result == statussync.ResultError {
		out = append(out, fmt.Sprintf("last status sync failed %s ago: %s", now.Sub(st.LastSync.Time).Round(time.Second), st.LastSync.Error))
	}
	if err := c.duplicateRecently(now, st.Lease); err != nil {
		out = append(out, err.Error())
	}
	if st.Lease.LastError != "" && st.Lease.ErrorTime.After(st.Lease.LastRenew) {
		out = append(out, fmt.Sprintf("lease renewal failing (%d errors): %s", st.Lease.Errors, st.Lease.LastError))
	}
	return out
}

// Late fails when the last successful status sync or Lease renewal is older than three of its
// periods (counted from start before the first one): 30 s each with the defaults. It says the Node's
// heartbeats are late (the API server does not answer, or refuses), which /debug/nodestatus and
// `nodeagent status` report; it is not a health check (see Healthy).
func (c *Controller) Late() error {
	now := c.deps.Clock.Now()
	var problems []string
	if bound, last := 3*c.cfg.NodeStatusUpdateFrequency, orStart(c.syncer.LastSync(), c.started); now.Sub(last) > bound {
		problems = append(problems, fmt.Sprintf("last node status sync %s ago, bound %s", now.Sub(last).Round(time.Second), bound))
	}
	if bound, last := 3*c.renewer.RenewInterval(), orStart(c.renewer.LastRenew(), c.started); now.Sub(last) > bound {
		problems = append(problems, fmt.Sprintf("last lease renewal %s ago, bound %s", now.Sub(last).Round(time.Second), bound))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Healthy reports whether this Node's loops are alive: its queue's workers serve their queues
// (Queue.Alive) and each of its periodic steps (Lease, runtime poll, status, or registration
// while the Node is not registered) finished a run, with whatever result, within three of its
// periods plus the step timeout. It fails on a stuck loop, never
// because the API server or the runtime fails: a step that fails or waits in backoff has run. It is
// the syncloop health check and the systemd watchdog's test, as the kubelet's syncloop check tests
// its sync loop's iterations. Before Start it is nil.
func (c *Controller) Healthy() error {
	c.mu.Lock()
	s, stopped, ends, start := c.queue, c.stopped, c.lastEnd, c.started
	c.mu.Unlock()
	var lastEnd [numSteps]time.Time
	for i, n := range ends {
		if n != 0 {
			lastEnd[i] = time.Unix(0, n)
		}
	}
	if s == nil || stopped {
		return nil
	}
	var errs []error
	if err := s.Alive(); err != nil {
		errs = append(errs, err)
	}
	now := c.deps.Clock.Now()
	periods := map[Step]time.Duration{
		StepLease: c.renewer.RenewInterval(), StepRuntime: c.cfg.RuntimePollPeriod, StepStatus: c.cfg.NodeStatusUpdateFrequency,
	}
	// While the Node is not registered, registration attempts are the status loop's runs.
	if lastEnd[StepRegister].After(lastEnd[StepStatus]) {
		lastEnd[StepStatus] = lastEnd[StepRegister]
	}
	for _, step := range []Step{StepLease, StepRuntime, StepStatus} {
		last := orStart(lastEnd[step], start)
		bound := 3*periods[step] + s.cfg.StepTimeout
		if age := now.Sub(last); age > bound {
			errs = append(errs, fmt.Errorf("%s step of node %q has not run for %s (bound %s)", step, c.cfg.NodeName, age.Round(time.Second), bound))
		}
	}
	return errors.Join(errs...)
}

// duplicateRecently says that another agent renewed this Node's Lease within the last lease
// duration (lease.Status.Duplicate); nil otherwise.
func (c *Controller) duplicateRecently(now time.Time, st lease.Status) error {
	if st.Duplicate == "" || now.Sub(st.DuplicateTime) > time.Duration(c.cfg.NodeLeaseDurationSeconds)*time.Second {
		return nil
	}
	return fmt.Errorf("another agent (%s) renews this node's Lease: two agents run with node name %q", st.Duplicate, c.cfg.NodeName)
}

// Registered is /readyz's check: nil once the Node is registered and a status has been posted, and
// no other agent renews its Lease.
func (c *Controller) Registered() error {
	if err := c.duplicateRecently(c.deps.Clock.Now(), c.renewer.Status()); err != nil {
		return err
	}
	if !c.registered.Load() {
		return fmt.Errorf("node %q not registered yet", c.cfg.NodeName)
	}
	if !c.Posted() {
		return fmt.Errorf("node %q status not posted yet", c.cfg.NodeName)
	}
	return nil
}

func orStart(t, start time.Time) time.Time {
	if t.IsZero() {
		return start
	}
	return t
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
