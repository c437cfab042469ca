package simulation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/pod"
	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// MaxNodes is the most Nodes one simulator (one shard) runs (--nodes).
const MaxNodes = 10000

// SimulatedRuntimePollPeriod is how often a simulated Node's runtime is polled (the kubelet's 5 s
// is for a runtime that can change on its own; the simulated one changes only through the control
// API, which polls it at once).
const SimulatedRuntimePollPeriod = 20 * time.Second

// LabelSimulated is on every simulated Node, with the value "true": the simulator's one Node informer
// selects on it, and it tells simulated Nodes from real ones.
const LabelSimulated = "nodeagent.io/simulated"

// SimulatedTaint keeps workloads that do not tolerate it off simulated Nodes (--simulated-taint).
var SimulatedTaint = v1.Taint{Key: LabelSimulated, Value: "true", Effect: v1.TaintEffectNoSchedule}

// Config configures a Simulator.
type Config struct {
	// Nodes is how many Nodes to simulate: 1 to MaxNodes.
	Nodes int
	// NamePrefix makes the names: NamePrefix followed by the global index (see Shard) on at least 4
	// digits (NodeName: sim-0000, sim-0001, ..., sim-9999, sim-10000, ...).
	NamePrefix string
	// Shard is the part of the simulation this Simulator runs: the global indexes
	// [Shard.Index*Nodes, (Shard.Index+1)*Nodes). Every Node gets LabelShard=Shard.Index. The zero
	// Shard runs indexes [0, Nodes).
	Shard Shard
	// Template is what every Node is made of; nil means DefaultTemplate.
	Template *Template
	// Node is what every Node's controller shares: the frequencies, NodeStatusMaxImages, AgentVersion,
	// and Labels, Taints and Unschedulable, which are added to the template's. The Simulator sets, per
	// Node, NodeName, Hostname, RegisterNode, NodeIPs, MaxPods (the template's pods), Reservation (so
	// that allocatable is the template's), Host, Runtime, RuntimeEndpoint and ExtraFuncs (the template's
	// extra conditions and extended resources); LabelSimulated=true is always added.
	Node node.Config
	// Dependencies are shared by every Node's controller, built once: the API clients, the Node
	// informer's lister (its informer must select LabelSimulated=true), the cache tracker, the event
	// recorder, the clock, the observer, and the Queue that runs every Node's steps (Run runs
	// it; nil: one with DefaultWorkersFor(Nodes) workers).
	Dependencies node.Dependencies
	// StartQPS and StartBurst pace the start of the Nodes (each start registers one Node through the
	// rate-limited Client): use the Client's QPS and burst so that registration never queues in its
	// rate limiter. Default 50 and 100, the agent's --kube-api-qps and --kube-api-burst.
	StartQPS   float64
	StartBurst int
	// PodBehaviour is how the simulated pods' containers behave without annotations (PodBehaviour);
	// the zero value is KWOK's fast Stages: they start and turn ready at once, and a Job's pods
	// complete with exit 0. Pods run on the simulated Nodes only when Dependencies.Pods is set.
	PodBehaviour Behaviour
	// KubeletAPI, if set, serves the kubelet's API of every Node (kubeletapi.go, ServeKubeletAPI):
	// the Nodes report its NodeIP and their own ports.
	KubeletAPI *KubeletAPI
	// InterpretPodCommands: a simulated container's command decides how long each of its runs lasts
	// and how it exits, interpreted in pkg/simulation/sandbox within CommandLimits (zero fields: the
	// sandbox's defaults), unless nodeagent.io/run-duration or exit-code set them; a command the
	// sandbox cannot honour leaves PodBehaviour's (a Warning Event says so once per container).
	InterpretPodCommands bool
	CommandLimits        sandbox.Limits
	// ClusterDomain is the cluster's domain (the kubelet's clusterDomain, --cluster-domain): a pod
	// with spec.subdomain has <hostname>.<subdomain>.<namespace>.svc.<ClusterDomain> in the hosts
	// file its interpreted commands read; "": DefaultClusterDomain.
	ClusterDomain string
	// CommandBudget bounds the interpretation of all the Nodes' commands together (zero fields:
	// sandbox.DefaultBudget, 64 MiB and one run at a time): each run holds its CommandLimits.Memory of
	// the budget's Memory and one of its Parallel slots while it runs, and waits for them (bounded by
	// the status request's context) when other runs hold them.
	CommandBudget sandbox.Budget
	// FallbackClusterCIDR is where a Node without spec.podCIDRs (no nodeipam) takes its pods' IPs:
	// the /24 of its global index (pod.FallbackPodCIDR); zero: pod.DefaultFallbackClusterCIDR.
	FallbackClusterCIDR netip.Prefix
	// Adopt, if set, also runs the Nodes that others create and Adopt.Selector selects (KWOK's
	// --manage-* flags; adopt.go), those of this Shard by AdoptedShard, each by the same controller
	// as the template's Nodes but never registering it. Nodes may then be 0: adopt only.
	Adopt *Adoption
}

// Simulator runs N simulated Nodes in one process, each one node.Controller (the very loops a
// single nodeagent runs) over a template host and its own CRI fakes. Build with New, run with Run;
// Set, State and States control and inspect the Nodes while it runs (Handler serves them over HTTP).
type Simulator struct {
	cfg         Config
	nodes       []*simNode
	byName      map[string]*simNode
	shared      *runtimeShared
	labels      map[string]string
	taints      []v1.Taint
	reservation v1.ResourceList
	extraFuncs  []nodestatus.Func
	pods        *simPods // nil: the Nodes run no pods
	// slices publishes the Nodes' ResourceSlices (nil: no devices, or not run by a Process).
	slices *deviceSlices
	usage  *Usage // the Nodes' and their pods' simulated resource usage (usage.go)

	restarts chan restart
	done     chan struct{} // closed when Run has returned

	// adopted are the running adopted Nodes by name (Config.Adopt), slotsUsed their slots
	// (adoptedIndex); both guarded by adoptedMu.
	adoptedMu sync.Mutex
	adopted   map[string]*simNode
	slotsUsed map[int]bool

	// apiOnce builds what every Node's kubelet API shares (kubeletAPIShared): apiProvider, apiPool
	// (nil: no cap), or apiErr.
	apiOnce     sync.Once
	apiProvider *Streaming
	apiPool     *kubeletserver.ConnectionPool
	apiErr      error
}

// Phase is where a simulated Node is: pending (not started yet: starts are paced), running, or stopped
// (its controller's context was cancelled, as a dead machine: no status, no Lease).
type Phase string

// The phases of a simulated Node.
const (
	PhasePending Phase = "pending"
	PhaseRunning Phase = "running"
	PhaseStopped Phase = "stopped"
)

type simNode struct {
	index int
	// adopted: a Node another creates (Config.Adopt), its slot in adoptedIndex.
	adopted bool
	slot    int
	// kubeletPort is an adopted Node's kubelet API port (0: none served) and stopAPI stops serving it
	// and waits (serveAdoptedKubeletAPI); both set before its controller starts.
	kubeletPort int32
	stopAPI     func()
	name        string
	host        *host
	runtime     *simRuntime

	mu                         sync.Mutex
	phase                      Phase
	runtimeReady, networkReady bool
	ctrl                       *node.Controller // the running or last run controller; nil before
}

type restart struct {
	n    *simNode
	done chan struct{}
}

// ValidateNodes checks a Node count: 1 to MaxNodes.
func ValidateNodes(n int) error {
	if n < 1 || n > MaxNodes {
		return fmt.Errorf("must be between 1 and %d", MaxNodes)
	}
	return nil
}

// ValidateNamePrefix checks that prefix followed by any index of a simulation of total Nodes (all
// shards; NodeName) is a valid Node name (a DNS-1123 subdomain) and a valid label value (the
// kubernetes.io/hostname label, so at most 63 characters).
func ValidateNamePrefix(prefix string, total int) error {
	if prefix == "" {
		return errors.New("must not be empty")
	}
	for _, name := range []string{NodeName(prefix, 0), NodeName(prefix, max(total, MaxNodes)-1)} {
		msgs := append(validation.IsDNS1123Subdomain(name), validation.IsValidLabelValue(name)...)
		if len(msgs) > 0 {
			return fmt.Errorf("makes invalid node names such as %q: %s", name, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// New validates cfg and builds the Simulator and every Node's host and CRI fakes. It makes no API
// call and starts nothing. Errors name the field.
func New(cfg Config) (*Simulator, error) {
	if cfg.Adopt != nil {
		if err := cfg.Adopt.Selector.Validate(); err != nil {
			return nil, fmt.Errorf("simulation: Adopt: %w", err)
		}
		if !cfg.Adopt.Selector.Enabled() || cfg.Adopt.Informer == nil || cfg.Adopt.Cache == nil {
			return nil, errors.New("simulation: Adopt needs a Selector that selects, an Informer and a Cache")
		}
	}
	if err := ValidateNodes(cfg.Nodes); err != nil && (cfg.Adopt == nil || cfg.Nodes != 0) {
		return nil, fmt.Errorf("simulation: Nodes %d: %w", cfg.Nodes, err)
	}
	if err := ValidateShards(cfg.Shard.count(), cfg.Shard.Index); err != nil {
		return nil, fmt.Errorf("simulation: Shard: %w", err)
	}
	if err := ValidateNamePrefix(cfg.NamePrefix, cfg.Nodes*cfg.Shard.count()); err != nil {
		return nil, fmt.Errorf("simulation: NamePrefix %q: %w", cfg.NamePrefix, err)
	}
	if cfg.KubeletAPI != nil {
		if err := cfg.KubeletAPI.Validate(cfg.Nodes); err != nil {
			return nil, err
		}
	}
	if cfg.Template == nil {
		cfg.Template = DefaultTemplate()
	}
	if cfg.Dependencies.Clock == nil {
		cfg.Dependencies.Clock = clock.RealClock{}
	}
	if cfg.Dependencies.Queue == nil {
		workers, leaseWorkers := DefaultWorkersFor(cfg.Nodes)
		queue, err := node.NewQueue(node.QueueConfig{Workers: workers, LeaseWorkers: leaseWorkers, Coalesce: StepGrid,
			Clock: cfg.Dependencies.Clock, CloseAllConns: cfg.Dependencies.CloseAllConns})
		if err != nil {
			return nil, fmt.Errorf("simulation: %w", err)
		}
		cfg.Dependencies.Queue = queue
	}
	if cfg.StartQPS <= 0 {
		cfg.StartQPS = 50
	}
	if cfg.StartBurst <= 0 {
		cfg.StartBurst = 100
	}
	t := cfg.Template
	s := &Simulator{
		cfg: cfg, byName: make(map[string]*simNode, cfg.Nodes), shared: newRuntimeShared(t),
		labels:      map[string]string{},
		reservation: t.reservation(),
		restarts:    make(chan restart),
		done:        make(chan struct{}),
		adopted:     map[string]*simNode{},
		slotsUsed:   map[int]bool{},
	}
	if cfg.Dependencies.Pods != nil {
		if !cfg.FallbackClusterCIDR.IsValid() {
			s.cfg.FallbackClusterCIDR = pod.DefaultFallbackClusterCIDR
		}
		last := cfg.Shard.First(cfg.Nodes) + max(cfg.Nodes, 1) - 1
		if _, err := pod.FallbackPodCIDR(s.cfg.FallbackClusterCIDR, pod.DefaultFallbackNodeMaskSize, last); err != nil {
			return nil, fmt.Errorf("simulation: FallbackClusterCIDR %s: %w", s.cfg.FallbackClusterCIDR, err)
		}
		s.pods = newSimPods(cfg.PodBehaviour, t.RuntimeName, cfg.Dependencies.Recorder, cfg.Dependencies.Clock)
		s.pods.plugins = newDeviceAllocator(t.devicePlugins(), podActive(cfg.Dependencies.Pods))
		if cfg.Dependencies.Client != nil {
			s.pods.dra = newDRA(cfg.Dependencies.Client, t.Devices)
			s.pods.driverEnv = t.Devices.driverEnv()
		}
		if cfg.InterpretPodCommands {
			s.pods.commands = &commands{limits: cfg.CommandLimits, runner: sandbox.NewRunner(cfg.CommandBudget),
				src: &envSources{allocatable: t.Allocatable}, deviceEnv: s.pods.deviceEnv,
				clusterDomain: cmp.Or(cfg.ClusterDomain, DefaultClusterDomain)}
			if c := cfg.Dependencies.Client; c != nil {
				// A bounded GET per object a container's config or volume references, per run (the
				// kubelet's configMapManager and secretManager watch them; a pod that references none
				// costs none).
				s.pods.commands.src.configMaps = getConfigMap(c)
				s.pods.commands.src.secrets = func(ctx context.Context, namespace, name string) (*v1.Secret, error) {
					return c.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
				}
				// The service links: one bounded LIST of the pod's namespace (and one of the master
				// service) per run of an interpreted command (the kubelet's service informer).
				s.pods.commands.src.services = func(ctx context.Context, namespace, name string, limit int64) ([]v1.Service, error) {
					opts := metav1.ListOptions{Limit: limit}
					if name != "" {
						opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
					}
					l, err := c.CoreV1().Services(namespace).List(ctx, opts)
					if err != nil {
						return nil, err
					}
					return l.Items, nil
				}
			}
		}
	}
	s.usage = NewUsage(cfg.Dependencies.Clock)
	maps.Copy(s.labels, t.Labels)
	maps.Copy(s.labels, cfg.Node.Labels)
	s.labels[LabelSimulated] = "true"
	s.labels[LabelShard] = cfg.Shard.Label()
	s.labels[LabelSimulation] = SimulationID(cfg.NamePrefix)
	s.taints = append(append([]v1.Taint(nil), t.Taints...), cfg.Node.Taints...)
	s.extraFuncs = append([]nodestatus.Func(nil), cfg.Node.ExtraFuncs...)
	if len(t.Conditions) > 0 {
		s.extraFuncs = append(s.extraFuncs, nodestatus.Func{Name: "TemplateConditions", Setter: conditionsSetter(cfg.Dependencies.Clock.Now, t.Conditions)})
	}
	if ext := t.extendedResources(); len(ext) > 0 {
		s.extraFuncs = append(s.extraFuncs, nodestatus.Func{Name: "TemplateExtendedResources", Setter: extendedResourcesSetter(ext, t.Allocatable)})
	}
	if cfg.KubeletAPI != nil {
		s.extraFuncs = append(s.extraFuncs, nodestatus.Func{Name: "DeclaredFeatures", Setter: declaredFeaturesSetter})
	}
	s.nodes = make([]*simNode, cfg.Nodes)
	first := cfg.Shard.First(cfg.Nodes)
	for j := range s.nodes {
		i := first + j
		name := NodeName(cfg.NamePrefix, i)
		n := &simNode{index: i, name: name, host: newHost(t, name), runtime: newSimRuntime(s.shared),
			phase: PhasePending, runtimeReady: true, networkReady: true}
		s.nodes[j], s.byName[name] = n, n
	}
	// Check once what node.New will need, so that a bad Config fails here, not in Run.
	check := &simNode{name: NodeName(cfg.NamePrefix, first), host: newHost(t, "check"), runtime: newSimRuntime(s.shared)}
	if err := errors.Join(s.nodeConfig(check).Validate(), cfg.Dependencies.Validate()); err != nil {
		return nil, fmt.Errorf("simulation: %w", err)
	}
	return s, nil
}

// Names returns the names of the simulated Nodes, in index order.
func (s *Simulator) Names() []string {
	out := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.name
	}
	return out
}

// nodeConfig is one Node's controller configuration.
func (s *Simulator) nodeConfig(n *simNode) node.Config {
	c := s.cfg.Node
	t := s.cfg.Template
	c.NodeName, c.Hostname, c.RegisterNode = n.name, n.name, true
	c.Labels, c.Taints, c.Unschedulable = s.labels, s.taints, c.Unschedulable || t.Unschedulable
	c.NodeIPs = []net.IP{nodeIP(n.index)}
	if n.adopted {
		// Its creator's: never registered (so never labelled or tainted here), its status filled from
		// the template where the creator set none, its kubelet API on a port of its own past the
		// template Nodes' (serveAdoptedKubeletAPI) when the process serves it.
		c.RegisterNode, c.Labels, c.Taints, c.Unschedulable = false, nil, nil, false
		if n.kubeletPort != 0 {
			c.NodeIPs, c.KubeletPort = []net.IP{s.cfg.KubeletAPI.NodeIP}, n.kubeletPort
		}
	} else if k := s.cfg.KubeletAPI; k != nil {
		c.NodeIPs, c.KubeletPort = []net.IP{k.NodeIP}, k.port(n.index-s.cfg.Shard.First(s.cfg.Nodes))
	}
	c.ExternalCloudProvider, c.ProviderID = false, ""
	c.MaxPods = int(t.Capacity.Pods().Value())
	c.Reservation = func(v1.ResourceList) v1.ResourceList { return s.reservation }
	c.RuntimeEndpoint = "simulated://" + t.RuntimeName
	// The in-memory runtime changes only through the control API, which polls it at once (Set): the
	// periodic poll only keeps runtimeState fresh, under the kubelet's 30 s "runtime is down" bound.
	c.RuntimePollPeriod = SimulatedRuntimePollPeriod
	if t.KubeletVersion != "" {
		c.AgentVersion = t.KubeletVersion
	}
	c.ExtraFuncs = s.extraFuncs
	if n.adopted {
		lister := corelisters.NewNodeLister(s.cfg.Adopt.Informer.GetIndexer())
		c.ExtraFuncs = append(slices.Clip(s.extraFuncs), nodestatus.Func{Name: "KeepCreatorStatus", Setter: keepCreatorStatus(lister.Get)})
	}
	c.Host, c.Runtime = n.host, n.runtime
	if s.pods != nil {
		c.Pods = s.pods
		// Validated in New for the highest template index; an adopted Node past the cluster CIDR gets
		// none (its pods wait for spec.podCIDRs).
		c.FallbackPodCIDR, _ = pod.FallbackPodCIDR(s.cfg.FallbackClusterCIDR, pod.DefaultFallbackNodeMaskSize, n.index)
		if n.adopted {
			c.FallbackPodCIDR, _ = adoptedPodCIDR(s.cfg.FallbackClusterCIDR, s.cfg.Nodes, s.cfg.Shard.count(), s.cfg.Shard.Index, n.slot)
		}
	}
	return c
}

// dependencies returns the Dependencies of n's controller: an adopted Node reads its Node through
// the adopted informer (Config.Adopt).
func (s *Simulator) dependencies(n *simNode) node.Dependencies {
	d := s.cfg.Dependencies
	if n.adopted {
		d.NodeLister, d.Cache = corelisters.NewNodeLister(s.cfg.Adopt.Informer.GetIndexer()), s.cfg.Adopt.Cache
	}
	return d
}

// Run runs the queue of every Node's steps, starts the Nodes on it, paced by StartQPS and
// StartBurst in index order, restarts those the control API asks to, and when ctx ends stops them
// all and returns once no step runs any more. It returns the queue's error (nil); it must be
// called once.
func (s *Simulator) Run(ctx context.Context) error {
	defer close(s.done)
	logger := klog.FromContext(ctx)
	if len(s.nodes) > 0 {
		logger.Info("Starting simulated nodes", "nodes", len(s.nodes), "first", s.nodes[0].name, "last", s.nodes[len(s.nodes)-1].name,
			"startQPS", s.cfg.StartQPS, "startBurst", s.cfg.StartBurst)
	}
	queue := s.cfg.Dependencies.Queue
	schedErr := make(chan error, 1)
	go func() { schedErr <- queue.Run(ctx) }()
	if a := s.cfg.Adopt; a != nil {
		logger.Info("Adopting the nodes others create", "selector", a.Selector, "shard", s.cfg.Shard.Index, "shards", s.cfg.Shard.count())
		reg, err := a.Informer.AddEventHandler(s.adoptHandler(ctx))
		if err != nil {
			return fmt.Errorf("adopted node informer: %w", err)
		}
		defer func() { _ = a.Informer.RemoveEventHandler(reg) }()
	}

	pending := make(chan *simNode)
	go func() {
		limiter := rate.NewLimiter(rate.Limit(s.cfg.StartQPS), s.cfg.StartBurst)
		for _, n := range s.nodes {
			if err := limiter.Wait(ctx); err != nil {
				return
			}
			select {
			case pending <- n:
			case <-ctx.Done():
				return
			}
		}
		logger.Info("All simulated nodes started", "nodes", len(s.nodes))
	}()
	for {
		select {
		case <-ctx.Done():
			logger.Info("Stopping simulated nodes")
			return <-schedErr
		case n := <-pending:
			s.start(ctx, n, false)
		case r := <-s.restarts:
			s.start(ctx, r.n, true)
			close(r.done)
		}
	}
}

// start starts a new controller for n on the queue, unless it is running, or (on the paced first
// start) was stopped while pending.
func (s *Simulator) start(ctx context.Context, n *simNode, restart bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.phase == PhaseRunning || (n.phase == PhaseStopped && !restart) {
		return
	}
	ctrl, err := node.New(s.nodeConfig(n), s.dependencies(n))
	if err == nil {
		err = s.cfg.Dependencies.Queue.Start(ctrl)
	}
	if err != nil { // New checked the same configuration for node 0
		klog.FromContext(ctx).Error(err, "Cannot start simulated node", "node", n.name)
		return
	}
	n.ctrl, n.phase = ctrl, PhaseRunning
}

// ErrUnknownNode is returned for a name that is not a simulated Node of this Simulator.
var ErrUnknownNode = errors.New("no such simulated node")

// Change is what the control API changes on one simulated Node; nil fields are left as they are.
type Change struct {
	// RuntimeReady and NetworkReady are the RuntimeReady and NetworkReady conditions the Node's CRI
	// fake answers to Status from now on; a change polls the runtime at once (the periodic poll is every
	// SimulatedRuntimePollPeriod).
	RuntimeReady *bool `json:"runtimeReady,omitempty"`
	NetworkReady *bool `json:"networkReady,omitempty"`
	// MemoryPressure, DiskPressure and PIDPressure are what the Node's host answers the pressure setters;
	// a change triggers a status sync.
	MemoryPressure *bool `json:"memoryPressure,omitempty"`
	DiskPressure   *bool `json:"diskPressure,omitempty"`
	PIDPressure    *bool `json:"pidPressure,omitempty"`
	// Stopped true stops the Node's controller (no status, no Lease: the node lifecycle controller
	// marks it Unknown after its grace period) and returns once none of its steps runs; false starts a
	// new controller for it, as a restarted agent.
	Stopped *bool `json:"stopped,omitempty"`
}

// Empty reports whether c changes nothing.
func (c Change) Empty() bool { return c == Change{} }

// Set applies c to the Node name and returns its state after. It returns ErrUnknownNode (wrapped) for
// a name that is not simulated here, and ctx's error, or an error saying the simulator is not running,
// when a stop or start could not complete.
func (s *Simulator) Set(ctx context.Context, name string, c Change) (NodeState, error) {
	n, ok := s.lookup(name)
	if !ok {
		return NodeState{}, fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	n.mu.Lock()
	if c.RuntimeReady != nil {
		n.runtimeReady = *c.RuntimeReady
	}
	if c.NetworkReady != nil {
		n.networkReady = *c.NetworkReady
	}
	runtimeChanged := (c.RuntimeReady != nil || c.NetworkReady != nil) && n.runtime.setReady(n.runtimeReady, n.networkReady)
	if runtimeChanged && n.phase == PhaseRunning {
		n.ctrl.PollRuntime()
	}
	pressure := false
	for _, p := range []struct {
		v    *bool
		flag interface{ Swap(bool) bool }
	}{{c.MemoryPressure, &n.host.memoryPressure}, {c.DiskPressure, &n.host.diskPressure}, {c.PIDPressure, &n.host.pidPressure}} {
		if p.v != nil && p.flag.Swap(*p.v) != *p.v {
			pressure = true
		}
	}
	if pressure && n.phase == PhaseRunning {
		n.ctrl.Trigger()
	}
	var wait <-chan struct{}
	switch {
	case c.Stopped == nil:
	case *c.Stopped:
		if n.phase == PhaseRunning {
			n.ctrl.Stop()
		}
		n.phase = PhaseStopped // if pending, the paced start skips it
		if n.ctrl != nil {
			wait = n.ctrl.Done() // closed once none of its steps runs
		}
	case n.phase == PhaseStopped:
		var prev <-chan struct{}
		if n.ctrl != nil {
			prev = n.ctrl.Done() // a stop may still be ending: never two controllers for one Node
		}
		n.mu.Unlock()
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
				return s.State(name), ctx.Err()
			}
		}
		r := restart{n: n, done: make(chan struct{})}
		select {
		case s.restarts <- r:
		case <-s.done:
			return s.State(name), errors.New("the simulator is not running")
		case <-ctx.Done():
			return s.State(name), ctx.Err()
		}
		wait = r.done
		n.mu.Lock()
	}
	n.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return s.State(name), ctx.Err()
		}
	}
	return s.State(name), nil
}

// NodeState is one simulated Node as the control API shows it: what it was told to be and what its
// controller last did.
type NodeState struct {
	Name  string `json:"name"`
	Phase Phase  `json:"phase"`
	// RuntimeReady, NetworkReady and the pressures are what the Node's runtime and host answer.
	RuntimeReady   bool `json:"runtimeReady"`
	NetworkReady   bool `json:"networkReady"`
	MemoryPressure bool `json:"memoryPressure"`
	DiskPressure   bool `json:"diskPressure"`
	PIDPressure    bool `json:"pidPressure"`
	// Registered, Ready (the Ready condition's status as last posted: True, False or Unknown; empty
	// before), LastSync and LastLeaseRenew are from its controller (current or last run).
	Registered     bool      `json:"registered"`
	Ready          string    `json:"ready,omitempty"`
	LastSync       time.Time `json:"lastSync,omitzero"`
	LastLeaseRenew time.Time `json:"lastLeaseRenew,omitzero"`
	// Pods and PodIPs are how many pods its controller knows and how many pod IPs it has given out
	// and not got back (node.Controller.PodCounts).
	Pods   int `json:"pods"`
	PodIPs int `json:"podIPs"`
	// DevicePlugins are its device-plugin resources' devices: those allocated to each container and
	// how many are free (State only; States leaves them out).
	DevicePlugins []NodePluginDevices `json:"devicePlugins,omitempty"`
}

// State returns the state of Node name; the zero NodeState for an unknown name.
func (s *Simulator) State(name string) NodeState {
	n, ok := s.lookup(name)
	if !ok {
		return NodeState{}
	}
	st := n.state()
	if s.pods != nil {
		st.DevicePlugins = s.pods.plugins.nodeDevices(name)
	}
	return st
}

// States returns the state of every Node, in index order, then of the adopted Nodes by name.
func (s *Simulator) States() []NodeState {
	adopted := s.adoptedNodes()
	out := make([]NodeState, 0, len(s.nodes)+len(adopted))
	for _, n := range append(slices.Clip(s.nodes), adopted...) {
		out = append(out, n.state())
	}
	return out
}

func (n *simNode) state() NodeState {
	n.mu.Lock()
	st := NodeState{Name: n.name, Phase: n.phase, RuntimeReady: n.runtimeReady, NetworkReady: n.networkReady}
	ctrl := n.ctrl
	n.mu.Unlock()
	st.MemoryPressure, st.DiskPressure, st.PIDPressure = n.host.memoryPressure.Load(), n.host.diskPressure.Load(), n.host.pidPressure.Load()
	if ctrl != nil {
		st.Registered = ctrl.IsRegistered()
		if r := ctrl.Status().Ready; r != nil {
			st.Ready = string(r.Status)
		}
		st.LastSync, st.LastLeaseRenew = ctrl.LastSync(), ctrl.LastLeaseRenew()
		st.Pods, st.PodIPs = ctrl.PodCounts()
	}
	return st
}

// Controller returns the controller of Node name (the running one, or the last one run), nil before
// its first start or for an unknown name.
func (s *Simulator) Controller(name string) *node.Controller {
	n, ok := s.lookup(name)
	if !ok {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ctrl
}

// Healthy is the simulator's syncloop health check: nil while every running Node's controller is
// healthy (node.Controller.Healthy), else an error counting those that are not and naming the first.
func (s *Simulator) Healthy() error {
	var bad int
	var first error
	for _, n := range append(slices.Clip(s.nodes), s.adoptedNodes()...) {
		n.mu.Lock()
		ctrl, running := n.ctrl, n.phase == PhaseRunning
		n.mu.Unlock()
		if !running {
			continue
		}
		if err := ctrl.Healthy(); err != nil {
			if bad == 0 {
				first = fmt.Errorf("%s: %w", n.name, err)
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d simulated nodes unhealthy, first %w", bad, first)
	}
	return nil
}

// Registered is the simulator's /readyz check: nil once every Node not stopped has been started,
// registered and has posted a status; else an error counting those that have not.
func (s *Simulator) Registered() error {
	var waiting int
	var first string
	for _, n := range s.nodes {
		n.mu.Lock()
		ctrl, phase := n.ctrl, n.phase
		n.mu.Unlock()
		if phase == PhaseStopped || (phase == PhaseRunning && ctrl.Registered() == nil) {
			continue
		}
		if waiting == 0 {
			first = n.name
		}
		waiting++
	}
	if waiting > 0 {
		return fmt.Errorf("%d of %d simulated nodes not registered yet, first %s", waiting, len(s.nodes), first)
	}
	return nil
}
