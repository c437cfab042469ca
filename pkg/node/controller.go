// Package node is the per-node controller: everything that keeps one Node object true, composed
// from explicit dependencies. A Controller owns, for one Node, the runtime-health poller and its
// runtimeState, the ordered setter list (DefaultNodeStatusFuncs), registration, the status syncer,
// the fast start-up update and the Lease renewer. The host (capacity, node info, pressure) and the
// container runtime behind the setters are interfaces, so the single agent runs one Controller over
// the real machine and containerd, and the simulation runs N over templates and CRI fakes, on the
// very same code path.
//
//	deps := node.Dependencies{Client: c, HeartbeatClient: hb, NodeLister: l, Cache: t, Recorder: r, Clock: clk}
//	ctrl, err := node.New(node.Config{NodeName: "n1", Host: h, Runtime: rt, ...}, deps)
//	go ctrl.Run(ctx)
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
	// Triggers, if set, asks for a status sync now on each receive (e.g. a problem monitor's
	// condition changed).
	Triggers <-chan struct{}

	// Host and Runtime are this Node's machine and container runtime; required.
	Host    Host
	Runtime criruntime.Runtime
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
	// OnHeartbeatFailure runs on repeated heartbeat failures: close the API connections (the kubelet's
	// OnHeartbeatFailure = closeAllConns), which also resets the informer's watch.
	OnHeartbeatFailure func()
	// Outage, if set, reports whether the process's API connection is failing as a whole (no heartbeat
	// of any Node has succeeded lately). A Node's heartbeat failure then marks its cache stale, and its
	// recovery reads the Node from the API server for a while, only when it is part of an outage: one
	// Lease write that times out while thousands of others succeed (a busy API server, in the simulation)
	// says nothing of the shared informer's watch, and treating it as an outage turned each such failure
	// into a minute of Node GETs (bench-scale at 5000 Nodes: 6 GETs per Node per minute). Nil: every
	// heartbeat failure counts, as for a single agent, whose heartbeats are all its connection's.
	Outage func() bool
	// Observer is told what the loops do; nil for none.
	Observer Observer
	// Serving, if set, is the process's one probe of the API server (lease.NewServingProbe over the
	// heartbeat client): Lease renewal resumes as soon as it serves again after an outage.
	Serving *lease.ServingProbe
}

// Controller keeps one Node true. Build with New, run with Run.
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

	mu          sync.Mutex
	firstReady  time.Time // when a sync first found the Node Ready
	lastPosted  *v1.Node  // the Node as of the last successful sync
	lastPatch   *statussync.SyncResult
	runtimeSeen chan struct{}
	seenOnce    sync.Once
	// heartbeatOutage is set when a heartbeat failure was counted as an outage (see Dependencies.Outage),
	// and cleared by the recovery that follows.
	heartbeatOutage atomic.Bool
	// startupDeadline is closed StatusCallTimeout + 1 s after Run started (or when its ctx ends): the
	// bound of every start-up wait (the first runtime check, the first Lease attempt) taken together.
	startupDeadline chan struct{}
}

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
	if deps.OnHeartbeatFailure == nil {
		deps.OnHeartbeatFailure = func() {}
	}
	c := &Controller{
		cfg: cfg, deps: deps,
		cache:       deps.Cache.Node(cfg.NodeName),
		started:     deps.Clock.Now(),
		runtimeSeen: make(chan struct{}),

		startupDeadline: make(chan struct{}),
	}
	c.runtimeState = criruntime.NewState(deps.Clock, MaxWaitForContainerRuntime)
	var err error
	pollerCfg := criruntime.PollerConfig{
		Runtime: cfg.Runtime, State: c.runtimeState, Period: cfg.RuntimePollPeriod, Timeout: StatusCallTimeout,
		Clock: deps.Clock, OnChange: c.onRuntimeChange,
	}
	if deps.Observer != nil {
		pollerCfg.Observer = deps.Observer
	}
	if c.poller, err = criruntime.NewPoller(pollerCfg); err != nil {
		return nil, err
	}
	c.funcs = nodestatus.NewFuncs(deps.Clock, append(c.DefaultNodeStatusFuncs(), cfg.ExtraFuncs...)...)

	var register func(context.Context) error
	if cfg.RegisterNode {
		c.registrar, err = registration.New(registration.Config{
			Client: deps.Client, NodeName: cfg.NodeName, Hostname: cfg.Hostname,
			Labels: cfg.Labels, Taints: cfg.Taints, Unschedulable: cfg.Unschedulable,
			ExternalCloudProvider: cfg.ExternalCloudProvider, ProviderID: cfg.ProviderID,
			Funcs: c.funcs, Clock: deps.Clock, OnAttempt: c.observeRegistration,
			// The Node is built (setters, CRI calls) while the Lease is being written; only the
			// create waits for it, so that a Node is never Ready without its Lease (issue 13).
			BeforeCreate: func(ctx context.Context) { c.awaitStartup(ctx, c.renewer.FirstAttempt()) },
		})
		if err != nil {
			return nil, err
		}
		register = c.registrar.Register
	}
	c.syncer, err = statussync.New(statussync.Config{
		Client: deps.HeartbeatClient, Lister: deps.NodeLister, Cache: c.cache, NodeName: cfg.NodeName,
		Funcs: c.funcs, Register: register, UpdateRuntimeUp: c.poller.UpdateRuntimeUp,
		UpdateFrequency: cfg.NodeStatusUpdateFrequency, ReportFrequency: cfg.NodeStatusReportFrequency,
		OnRepeatedHeartbeatFailure: deps.OnHeartbeatFailure, OnSync: c.onSync, Clock: deps.Clock,
	})
	if err != nil {
		return nil, err
	}
	leaseCfg := lease.Config{
		Client: deps.HeartbeatClient, Lister: deps.NodeLister, NodeName: cfg.NodeName,
		LeaseDurationSeconds: cfg.NodeLeaseDurationSeconds, OnRepeatedHeartbeatFailure: deps.OnHeartbeatFailure,
		OnHeartbeatFailure: c.onHeartbeatFailure,
		// The API server answers again: post the status at once, read from the API server (the cache
		// is stale since the failures), so a Node the lifecycle controller marked Unknown during the
		// outage is Ready again within a round trip instead of one status period.
		OnHeartbeatRecovered: c.onHeartbeatRecovered,
		Serving:              deps.Serving,
		Registered:           c.syncer.IsRegistered,
		Clock:                deps.Clock,
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

// Run runs the Node's loops until ctx ends and returns once they all have stopped; call it once. As
// the kubelet's Run: the runtime poller and the Lease renewer start at once in their own goroutines;
// the first status sync (registration) waits for the first runtime check, builds the Node meanwhile
// the Lease is written, and creates it once the first Lease write was attempted; these waits together
// are bounded by StatusCallTimeout + 1 s. So a Node whose runtime is ready registers Ready with its
// Lease already there, and one whose runtime is gone or hangs registers NotReady, saying why. The
// fast start-up update (fastStatusUpdateOnce) runs once, after both waits, so that it never posts
// Ready before the Lease either; so does the first sync with --register-node=false.
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("node", c.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	c.deps.Recorder.Eventf(c.EventRef(), v1.EventTypeNormal, "Starting", "Starting nodeagent.")

	var wg sync.WaitGroup
	deadline := c.deps.Clock.NewTimer(StatusCallTimeout + time.Second)
	wg.Go(func() {
		defer close(c.startupDeadline)
		defer deadline.Stop()
		select {
		case <-ctx.Done():
		case <-deadline.C():
		}
	})
	wg.Go(func() { c.poller.Run(ctx) })
	wg.Go(func() { c.renewer.Run(ctx) })
	wg.Go(func() {
		if !c.awaitStartup(ctx, c.runtimeSeen) {
			return
		}
		if c.registrar == nil && !c.awaitStartup(ctx, c.renewer.FirstAttempt()) {
			return // without registration there is no create to hold back: the first sync waits
		}
		wg.Go(func() {
			if !c.awaitStartup(ctx, c.renewer.FirstAttempt()) {
				return
			}
			c.syncer.FastStatusUpdateOnce(ctx)
			// From now on a runtime that is not ready is news: log it at the default level (the
			// kubelet's containerRuntimeReadyExpected).
			c.poller.SetReadyExpected()
		})
		c.syncer.Run(ctx)
	})
	if c.cfg.Triggers != nil {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-c.cfg.Triggers:
					c.syncer.Trigger()
				}
			}
		})
	}
	wg.Wait()
}

// awaitStartup waits until first is closed or the start-up deadline (StatusCallTimeout + 1 s after
// Run started) has passed, and returns true; it returns false when ctx ended first.
func (c *Controller) awaitStartup(ctx context.Context, first <-chan struct{}) bool {
	select {
	case <-first:
		return true
	case <-c.startupDeadline:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// Trigger asks for a status sync now (e.g. a problem monitor's condition changed).
func (c *Controller) Trigger() { c.syncer.Trigger() }

// recoveryResyncs are the delays after a heartbeat recovers at which the status is synced again:
// the node lifecycle controller may mark the Node Unknown just after the first sync (from a Lease it
// read before the renewal), and the Node should not stay Unknown for a status period.
var recoveryResyncs = []time.Duration{0, time.Second, 3 * time.Second}

// recoveryReadWindow is how long after a heartbeat recovers every sync reads the Node from the API
// server whatever the informer says: the API server's watch cache can lag behind etcd after an
// outage (etcd paused), and the lifecycle controller's Ready=Unknown may come seconds later.
const recoveryReadWindow = time.Minute

// onHeartbeatFailure runs after each failed Lease write or read: the connection, and so the informer's
// watch, may be gone, so the cache is stale, unless Dependencies.Outage says the process's other
// heartbeats succeed.
func (c *Controller) onHeartbeatFailure(reason string) {
	if c.deps.Outage != nil && !c.deps.Outage() {
		return
	}
	c.heartbeatOutage.Store(true)
	c.cache.MarkStale(reason)
}

// onHeartbeatRecovered runs after the first successful Lease renewal that follows failures; it does
// nothing when none of them was counted as an outage.
func (c *Controller) onHeartbeatRecovered() {
	if !c.heartbeatOutage.Swap(false) {
		return
	}
	c.cache.MarkStaleUntil("heartbeat recovered after failures", c.deps.Clock.Now().Add(recoveryReadWindow))
	for _, d := range recoveryResyncs {
		if d == 0 {
			c.syncer.Trigger()
			continue
		}
		t := c.deps.Clock.NewTimer(d)
		go func() { <-t.C(); c.syncer.Trigger() }()
	}
}

// onRuntimeChange runs after the poller updated runtimeState with a change of reachability or
// readiness: post it now rather than up to one status period later.
func (c *Controller) onRuntimeChange() {
	c.seenOnce.Do(func() { close(c.runtimeSeen) })
	c.syncer.Trigger()
}

func (c *Controller) observeRegistration(result string) {
	if c.deps.Observer != nil {
		c.deps.Observer.ObserveRegistrationAttempt(result)
	}
}

// onSync records the posted Node and tells the Observer.
func (c *Controller) onSync(r statussync.SyncResult) {
	c.mu.Lock()
	if r.Patched {
		c.lastPatch = &r
	}
	if r.Node != nil {
		c.lastPosted = r.Node
		if c.firstReady.IsZero() && nodeReady(r.Node) {
			c.firstReady = r.Time
		}
	}
	c.mu.Unlock()
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
	if c.lastPosted != nil {
		ref.UID = c.lastPosted.UID
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
	return c.lastPosted != nil
}

func nodeReady(n *v1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}
