package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/cadvisor/lib/fs"
	"github.com/google/cadvisor/lib/machine"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/connrotation"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/registration"
	"github.com/nodeagent/nodeagent/pkg/server"
	"github.com/nodeagent/nodeagent/pkg/statussync"
	"github.com/nodeagent/nodeagent/pkg/systemd"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// maxWaitForContainerRuntime is the kubelet's threshold after which the runtime counts as down.
const maxWaitForContainerRuntime = 30 * time.Second

// Agent is one wired nodeagent. Build with New, run with Run.
type Agent struct {
	opts      *config.Options
	nodeName  string
	clock     clock.WithTicker
	startTime time.Time

	client          kubernetes.Interface
	informers       informers.SharedInformerFactory
	broadcaster     record.EventBroadcaster
	recorder        record.EventRecorder
	nodeRef         *v1.ObjectReference
	runtime         *criruntime.Client
	runtimeState    *criruntime.State
	poller          *criruntime.Poller
	evictionManager *eviction.Manager
	syncer          *statussync.Syncer
	renewer         *lease.Renewer
	server          *server.Server
	metrics         *metrics.Metrics

	lastLeaseRenew atomic.Int64 // unix nanos of the last successful Lease write
	nodeWatches    atomic.Int32 // watches on the Node open now (the informer's), see observeNodeWatches
	readyOnce      sync.Once
	firstPosted    atomic.Bool
}

// New checks the inputs that touch nothing (kubeconfig, root dir), then wires every component.
// It makes no API or CRI call: an unreachable API server or runtime is handled by Run's retries.
// Errors name the flag and the value.
func New(ctx context.Context, opts *config.Options) (*Agent, error) {
	c := opts.Config
	clk := clock.RealClock{}
	a := &Agent{opts: opts, clock: clk, startTime: processStartTime(clk), metrics: metrics.New()}

	hostname, err := nodeutil.GetHostname(c.HostnameOverride)
	if err != nil {
		return nil, fmt.Errorf("--hostname-override %q: %w", c.HostnameOverride, err)
	}
	a.nodeName = hostname
	a.metrics.NodeName.WithLabelValues(hostname).Set(1)

	restConfig, err := loadRESTConfig(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.RootDir, 0o750); err != nil {
		return nil, fmt.Errorf("--root-dir %q: %w", c.RootDir, err)
	}
	nodeIPs, _, err := nodeutil.ParseNodeIPArgument(c.NodeIP, c.CloudProvider)
	if err != nil {
		return nil, fmt.Errorf("--node-ip %q: %w", c.NodeIP, err)
	}
	systemReserved, _ := config.ParseReserved(c.SystemReserved) // validated by config.Load
	kubeReserved, _ := config.ParseReserved(c.KubeReserved)
	thresholds, _ := eviction.ParseThresholds(c.EvictionHard)

	// API clients: the main client (protobuf, rate-limited) for registration, informers and events;
	// the heartbeat client (no rate limit, timeout ≤ the lease duration, connections closed on
	// repeated failure) for node status and the Lease, as the kubelet's kubeDeps.HeartbeatClient.
	restConfig.ContentType = "application/vnd.kubernetes.protobuf"
	restConfig.UserAgent = "nodeagent/" + version.Get().GitVersion
	restConfig.QPS, restConfig.Burst = *c.KubeAPIQPS, int(c.KubeAPIBurst)
	mainConfig := rest.CopyConfig(restConfig)
	mainConfig.Wrap(a.observeNodeWatches)
	a.client, err = kubernetes.NewForConfig(mainConfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: building client: %w", opts.Kubeconfig, err)
	}
	heartbeatConfig := rest.CopyConfig(restConfig)
	heartbeatConfig.QPS = -1
	heartbeatConfig.Timeout = min(c.NodeStatusUpdateFrequency.Duration, time.Duration(c.NodeLeaseDurationSeconds)*time.Second)
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	heartbeatConfig.Dial = dialer.DialContext
	heartbeatConfig.Wrap(a.observeLeaseRequests)
	heartbeatClient, err := kubernetes.NewForConfig(heartbeatConfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: building heartbeat client: %w", opts.Kubeconfig, err)
	}

	// One informer on this Node only, for the status syncer's first try and the fast path.
	a.informers = informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.nodeName).String()
		}))
	nodeLister := a.informers.Core().V1().Nodes().Lister()
	// Any event means the informer's watch is live and its cache current (see ListerMayBeStale).
	listerUpdated := func() {
		if a.syncer != nil {
			a.syncer.ListerUpdated()
		}
	}
	if _, err := a.informers.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { listerUpdated() },
		UpdateFunc: func(any, any) { listerUpdated() },
		DeleteFunc: func(any) { listerUpdated() },
	}); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}

	// Events on the Node, as the kubelet's recorder (component "nodeagent", host = node name).
	a.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	a.recorder = a.broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "nodeagent", Host: a.nodeName})
	a.nodeRef = &v1.ObjectReference{Kind: "Node", Name: a.nodeName, UID: types.UID(a.nodeName)}
	recordNodeStatusEvent := func(eventType, reason string) {
		a.recorder.Eventf(a.nodeRef, eventType, reason, "Node %s status is now: %s", a.nodeName, reason)
	}
	recordEvent := func(eventType, reason, message string) {
		a.recorder.Event(a.nodeRef, eventType, reason, message)
	}

	// Container runtime. Calls made from setters get a short timeout so that a hung runtime cannot
	// stall the status sync (the poller's Status calls keep the full --runtime-request-timeout).
	var lastRuntimeState [3]bool
	setterCallTimeout := min(c.RuntimeRequestTimeout.Duration, 5*time.Second)
	a.runtime = criruntime.NewClient(c.ContainerRuntimeEndpoint, c.ImageServiceEndpoint, c.RuntimeRequestTimeout.Duration)
	a.runtimeState = criruntime.NewState(clk, maxWaitForContainerRuntime)
	a.poller, err = criruntime.NewPoller(criruntime.PollerConfig{
		Runtime: a.runtime, State: a.runtimeState, Clock: clk,
		OnStatus: func(err error, runtimeReady, networkReady bool) {
			if err != nil {
				a.metrics.RuntimeStatusCalls.WithLabelValues("error").Inc()
			} else {
				a.metrics.RuntimeStatusCalls.WithLabelValues("success").Inc()
			}
			a.metrics.SetRuntimeCondition("RuntimeReady", runtimeReady)
			a.metrics.SetRuntimeCondition("NetworkReady", networkReady)
			// Post a readiness change at once instead of up to one status period later.
			if state := [3]bool{err == nil, runtimeReady, networkReady}; state != lastRuntimeState {
				lastRuntimeState = state
				if a.syncer != nil {
					a.syncer.Trigger()
				}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	var runtimeName atomic.Value
	runtimeName.Store(runtimeTypeFromEndpoint(c.ContainerRuntimeEndpoint))
	runtimeVersion := func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, setterCallTimeout)
		defer cancel()
		v, err := a.runtime.Version(ctx)
		if err != nil {
			return "", err
		}
		runtimeName.Store(v.RuntimeName)
		return v.RuntimeVersion, nil
	}

	// Host: cadvisor machine info (read once, retried until it succeeds) and filesystems.
	fsInfo, err := fs.NewFsInfo(fs.Context{})
	if err != nil {
		return nil, fmt.Errorf("cadvisor filesystem info: %w", err)
	}
	machineInfo := cachedMachineInfo(fsInfo)
	ephemeralCapacity := func() (resource.Quantity, error) {
		f, err := eviction.DirFs(fsInfo, c.RootDir)
		if err != nil {
			return resource.Quantity{}, err
		}
		return *resource.NewQuantity(int64(f.Capacity), resource.BinarySI), nil
	}
	observer := &eviction.HostObserver{FsInfo: fsInfo, RootDir: c.RootDir, ImageFsDir: a.imageFsDir}
	a.evictionManager, err = eviction.New(eviction.Config{
		Thresholds: thresholds, Observe: observer.Observe, Clock: clk,
		Period: 10 * time.Second, PressureTransitionPeriod: 5 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	reservation := func(capacity v1.ResourceList) v1.ResourceList {
		return allocatableReservation(capacity, systemReserved, kubeReserved, thresholds)
	}

	// The setters, in the kubelet's order (defaultNodeStatusFuncs).
	setters := []nodestatus.Setter{
		nodestatus.NodeAddress(nodeIPs, nodestatus.ValidateNodeIP, hostname, c.CloudProvider == "external", utilnet.ResolveBindAddress, net.LookupIP),
		nodestatus.MachineInfo(a.nodeName, int(c.EffectiveMaxPods()), machineInfo, ephemeralCapacity, reservation, recordEvent),
		nodestatus.VersionInfo(machine.KernelVersion, machine.ContainerOsVersion, func() string { return runtimeName.Load().(string) },
			runtimeVersion, version.Get().GitVersion),
		nodestatus.DaemonEndpoints(&v1.NodeDaemonEndpoints{}),
		nodestatus.Images(*c.NodeStatusMaxImages, func(ctx context.Context) ([]nodestatus.Image, error) {
			ctx, cancel := context.WithTimeout(ctx, setterCallTimeout)
			defer cancel()
			return a.listImages(ctx)
		}),
		nodestatus.GoRuntime(),
		nodestatus.RuntimeHandlers(a.runtimeState.RuntimeHandlers),
		nodestatus.NodeFeatures(a.runtimeState.RuntimeFeatures),
		nodestatus.MemoryPressureCondition(clk.Now, a.evictionManager.IsUnderMemoryPressure, recordNodeStatusEvent),
		nodestatus.DiskPressureCondition(clk.Now, a.evictionManager.IsUnderDiskPressure, recordNodeStatusEvent),
		nodestatus.PIDPressureCondition(clk.Now, a.evictionManager.IsUnderPIDPressure, recordNodeStatusEvent),
		nodestatus.ReadyCondition(clk.Now, a.runtimeState.RuntimeErrors, a.runtimeState.NetworkErrors, a.runtimeState.StorageErrors, recordNodeStatusEvent),
		nodestatus.SchedulableEvent(recordNodeStatusEvent),
	}

	var register func(ctx context.Context) error
	if *c.RegisterNode {
		registrar, err := registration.New(registration.Config{
			Client: a.client, NodeName: a.nodeName, Hostname: hostname,
			Labels: c.NodeLabels, Taints: c.RegisterWithTaints, Unschedulable: !*c.RegisterSchedulable,
			ExternalCloudProvider: c.CloudProvider == "external", ProviderID: c.ProviderID,
			// The initial Node carries a full first status: the syncer's setters (assigned below,
			// before Run starts anything).
			SetStatus: func(ctx context.Context, node *v1.Node) { a.syncer.SetNodeStatus(ctx, node) },
			Clock:     clk,
			OnAttempt: func(result string) { a.metrics.RegistrationAttempts.WithLabelValues(result).Inc() },
		})
		if err != nil {
			return nil, err
		}
		register = registrar.Register
	}

	a.syncer, err = statussync.New(statussync.Config{
		Client: heartbeatClient, Lister: nodeLister, NodeName: a.nodeName, Setters: setters, Register: register,
		UpdateRuntimeUp: a.poller.UpdateRuntimeUp,
		UpdateFrequency: c.NodeStatusUpdateFrequency.Duration, ReportFrequency: c.NodeStatusReportFrequency.Duration,
		OnRepeatedHeartbeatFailure: dialer.CloseAll,
		CacheLive:                  func() bool { return a.nodeWatches.Load() > 0 },
		OnPatched:                  a.onPatched,
		OnUnchanged:                a.onPatched,
		OnSync:                     func(result string) { a.metrics.NodeStatusSyncs.WithLabelValues(result).Inc() },
		ObservePatch:               a.metrics.ObservePatch,
		Clock:                      clk,
	})
	if err != nil {
		return nil, err
	}
	a.renewer, err = lease.New(lease.Config{
		Client: heartbeatClient, Lister: nodeLister, NodeName: a.nodeName,
		LeaseDurationSeconds: c.NodeLeaseDurationSeconds, OnRepeatedHeartbeatFailure: dialer.CloseAll, Clock: clk,
	})
	if err != nil {
		return nil, err
	}
	if *c.HealthzPort > 0 {
		a.server, err = server.New(server.Config{
			BindAddress: c.HealthzBindAddress, Port: int(*c.HealthzPort), Metrics: a.metrics.Handler(),
			SyncLoop: a.syncLoopHealthy, Registered: a.registeredHealthy, EnableProfiling: c.EnableProfilingHandler,
		})
		if err != nil {
			return nil, fmt.Errorf("--healthz-bind-address %q --healthz-port %d: %w", c.HealthzBindAddress, *c.HealthzPort, err)
		}
	}
	return a, nil
}

// Run starts every loop and blocks until ctx ends; then it stops them, waiting at most 5 s, flushes
// events and returns nil. The order mirrors Kubelet.Run: one runtime check and one eviction
// observation first, so the first status (at registration) is already Ready when the runtime is.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.nodeName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting nodeagent", "version", version.Get().GitVersion, "runtimeEndpoint", a.opts.Config.ContainerRuntimeEndpoint)

	a.broadcaster.StartStructuredLogging(3)
	a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	a.recorder.Eventf(a.nodeRef, v1.EventTypeNormal, "Starting", "Starting nodeagent.")

	a.poller.UpdateRuntimeUp(ctx)
	if err := a.evictionManager.Synchronize(ctx); err != nil {
		logger.Error(err, "Eviction manager: some signals could not be observed")
	}
	a.informers.Start(ctx.Done())

	var wg sync.WaitGroup
	goRun := func(f func(ctx context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	if a.server != nil {
		goRun(func(ctx context.Context) {
			if err := a.server.Run(ctx); err != nil {
				logger.Error(err, "Healthz server stopped")
			}
		})
	}
	goRun(a.syncer.Run)
	goRun(func(ctx context.Context) {
		a.syncer.FastStatusUpdateOnce(ctx)
		// From now on a runtime that is not ready is news: log it at the default level (the
		// kubelet's containerRuntimeReadyExpected).
		a.poller.SetReadyExpected()
	})
	goRun(a.poller.Run)
	goRun(a.evictionManager.Run)
	goRun(func(ctx context.Context) {
		// The Lease is renewed only once the Node exists, so its owner reference can be set; the
		// kubelet starts its lease controller alongside registration too.
		for !a.syncer.Registered() {
			select {
			case <-ctx.Done():
				return
			case <-a.clock.After(50 * time.Millisecond):
			}
		}
		a.renewer.Run(ctx)
	})
	goRun(func(ctx context.Context) {
		if err := systemd.Ready(ctx); err != nil {
			logger.Error(err, "sd_notify READY failed")
		}
		if err := systemd.RunWatchdog(ctx, a.clock, a.syncLoopHealthy); err != nil {
			logger.Error(err, "systemd watchdog stopped")
		}
	})

	<-ctx.Done()
	logger.Info("Shutting down nodeagent")
	_ = systemd.Stopping()
	done := make(chan struct{})
	go func() { wg.Wait(); a.informers.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		logger.Info("Some loops did not stop within 5s; exiting anyway")
	}
	a.broadcaster.Shutdown()
	return nil
}

// onPatched updates the Ready metrics, last-sync time and start-up duration from the Node as the API
// server has it after a successful sync: the one a patch returned, or the one read when the status was
// unchanged (a Node created Ready at registration is not patched again until the report period).
func (a *Agent) onPatched(node *v1.Node) {
	a.firstPosted.Store(true)
	a.metrics.LastStatusSync.Set(float64(a.clock.Now().Unix()))
	ready := false
	for _, cond := range node.Status.Conditions {
		for _, s := range []v1.ConditionStatus{v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown} {
			v := 0.0
			if cond.Status == s {
				v = 1
			}
			a.metrics.NodeCondition.WithLabelValues(string(cond.Type), string(s)).Set(v)
		}
		if cond.Type == v1.NodeReady && cond.Status == v1.ConditionTrue {
			ready = true
		}
	}
	if ready {
		a.metrics.NodeReady.Set(1)
		a.readyOnce.Do(func() { a.metrics.StartupDuration.Set(a.clock.Since(a.startTime).Seconds()) })
	} else {
		a.metrics.NodeReady.Set(0)
	}
}

// syncLoopHealthy fails when the last successful status sync or Lease renewal is older than three of
// its periods (counted from start before the first one): 30 s each with the defaults.
func (a *Agent) syncLoopHealthy() error {
	now := a.clock.Now()
	statusBound := 3 * a.opts.Config.NodeStatusUpdateFrequency.Duration
	leaseBound := 3 * a.renewer.RenewInterval()
	last := a.syncer.LastSync()
	if last.IsZero() {
		last = a.startTime
	}
	var problems []string
	if age := now.Sub(last); age > statusBound {
		problems = append(problems, fmt.Sprintf("last node status sync %s ago, bound %s", age.Round(time.Second), statusBound))
	}
	lastLease := time.Unix(0, a.lastLeaseRenew.Load())
	if a.lastLeaseRenew.Load() == 0 {
		lastLease = a.startTime
	}
	if age := now.Sub(lastLease); age > leaseBound {
		problems = append(problems, fmt.Sprintf("last lease renewal %s ago, bound %s", age.Round(time.Second), leaseBound))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// registeredHealthy is /readyz's check: the Node is registered and a status has been posted.
func (a *Agent) registeredHealthy() error {
	if !a.syncer.Registered() {
		return fmt.Errorf("node %q not registered yet", a.nodeName)
	}
	if !a.firstPosted.Load() && a.syncer.LastSync().IsZero() {
		return fmt.Errorf("node %q status not posted yet", a.nodeName)
	}
	return nil
}

// observeLeaseRequests wraps the heartbeat transport to time Lease writes (for the lease metrics and
// the syncloop check): the component-helpers lease controller has no hooks of its own.
func (a *Agent) observeLeaseRequests(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if !strings.Contains(req.URL.Path, "/leases") {
			return rt.RoundTrip(req)
		}
		// Writes are renewals; a GET is the controller looking for its Lease before creating it again
		// (after failures), where 404 is the expected answer, not an error.
		isGet := req.Method == http.MethodGet
		start := a.clock.Now()
		resp, err := rt.RoundTrip(req)
		switch {
		case err != nil:
			a.metrics.LeaseRenewErrors.WithLabelValues("Transport").Inc()
			a.listerMayBeStale()
		case isGet && resp.StatusCode == http.StatusNotFound:
		case resp.StatusCode >= 300:
			a.metrics.LeaseRenewErrors.WithLabelValues(http.StatusText(resp.StatusCode)).Inc()
			if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
				a.listerMayBeStale()
			}
		case isGet:
		default:
			a.metrics.LeaseRenewDuration.Observe(a.clock.Since(start).Seconds())
			a.lastLeaseRenew.Store(a.clock.Now().UnixNano())
		}
		return resp, err
	})
}

// observeNodeWatches wraps the main client's transport to count the Node watches open now: the
// informer's cache is only current while its watch is open. When one ends (the API server went
// away, or ended it with an error such as "too old resource version") the informer reconnects with a
// backoff of up to a minute, so the status syncer is told its cache may be stale.
func (a *Agent) observeNodeWatches(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.URL.Path != "/api/v1/nodes" || req.URL.Query().Get("watch") == "" {
			return rt.RoundTrip(req)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		a.nodeWatches.Add(1)
		var once sync.Once
		resp.Body = &watchBody{ReadCloser: resp.Body, done: func() {
			once.Do(func() {
				a.nodeWatches.Add(-1)
				a.listerMayBeStale()
			})
		}}
		return resp, nil
	})
}

// watchBody is a watch response body that calls done once the stream ends or is closed.
type watchBody struct {
	io.ReadCloser
	done func()
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *watchBody) Close() error {
	b.done()
	return b.ReadCloser.Close()
}

// listerMayBeStale tells the status syncer that the API server could not be reached, so the Node
// informer may have missed changes (see statussync.Syncer.ListerMayBeStale).
func (a *Agent) listerMayBeStale() {
	if a.syncer != nil {
		a.syncer.ListerMayBeStale()
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// listImages returns the runtime's images (CRI ListImages) for the Images setter.
func (a *Agent) listImages(ctx context.Context) ([]nodestatus.Image, error) {
	images, err := a.runtime.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]nodestatus.Image, 0, len(images))
	for _, img := range images {
		out = append(out, nodestatus.Image{RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: int64(img.GetSize())})
	}
	return out, nil
}

// imageFsDir returns the mount point of the runtime's image filesystem (CRI ImageFsInfo), or "".
func (a *Agent) imageFsDir(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, min(a.opts.Config.RuntimeRequestTimeout.Duration, 5*time.Second))
	defer cancel()
	resp, err := a.runtime.ImageFsInfo(ctx)
	if err != nil {
		return ""
	}
	for _, f := range resp.GetImageFilesystems() {
		if mp := f.GetFsId().GetMountpoint(); mp != "" {
			return mp
		}
	}
	return ""
}

// loadRESTConfig loads --kubeconfig, or the in-cluster config when it is empty. The error names the flag.
func loadRESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig not set and no in-cluster config: %w", err)
		}
		return cfg, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", path, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", path, err)
	}
	return cfg, nil
}

// cachedMachineInfo returns a func that reads cadvisor machine info once it succeeds and then serves
// the cached copy, as the kubelet's GetCachedMachineInfo.
func cachedMachineInfo(fsInfo fs.FsInfo) func() (*cadvisorapi.MachineInfo, error) {
	var mu sync.Mutex
	var cached *cadvisorapi.MachineInfo
	return func() (*cadvisorapi.MachineInfo, error) {
		mu.Lock()
		defer mu.Unlock()
		if cached != nil {
			return cached, nil
		}
		info, err := machine.Info(sysfs.NewRealSysFs(), fsInfo, true)
		if err != nil {
			return nil, fmt.Errorf("cadvisor machine info: %w", err)
		}
		cached = info
		return info, nil
	}
}

// allocatableReservation is capacity's reservation: system-reserved + kube-reserved + the hard
// eviction thresholds for memory and ephemeral-storage, as the kubelet's GetNodeAllocatableReservation.
func allocatableReservation(capacity, systemReserved, kubeReserved v1.ResourceList, thresholds []eviction.Threshold) v1.ResourceList {
	out := v1.ResourceList{}
	add := func(name v1.ResourceName, q resource.Quantity) {
		v := out[name]
		v.Add(q)
		out[name] = v
	}
	for _, rl := range []v1.ResourceList{systemReserved, kubeReserved} {
		for k, v := range rl {
			add(k, v)
		}
	}
	if mem, ok := capacity[v1.ResourceMemory]; ok {
		if v := eviction.ReservedMemory(thresholds, mem.Value()); v > 0 {
			add(v1.ResourceMemory, *resource.NewQuantity(v, resource.BinarySI))
		}
	}
	if eph, ok := capacity[v1.ResourceEphemeralStorage]; ok {
		if v := eviction.ReservedEphemeralStorage(thresholds, eph.Value()); v > 0 {
			add(v1.ResourceEphemeralStorage, *resource.NewQuantity(v, resource.BinarySI))
		}
	}
	return out
}

// runtimeTypeFromEndpoint guesses the runtime's name from its socket path until the runtime answers
// Version ("containerd" for .../containerd.sock), for containerRuntimeVersion while it is down.
func runtimeTypeFromEndpoint(endpoint string) string {
	switch {
	case strings.Contains(endpoint, "crio"):
		return "cri-o"
	default:
		return "containerd"
	}
}

// startedAt is taken when the package initialises, the closest the process can see to its own start.
var startedAt = clock.RealClock{}.Now()

// processStartTime returns when this process started (package init), for the time-to-Ready metric.
func processStartTime(clock.PassiveClock) time.Time { return startedAt }
