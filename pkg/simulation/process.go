package simulation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/apiclient"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/lifecycle"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// DefaultWorkersFor returns the queue's pools for n Nodes: one step worker per 100 Nodes (16 to
// 64: the status syncs are mostly local work) and one Lease worker per 20 Nodes (16 to 256: each holds
// one Lease write in flight, and n Nodes need n/10 writes a second; at 5000 Nodes, 16 workers could not
// keep up once the API server answered in 30 ms, and Lease renewals fell to p99 31 s).
func DefaultWorkersFor(n int) (workers, leaseWorkers int) {
	return min(max(n/100, 16), 64), min(max(n/20, 16), 256)
}

// StepGrid is the simulator's node.QueueConfig.Coalesce: every Node's periodic steps (Lease renewals,
// status syncs, runtime polls) run on a 250 ms grid, moved earlier by less than 250 ms, so that the
// work queue wakes once per grid interval for all the Nodes due in it instead of once per step
// (BENCHMARKS.md, "Issue 26": the wake-ups, not the requests, are what costs at thousands of Nodes). A
// 1 s grid cost the same CPU at 1000 Nodes but, at 5000, sent ~500 Lease writes in one instant and
// pushed the renewal interval's p99 to 12.9 s; 250 ms keeps it at 11.0 s.
const StepGrid = 250 * time.Millisecond

// DefaultPodWorkersFor returns the pod workers for n Nodes: one per 20 Nodes, 32 to 128. Each holds one
// pod status write or delete in flight, so the pool is what a pod storm waits on: 5000 pods bound to one
// Node started in 23 s and were deleted in 75 s with 8 workers, 21 s and 41 s with 32, no faster with
// 64 (the API server on the same 2 cores was then the limit; make bench-pods, BENCHMARKS.md).
func DefaultPodWorkersFor(n int) int { return min(max(n/20, 32), 128) }

// ProcessConfig is a validated `nodeagent simulate` command line: the Nodes and how to reach the
// API server.
type ProcessConfig struct {
	// Nodes, NamePrefix, Shard, Template and Node are the Simulator's (see Config).
	Nodes      int
	NamePrefix string
	Shard      Shard
	Template   *Template
	Node       node.Config
	// TemplatePath is the --node-template file Template was read from ("" for the default template),
	// named in errors.
	TemplatePath string
	// REST is the API server and the simulation's identity; Kubeconfig names it in errors.
	REST       *rest.Config
	Kubeconfig string
	// QPS and Burst limit the main client (registration, the informer; --kube-api-qps and
	// --kube-api-burst); EventQPS and EventBurst the events client (--event-qps, --event-burst);
	// PodQPS and PodBurst the pods client (--pod-api-qps, --pod-api-burst: pod status patches and
	// deletions).
	QPS        float32
	Burst      int
	EventQPS   float32
	EventBurst int
	PodQPS     float32
	PodBurst   int
	// Workers and LeaseWorkers size the queue's pools (--workers, --lease-workers); 0 sizes them
	// by Nodes (DefaultWorkersFor).
	Workers, LeaseWorkers int
	// PodWorkers sizes the queue's pod pool (--pod-workers); 0: DefaultPodWorkersFor(Nodes).
	PodWorkers int
	// PodBehaviour is the simulated pods' default behaviour (Config.PodBehaviour).
	PodBehaviour Behaviour
	// InterpretPodCommands: the simulated containers' commands are interpreted (Config.InterpretPodCommands).
	InterpretPodCommands bool
	// ClusterDomain is the cluster's domain (Config.ClusterDomain).
	ClusterDomain string
	// ProcessStart is when the process started (metrics, /debug/nodestatus).
	ProcessStart time.Time
	// DeleteNodesOnExit makes DeleteNodes delete the shard's Nodes (--delete-nodes-on-exit), and
	// Preflight check that the identity may.
	DeleteNodesOnExit bool
	// KubeletAPI, if set, serves the kubelet's API of every simulated Node (Config.KubeletAPI).
	KubeletAPI *KubeletAPI
	// Adopt selects the Nodes that others create which the simulation also runs (KWOK's --manage-*
	// flags; Config.Adopt); the zero NodeSelector adopts none. With it, Nodes may be 0: adopt only.
	Adopt NodeSelector
}

// Process is one `nodeagent simulate`: the API clients and Node informer (Shard.Selector: selecting
// LabelSimulated, the simulation's LabelSimulation and the shard's LabelShard),
// the metrics, the queue and the Simulator. Build with NewProcess, check with Preflight, run
// with Run.
type Process struct {
	cfg       ProcessConfig
	instance  string
	set       *apiclient.Set
	Metrics   *metrics.Metrics
	Queue     *node.Queue
	Simulator *Simulator

	podInformers informers.SharedInformerFactory
	devices      *deviceSlices // nil: the template has no devices
	// adoptInformers is the adopted Nodes' informer (ProcessConfig.Adopt); nil when none is adopted.
	adoptInformers informers.SharedInformerFactory
}

// NewProcess builds the process's clients, metrics, queue and Simulator, and checks the Node the
// simulation would register as the API server and etcd will (CheckNodeObject). It makes no API call.
// Errors name what could not be built, or the flags whose Node would be refused.
func NewProcess(ctx context.Context, cfg ProcessConfig) (*Process, error) {
	clk := clock.RealClock{}
	heartbeatTimeout := min(cfg.Node.NodeStatusUpdateFrequency, time.Duration(cfg.Node.NodeLeaseDurationSeconds)*time.Second)
	set, err := apiclient.New(ctx, apiclient.Config{
		REST: cfg.REST, UserAgent: "nodeagent-simulate/" + version.Get().GitVersion, QPS: cfg.QPS, Burst: cfg.Burst,
		HeartbeatTimeout: heartbeatTimeout, EventQPS: cfg.EventQPS, EventBurst: cfg.EventBurst,
		PodQPS: cfg.PodQPS, PodBurst: cfg.PodBurst,
		NodeLabelSelector: cfg.Shard.Selector(cfg.NamePrefix), Clock: clk,
	})
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", cfg.Kubeconfig, err)
	}
	p := &Process{cfg: cfg, set: set, Metrics: metrics.New(cfg.ProcessStart), instance: node.ProcessInstance()}
	// One watch of the pods bound to any Node, indexed by Node: each shard keeps only its own Nodes'
	// pods whole (trimPod), so that a shard's memory follows its own pods.
	p.podInformers = informers.NewSharedInformerFactoryWithOptions(set.Client, 0,
		informers.WithTransform(trimPod(cfg.NamePrefix, cfg.Shard, cfg.Nodes, cfg.Adopt.Enabled())),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	podInformer := p.podInformers.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(node.PodIndexers()); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if cfg.Workers == 0 || cfg.LeaseWorkers == 0 || cfg.PodWorkers == 0 {
		w, lw := DefaultWorkersFor(cfg.Nodes)
		cfg.Workers, cfg.LeaseWorkers = cmp.Or(cfg.Workers, w), cmp.Or(cfg.LeaseWorkers, lw)
		cfg.PodWorkers = cmp.Or(cfg.PodWorkers, DefaultPodWorkersFor(cfg.Nodes))
		p.cfg = cfg
	}
	first := NodeName(cfg.NamePrefix, cfg.Shard.First(cfg.Nodes))
	// One queue runs every simulated Node's steps; it closes the connections only when the
	// process's heartbeats fail as a whole (node.Heartbeats), as one agent whose heartbeats all fail.
	if p.Queue, err = node.NewQueue(node.QueueConfig{
		Workers: cfg.Workers, LeaseWorkers: cfg.LeaseWorkers, PodWorkers: cfg.PodWorkers, Clock: clk,
		CloseAllConns: set.CloseAllConns, Coalesce: StepGrid,
	}); err != nil {
		return nil, err
	}
	if _, err := podInformer.AddEventHandler(p.Queue.PodEventHandler()); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	var adopt *Adoption
	if cfg.Adopt.Enabled() {
		if err := cfg.Adopt.Validate(); err != nil {
			return nil, err
		}
		// The Nodes others create, in an informer of their own (its own tracker): the selector is not
		// the simulation's, and the informer holds every shard's adopted Nodes (AdoptedShard picks).
		p.adoptInformers = informers.NewSharedInformerFactoryWithOptions(set.Client, 0,
			informers.WithTransform(nodecache.TrimNode), informers.WithTweakListOptions(cfg.Adopt.TweakListOptions))
		adopt = &Adoption{Selector: cfg.Adopt, Informer: p.adoptInformers.Core().V1().Nodes().Informer(), Cache: nodecache.New(clk)}
		if _, err := adopt.Informer.AddEventHandler(adopt.Cache.EventHandler()); err != nil {
			return nil, fmt.Errorf("adopted node informer: %w", err)
		}
		if err := adopt.Informer.SetWatchErrorHandlerWithContext(adopt.Cache.WatchErrorHandler()); err != nil {
			return nil, fmt.Errorf("adopted node informer: %w", err)
		}
	}
	p.Simulator, err = New(Config{
		Nodes: cfg.Nodes, NamePrefix: cfg.NamePrefix, Shard: cfg.Shard, Template: cfg.Template, Node: cfg.Node,
		Dependencies: node.Dependencies{
			Client: set.Client, HeartbeatClient: set.Heartbeat, NodeLister: set.Informers.Core().V1().Nodes().Lister(),
			Cache: set.NodeCache, Recorder: set.Broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "nodeagent"}),
			Clock: clk, Queue: p.Queue, Observer: p.Metrics.ManyNodes(), Instance: p.instance,
			// One probe for every simulated node (it reads the shard's first node's Lease): after an
			// outage, N Leases resume together, at the cost of one GET per probe period while they wait.
			Serving:   lease.NewServingProbe(set.Heartbeat, first, clk, 0),
			Pods:      node.IndexedPodLister{Indexer: podInformer.GetIndexer()},
			PodClient: set.Pods, PodMetadataClient: set.PodMetadata,
		},
		PodBehaviour: cfg.PodBehaviour, KubeletAPI: cfg.KubeletAPI, InterpretPodCommands: cfg.InterpretPodCommands, ClusterDomain: cfg.ClusterDomain,
		StartQPS: float64(cfg.QPS), StartBurst: cfg.Burst, Adopt: adopt,
	})
	if err != nil {
		return nil, err
	}
	if err := p.checkNodeObject(ctx); err != nil {
		return nil, err
	}
	if err := p.newDeviceSlices(); err != nil {
		return nil, err
	}
	return p, nil
}

// checkNodeObject refuses, before any API call, a template (with --node-labels and
// --register-with-taints) whose Nodes the API server or etcd would refuse (CheckNodeObject), naming
// the flags.
func (p *Process) checkNodeObject(ctx context.Context) error {
	if p.cfg.Nodes == 0 {
		return nil // adopt only: no Node of the template's is registered
	}
	n, err := p.Simulator.InitialNode(ctx)
	if err != nil {
		return err
	}
	if err := CheckNodeObject(n); err != nil {
		what := "--node-labels, --register-with-taints"
		if p.cfg.TemplatePath != "" {
			what = fmt.Sprintf("--node-template %q (with --node-labels, --register-with-taints)", p.cfg.TemplatePath)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Preflight checks, before anything is written, that the identity may do what the simulation does
// (CheckAccess, and DeleteAccess with DeleteNodesOnExit) and that the shard may own its Nodes
// (CheckOwnership: no real Node, none of another shard or simulation, none of a shard at or above
// Shard.Count). Then it agrees with the simulation's layout record, its first write, made only when
// there is none (AgreeLayout: refused when the simulation runs another --nodes); checks that no other
// live process renews its Leases (CheckNoOtherInstance); and labels the shard's simulated Nodes of an
// earlier run that lack LabelShard or LabelSimulation (AdoptNodes). Errors name the flag and the
// value or the Node.
func (p *Process) Preflight(ctx context.Context) error {
	var extra []authorizationv1.ResourceAttributes
	if p.cfg.DeleteNodesOnExit {
		extra = DeleteAccess
	}
	if p.cfg.KubeletAPI != nil {
		extra = append(slices.Clone(extra), KubeletAPIAccess...)
	}
	if p.devices != nil {
		extra = append(slices.Clone(extra), ResourceSliceAccess...)
		extra = append(extra, ResourceClaimAccess...)
	}
	if err := CheckAccess(ctx, p.set.Client, p.cfg.Kubeconfig, extra...); err != nil {
		return err
	}
	if p.cfg.Nodes == 0 {
		return nil // adopt only: no Node of the simulation's own, so no layout and no Lease of its own to check
	}
	unlabelled, err := CheckOwnership(ctx, p.set.Client, Ownership{NamePrefix: p.cfg.NamePrefix, Nodes: p.cfg.Nodes, Shard: p.cfg.Shard})
	if err != nil {
		return err
	}
	// The layout first: it is agreed at once (one create-if-absent or read), so that of two shards
	// started together with different --nodes the refused one says so, rather than that another
	// process renews one of the Leases they share (the duplicate check, which may wait 15 s).
	if err := AgreeLayout(ctx, p.set.Client, Layout{
		NamePrefix: p.cfg.NamePrefix, Nodes: p.cfg.Nodes, Shards: p.cfg.Shard.count(), Instance: p.instance,
	}); err != nil {
		return err
	}
	if err := CheckNoOtherInstance(ctx, p.set.Client, DuplicateCheck{
		Names: p.Simulator.Names(), Instance: p.instance,
		LeaseDuration: time.Duration(p.cfg.Node.NodeLeaseDurationSeconds) * time.Second,
		Flag:          fmt.Sprintf("--shard-index %d", p.cfg.Shard.Index),
	}); err != nil {
		return err
	}
	return AdoptNodes(ctx, p.set.Client, p.cfg.Shard, p.cfg.NamePrefix, unlabelled)
}

// DeleteNodes deletes the shard's Nodes (their Leases go with them: the Node owns them) once Run has
// returned, when DeleteNodesOnExit is set; otherwise it does nothing. It deletes by name with
// deleteWorkers requests in flight through the heartbeat client (no client-side rate limit), ignores
// Nodes already gone, and returns the errors joined (each naming its Node), or ctx's error.
func (p *Process) DeleteNodes(ctx context.Context) error {
	if !p.cfg.DeleteNodesOnExit {
		return nil
	}
	names := p.Simulator.Names()
	klog.FromContext(ctx).Info("Deleting this shard's simulated nodes (--delete-nodes-on-exit)", "nodes", len(names), "shard", p.cfg.Shard.Index)
	work := make(chan string)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range min(deleteWorkers, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				err := p.set.Heartbeat.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					errs <- fmt.Errorf("deleting node %s: %w", name, err)
				}
			}
		}()
	}
	for _, name := range names {
		select {
		case work <- name:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if ctx.Err() != nil {
		all = append(all, fmt.Errorf("deleting nodes: %w", ctx.Err()))
	}
	return errors.Join(all...)
}

// deleteWorkers is how many Node deletions DeleteNodes has in flight.
const deleteWorkers = 16

// Informers is the process's Node informer, a lifecycle.Cache: run it in the group's first phase
// (Group.AddCache), so that Run starts once it has synced and every Node's first sync reads it
// instead of GETting its Node (thousands of GETs at start).
func (p *Process) Informers() lifecycle.Informers {
	p.set.Informers.Core().V1().Nodes().Informer() // requested before Start, so that it is started and waited for
	return lifecycle.Informers{SharedInformerFactory: p.set.Informers}
}

// AdoptedInformers is the adopted Nodes' informer (ProcessConfig.Adopt), a lifecycle.Cache for the
// group's first phase, so that Run adopts the Nodes that exist at once; ok false when none is adopted.
func (p *Process) AdoptedInformers() (lifecycle.Informers, bool) {
	if p.adoptInformers == nil {
		return lifecycle.Informers{}, false
	}
	p.adoptInformers.Core().V1().Nodes().Informer()
	return lifecycle.Informers{SharedInformerFactory: p.adoptInformers}, true
}

// PodInformers is the process's pod informer (the pods bound to any Node; those of other Nodes than
// the shard's trimmed to their keys), a lifecycle.Cache for the group's first phase, so that a Node's
// pods are known before its controller starts (no pod IP given twice across a restart).
func (p *Process) PodInformers() lifecycle.Informers {
	return lifecycle.Informers{SharedInformerFactory: p.podInformers}
}

// Run runs the event sink, the Simulator (and so the queue) and, every ForeignCheckPeriod, its
// StopForeignNodes, until ctx ends; then it stops them and flushes the events. It returns nil, or the
// Simulator's error. Start it once Informers has synced.
func (p *Process) Run(ctx context.Context) error {
	klog.FromContext(ctx).Info("Starting nodeagent simulate", "version", version.Get().GitVersion, "nodes", p.cfg.Nodes,
		"shard", p.cfg.Shard.Index, "shards", p.cfg.Shard.count(), "instance", p.instance,
		"prefix", p.cfg.NamePrefix, "simulation", SimulationID(p.cfg.NamePrefix), "kubeconfig", p.cfg.Kubeconfig, "workers", p.cfg.Workers, "leaseWorkers", p.cfg.LeaseWorkers)
	p.set.Broadcaster.StartStructuredLogging(3)
	p.set.Broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.set.Events.CoreV1().Events("")})
	defer p.set.Broadcaster.Shutdown()
	foreignCtx, stopForeign := context.WithCancel(ctx)
	foreignDone := make(chan struct{})
	go func() {
		defer close(foreignDone)
		p.Simulator.stopForeignNodesEvery(foreignCtx, p.set.Client, clock.RealClock{}, ForeignCheckPeriod)
	}()
	devicesDone := p.runDeviceSlices(foreignCtx)
	err := p.Simulator.Run(ctx)
	stopForeign()
	<-foreignDone
	<-devicesDone
	klog.FromContext(ctx).Info("Shutting down nodeagent simulate")
	return err
}

// DebugHandler serves /debug/nodestatus for the simulated Nodes: every one, or those named
// by ?node= (repeatable).
func (p *Process) DebugHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		names := r.URL.Query()["node"]
		if len(names) == 0 {
			names = p.Simulator.Names()
		}
		node.DebugHandler(func() node.Report {
			rep := node.Report{Version: version.Get().GitVersion, StartedAt: p.cfg.ProcessStart}
			for _, name := range names {
				if ctrl := p.Simulator.Controller(name); ctrl != nil {
					rep.Nodes = append(rep.Nodes, ctrl.Status())
				}
			}
			return rep
		}).ServeHTTP(w, r)
	})
}
