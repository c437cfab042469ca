package simulation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/apiclient"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// DefaultWorkersFor returns the scheduler's pools for n Nodes: one step worker per 100 Nodes (16 to
// 64: the status syncs are mostly local work) and one Lease worker per 20 Nodes (16 to 256: each holds
// one Lease write in flight, and n Nodes need n/10 writes a second; at 5000 Nodes, 16 workers could not
// keep up once the API server answered in 30 ms, and Lease renewals fell to p99 31 s).
func DefaultWorkersFor(n int) (workers, leaseWorkers int) {
	return min(max(n/100, 16), 64), min(max(n/20, 16), 256)
}

// ProcessConfig is a validated `nodeagent simulate` command line: the Nodes and how to reach the
// API server.
type ProcessConfig struct {
	// Nodes, NamePrefix, Template and Node are the Simulator's (see Config).
	Nodes      int
	NamePrefix string
	Template   *Template
	Node       node.Config
	// REST is the API server and the simulation's identity; Kubeconfig names it in errors.
	REST       *rest.Config
	Kubeconfig string
	// QPS and Burst limit the main client (registration, the informer; --kube-api-qps and
	// --kube-api-burst); EventQPS and EventBurst the events client (--event-qps, --event-burst).
	QPS        float32
	Burst      int
	EventQPS   float32
	EventBurst int
	// Workers and LeaseWorkers size the scheduler's pools (--workers, --lease-workers); 0 sizes them
	// by Nodes (DefaultWorkersFor).
	Workers, LeaseWorkers int
	// ProcessStart is when the process started (metrics, /debug/nodestatus).
	ProcessStart time.Time
}

// Process is one `nodeagent simulate`: the API clients and Node informer (selecting LabelSimulated),
// the metrics, the scheduler and the Simulator. Build with NewProcess, check with Preflight, run
// with Run.
type Process struct {
	cfg       ProcessConfig
	set       *apiclient.Set
	Metrics   *metrics.Metrics
	Scheduler *node.Scheduler
	Simulator *Simulator
}

// NewProcess builds the process's clients, metrics, scheduler and Simulator. It makes no API call.
// Errors name what could not be built.
func NewProcess(ctx context.Context, cfg ProcessConfig) (*Process, error) {
	clk := clock.RealClock{}
	heartbeatTimeout := min(cfg.Node.NodeStatusUpdateFrequency, time.Duration(cfg.Node.NodeLeaseDurationSeconds)*time.Second)
	set, err := apiclient.New(ctx, apiclient.Config{
		REST: cfg.REST, UserAgent: "nodeagent-simulate/" + version.Get().GitVersion, QPS: cfg.QPS, Burst: cfg.Burst,
		HeartbeatTimeout: heartbeatTimeout, EventQPS: cfg.EventQPS, EventBurst: cfg.EventBurst,
		NodeLabelSelector: LabelSimulated + "=true", Clock: clk,
	})
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", cfg.Kubeconfig, err)
	}
	p := &Process{cfg: cfg, set: set, Metrics: metrics.New(cfg.ProcessStart)}
	if cfg.Workers == 0 || cfg.LeaseWorkers == 0 {
		w, lw := DefaultWorkersFor(cfg.Nodes)
		cfg.Workers, cfg.LeaseWorkers = cmp.Or(cfg.Workers, w), cmp.Or(cfg.LeaseWorkers, lw)
		p.cfg = cfg
	}
	// One scheduler runs every simulated Node's steps; it closes the connections only when the
	// process's heartbeats fail as a whole (node.Heartbeats), as one agent whose heartbeats all fail.
	if p.Scheduler, err = node.NewScheduler(node.SchedulerConfig{
		Workers: cfg.Workers, LeaseWorkers: cfg.LeaseWorkers, Clock: clk, CloseAllConns: set.CloseAllConns,
	}); err != nil {
		return nil, err
	}
	p.Simulator, err = New(Config{
		Nodes: cfg.Nodes, NamePrefix: cfg.NamePrefix, Template: cfg.Template, Node: cfg.Node,
		Dependencies: node.Dependencies{
			Client: set.Client, HeartbeatClient: set.Heartbeat, NodeLister: set.Informers.Core().V1().Nodes().Lister(),
			Cache: set.NodeCache, Recorder: set.Broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "nodeagent"}),
			Clock: clk, Scheduler: p.Scheduler, Observer: p.Metrics.ManyNodes(), Instance: node.ProcessInstance(),
			// One probe for every simulated node (it reads the first node's Lease): after an outage, N
			// Leases resume together, at the cost of one GET per probe period while they wait.
			Serving: lease.NewServingProbe(set.Heartbeat, NodeName(cfg.NamePrefix, 0), clk, 0),
		},
		StartQPS: float64(cfg.QPS), StartBurst: cfg.Burst,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Preflight asks the API server whether the identity may do what the simulation does (CheckAccess)
// and whether the names are free (CheckNamesFree), before anything is written.
func (p *Process) Preflight(ctx context.Context) error {
	if err := CheckAccess(ctx, p.set.Client, p.cfg.Kubeconfig); err != nil {
		return err
	}
	return CheckNamesFree(ctx, p.set.Client, p.cfg.NamePrefix, p.cfg.Nodes)
}

// Run runs the event sink, the Node informer and, once it has synced, the Simulator (and so the
// scheduler) until ctx ends; then it stops them and flushes the events. It returns nil, or the
// Simulator's error.
func (p *Process) Run(ctx context.Context) error {
	klog.FromContext(ctx).Info("Starting nodeagent simulate", "version", version.Get().GitVersion, "nodes", p.cfg.Nodes,
		"prefix", p.cfg.NamePrefix, "kubeconfig", p.cfg.Kubeconfig, "workers", p.cfg.Workers, "leaseWorkers", p.cfg.LeaseWorkers)
	p.set.Broadcaster.StartStructuredLogging(3)
	p.set.Broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.set.Events.CoreV1().Events("")})
	defer p.set.Broadcaster.Shutdown()
	p.set.Informers.Start(ctx.Done())
	defer p.set.Informers.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), p.set.Informers.Core().V1().Nodes().Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("node informer did not sync")
	}
	err := p.Simulator.Run(ctx)
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
