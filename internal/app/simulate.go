package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/connrotation"
	logsapi "k8s.io/component-base/logs/api/v1"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/server"
	"github.com/nodeagent/nodeagent/pkg/simulation"
	"github.com/nodeagent/nodeagent/pkg/statussync"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// simulateAgentFlags are the agent's flags that apply to simulated Nodes (with the logging flags).
// The others describe this machine (--hostname-override, --node-ip, --root-dir, --max-pods, the
// reservations), its runtime (--container-runtime-endpoint) or modes the simulation has not
// (--companion, the problem monitors, --config): the template and the simulation flags replace them.
var simulateAgentFlags = []string{
	"kubeconfig", "node-labels", "register-with-taints", "register-schedulable",
	"node-status-update-frequency", "node-status-report-frequency", "node-lease-duration-seconds", "node-status-max-images",
	"healthz-bind-address", "healthz-port", "enable-profiling-handler", "kube-api-qps", "kube-api-burst",
}

// simulateOptions is the command line of `nodeagent simulate`.
type simulateOptions struct {
	agent          *config.Options
	nodes          int
	prefix         string
	templatePath   string
	simulatedTaint bool
	eventQPS       float32
	eventBurst     int32
	workers        int
	leaseWorkers   int
}

// simulateFlags returns the options and the flag set bound to them: the agent's flags that apply and
// the simulation's own.
func simulateFlags() (*simulateOptions, *pflag.FlagSet) {
	o := &simulateOptions{agent: &config.Options{Config: config.NewDefault()}, nodes: 100, prefix: "sim-node-",
		eventQPS: 50, eventBurst: 100, workers: 16, leaseWorkers: 16}
	agentFlags := config.BindFlags(o.agent)
	logFlags := pflag.NewFlagSet("logging", pflag.ContinueOnError)
	logsapi.AddFlags(&config.NewDefault().Logging, logFlags)
	fs := pflag.NewFlagSet("simulate", pflag.ContinueOnError)
	fs.IntVar(&o.nodes, "nodes", o.nodes, fmt.Sprintf("Number of Nodes to simulate, 1 to %d.", simulation.MaxNodes))
	fs.StringVar(&o.prefix, "node-name-prefix", o.prefix, "Prefix of the simulated Nodes' names: <prefix>0000, <prefix>0001, ...")
	fs.StringVar(&o.templatePath, "node-template", o.templatePath, "Node manifest (YAML) every simulated Node is made of: labels, taints, capacity, allocatable, nodeInfo, extra conditions, images (see docs/simulation.md); empty: 4 CPUs, 16Gi, 110 pods.")
	fs.BoolVar(&o.simulatedTaint, "simulated-taint", o.simulatedTaint, "Register every simulated Node with the taint "+taintText(simulation.SimulatedTaint)+", so that only pods that tolerate it are scheduled there.")
	fs.Float32Var(&o.eventQPS, "event-qps", o.eventQPS, "QPS of the client that writes Events (its own rate limit, as the kubelet's --event-qps); events beyond it are dropped, never the heartbeats.")
	fs.Int32Var(&o.eventBurst, "event-burst", o.eventBurst, "Burst of the Events client (as the kubelet's --event-burst).")
	fs.IntVar(&o.workers, "workers", o.workers, "Workers that run every simulated Node's runtime polls, status syncs and fast start-up updates, from one work queue.")
	fs.IntVar(&o.leaseWorkers, "lease-workers", o.leaseWorkers, "Workers that renew every simulated Node's Lease, from a work queue of their own, so that no status sync delays a Lease.")
	for _, name := range simulateAgentFlags {
		fs.AddFlag(agentFlags.Lookup(name))
	}
	logFlags.VisitAll(func(f *pflag.Flag) {
		if af := agentFlags.Lookup(f.Name); af != nil {
			fs.AddFlag(af)
		}
	})
	return o, fs
}

func taintText(t v1.Taint) string { return t.Key + "=" + t.Value + ":" + string(t.Effect) }

// newSimulateCommand returns `nodeagent simulate`.
func newSimulateCommand() *cobra.Command {
	o, fs := simulateFlags()
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Run many simulated Nodes in this process, each on the agent's own code path",
		Long: `simulate registers --nodes Nodes named <--node-name-prefix>0000... and keeps each of them true
exactly as a single nodeagent keeps its own: one per-node controller each (registration, the kubelet's
status setters, the status syncer, the fast start-up update, the Lease renewer, the CRI poller), over a
host made from --node-template and its own in-memory CRI runtime. Every Node carries the label
` + simulation.LabelSimulated + `=true. Pods bound to them are not run.

The agent's HTTP server also serves the control API, to loopback clients only:
  GET  /simulation/nodes            every Node's state
  POST /simulation/nodes/<name>     {"runtimeReady":false}, {"networkReady":false}, {"memoryPressure":true},
                                    {"diskPressure":true}, {"pidPressure":true}, {"stopped":true}, and back
The identity of --kubeconfig needs the RBAC in docs/simulation.md (create and watch Nodes, patch their
status, write Leases in kube-node-lease, Events); it is checked at start.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.agent.Flags = fs
			return runSimulate(cmd.Context(), o)
		},
	}
	cmd.Flags().AddFlagSet(fs)
	return cmd
}

// simulationConfig is a validated simulate command line.
type simulationConfig struct {
	*simulateOptions
	template *simulation.Template
}

// completeSimulate checks the whole command line and reads the template, before anything touches the
// cluster. The error names the flag (or the file) and the value.
func completeSimulate(o *simulateOptions) (*simulationConfig, error) {
	if err := simulation.ValidateNodes(o.nodes); err != nil {
		return nil, fmt.Errorf("--nodes %d: %w", o.nodes, err)
	}
	if err := simulation.ValidateNamePrefix(o.prefix); err != nil {
		return nil, fmt.Errorf("--node-name-prefix %q: %w", o.prefix, err)
	}
	if o.workers < 1 || o.workers > 1000 {
		return nil, fmt.Errorf("--workers %d: must be between 1 and 1000", o.workers)
	}
	if o.leaseWorkers < 1 || o.leaseWorkers > 1000 {
		return nil, fmt.Errorf("--lease-workers %d: must be between 1 and 1000", o.leaseWorkers)
	}
	if o.eventQPS <= 0 || o.eventBurst <= 0 {
		return nil, fmt.Errorf("--event-qps %v --event-burst %d: must be greater than 0", o.eventQPS, o.eventBurst)
	}
	if err := config.Validate(o.agent.Config); err != nil {
		return nil, err
	}
	c := &simulationConfig{simulateOptions: o, template: simulation.DefaultTemplate()}
	if o.templatePath != "" {
		t, err := simulation.LoadTemplate(o.templatePath)
		if err != nil {
			return nil, err
		}
		c.template = t
	}
	return c, nil
}

func runSimulate(ctx context.Context, o *simulateOptions) error {
	c, err := completeSimulate(o)
	if err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(&o.agent.Config.Logging, nil); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	defer klog.Flush()
	restConfig, err := loadRESTConfig(o.agent.Kubeconfig)
	if err != nil {
		return err
	}
	deps, err := newSimulateDeps(ctx, c, restConfig)
	if err != nil {
		return err
	}
	if err := checkSimulationAccess(ctx, deps.client, o.agent.Kubeconfig); err != nil {
		return err
	}
	if err := checkNamesFree(ctx, deps.client, o.prefix, o.nodes); err != nil {
		return err
	}

	cfg := o.agent.Config
	taints := append([]v1.Taint(nil), cfg.RegisterWithTaints...)
	if o.simulatedTaint {
		taints = append(taints, simulation.SimulatedTaint)
	}
	sim, err := simulation.New(simulation.Config{
		Nodes: o.nodes, NamePrefix: o.prefix, Template: c.template,
		Node: node.Config{
			Labels: cfg.NodeLabels, Taints: taints, Unschedulable: !*cfg.RegisterSchedulable,
			NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency.Duration, NodeStatusReportFrequency: cfg.NodeStatusReportFrequency.Duration,
			NodeLeaseDurationSeconds: cfg.NodeLeaseDurationSeconds, NodeStatusMaxImages: *cfg.NodeStatusMaxImages,
			AgentVersion: version.Get().GitVersion,
		},
		Dependencies: node.Dependencies{
			Client: deps.client, HeartbeatClient: deps.heartbeat, NodeLister: deps.informers.Core().V1().Nodes().Lister(),
			Cache: deps.tracker, Recorder: deps.recorder, Clock: deps.clock, Scheduler: deps.scheduler,
			Observer: simulationObserver{m: deps.metrics},
			// One probe for every simulated node (it reads the first node's Lease): after an outage, N
			// Leases resume together, at the cost of one GET per probe period while they wait.
			Serving: lease.NewServingProbe(deps.heartbeat, simulation.NodeName(o.prefix, 0), deps.clock, 0),
		},
		StartQPS: float64(*cfg.KubeAPIQPS), StartBurst: int(cfg.KubeAPIBurst),
	})
	if err != nil {
		return err
	}
	var srv *server.Server
	if *cfg.HealthzPort > 0 {
		srv, err = server.New(server.Config{
			BindAddress: cfg.HealthzBindAddress, Port: int(*cfg.HealthzPort), Metrics: deps.metrics.Handler(),
			SyncLoop: sim.Healthy, Registered: sim.Registered, EnableProfiling: cfg.EnableProfilingHandler, Flags: o.agent.Flags,
			Handlers: map[string]http.Handler{
				simulation.Path: server.LoopbackOnly(sim.Handler()),
				node.DebugPath:  simulationDebugHandler(sim),
			},
		})
		if err != nil {
			return fmt.Errorf("--healthz-bind-address %q --healthz-port %d: %w", cfg.HealthzBindAddress, *cfg.HealthzPort, err)
		}
	}
	return runSimulation(ctx, c, deps, sim, srv)
}

// runSimulation runs the server, the event sink, the Node informer and the simulator until ctx ends,
// then stops them (waiting at most 10 s for the controllers) and flushes events.
func runSimulation(ctx context.Context, c *simulationConfig, deps *simulateDeps, sim *simulation.Simulator, srv *server.Server) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting nodeagent simulate", "version", version.Get().GitVersion, "nodes", c.nodes, "prefix", c.prefix,
		"template", c.templatePath, "kubeconfig", c.agent.Kubeconfig)
	var wg sync.WaitGroup
	if srv != nil {
		wg.Go(func() {
			if err := srv.Run(ctx); err != nil {
				logger.Error(err, "Healthz server stopped")
			}
		})
	}
	deps.broadcaster.StartStructuredLogging(3)
	deps.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: deps.events.CoreV1().Events("")})
	deps.informers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), deps.informers.Core().V1().Nodes().Informer().HasSynced) {
		wg.Wait()
		deps.broadcaster.Shutdown()
		return nil // ctx ended first
	}
	wg.Go(func() { _ = sim.Run(ctx) })

	<-ctx.Done()
	logger.Info("Shutting down nodeagent simulate")
	done := make(chan struct{})
	go func() { wg.Wait(); deps.informers.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		logger.Info("Some simulated nodes did not stop within 10s; exiting anyway")
	}
	deps.broadcaster.Shutdown()
	return nil
}

// simulateDeps are built once for every simulated Node: the main client (rate-limited by
// --kube-api-qps/--kube-api-burst: registration and the informer), the heartbeat client (no rate
// limit: status and Leases, so registration never starves them), the events client (its own limit),
// one rotating dialer under all three, one Node informer selecting the simulated label and the cache
// tracker it feeds, one event broadcaster and recorder, metrics and the clock.
type simulateDeps struct {
	clock                     clock.WithTicker
	client, heartbeat, events kubernetes.Interface
	scheduler                 *node.Scheduler
	informers                 informers.SharedInformerFactory
	tracker                   *nodecache.Tracker
	broadcaster               record.EventBroadcaster
	recorder                  record.EventRecorder
	metrics                   *metrics.Metrics
}

func newSimulateDeps(ctx context.Context, c *simulationConfig, restConfig *rest.Config) (*simulateDeps, error) {
	cfg := c.agent.Config
	d := &simulateDeps{clock: clock.RealClock{}, metrics: metrics.New(processStart)}
	// The gauges that describe one Node would read 0 or flap between Nodes: not exported.
	for _, c := range []k8smetrics.Registerable{d.metrics.NodeReady, d.metrics.NodeCondition, d.metrics.RuntimeCondition,
		d.metrics.StartupDuration, d.metrics.LastStatusSync, d.metrics.NodeName} {
		d.metrics.Registry.Unregister(c)
	}
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	heartbeatTimeout := min(cfg.NodeStatusUpdateFrequency.Duration, time.Duration(cfg.NodeLeaseDurationSeconds)*time.Second)
	// One scheduler runs every simulated Node's steps; it closes the connections only when the
	// process's heartbeats fail as a whole (node.Heartbeats), as one agent whose heartbeats all fail.
	var err error
	if d.scheduler, err = node.NewScheduler(node.SchedulerConfig{
		Workers: c.workers, LeaseWorkers: c.leaseWorkers, Clock: d.clock, CloseAllConns: dialer.CloseAll,
	}); err != nil {
		return nil, err
	}
	restConfig.ContentType = "application/vnd.kubernetes.protobuf"
	restConfig.UserAgent = "nodeagent-simulate/" + version.Get().GitVersion
	restConfig.QPS, restConfig.Burst = *cfg.KubeAPIQPS, int(cfg.KubeAPIBurst)
	restConfig.Dial = dialer.DialContext
	if d.client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: building client: %w", c.agent.Kubeconfig, err)
	}
	heartbeatConfig := rest.CopyConfig(restConfig)
	heartbeatConfig.QPS = -1
	heartbeatConfig.Timeout = heartbeatTimeout
	if d.heartbeat, err = kubernetes.NewForConfig(heartbeatConfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: building heartbeat client: %w", c.agent.Kubeconfig, err)
	}
	eventConfig := rest.CopyConfig(restConfig)
	eventConfig.QPS, eventConfig.Burst = c.eventQPS, int(c.eventBurst)
	if d.events, err = kubernetes.NewForConfig(eventConfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: building events client: %w", c.agent.Kubeconfig, err)
	}

	d.tracker = nodecache.New(d.clock)
	d.informers = informers.NewSharedInformerFactoryWithOptions(d.client, 0,
		informers.WithTransform(nodecache.StripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = simulation.LabelSimulated + "=true" }))
	nodeInformer := d.informers.Core().V1().Nodes().Informer()
	if _, err := nodeInformer.AddEventHandler(d.tracker.EventHandler()); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	if err := nodeInformer.SetWatchErrorHandlerWithContext(d.tracker.WatchErrorHandler()); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	d.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	d.recorder = d.broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "nodeagent"})
	return d, nil
}

// simulationAccess is what the simulation's identity must be allowed to do, as SelfSubjectAccessReview
// attributes: register, read and watch Nodes, patch their status, and write their Leases.
var simulationAccess = []authorizationv1.ResourceAttributes{
	{Verb: "create", Resource: "nodes"},
	{Verb: "get", Resource: "nodes"},
	{Verb: "list", Resource: "nodes"},
	{Verb: "watch", Resource: "nodes"},
	{Verb: "patch", Resource: "nodes", Subresource: "status"},
	{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
	{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
	{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
}

// simulationEventAccess is what it should be allowed for Events; without it events are lost, nothing else.
var simulationEventAccess = []authorizationv1.ResourceAttributes{
	{Verb: "create", Resource: "events", Namespace: metav1.NamespaceDefault},
	{Verb: "patch", Resource: "events", Namespace: metav1.NamespaceDefault},
}

// checkSimulationAccess asks the API server whether the identity may do what the simulation does
// (SelfSubjectAccessReview) and refuses, naming what is missing, before any Node is created. A node
// identity (group system:nodes) is refused too: NodeRestriction lets it register only its own Node.
func checkSimulationAccess(ctx context.Context, client kubernetes.Interface, kubeconfig string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	user := "the identity of --kubeconfig"
	if r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		user = fmt.Sprintf("user %q", r.Status.UserInfo.Username)
		if slices.Contains(r.Status.UserInfo.Groups, "system:nodes") {
			return fmt.Errorf("--kubeconfig %q: %s is a node identity (group system:nodes), which may register only its own Node; "+
				"the simulation needs an identity with the RBAC in docs/simulation.md", kubeconfig, r.Status.UserInfo.Username)
		}
	}
	allowed := func(attrs authorizationv1.ResourceAttributes) (bool, error) {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("--kubeconfig %q: checking access (SelfSubjectAccessReview): %w", kubeconfig, err)
		}
		return r.Status.Allowed, nil
	}
	var missing []string
	for _, a := range simulationAccess {
		ok, err := allowed(a)
		if err != nil {
			return err
		}
		if !ok {
			missing = append(missing, accessText(a))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("--kubeconfig %q: %s may not %s; the simulation needs the RBAC in docs/simulation.md",
			kubeconfig, user, strings.Join(missing, ", "))
	}
	for _, a := range simulationEventAccess {
		if ok, err := allowed(a); err == nil && !ok {
			klog.FromContext(ctx).Info("Warning: events will not be recorded", "user", user, "missing", accessText(a))
		}
	}
	return nil
}

func accessText(a authorizationv1.ResourceAttributes) string {
	s := a.Verb + " " + a.Resource
	if a.Subresource != "" {
		s += "/" + a.Subresource
	}
	if a.Group != "" {
		s += "." + a.Group
	}
	if a.Namespace != "" {
		s += " in " + a.Namespace
	}
	return s
}

// checkNamesFree refuses names already taken by Nodes that are not simulated (no LabelSimulated=true):
// registration would otherwise adopt a real Node. Simulated Nodes of an earlier run are reused.
func checkNamesFree(ctx context.Context, client kubernetes.Interface, prefix string, nodes int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: simulation.LabelSimulated + "!=true"})
	if err != nil {
		return fmt.Errorf("listing nodes that are not simulated: %w", err)
	}
	for _, n := range list.Items {
		index, err := strconv.Atoi(strings.TrimPrefix(n.Name, prefix))
		if strings.HasPrefix(n.Name, prefix) && err == nil && index < nodes && n.Name == simulation.NodeName(prefix, index) {
			return fmt.Errorf("--node-name-prefix %q: node %s exists and is not simulated (no label %s=true); choose another prefix",
				prefix, n.Name, simulation.LabelSimulated)
		}
	}
	return nil
}

// simulationDebugHandler serves /debug/nodestatus for the simulated Nodes: every one, or those named
// by ?node= (repeatable).
func simulationDebugHandler(sim *simulation.Simulator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		names := r.URL.Query()["node"]
		if len(names) == 0 {
			names = sim.Names()
		}
		node.DebugHandler(func() node.Report {
			rep := node.Report{Version: version.Get().GitVersion, StartedAt: processStart}
			for _, name := range names {
				if ctrl := sim.Controller(name); ctrl != nil {
					rep.Nodes = append(rep.Nodes, ctrl.Status())
				}
			}
			return rep
		}).ServeHTTP(w, r)
	})
}

// simulationObserver feeds the process's metrics from every simulated Node: the counters and
// histograms add up; the gauges that describe one Node (node_ready, node_condition, runtime_condition,
// the last sync time, startup_to_ready, node_name) are not set, and not exported (newSimulateDeps).
type simulationObserver struct {
	m *metrics.Metrics
}

var _ node.Observer = simulationObserver{}

func (o simulationObserver) ObserveRuntimeStatus(err error, _, _ bool) {
	result := "success"
	if err != nil {
		result = "error"
	}
	o.m.RuntimeStatusCalls.WithLabelValues(result).Inc()
}

func (o simulationObserver) ObserveLeaseRenewal(d time.Duration) {
	o.m.ObserveLeaseRenewal(d)
}
func (o simulationObserver) ObserveLeaseError(reason string) { o.m.ObserveLeaseError(reason) }
func (o simulationObserver) ObserveRegistrationAttempt(result string) {
	o.m.ObserveRegistrationAttempt(result)
}

func (o simulationObserver) ObserveSync(_ string, r statussync.SyncResult) {
	o.m.NodeStatusSyncs.WithLabelValues(string(r.Result)).Inc()
	for _, p := range r.Patches {
		if p.Reason == "" {
			o.m.NodeStatusPatchDuration.WithLabelValues("success").Observe(p.Duration.Seconds())
		} else {
			o.m.NodeStatusPatchDuration.WithLabelValues("error").Observe(p.Duration.Seconds())
			o.m.NodeStatusPatchErrors.WithLabelValues(p.Reason).Inc()
		}
	}
}
