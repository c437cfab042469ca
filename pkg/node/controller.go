// Package node is the per-node controller: everything that keeps one Node object true, composed
// from explicit dependencies. A Controller owns, for one Node, the runtime-health poller and its
// runtimeState, the ordered setter list (DefaultNodeStatusFuncs), registration, the status syncer,
// the fast start-up update and the Lease renewer. The host (capacity, node info, pressure) and the
// container runtime behind the setters are interfaces, so the single agent runs one Controller over
// the real machine and containerd, and the simulation runs N over templates and CRI fakes, on the
// very same code path.
//
// A Controller's loops are steps (see Step) that one Scheduler per process runs for every Node on a
// shared work queue: the single agent is the same code with one Node, and the simulation runs
// thousands without a goroutine or timer per Node.
//
//	deps := node.Dependencies{Client: c, HeartbeatClient: hb, NodeLister: l, Cache: t, Recorder: r, Clock: clk}
//	ctrl, err := node.New(node.Config{NodeName: "n1", Host: h, Runtime: rt, ...}, deps)
//	err = ctrl.Run(ctx) // or: sched.Start(ctrl) on a shared Scheduler
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/registration"
	"github.com/nodeagent/nodeagent/pkg/statussync"
)

// MaxWaitForContainerRuntime is the kubelet's threshold after which the runtime counts as down (30 s).
const MaxWaitForContainerRuntime = 30 * time.Second

// StatusCallTimeout bounds every CRI call made on the status path (setters, fast start-up update,
// the poller's Status), so a runtime that hangs delays a sync by seconds, never minutes.
const StatusCallTimeout = 5 * time.Second

// Host is the machine behind one Node: what the MachineInfo, VersionInfo, NodeAddress and pressure
// setters read. The real one is cadvisor plus the eviction manager; a simulated one is a template.
type Host interface {
	// MachineInfo returns cadvisor's machine info (cpu, memory, hugepages, IDs), cached once read.
	MachineInfo() (*cadvisorapi.MachineInfo, error)
	// EphemeralStorageCapacity returns the capacity of the nodefs (the root dir's filesystem), in bytes.
	EphemeralStorageCapacity() (resource.Quantity, error)
	// KernelVersion and OSImage are nodeInfo.kernelVersion and osImage.
	KernelVersion() string
	OSImage() string
	// ValidateNodeIP, LookupIP and ResolveAddress serve the NodeAddress setter (nodestatus.ValidateNodeIP,
	// net.LookupIP and utilnet.ResolveBindAddress on a real machine).
	ValidateNodeIP(ip net.IP) error
	LookupIP(host string) ([]net.IP, error)
	ResolveAddress(ip net.IP) (net.IP, error)
	// IsUnderMemoryPressure, IsUnderDiskPressure and IsUnderPIDPressure are the eviction manager's answers.
	IsUnderMemoryPressure() bool
	IsUnderDiskPressure() bool
	IsUnderPIDPressure() bool
	// RunningInUserNamespace is nodeInfo.runningInUserNamespace: whether the agent runs in a user
	// namespace (the kubelet's runningInUserNS); nil leaves the field unset.
	RunningInUserNamespace() *bool
}

// Runtime is the container runtime behind one Node, as the setters and the runtime poll call it
// (CRI Status, Version, ListImages, ImageFsInfo): criruntime.Client over containerd on a real
// machine, an in-memory one in the simulation. Each method must honour ctx (the controller bounds
// every call by StatusCallTimeout) and be safe for concurrent use.
type Runtime = criruntime.Runtime

// Observer is told what the Controller's loops do (metrics.Metrics implements it). Optional.
type Observer interface {
	criruntime.Observer
	lease.Observer
	// ObserveSync is called after each status sync.
	ObserveSync(nodeName string, r statussync.SyncResult)
	// ObserveRegistrationAttempt is called after each registration attempt: created, existing or error.
	ObserveRegistrationAttempt(result string)
}

// Config is one Node's completed configuration: parsed, validated, defaulted.
type Config struct {
	// NodeName is the Node's name; Hostname its kubernetes.io/hostname label and Hostname address.
	NodeName, Hostname string
	// RegisterNode registers the Node (--register-node); Labels, Taints, Unschedulable, ProviderID and
	// ExternalCloudProvider shape the registered Node (see registration.Config).
	RegisterNode          bool
	Labels                map[string]string
	Taints                []v1.Taint
	Unschedulable         bool
	ExternalCloudProvider bool
	ProviderID            string
	// NodeIPs are --node-ip's addresses (at most one per family).
	NodeIPs []net.IP
	// MaxPods is the pods capacity.
	MaxPods int
	// Reservation returns what is subtracted from capacity for allocatable (system-reserved +
	// kube-reserved + hard eviction thresholds); nil reserves nothing.
	Reservation func(capacity v1.ResourceList) v1.ResourceList
	// NodeStatusUpdateFrequency, NodeStatusReportFrequency and NodeLeaseDurationSeconds are the
	// kubelet's; NodeStatusMaxImages caps status.images (-1: no cap).
	NodeStatusUpdateFrequency, NodeStatusReportFrequency time.Duration
	NodeLeaseDurationSeconds                             int32
	NodeStatusMaxImages                                  int32
	// RuntimeEndpoint names the runtime before it first answers ("containerd" for .../containerd.sock).
	RuntimeEndpoint string
	// AgentVersion is nodeInfo.kubeletVersion.
	AgentVersion string
	// ExtraFuncs run after the kubelet's setters, in order (e.g. problem monitors).
	ExtraFuncs []nodestatus.Func
	// RuntimePollPeriod is how often CRI Status is called (5 s when 0).
	RuntimePollPeriod time.Duration

	// Host and Runtime are this Node's machine and container runtime; required.
	Host    Host
	Runtime Runtime
}

// Dependencies are shared by every Controller of a process: built once.
type Dependencies struct {
	// Client is the rate-limited main client (registration); HeartbeatClient the one for status and
	// Lease (no rate limit, short timeout), as the kubelet's KubeClient and HeartbeatClient.
	Client, HeartbeatClient kubernetes.Interface
	// NodeLister is the shared Node informer's lister; Cache says when it can be trusted.
	NodeLister corelisters.NodeLister
	Cache      *nodecache.Tracker
	// Recorder records Events (on the Node).
	Recorder record.EventRecorder
	// Clock is the clock of every loop.
	Clock clock.WithTicker
	// Scheduler runs the Controller's steps, shared by every Controller of the process; nil: Run
	// makes one of its own (the library's single Node). It also decides, for all its Nodes alike,
	// when heartbeat failures are an outage (Heartbeats) and closes the API connections then.
	Scheduler *Scheduler
	// Observer is told what the loops do; nil for none.
	Observer Observer
	// Instance identifies this process on the Leases it writes (lease.AnnotationInstance), so that
	// two agents started with one node name find each other (ProcessInstance); empty: not checked.
	Instance string
	// CloseAllConns, if set, closes every API connection (the kubelet's closeAllConns, its
	// OnHeartbeatFailure), which also resets the informer's watch; used by the Scheduler that Run
	// makes when Scheduler is nil (a shared Scheduler has its own, SchedulerConfig.CloseAllConns).
	CloseAllConns func()
	// Serving, if set, is the process's one probe of the API server (lease.NewServingProbe over the
	// heartbeat client): Lease renewal resumes as soon as it serves again after an outage.
	Serving *lease.ServingProbe
}

// StartupWait bounds the start-up waits taken together (the first runtime check, the first Lease
// write), counted from Start: StatusCallTimeout + 1 s.
const StartupWait = StatusCallTimeout + time.Second

// Controller keeps one Node true. Build with New; run with Run, or Start it on a shared Scheduler.
// Ready is closed once the Node is registered and its status posted, Done once it has stopped.
type Controller struct {
	cfg  Config
	deps Dependencies

	runtimeState *criruntime.State
	poller       *criruntime.Poller
	funcs        *nodestatus.Funcs
	registrar    *registration.Registrar // nil with RegisterNode false
	syncer       *statussync.Syncer
	renewer      *lease.Renewer
	cache        *nodecache.Node
	started      time.Time

	mu         sync.Mutex
	sched      *Scheduler
	state      nodeState
	firstReady time.Time // when a sync first found the Node Ready
	// posted is what the last successful sync left on the Node: its UID and conditions (not the
	// whole Node, which the informer holds already); nil before.
	posted    *postedNode
	lastPatch *statussync.SyncResult

	logger    *klog.Logger // the workers' logger with the node's name, made at the first step
	ready     chan struct{}
	readyOnce sync.Once
	done      chan struct{}
}

// nodeState is one Node's start-up order and step bookkeeping, guarded by Controller.mu. The steps
// read it; nothing else orders them. The start-up order, as the kubelet's:
//   - the Lease step and the runtime poll run at once;
//   - the status step builds the Node to register once the runtime was checked (or StartupWait has
//     passed), meanwhile the Lease's first write is in flight, and creates it once that write was
//     attempted (or StartupWait has passed), so that a Node is never Ready without its Lease;
//     with --register-node=false the first sync waits for both;
//   - the fast start-up update starts once both have happened (or StartupWait has passed).
type nodeState struct {
	attachedAt     time.Time // when Start queued the first steps
	leaseAttempted bool      // the Lease's first write succeeded, or a Lease call failed
	runtimeChecked bool      // the runtime poll ran once
	fastStarted    bool
	fastDeadline   time.Time
	pending        *v1.Node // the Node built for registration while the Lease's first write is in flight
	stopped        bool

	due       [numSteps]time.Time // a step popped before its due time waits; zero: due now
	triggered [numSteps]bool      // run when popped, whatever due says
	cancel    [numSteps]context.CancelFunc
	runStart  [numSteps]time.Time
	lastRun   [numSteps]time.Time // when each step last finished
	resyncs   []time.Time         // extra status syncs asked for (heartbeat recovery)
	// duplicates are the other agents seen renewing this Node's Lease.
	duplicates map[string]bool
}

// never is a due time no step reaches: a step that does not want to run again.
var never = time.Unix(1<<62, 0)

// New validates cfg and deps and composes the Controller. It makes no API or CRI call. It errors,
// naming the field, when a required field is missing or a frequency is not positive.
func New(cfg Config, deps Dependencies) (*Controller, error) {
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("node: Config.NodeName is required")
	case cfg.Host == nil || cfg.Runtime == nil:
		return nil, fmt.Errorf("node %q: Config.Host and Config.Runtime are required", cfg.NodeName)
	case deps.Client == nil || deps.HeartbeatClient == nil || deps.NodeLister == nil || deps.Cache == nil || deps.Recorder == nil:
		return nil, fmt.Errorf("node %q: Dependencies need Client, HeartbeatClient, NodeLister, Cache and Recorder", cfg.NodeName)
	}
	if cfg.Hostname == "" {
		cfg.Hostname = cfg.NodeName
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	c := &Controller{
		cfg: cfg, deps: deps,
		cache:   deps.Cache.Node(cfg.NodeName),
		started: deps.Clock.Now(),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.runtimeState = criruntime.NewState(deps.Clock, MaxWaitForContainerRuntime)
	var err error
	pollerCfg := criruntime.PollerConfig{
		Runtime: cfg.Runtime, State: c.runtimeState, Period: cfg.RuntimePollPeriod, Timeout: StatusCallTimeout,
		Clock: deps.Clock, OnChange: func() { c.trigger(StepStatus) },
	}
	if deps.Observer != nil {
		pollerCfg.Observer = deps.Observer
	}
	if c.poller, err = criruntime.NewPoller(pollerCfg); err != nil {
		return nil, err
	}
	if c.cfg.RuntimePollPeriod <= 0 {
		c.cfg.RuntimePollPeriod = 5 * time.Second
	}
	c.funcs = nodestatus.NewFuncs(deps.Clock, append(c.DefaultNodeStatusFuncs(), cfg.ExtraFuncs...)...)

	var register func(context.Context) error
	if cfg.RegisterNode {
		c.registrar, err = registration.New(registration.Config{
			Client: deps.Client, NodeName: cfg.NodeName, Hostname: cfg.Hostname,
			Labels: cfg.Labels, Taints: cfg.Taints, Unschedulable: cfg.Unschedulable,
			ExternalCloudProvider: cfg.ExternalCloudProvider, ProviderID: cfg.ProviderID,
			Funcs: c.funcs, Clock: deps.Clock, OnAttempt: c.observeRegistration,
		})
		if err != nil {
			return nil, err
		}
		register = func(ctx context.Context) error { return c.registrar.TryRegister(ctx, c.registrar.InitialNode(ctx)) }
	}
	c.syncer, err = statussync.New(statussync.Config{
		Client: deps.HeartbeatClient, Lister: deps.NodeLister, Cache: c.cache, NodeName: cfg.NodeName,
		Funcs: c.funcs, Register: register, UpdateRuntimeUp: c.poller.UpdateRuntimeUp,
		UpdateFrequency: cfg.NodeStatusUpdateFrequency, ReportFrequency: cfg.NodeStatusReportFrequency,
		OnRepeatedHeartbeatFailure: c.closeAllConns, OnSync: c.onSync, Clock: deps.Clock,
	})
	if err != nil {
		return nil, err
	}
	c.renewer, err = lease.New(lease.Config{
		Client: deps.HeartbeatClient, Lister: deps.NodeLister, NodeName: cfg.NodeName,
		LeaseDurationSeconds: cfg.NodeLeaseDurationSeconds, OnRepeatedHeartbeatFailure: c.closeAllConns,
		OnHeartbeatFailure: c.heartbeatFailed,
		Observer:           leaseObserver{c},
		Serving:            deps.Serving,
		Wake:               func() { c.trigger(StepLease) },
		Registered:         c.syncer.IsRegistered,
		Instance:           deps.Instance,
		OnDuplicate:        c.duplicate,
		Clock:              deps.Clock,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Name returns the Node's name.
func (c *Controller) Name() string { return c.cfg.NodeName }

// Run runs the Node until ctx ends and returns nil once its steps have stopped; call it once. On the
// Dependencies' Scheduler it starts the Node there; without one it runs a Scheduler of its own with
// the default workers (the library's and the single agent's case). See nodeState for the start-up
// order, which is the kubelet's: a Node whose runtime is ready registers Ready with its Lease already
// there, and one whose runtime is gone or hangs registers NotReady, saying why.
func (c *Controller) Run(ctx context.Context) error {
	if s := c.deps.Scheduler; s != nil {
		if err := s.Start(c); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			c.Stop()
			<-c.Done()
		case <-c.Done():
		}
		return nil
	}
	s, err := NewScheduler(SchedulerConfig{Clock: c.deps.Clock, CloseAllConns: c.deps.CloseAllConns})
	if err != nil {
		return err
	}
	if err := s.Start(c); err != nil {
		return err
	}
	return s.Run(ctx)
}

// Ready returns a channel closed once the Node is registered and a status has been posted.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Done returns a channel closed once the Controller has stopped and none of its steps runs.
func (c *Controller) Done() <-chan struct{} { return c.done }

// Err returns why the Controller stopped: nil (it stops only when told to, by Stop or Run's ctx).
func (c *Controller) Err() error { return nil }

// attach binds c to s; a Controller runs once, on one Scheduler.
func (c *Controller) attach(s *Scheduler) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sched != nil || c.state.stopped {
		return fmt.Errorf("node %q: controller already started", c.cfg.NodeName)
	}
	c.sched = s
	c.state.attachedAt = c.deps.Clock.Now()
	c.started = c.state.attachedAt
	return nil
}

// Stop stops the Node: no step of it starts any more, a running one's context is cancelled, and
// Done is closed once none runs. A stopped Controller is not started again (build a new one).
func (c *Controller) Stop() {
	c.mu.Lock()
	if c.state.stopped {
		c.mu.Unlock()
		return
	}
	c.state.stopped = true
	running := false
	for _, cancel := range c.state.cancel {
		if cancel != nil {
			cancel()
			running = true
		}
	}
	if !running {
		close(c.done)
	}
	s := c.sched
	c.mu.Unlock()
	if s != nil {
		s.remove(c)
	}
}

// trigger asks for step to run now (a runtime change, a problem monitor's change, the control
// endpoint): it is queued at once, and triggers while one is queued coalesce.
func (c *Controller) trigger(step Step) {
	c.mu.Lock()
	s := c.sched
	if s == nil || c.state.stopped {
		c.mu.Unlock()
		return
	}
	c.state.triggered[step] = true
	c.mu.Unlock()
	s.add(c, step)
}

// PollRuntime asks for a runtime-health poll now (the runtime is known to have changed); a change
// it finds triggers a status sync.
func (c *Controller) PollRuntime() { c.trigger(StepRuntime) }

// Trigger asks for a status sync now (e.g. a problem monitor's condition changed).
func (c *Controller) Trigger() { c.trigger(StepStatus) }

// claim decides whether a popped step runs: not when the Node is stopped, nor before its due time
// unless triggered (then wait says how long until it is due). When it runs, it gets a context
// bounded by timeout that Stop cancels.
func (c *Controller) claim(ctx context.Context, step Step, now time.Time, timeout time.Duration) (context.Context, context.CancelFunc, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.state
	if st.stopped {
		return nil, nil, 0, false
	}
	if !st.triggered[step] && now.Before(st.due[step]) {
		if st.due[step] == never {
			return nil, nil, 0, false
		}
		return nil, nil, st.due[step].Sub(now), false
	}
	st.triggered[step] = false
	stepCtx, cancel := context.WithTimeout(ctx, timeout)
	if c.logger == nil { // once: WithValues allocates, and a Node runs thousands of steps
		l := klog.FromContext(ctx).WithValues("node", c.cfg.NodeName)
		c.logger = &l
	}
	stepCtx = klog.NewContext(stepCtx, *c.logger)
	st.cancel[step], st.runStart[step] = cancel, now
	return stepCtx, cancel, 0, true
}

// release records the end of a step that wants to run again after `after` (never when negative) and
// reports whether, and after how long, to queue it again; a stopped Node closes Done once none of
// its steps runs.
func (c *Controller) release(step Step, now time.Time, after time.Duration) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.state
	st.cancel[step] = nil
	st.lastRun[step] = now
	if st.stopped {
		for _, cancel := range st.cancel {
			if cancel != nil {
				return 0, false
			}
		}
		select {
		case <-c.done:
		default:
			close(c.done)
		}
		return 0, false
	}
	if after < 0 {
		st.due[step] = never
		return 0, false
	}
	st.due[step] = now.Add(after)
	if step == StepStatus && len(st.resyncs) > 0 {
		start := st.runStart[step]
		kept := st.resyncs[:0]
		for _, t := range st.resyncs {
			if t.After(start) {
				kept = append(kept, t)
			}
		}
		st.resyncs = kept
		if len(kept) > 0 && kept[0].Before(st.due[step]) {
			st.due[step] = kept[0]
			after = max(kept[0].Sub(now), 0)
		}
	}
	return after, true
}

// runStep runs one round of step and returns when it wants to run next (negative: never), or an
// error for the scheduler's backoff (100 ms doubling to 7 s: failed registration attempts).
func (c *Controller) runStep(ctx context.Context, step Step) (time.Duration, error) {
	switch step {
	case StepLease:
		next := c.renewer.Step(ctx)
		if c.renewer.Attempted() {
			c.startupProgress(func(st *nodeState) bool { was := st.leaseAttempted; st.leaseAttempted = true; return !was })
		}
		return next, nil
	case StepRuntime:
		c.poller.UpdateRuntimeUp(ctx)
		if ctx.Err() == nil {
			c.startupProgress(func(st *nodeState) bool { was := st.runtimeChecked; st.runtimeChecked = true; return !was })
		}
		return c.cfg.RuntimePollPeriod, nil
	case StepStatus:
		return c.statusStep(ctx)
	case StepFastUpdate:
		return c.fastUpdateStep(ctx), nil
	}
	return -1, fmt.Errorf("node: unknown step %d", step)
}

// startupProgress applies change to the start-up state and, when it changed, wakes the steps that
// wait on it: the status step, and the fast start-up update once both waits are over.
func (c *Controller) startupProgress(change func(*nodeState) bool) {
	c.mu.Lock()
	changed := change(&c.state)
	c.mu.Unlock()
	if changed {
		c.trigger(StepStatus)
		c.maybeStartFastUpdate()
	}
}

// startupGates says whether the runtime was checked and the Lease's first write attempted, each
// counting as done once StartupWait has passed since Start; it returns the time left until then.
func (c *Controller) startupGates(now time.Time) (runtimeOK, leaseOK bool, left time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	left = c.state.attachedAt.Add(StartupWait).Sub(now)
	return c.state.runtimeChecked || left <= 0, c.state.leaseAttempted || left <= 0, left
}

// maybeStartFastUpdate starts the fast start-up update once, when both start-up waits are over.
func (c *Controller) maybeStartFastUpdate() {
	now := c.deps.Clock.Now()
	runtimeOK, leaseOK, _ := c.startupGates(now)
	if !runtimeOK || !leaseOK {
		return
	}
	c.mu.Lock()
	if c.state.fastStarted {
		c.mu.Unlock()
		return
	}
	c.state.fastStarted = true
	c.state.fastDeadline = now.Add(statussync.FastStatusUpdateGrace)
	c.mu.Unlock()
	c.trigger(StepFastUpdate)
}

// statusStep is one run of the status step: wait for the start-up order, register (one attempt),
// then one status sync (syncNodeStatus, up to 5 tries). It returns the next sync's delay, the status
// update frequency with 0.04 jitter, or a registration error for the backoff.
func (c *Controller) statusStep(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	runtimeOK, leaseOK, left := c.startupGates(c.deps.Clock.Now())
	if !runtimeOK || (c.registrar == nil && !leaseOK) {
		return left, nil // the runtime poll or the Lease step triggers this step as soon as it can go on
	}
	c.maybeStartFastUpdate()
	if c.registrar != nil && !c.syncer.IsRegistered() {
		c.mu.Lock()
		node := c.state.pending
		c.state.pending = nil
		c.mu.Unlock()
		if node == nil {
			node = c.registrar.InitialNode(ctx)
		}
		if !leaseOK {
			// Built while the Lease's first write is in flight; created once it was attempted.
			c.mu.Lock()
			c.state.pending = node
			c.mu.Unlock()
			return left, nil
		}
		logger.Info("Attempting to register node", "node", klog.KObj(node))
		if err := c.registrar.TryRegister(ctx, node); err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Unable to register node with API server", "node", klog.KObj(node))
			}
			return 0, err
		}
		logger.Info("Successfully registered node", "node", klog.KObj(node))
		c.syncer.SetRegistered()
	}
	r := c.syncer.SyncNodeStatus(ctx)
	if r.Err != nil && !c.syncer.IsRegistered() {
		return 0, r.Err // the Node was deleted and could not be registered again: back off
	}
	return wait.Jitter(c.cfg.NodeStatusUpdateFrequency, 0.04), nil
}

// fastUpdateStep is one tick of the fast start-up update; it returns the next tick's delay, or -1
// once the fast path is finished.
func (c *Controller) fastUpdateStep(ctx context.Context) time.Duration {
	c.mu.Lock()
	started, deadline := c.state.fastStarted, c.state.fastDeadline
	c.mu.Unlock()
	if !started {
		return -1
	}
	if c.syncer.FastNodeStatusUpdate(ctx, !c.deps.Clock.Now().Before(deadline)) {
		if ctx.Err() == nil {
			// From now on a runtime that is not ready is news: log it at the default level (the
			// kubelet's containerRuntimeReadyExpected).
			c.poller.SetReadyExpected()
		}
		return -1
	}
	return statussync.FastStatusUpdateTick
}

// recoveryResyncs are the delays after a heartbeat recovers at which the status is synced again:
// the node lifecycle controller may mark the Node Unknown just after the first sync (from a Lease it
// read before the renewal), and the Node should not stay Unknown for a status period.
var recoveryResyncs = []time.Duration{0, time.Second, 3 * time.Second}

// recoveryReadWindow is how long after a heartbeat recovers every sync reads the Node from the API
// server whatever the informer says: the API server's watch cache can lag behind etcd after an
// outage (etcd paused), and the lifecycle controller's Ready=Unknown may come seconds later.
const recoveryReadWindow = time.Minute

// heartbeatFailed runs after each failed Lease write or read, started at start: in an outage (no
// heartbeat of the process succeeded since, see Heartbeats) the connection, and so the informer's
// watch, may be gone, so the cache is stale. One failure among many successes says nothing of it.
func (c *Controller) heartbeatFailed(reason string, start time.Time) {
	c.mu.Lock()
	s := c.sched
	c.mu.Unlock()
	if s == nil || s.heartbeats.Failed(start) {
		c.cache.MarkStale(reason)
	}
}

// recover runs on every Node when the process's heartbeats succeed again after an outage: read the
// Node from the API server for recoveryReadWindow and sync the status at once and after 1 s and 3 s,
// so that a Node the lifecycle controller marked Unknown during the outage is Ready again within a
// round trip instead of one status period.
func (c *Controller) recover() {
	now := c.deps.Clock.Now()
	c.cache.MarkStaleUntil("heartbeat recovered after failures", now.Add(recoveryReadWindow))
	c.mu.Lock()
	s := c.sched
	if s == nil || c.state.stopped {
		c.mu.Unlock()
		return
	}
	for _, d := range recoveryResyncs {
		t := now.Add(d)
		c.state.resyncs = append(c.state.resyncs, t)
		if t.Before(c.state.due[StepStatus]) {
			c.state.due[StepStatus] = t
		}
	}
	c.mu.Unlock()
	for _, d := range recoveryResyncs {
		s.addAfter(c, StepStatus, d)
	}
}

// duplicate runs when another agent, other, renewed this Node's Lease within its duration: two
// agents were started with one node name and overwrite each other's Lease and status. It records a
// Warning Event once per other agent; Status().Problems and the /readyz check say it while it lasts.
func (c *Controller) duplicate(other string) {
	c.mu.Lock()
	seen := c.state.duplicates[other]
	if c.state.duplicates == nil {
		c.state.duplicates = map[string]bool{}
	}
	c.state.duplicates[other] = true
	c.mu.Unlock()
	if !seen {
		c.recordEvent(v1.EventTypeWarning, "DuplicateNodeAgent", fmt.Sprintf(
			"Another agent (%s) renews the Lease of node %s: two agents run with one node name and overwrite each other's Lease and status", other, c.cfg.NodeName))
	}
}

// ProcessInstance returns an identity of this process for Dependencies.Instance: host name, PID and
// start time, e.g. "host-1_4242_1732480000123456789".
func ProcessInstance() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s_%d_%d", host, os.Getpid(), processStart.UnixNano())
}

var processStart = clock.RealClock{}.Now()

// closeAllConns is the repeated heartbeat failure hook: the scheduler closes the connections when
// the process's heartbeats fail as a whole.
func (c *Controller) closeAllConns() {
	c.mu.Lock()
	s := c.sched
	c.mu.Unlock()
	if s != nil {
		s.closeAllConns()
	}
}

// leaseObserver tells the Observer, and the process's heartbeat tracker, about Lease writes.
type leaseObserver struct{ c *Controller }

func (o leaseObserver) ObserveLeaseRenewal(d time.Duration) {
	o.c.heartbeatSucceeded()
	if o.c.deps.Observer != nil {
		o.c.deps.Observer.ObserveLeaseRenewal(d)
	}
}

func (o leaseObserver) ObserveLeaseError(reason string) {
	if o.c.deps.Observer != nil {
		o.c.deps.Observer.ObserveLeaseError(reason)
	}
}

func (c *Controller) heartbeatSucceeded() {
	c.mu.Lock()
	s := c.sched
	c.mu.Unlock()
	if s != nil {
		s.heartbeats.Succeeded()
	}
}

func (c *Controller) observeRegistration(result string) {
	if c.deps.Observer != nil {
		c.deps.Observer.ObserveRegistrationAttempt(result)
	}
}

// onSync records the posted Node, tells the heartbeat tracker and the Observer.
func (c *Controller) onSync(r statussync.SyncResult) {
	c.mu.Lock()
	if r.Patched {
		kept := r
		kept.Node = nil
		c.lastPatch = &kept
	}
	posted := false
	if r.Node != nil {
		// Not copied: r.Node is the informer's copy or an API answer, both read-only to everyone
		// (client-go's rule for informer objects; the syncer copies before it changes a Node), so the
		// conditions are shared with the informer's store most of the time instead of held twice.
		c.posted = &postedNode{uid: r.Node.UID, conditions: r.Node.Status.Conditions}
		posted = true
		if c.firstReady.IsZero() && nodeReady(r.Node) {
			c.firstReady = r.Time
		}
	}
	c.mu.Unlock()
	switch {
	case r.Result == statussync.ResultPatched:
		c.heartbeatSucceeded()
	case r.Err != nil && len(r.Patches) > 0:
		c.heartbeatFailed("node status patch failed: "+r.Error, r.Time.Add(-r.Duration))
	}
	if posted && c.syncer.IsRegistered() {
		c.readyOnce.Do(func() { close(c.ready) })
	}
	if c.deps.Observer != nil {
		c.deps.Observer.ObserveSync(c.cfg.NodeName, r)
	}
}

// recordNodeStatusEvent records "Node <name> status is now: <reason>", as the kubelet's.
func (c *Controller) recordNodeStatusEvent(eventType, reason string) {
	c.deps.Recorder.Eventf(c.EventRef(), eventType, reason, "Node %s status is now: %s", c.cfg.NodeName, reason)
}

func (c *Controller) recordEvent(eventType, reason, message string) {
	c.deps.Recorder.Event(c.EventRef(), eventType, reason, message)
}

// EventRef returns the Node as the involved object of the Events its controller records, as the 1.37
// kubelet's nodeRefWithUID: apiVersion v1, kind Node, the name and, once a sync has seen the Node, its
// UID (none before, e.g. for "Starting"), so `kubectl describe node` finds them by UID. Unlike the
// kubelet, which resolves the UID once, a Node deleted and registered again gets the new UID.
func (c *Controller) EventRef() *v1.ObjectReference {
	ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: c.cfg.NodeName}
	c.mu.Lock()
	if c.posted != nil {
		ref.UID = c.posted.uid
	}
	c.mu.Unlock()
	return ref
}

// IsRegistered reports whether the Node is registered now.
func (c *Controller) IsRegistered() bool { return c.syncer.IsRegistered() }

// LastSync returns when the status was last synced successfully; zero before.
func (c *Controller) LastSync() time.Time { return c.syncer.LastSync() }

// LastLeaseRenew returns when the Lease was last renewed; zero before.
func (c *Controller) LastLeaseRenew() time.Time { return c.renewer.LastRenew() }

// LeaseRenewInterval returns how often the Lease is renewed.
func (c *Controller) LeaseRenewInterval() time.Duration { return c.renewer.RenewInterval() }

// RuntimeState returns the Node's runtimeState.
func (c *Controller) RuntimeState() *criruntime.State { return c.runtimeState }

// Posted reports whether a status has been posted since start: a successful sync, or a Node created at
// registration (whose status came from the setters).
func (c *Controller) Posted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posted != nil
}

// postedNode is what the Controller keeps of the Node a sync posted. Its conditions are read-only
// (they may be the informer's): readers copy them.
type postedNode struct {
	uid        types.UID
	conditions []v1.NodeCondition
}

func nodeReady(n *v1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}
