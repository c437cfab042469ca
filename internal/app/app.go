package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/certificate"
	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/host"
	"github.com/nodeagent/nodeagent/pkg/lifecycle"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/server"
	"github.com/nodeagent/nodeagent/pkg/systemd"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// Agent is one wired nodeagent: standalone, one per-node controller over this machine; with
// --companion, the runtime and problem conditions patched onto the kubelet's Node. Build with New,
// run with Run.
type Agent struct {
	cfg    *config.Completed
	deps   *Dependencies
	mode   mode           // the agent's own Node, or --companion
	server *server.Server // nil with --healthz-port=0
}

// mode is what the agent runs on this machine: its own Node (nodeMode: a node.Controller on a
// Queue, with the Node informer and the eviction manager), or companion mode (companionMode:
// conditions patched onto the kubelet's Node).
type mode interface {
	// Healthy is the syncloop check (/healthz, the systemd watchdog); Ready is /readyz's.
	Healthy() error
	Ready() error
	// Trigger posts the status (or the companion's conditions) now: a problem condition changed.
	Trigger()
	// EventRef is the Node as the object of the agent's own Events.
	EventRef() *v1.ObjectReference
	// addTo adds what the mode runs to the agent's group, after recording its Starting Event.
	addTo(group *lifecycle.Group) error
	// report adds the mode's part of /debug/nodestatus.
	report(r *node.Report)
}

// New composes the agent from cfg and deps; it makes no API or CRI call. Errors name the flag.
func New(cfg *config.Completed, deps *Dependencies) (*Agent, error) {
	c := cfg.Config
	a := &Agent{cfg: cfg, deps: deps}
	var err error
	if c.Companion {
		a.mode, err = newCompanionMode(cfg.NodeName, c.K8sExporterHeartbeatPeriod.Duration, deps)
	} else {
		a.mode, err = newNodeMode(cfg, deps)
	}
	if err != nil {
		return nil, err
	}
	deps.SetProblemTrigger(a.mode.Trigger)
	healthy, ready := a.mode.Healthy, a.mode.Ready
	if deps.Certificates != nil {
		deps.Certificates.SetEvent(func(eventType, reason, message string) {
			deps.Recorder.Event(a.eventRef(), eventType, reason, message)
		})
		healthy, ready = withCertificate(healthy, ready, deps.Certificates.Healthy)
	}
	if *c.HealthzPort > 0 {
		var checks []server.Check
		if deps.Problems != nil {
			for _, pc := range deps.Problems.Checks() {
				checks = append(checks, server.Check{Name: pc.Name, Check: pc.Check})
			}
		}
		a.server, err = server.New(server.Config{
			Checks:      checks,
			BindAddress: c.HealthzBindAddress, Port: int(*c.HealthzPort), Metrics: deps.Metrics.Handler(),
			SyncLoop: healthy, Registered: ready, EnableProfiling: c.EnableProfilingHandler, Flags: cfg.Flags,
			Handlers: map[string]http.Handler{node.DebugPath: node.DebugHandler(a.report)},
		})
		if err != nil {
			return nil, fmt.Errorf("--healthz-bind-address %q --healthz-port %d: %w", c.HealthzBindAddress, *c.HealthzPort, err)
		}
	}
	return a, nil
}

// nodeConfig is the standalone Node's configuration: the flags, this machine and its runtime, and
// the problem monitors' setters after the kubelet's.
func nodeConfig(cfg *config.Completed, deps *Dependencies) node.Config {
	c := cfg.Config
	nc := node.Config{
		NodeName: cfg.NodeName, Hostname: cfg.NodeName, RegisterNode: *c.RegisterNode,
		Labels: c.NodeLabels, Taints: c.RegisterWithTaints, Unschedulable: !*c.RegisterSchedulable,
		ExternalCloudProvider: c.CloudProvider == "external", ProviderID: c.ProviderID, NodeIPs: cfg.NodeIPs,
		KubeletPort: *c.Port,
		MaxPods:     int(c.EffectiveMaxPods()), Reservation: cfg.Reservation,
		NodeStatusUpdateFrequency: c.NodeStatusUpdateFrequency.Duration, NodeStatusReportFrequency: c.NodeStatusReportFrequency.Duration,
		NodeLeaseDurationSeconds: c.NodeLeaseDurationSeconds, NodeStatusMaxImages: *c.NodeStatusMaxImages,
		RuntimeEndpoint: c.ContainerRuntimeEndpoint, AgentVersion: version.Get().KubeletVersion(),
		Host: machineHost{deps.Machine, deps.Eviction}, Runtime: deps.Runtime,
	}
	if deps.Problems != nil {
		for i, setter := range deps.Problems.Setters() {
			nc.ExtraFuncs = append(nc.ExtraFuncs, nodestatus.Func{Name: "ProblemMonitor(" + deps.Problems.Status()[i].Source + ")", Setter: setter})
		}
	}
	return nc
}

// withCertificate adds the client certificate to the health checks: /healthz (syncloop) fails on a
// certificate that has expired (certificate.ErrCertificateExpired: every request is refused), is
// expiring unrenewed, a CSR left unapproved or one that cannot be made (401, unknown CA), and, once
// the loops are late, says that there is no certificate yet (a join waiting for its CSR); /readyz
// waits for a certificate. Only a first certificate not obtained yet, with nothing wrong, passes.
func withCertificate(healthy, ready, cert func() error) (func() error, func() error) {
	return func() error {
			loops, c := healthy(), cert()
			if errors.Is(c, certificate.ErrNoCertificateYet) && loops == nil {
				c = nil // joining: not unhealthy yet
			}
			return errors.Join(loops, c)
		}, func() error {
			return errors.Join(cert(), ready())
		}
}

// machineHost is the real machine as a node.Host: cadvisor and the eviction manager's pressure.
type machineHost struct {
	*host.Machine
	*eviction.Manager
}

// report is /debug/nodestatus's answer.
func (a *Agent) report() node.Report {
	r := node.Report{Version: version.Get().GitVersion, StartedAt: processStart, Notes: a.notes(), Extra: map[string]any{}}
	if a.deps.Certificates != nil {
		cert := a.deps.Certificates.Status()
		r.Notes = append(r.Notes, cert.Notes()...)
		r.Extra["clientCertificate"] = cert
	}
	a.mode.report(&r)
	if a.deps.Problems != nil {
		r.Extra["problemMonitors"] = a.deps.Problems.Status()
	}
	return r
}

// noPodsNote says why capacity.pods is 0 (issue 14).
const noPodsNote = "capacity.pods is 0: nodeagent runs no pods, so no pod is scheduled on this node; " +
	"set --max-pods (maxPods) if something else runs this node's pods"

// notes are the configuration facts an operator should know.
func (a *Agent) notes() []string {
	if _, own := a.mode.(*nodeMode); own && a.cfg.Config.EffectiveMaxPods() == 0 {
		return []string{noPodsNote}
	}
	return nil
}

// Run starts the server, tells systemd it is ready, and runs the event sink, the Node informer, the
// eviction manager, the problem monitors and the per-node controller (or companion mode) until ctx
// ends; then it stops them, waiting at most 5 s, flushes events and returns nil. Nothing waits on the
// container runtime before the server answers and READY=1 is sent (the kubelet's health server and
// READY=1 do not either), and nothing waits on the kubelet API's set-up before the Node registers
// (kubeletAPI.addTo: it sets up and serves beside registration, as the kubelet's ListenAndServe).
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	c := a.cfg.Config
	logger.Info("Starting nodeagent", "version", version.Get().GitVersion, "companion", c.Companion,
		"runtimeEndpoint", c.ContainerRuntimeEndpoint, "imageServiceEndpoint", c.ImageServiceEndpoint, "kubeconfig", a.cfg.Kubeconfig)

	healthy := a.mode.Healthy
	// One group, one shutdown timeout (5 s): the HTTP server, systemd's notifications, the event sink,
	// the problem monitors, and the per-node controller's queue with its informer and eviction
	// manager (or companion mode). A component that fails stops the agent; the problem monitors and
	// the watchdog only log their errors.
	group := lifecycle.Group{ShutdownTimeout: 5 * time.Second, Clock: a.deps.Clock}
	if a.server != nil {
		group.Add("healthz server", a.server)
	}
	group.Add("systemd", logOnly(logger, "systemd notifications", func(ctx context.Context) error {
		if err := systemd.Ready(ctx); err != nil {
			logger.Error(err, "sd_notify READY failed")
		}
		return systemd.RunWatchdog(ctx, a.deps.Clock, healthy)
	}))
	a.deps.Broadcaster.StartStructuredLogging(3)
	a.deps.Broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.deps.Client.CoreV1().Events("")})
	for _, note := range a.notes() {
		logger.Info(note)
		a.deps.Recorder.Event(a.eventRef(), v1.EventTypeNormal, "NoPodsCapacity", note)
	}
	if a.deps.Problems != nil {
		group.Add("problem monitors", logOnly(logger, "problem monitors", a.deps.Problems.Run))
	}
	if err := a.mode.addTo(&group); err != nil {
		return err
	}
	stopping := lifecycle.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		logger.Info("Shutting down nodeagent")
		_ = systemd.Stopping()
		return nil
	})
	group.Add("shutdown notice", stopping)
	err := group.Run(ctx)
	a.deps.Broadcaster.Shutdown()
	_ = a.deps.Runtime.Close()
	if ctx.Err() != nil && errors.Is(err, lifecycle.ErrShutdownTimeout) {
		return nil // asked to stop, and stopped: a slow loop is logged, not an error
	}
	return err
}

// logOnly runs f as a Runnable whose error is logged, not returned: the component stops, the agent
// goes on until its context ends.
func logOnly(logger klog.Logger, what string, f func(context.Context) error) lifecycle.Runnable {
	return lifecycle.RunnableFunc(func(ctx context.Context) error {
		if err := f(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Stopped", "component", what)
		}
		<-ctx.Done()
		return nil
	})
}
