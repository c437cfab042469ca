// Package node is the per-node controller: everything that keeps one Node object true, composed
// from explicit dependencies. A Controller owns, for one Node, the runtime-health poller and its
// runtimeState, the ordered setter list (DefaultNodeStatusFuncs), registration, the status syncer,
// the fast start-up update and the Lease renewer. The host (capacity, node info, pressure) and the
// container runtime behind the setters are interfaces, so the single agent runs one Controller over
// the real machine and containerd, and the simulation runs N over templates and CRI fakes, on the
// very same code path.
//
// A Controller's loops are steps (see Step) that one Queue per process runs for every Node on a
// shared work queue: the single agent is the same code with one Node, and the simulation runs
// thousands without a goroutine or timer per Node.
//
//	deps := node.Dependencies{Client: c, HeartbeatClient: hb, NodeLister: l, Cache: t, Recorder: r, Clock: clk}
//	ctrl, err := node.New(node.Config{NodeName: "n1", Host: h, Runtime: rt, ...}, deps)
//	err = ctrl.Run(ctx) // or: queue.Start(ctrl) on a shared Queue
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
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
const MaxWaitForContainerRuntime = criruntime.MaxWaitForContainerRuntime

// StatusCallTimeout bounds every CRI call made on the status path (setters, fast start-up update,
// the poller's Status), so a runtime that hangs delays a sync by seconds, never minutes.
const StatusCallTimeout = criruntime.StatusCallTimeout

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

// PodObserver is an optional part of an Observer (metrics.Metrics implements it) for the Nodes that
// run pods: told of each pod status write the API server refused.
type PodObserver interface {
	// ObservePodStatusRefused is called for each refused pod status patch, with the API's status
	// reason (e.g. RequestEntityTooLarge, Invalid, Forbidden).
	ObservePodStatusRefused(reason string)
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
	// KubeletPort is the port the Node's kubelet API listens on (--port, KubeletServer), reported
	// in status.daemonEndpoints.kubeletEndpoint.Port as the kubelet's DaemonEndpoints setter does;
	// 0: none. (Beside the two bools: no padding, see TestControllerSize.)
	KubeletPort int32
	ProviderID  string
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

	// Pods, if set, runs the pods bound to the Node (PodProvider): nodeagent admits them, writes
	// their status and deletes them as the kubelet does (pods.go). nil: the Node runs no pods (the
	// single agent on a host, which reports capacity.pods 0).
	Pods PodProvider
	// FallbackPodCIDR is where pod IPs come from when the Node has no spec.podCIDRs (no nodeipam);
	// zero: such a Node's pods get no IP and are retried until it has one.
	FallbackPodCIDR netip.Prefix
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
	// Queue runs the Controller's steps, shared by every Controller of the process; nil: Run
	// makes one of its own (the library's single Node). It also decides, for all its Nodes alike,
	// when heartbeat failures are an outage (Heartbeats) and closes the API connections then.
	Queue *Queue
	// Observer is told what the loops do; nil for none.
	Observer Observer
	// Instance identifies this process on the Leases it writes (lease.AnnotationInstance), so that
	// two agents started with one node name find each other (ProcessInstance); empty: not checked.
	Instance string
	// CloseAllConns, if set, closes every API connection (the kubelet's closeAllConns, its
	// OnHeartbeatFailure), which also resets the informer's watch; used by the Queue that Run
	// makes when Queue is nil (a shared Queue has its own, QueueConfig.CloseAllConns).
	CloseAllConns func()
	// Serving, if set, is the process's one probe of the API server (lease.NewServingProbe over the
	// heartbeat client): Lease renewal resumes as soon as it serves again after an outage.
	Serving *lease.ServingProbe
	// Pods reads the process's pod informer (IndexedPodLister); required when a Config has Pods. The
	// informer's events reach the Controllers through Queue.PodEventHandler.
	Pods PodLister
	// PodClient patches pod status and deletes pods (a client with a rate limit of its own, as
	// apiclient.Set.Pods); nil: Client.
	PodClient kubernetes.Interface
	// PodMetadataClient, if set, sends the pod status patches instead of PodClient and reads each
	// answer as the pod's metadata only (apiclient.Set.PodMetadata: client-go's metadata client, the
	// API server answering PartialObjectMetadata), not the whole pod decoded: the Controller reads only
	// its resourceVersion. Give it PodClient's rate limiter.
	PodMetadataClient metadata.Interface
}

// Controller keeps one Node true. Build with New; run with Run, or Start it on a shared Queue.
// Ready is closed once the Node is registered and its status posted, Done once it has stopped.
//
// Its steps (steps.go) run on the Queue's work queue, which alone decides when each runs: a step
// returns when it wants to run again, or an error for the queue's backoff, and the steps of its Node
// that it unblocked (startup.go has the start-up order). The Controller keeps no schedule.
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
	// started is when New ran, then when Start ran (Controller.mu held to set it): the start-up
	// waits (startup.go) count from it.
	started time.Time
	// registered says whether the Node exists on the API server as far as registration knows: set by
	// the registration step, cleared when a status sync finds the Node deleted; true from the start
	// with RegisterNode false.
	registered atomic.Bool

	// mu guards the Controller's run (stopped, queue, started, cancel, lastEnd, logger) and its
	// start-up (startup). What its syncs saw is nodeSeen's, its pods' podWorkers'.
	mu      sync.Mutex
	stopped bool // next to mu: no padding (see TestControllerSize)
	queue   *Queue
	startup startupState
	// cancel cancels each running step's context (nil when the step is not running); lastEnd is when
	// each step last finished (the clock's Unix nanoseconds; 0: never), for Healthy only.
	cancel  [numSteps]context.CancelFunc
	lastEnd [numSteps]int64

	// seen is what the Node's syncs and Lease renewals saw, with its own lock.
	seen nodeSeen

	// pods are the Node's pod workers when it runs pods (Config.Pods); nil otherwise: a Node without
	// pods (the single agent on a host, a library Node without a PodProvider) pays one nil pointer.
	pods *podWorkers

	logger *klog.Logger // the workers' logger with the node's name, made at the first step
	ready  chan struct{}
	done   chan struct{}
	// The two Onces (12 bytes each) side by side: no padding (see TestControllerSize).
	readyOnce sync.Once
	doneOnce  sync.Once
}

// Validate checks what New needs of a Config without building anything: the Node's name, its Host
// and Runtime, and positive NodeStatusUpdateFrequency, NodeStatusReportFrequency and
// NodeLeaseDurationSeconds. The error names the field and its value.
func (cfg Config) Validate() error {
	switch {
	case cfg.NodeName == "":
		return errors.New("node: Config.NodeName is required")
	case cfg.Host == nil || cfg.Runtime == nil:
		return fmt.Errorf("node %q: Config.Host and Config.Runtime are required", cfg.NodeName)
	case cfg.NodeStatusUpdateFrequency <= 0:
		return fmt.Errorf("node %q: Config.NodeStatusUpdateFrequency %v must be positive", cfg.NodeName, cfg.NodeStatusUpdateFrequency)
	case cfg.NodeStatusReportFrequency <= 0:
		return fmt.Errorf("node %q: Config.NodeStatusReportFrequency %v must be positive", cfg.NodeName, cfg.NodeStatusReportFrequency)
	case cfg.NodeLeaseDurationSeconds <= 0:
		return fmt.Errorf("node %q: Config.NodeLeaseDurationSeconds %d must be positive", cfg.NodeName, cfg.NodeLeaseDurationSeconds)
	case cfg.FallbackPodCIDR.IsValid() && cfg.FallbackPodCIDR != cfg.FallbackPodCIDR.Masked():
		return fmt.Errorf("node %q: Config.FallbackPodCIDR %s is not a network address (want %s)", cfg.NodeName, cfg.FallbackPodCIDR, cfg.FallbackPodCIDR.Masked())
	}
	return nil
}

// Validate checks that the required Dependencies are set: Client, HeartbeatClient, NodeLister,
// Cache and Recorder.
func (deps Dependencies) Validate() error {
	if deps.Client == nil || deps.HeartbeatClient == nil || deps.NodeLister == nil || deps.Cache == nil || deps.Recorder == nil {
		return errors.New("Dependencies need Client, HeartbeatClient, NodeLister, Cache and Recorder")
	}
	return nil
}

// New validates cfg and deps and composes the Controller. It makes no API or CRI call. It errors,
// naming the field, when a required field is missing or a frequency is not positive.
func New(cfg Config, deps Dependencies) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.Validate(); err != nil {
		return nil, fmt.Errorf("node %q: %w", cfg.NodeName, err)
	}
	if cfg.Pods != nil && deps.Pods == nil {
		return nil, fmt.Errorf("node %q: Config.Pods is set but Dependencies.Pods (the pod informer's lister) is not", cfg.NodeName)
	}
	if cfg.Hostname == "" {
		cfg.Hostname = cfg.NodeName
	}
	if cfg.RuntimePollPeriod <= 0 {
		cfg.RuntimePollPeriod = 5 * time.Second
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
	c.registered.Store(!cfg.RegisterNode)
	if cfg.Pods != nil {
		c.pods = &podWorkers{node: c} // its maps made at the first pod
	}
	c.runtimeState = criruntime.NewState(deps.Clock, MaxWaitForContainerRuntime)
	var err error
	pollerCfg := criruntime.PollerConfig{
		Runtime: cfg.Runtime, State: c.runtimeState, Period: cfg.RuntimePollPeriod, Timeout: StatusCallTimeout, Clock: deps.Clock,
	}
	if deps.Observer != nil {
		pollerCfg.Observer = deps.Observer
	}
	if c.poller, err = criruntime.NewPoller(pollerCfg); err != nil {
		return nil, err
	}
	c.funcs = nodestatus.NewFuncs(deps.Clock, append(c.DefaultNodeStatusFuncs(), cfg.ExtraFuncs...)...)
	if cfg.RegisterNode {
		c.registrar, err = registration.New(registration.Config{
			Client: deps.Client, NodeName: cfg.NodeName, Hostname: cfg.Hostname,
			Labels: cfg.Labels, Taints: cfg.Taints, Unschedulable: cfg.Unschedulable,
			ExternalCloudProvider: cfg.ExternalCloudProvider, ProviderID: cfg.ProviderID,
			Funcs: c.funcs, Clock: deps.Clock,
		})
		if err != nil {
			return nil, err
		}
	}
	// Three callbacks, no more: the repeated heartbeat failure hook of the syncer and of the Lease
	// (the kubelet's, between two tries of one sync), and the Lease's Wake (the API server serves
	// again while it waits in backoff). Everything else a step does, it returns.
	c.syncer, err = statussync.New(statussync.Config{
		Client: deps.HeartbeatClient, Lister: deps.NodeLister, Cache: c.cache, NodeName: cfg.NodeName, Funcs: c.funcs,
		UpdateFrequency: cfg.NodeStatusUpdateFrequency, ReportFrequency: cfg.NodeStatusReportFrequency,
		OnRepeatedHeartbeatFailure: c.closeAllConns, Clock: deps.Clock,
	})
	if err != nil {
		return nil, err
	}
	leaseCfg := lease.Config{
		Client: deps.HeartbeatClient, Lister: deps.NodeLister, NodeName: cfg.NodeName,
		LeaseDurationSeconds: cfg.NodeLeaseDurationSeconds, OnRepeatedHeartbeatFailure: c.closeAllConns,
		Serving: deps.Serving, Wake: func() { c.add(StepLease) }, Instance: deps.Instance, Clock: deps.Clock,
	}
	if deps.Observer != nil {
		leaseCfg.Observer = deps.Observer
	}
	if c.renewer, err = lease.New(leaseCfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Name returns the Node's name.
func (c *Controller) Name() string { return c.cfg.NodeName }

// Run runs the Node until ctx ends and returns nil once its steps have stopped; call it once. On the
// Dependencies' Queue it starts the Node there; without one it runs a Queue of its own with
// the default workers (the library's and the single agent's case). It errors when the Controller was
// started before. The start-up order is the kubelet's (startup.go): a Node whose runtime is ready
// registers Ready with its Lease already there, and one whose runtime is gone or hangs registers
// NotReady, saying why.
func (c *Controller) Run(ctx context.Context) error {
	if s := c.deps.Queue; s != nil {
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
	s, err := NewQueue(QueueConfig{Clock: c.deps.Clock, CloseAllConns: c.deps.CloseAllConns})
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

// attach binds c to s; a Controller runs once, on one Queue.
func (c *Controller) attach(s *Queue) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue != nil || c.stopped {
		return fmt.Errorf("node %q: controller already started", c.cfg.NodeName)
	}
	c.queue = s
	c.started = c.deps.Clock.Now()
	return nil
}

// Stop stops the Node: its queued steps become no-ops, a running one's context is cancelled, and
// Done is closed once none runs. A stopped Controller is not started again (build a new one).
func (c *Controller) Stop() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	running := false
	if c.pods != nil {
		running = c.pods.stop()
	}
	for _, cancel := range c.cancel {
		if cancel != nil {
			cancel()
			running = true
		}
	}
	s := c.queue
	c.mu.Unlock()
	if !running {
		c.doneOnce.Do(func() { close(c.done) })
	}
	if s != nil {
		s.remove(c)
	}
}

// add queues step now, unless the Node is not started or stopped; queued twice, it runs once.
func (c *Controller) add(step Step) {
	c.mu.Lock()
	s, stopped := c.queue, c.stopped
	c.mu.Unlock()
	if s != nil && !stopped {
		s.add(c, step)
	}
}

// PollRuntime asks for a runtime-health poll now (the runtime is known to have changed); a change
// it finds queues a status sync.
func (c *Controller) PollRuntime() { c.add(StepRuntime) }

// Trigger asks for a status sync now (e.g. a problem monitor's condition changed).
func (c *Controller) Trigger() { c.add(StepStatus) }

// begin starts a run of step popped from the queue: false when the Node is stopped (the item is a
// no-op). The run's context is bounded by timeout, and Stop cancels it.
func (c *Controller) begin(ctx context.Context, step Step, timeout time.Duration) (context.Context, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, false
	}
	if c.logger == nil { // once: WithValues allocates, and a Node runs thousands of steps
		l := klog.FromContext(ctx).WithValues("node", c.cfg.NodeName)
		c.logger = &l
	}
	stepCtx, cancel := context.WithTimeout(klog.NewContext(ctx, *c.logger), timeout)
	c.cancel[step] = cancel
	return stepCtx, true
}

// end ends a run of step and reports whether the Node has been stopped meanwhile; a stopped Node
// closes Done once none of its steps runs.
func (c *Controller) end(step Step) (stopped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel[step]()
	c.cancel[step] = nil
	c.lastEnd[step] = c.deps.Clock.Now().UnixNano()
	if !c.stopped {
		return false
	}
	c.closeDoneIfIdle()
	return true
}

// closeDoneIfIdle closes Done when no step of the stopped Node runs; c.mu held.
func (c *Controller) closeDoneIfIdle() {
	if c.pods != nil && !c.pods.idle() {
		return
	}
	for _, cancel := range c.cancel {
		if cancel != nil {
			return
		}
	}
	c.doneOnce.Do(func() { close(c.done) })
}

// beginPod starts a sync of pod key: false when the Node is stopped or runs no pods (the item is a
// no-op). Its context ends with the timeout, when the Node stops, or when the pod's deletion arrives
// during a SyncPod; end ends it.
func (c *Controller) beginPod(ctx context.Context, key string, timeout time.Duration) (context.Context, func(), bool) {
	if c.pods == nil {
		return nil, nil, false
	}
	return c.pods.begin(ctx, c.cfg.NodeName, key, timeout)
}

// endPod reports, after a pod sync ended, whether the Node has been stopped meanwhile; a stopped
// Node closes Done once none of its steps and syncs runs.
func (c *Controller) endPod() (stopped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped {
		return false
	}
	c.closeDoneIfIdle()
	return true
}

// ProcessInstance returns an identity of this process for Dependencies.Instance: host name, PID and
// start time, e.g. "host-1_4242_1732480000123456789".
func ProcessInstance() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s_%d_%d", host, os.Getpid(), processStart.UnixNano())
}

var processStart = clock.RealClock{}.Now()

// observeRegistration tells the Observer what a registration attempt did.
func (c *Controller) observeRegistration(result registration.Result) {
	if c.deps.Observer != nil {
		c.deps.Observer.ObserveRegistrationAttempt(string(result))
	}
}

// observeSync records a finished sync (r.Time set; a sync cut short by the context's end posted
// nothing and is not reported): the posted Node, the heartbeat tracker, the Observer, Ready.
func (c *Controller) observeSync(r statussync.SyncResult) {
	if r.Time.IsZero() {
		return
	}
	c.seen.mu.Lock()
	if r.Patched {
		kept := r
		kept.Node = nil
		c.seen.lastPatch = &kept
	}
	posted := false
	if r.Node != nil {
		// Not copied: r.Node is the informer's copy or an API answer, both read-only to everyone
		// (client-go's rule for informer objects; the syncer copies before it changes a Node), so the
		// conditions are shared with the informer's store most of the time instead of held twice.
		c.seen.posted = &postedNode{uid: r.Node.UID, conditions: r.Node.Status.Conditions}
		posted = true
		if c.seen.firstReady.IsZero() && nodeReady(r.Node) {
			c.seen.firstReady = r.Time
		}
	}
	c.seen.mu.Unlock()
	switch {
	case r.Result == statussync.ResultPatched:
		c.heartbeatSucceeded()
	case r.Err != nil && len(r.Patches) > 0 && !apiRefusal(r.Err):
		c.heartbeatFailed("node status patch failed: "+r.Error, r.Time.Add(-r.Duration))
	}
	if posted && c.registered.Load() {
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
	c.seen.mu.Lock()
	if c.seen.posted != nil {
		ref.UID = c.seen.posted.uid
	}
	c.seen.mu.Unlock()
	return ref
}

// IsRegistered reports whether the Node is registered now (true from the start with RegisterNode
// false; false again while a Node found deleted is registered again).
func (c *Controller) IsRegistered() bool { return c.registered.Load() }

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
	c.seen.mu.Lock()
	defer c.seen.mu.Unlock()
	return c.seen.posted != nil
}

// nodeSeen is what a Controller's syncs and Lease renewals saw of its Node: what the last successful
// sync posted, when the Node was first Ready, and the other agents seen renewing its Lease. Its own lock;
// the steps that see write it, Status, EventRef and Posted read it.
type nodeSeen struct {
	mu sync.Mutex
	// duplicates are the other agents seen renewing this Node's Lease.
	duplicates map[string]bool
	firstReady time.Time // when a sync first found the Node Ready
	// posted is what the last successful sync left on the Node: its UID and conditions (not the
	// whole Node, which the informer holds already); nil before.
	posted    *postedNode
	lastPatch *statussync.SyncResult
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

// apiRefusal reports whether err is the API server's answer that it will not take the request
// (Forbidden, Unauthorized, NotFound, Invalid, Conflict): the API server was reached, so the failure
// says nothing of an outage (Heartbeats), unlike a transport error, a timeout, 429 or 5xx.
func apiRefusal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) ||
		apierrors.IsInvalid(err) || apierrors.IsConflict(err)
}
