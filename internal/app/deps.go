package app

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/apiclient"
	"github.com/nodeagent/nodeagent/pkg/certificate"
	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/host"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/problem"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// Dependencies are built once per process, as the kubelet's kubelet.Dependencies: the API clients
// (sharing one rotating dialer), the Node informer and the cache tracker it feeds, the event
// broadcaster, the CRI connection, the host and its eviction manager, metrics and the clock.
type Dependencies struct {
	Clock           clock.WithTicker
	Client          kubernetes.Interface
	HeartbeatClient kubernetes.Interface
	// CloseAllConns closes every API connection (the kubelet's closeAllConns), which also resets the
	// informer's watch.
	CloseAllConns func()
	Informers     informers.SharedInformerFactory
	NodeCache     *nodecache.Tracker
	Broadcaster   record.EventBroadcaster
	Recorder      record.EventRecorder
	Runtime       *criruntime.Client
	// Machine and Eviction are nil in companion mode (the kubelet owns capacity and pressure).
	Machine  *host.Machine
	Eviction *eviction.Manager
	Metrics  *metrics.Metrics
	// Certificates obtains (TLS bootstrap) and rotates the client certificate the clients present;
	// nil without --bootstrap-kubeconfig and --rotate-certificates. Its Healthy is a /healthz check.
	Certificates *certificate.Manager
	// Problems runs the node-problem-detector monitors of --config.custom-plugin-monitor and
	// --config.system-log-monitor; nil without any. When one of their conditions changes they call
	// the Trigger of what the agent runs (its Node's status sync, or companion mode's patch), set by
	// SetProblemTrigger once that is built.
	Problems       *problem.Manager
	problemTrigger atomic.Pointer[func()]

	recordersMu sync.Mutex
	recorders   map[string]record.EventRecorder
}

// SetProblemTrigger sets what a problem monitor's condition change calls: the status sync's
// Trigger, or companion mode's. The problem monitors are built first (their setters are the Node's),
// so it is set once the Node or companion mode is built; changes before that are seen by the first
// sync anyway.
func (d *Dependencies) SetProblemTrigger(trigger func()) { d.problemTrigger.Store(&trigger) }

// RecorderFor returns the event recorder whose source component is component (e.g. a problem
// monitor's "kernel-monitor"), host the node name, as NPD records its events.
func (d *Dependencies) RecorderFor(component, host string) record.EventRecorder {
	d.recordersMu.Lock()
	defer d.recordersMu.Unlock()
	if r, ok := d.recorders[component]; ok {
		return r
	}
	r := d.Broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: component, Host: host})
	d.recorders[component] = r
	return r
}

// NewDependencies builds the Dependencies for cfg. It makes no API or CRI call, except that once
// every check has passed the certificate manager (with --bootstrap-kubeconfig or
// --rotate-certificates) starts requesting a certificate in the background, and the CRI connection
// starts connecting (no call). The error names the flag and the value
// (--kubeconfig, --bootstrap-kubeconfig, --cert-dir, --rotate-certificates, --root-dir,
// --container-runtime-endpoint).
func NewDependencies(ctx context.Context, cfg *config.Completed) (*Dependencies, error) {
	c := cfg.Config
	d := &Dependencies{Clock: clock.RealClock{}, Metrics: metrics.New(processStart), recorders: map[string]record.EventRecorder{}}
	d.Metrics.NodeName.WithLabelValues(cfg.NodeName).Set(1)

	if err := os.MkdirAll(c.RootDir, 0o750); err != nil {
		return nil, fmt.Errorf("--root-dir %q: %w", c.RootDir, err)
	}
	var restConfig *rest.Config
	var closeAllConns func()
	var err error
	if cfg.BootstrapKubeconfig != "" || c.RotateCertificates {
		// TLS bootstrap and rotation, as the kubelet's buildKubeletClientConfig: the clients present
		// the certificate manager's current certificate, and its rotating dialer's connections are
		// closed when it changes.
		if d.Certificates, err = certificate.New(certificate.Config{
			NodeName: cfg.NodeName, Kubeconfig: cfg.Kubeconfig, BootstrapKubeconfig: cfg.BootstrapKubeconfig,
			CertDir: cfg.EffectiveCertDir(), Rotate: c.RotateCertificates, Registry: d.Metrics.Registry,
		}); err != nil {
			return nil, err
		}
		restConfig = d.Certificates.RESTConfig()
		closeAllConns = d.Certificates.CloseAllConns
	} else if restConfig, err = loadRESTConfig(cfg.Kubeconfig); err != nil {
		return nil, err
	}
	// The main client (protobuf, rate-limited) registers and watches; the heartbeat client (no rate
	// limit, timeout ≤ the lease duration) posts status and renews the Lease; one informer on this
	// Node only, and the tracker that hears its events and watch errors.
	set, err := apiclient.New(ctx, apiclient.Config{
		REST: restConfig, CloseAllConns: closeAllConns, UserAgent: "nodeagent/" + version.Get().GitVersion,
		QPS: *c.KubeAPIQPS, Burst: int(c.KubeAPIBurst),
		HeartbeatTimeout: min(c.NodeStatusUpdateFrequency.Duration, time.Duration(c.NodeLeaseDurationSeconds)*time.Second),
		NodeName:         cfg.NodeName, Clock: d.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", cfg.Kubeconfig, err)
	}
	d.Client, d.HeartbeatClient, d.CloseAllConns = set.Client, set.Heartbeat, set.CloseAllConns
	d.Informers, d.NodeCache, d.Broadcaster = set.Informers, set.NodeCache, set.Broadcaster

	// Events on the Node, as the kubelet's recorder (component "nodeagent", host = node name).
	d.Recorder = d.RecorderFor("nodeagent", cfg.NodeName)

	// Problem monitors: their configs are checked here, before anything touches the cluster.
	if len(c.CustomPluginMonitors)+len(c.SystemLogMonitors) > 0 {
		nodeRef := nodeRef(cfg.NodeName)
		if d.Problems, err = problem.New(problem.Config{
			CustomPluginMonitors: c.CustomPluginMonitors, SystemLogMonitors: c.SystemLogMonitors, Clock: d.Clock,
			Recorder: func(eventType, reason, message, source string) {
				d.RecorderFor(source, cfg.NodeName).Event(nodeRef, eventType, reason, message)
			},
			Metrics: d.Metrics.Registry,
			OnChange: func() {
				if trigger := d.problemTrigger.Load(); trigger != nil {
					(*trigger)()
				}
			},
		}); err != nil {
			return nil, err
		}
		d.Metrics.AddConditionTypes(d.Problems.ConditionTypes()...)
	}

	if d.Runtime, err = criruntime.Dial(c.ContainerRuntimeEndpoint, c.ImageServiceEndpoint, c.RuntimeRequestTimeout.Duration); err != nil {
		return nil, fmt.Errorf("--container-runtime-endpoint %q: %w", c.ContainerRuntimeEndpoint, err)
	}
	// The host (cadvisor) and the eviction manager feed the Node's capacity and pressure, which the
	// kubelet owns in companion mode: there they are neither built nor run.
	if !c.Companion {
		if d.Machine, err = host.New(c.RootDir); err != nil {
			return nil, err
		}
		if err := checkNodeAllocatable(ctx, cfg, d.Machine); err != nil {
			return nil, err
		}
		observer := &eviction.HostObserver{FsInfo: d.Machine.FsInfo(), RootDir: c.RootDir,
			ImageFsDir: host.ImageFsDir(d.Runtime, node.StatusCallTimeout)}
		if d.Eviction, err = eviction.New(eviction.Config{
			Thresholds: cfg.EvictionHard, Observe: observer.Observe, Clock: d.Clock,
			Period: 10 * time.Second, PressureTransitionPeriod: 5 * time.Minute,
		}); err != nil {
			return nil, err
		}
	}
	// Last, once every check has passed: the certificate manager bootstraps (a CSR) and rotates in
	// the background; until it has a certificate, API requests wait for it.
	if d.Certificates != nil {
		d.Certificates.Start(ctx)
	}
	// The CRI connection is opened in the background while the agent builds the rest, so that the
	// first runtime check, which the Node's registration waits for (pkg/node startup.go), does not
	// pay for the dial.
	d.Runtime.Connect()
	return d, nil
}

// checkNodeAllocatable refuses reservations larger than the machine's capacity, as the kubelet's
// validateNodeAllocatable does at start (it exits). A machine whose capacity cannot be read is not
// checked here: the MachineInfo setter reports it.
func checkNodeAllocatable(ctx context.Context, cfg *config.Completed, m *host.Machine) error {
	info, err := m.MachineInfo()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot check the reservations against the node's capacity")
		return nil
	}
	capacity := nodestatus.CapacityFromMachineInfo(info)
	if q, err := m.EphemeralStorageCapacity(); err == nil {
		capacity[v1.ResourceEphemeralStorage] = q
	}
	return config.ValidateNodeAllocatable(capacity, cfg.Reservation(capacity))
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

// processStart is taken when the package initialises, the closest the process can see to its own
// start, for the time-to-Ready metric.
var processStart = clock.RealClock{}.Now()
