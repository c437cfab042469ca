// Package metrics defines nodeagent's Prometheus metrics on a private k8s.io/component-base
// KubeRegistry (the kubelet's metrics library, with its stability annotations), plus the Go and
// process collectors. Names are nodeagent_ snake case with units.
//
// Why component-base/metrics rather than bare client_golang: it is what the kubelet and every
// control-plane component use, so names, help text and stability levels read the same to an
// operator, and it adds nothing we did not already link (client-go brings it in).
package metrics

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"

	"github.com/nodeagent/nodeagent/pkg/statussync"
	"github.com/nodeagent/nodeagent/pkg/version"
)

const namespace = "nodeagent"

// Metrics holds every nodeagent metric. Build one with New; all methods are safe for concurrent use.
type Metrics struct {
	Registry metrics.KubeRegistry

	NodeStatusPatchDuration *metrics.HistogramVec // result
	NodeStatusPatchErrors   *metrics.CounterVec   // reason
	NodeStatusSyncs         *metrics.CounterVec   // result: patched, unchanged, error
	RegistrationAttempts    *metrics.CounterVec   // result
	LeaseRenewDuration      *metrics.Histogram
	LeaseRenewErrors        *metrics.CounterVec // reason
	RuntimeStatusCalls      *metrics.CounterVec // result
	PodStatusPatchErrors    *metrics.CounterVec // reason
	RuntimeCondition        *metrics.GaugeVec   // condition: RuntimeReady, NetworkReady
	NodeReady               *metrics.Gauge
	NodeCondition           *metrics.GaugeVec // condition, status
	StartupDuration         *metrics.Gauge
	LastStatusSync          *metrics.Gauge
	BuildInfo               *metrics.GaugeVec
	NodeName                *metrics.GaugeVec

	// ProcessStart is when the process started, for startup_to_ready_duration_seconds.
	ProcessStart time.Time

	mu             sync.Mutex
	conditionTypes []v1.NodeConditionType
	readyOnce      sync.Once
}

// New creates every metric and registers it, with the Go and process collectors, on a new registry.
// processStart is when the process started.
func New(processStart time.Time) *Metrics {
	m := &Metrics{
		ProcessStart:   processStart,
		conditionTypes: []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure},
		Registry:       metrics.NewKubeRegistry(),
		NodeStatusPatchDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: namespace, Name: "node_status_patch_duration_seconds",
			Help:    "Duration in seconds of PATCH nodes/status requests, by result.",
			Buckets: metrics.ExponentialBuckets(0.001, 2, 14), StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		NodeStatusPatchErrors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "node_status_patch_errors_total",
			Help: "Failed PATCH nodes/status requests, by reason (the API status reason, e.g. Conflict, Forbidden, Timeout).", StabilityLevel: metrics.ALPHA,
		}, []string{"reason"}),
		NodeStatusSyncs: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "node_status_syncs_total",
			Help: "Node status syncs, by result: patched, unchanged (no write) or error.", StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		RegistrationAttempts: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "node_registration_attempts_total",
			Help: "Attempts to register the Node, by result: created, existing, error.", StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		LeaseRenewDuration: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: namespace, Name: "lease_renew_duration_seconds",
			Help:    "Duration in seconds of successful node Lease renewals.",
			Buckets: metrics.ExponentialBuckets(0.001, 2, 14), StabilityLevel: metrics.ALPHA,
		}),
		LeaseRenewErrors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "lease_renew_errors_total",
			Help: "Failed node Lease writes, by reason.", StabilityLevel: metrics.ALPHA,
		}, []string{"reason"}),
		RuntimeStatusCalls: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "runtime_status_calls_total",
			Help: "CRI RuntimeService.Status calls, by result: success or error.", StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		PodStatusPatchErrors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "pod_status_patch_errors_total",
			Help: "PATCH pods/status requests the API server refused (4xx but NotFound and Conflict), by reason (the API status reason, e.g. RequestEntityTooLarge, Invalid).", StabilityLevel: metrics.ALPHA,
		}, []string{"reason"}),
		RuntimeCondition: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: namespace, Name: "runtime_condition",
			Help: "1 when the runtime condition (RuntimeReady, NetworkReady) was true in the last CRI Status, else 0.", StabilityLevel: metrics.ALPHA,
		}, []string{"condition"}),
		NodeReady: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: namespace, Name: "node_ready",
			Help: "1 when the Ready condition of the Node, as of the last successful status sync, was True, else 0.", StabilityLevel: metrics.ALPHA,
		}),
		NodeCondition: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: namespace, Name: "node_condition",
			Help: "1 for the status (True, False, Unknown) of each NodeCondition type nodeagent sets, as last posted, else 0.", StabilityLevel: metrics.ALPHA,
		}, []string{"condition", "status"}),
		StartupDuration: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: namespace, Name: "startup_to_ready_duration_seconds",
			Help: "Seconds from process start to the first successful status sync with Ready=True.", StabilityLevel: metrics.ALPHA,
		}),
		LastStatusSync: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: namespace, Name: "node_status_last_sync_timestamp_seconds",
			Help: "Unix time of the last successful node status sync.", StabilityLevel: metrics.ALPHA,
		}),
		BuildInfo: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: namespace, Name: "build_info",
			Help: "Always 1; labels give the nodeagent build.", StabilityLevel: metrics.ALPHA,
		}, []string{"git_version", "git_commit", "go_version"}),
		NodeName: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: namespace, Name: "node_name",
			Help: "Always 1; the label is the node name (as kubelet_node_name).", StabilityLevel: metrics.ALPHA,
		}, []string{"node"}),
	}
	m.Registry.MustRegister(m.NodeStatusPatchDuration, m.NodeStatusPatchErrors, m.NodeStatusSyncs, m.RegistrationAttempts,
		m.LeaseRenewDuration, m.LeaseRenewErrors, m.RuntimeStatusCalls, m.PodStatusPatchErrors, m.RuntimeCondition, m.NodeReady, m.NodeCondition,
		m.StartupDuration, m.LastStatusSync, m.BuildInfo, m.NodeName)
	m.Registry.RawMustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	v := version.Get()
	m.BuildInfo.WithLabelValues(v.GitVersion, v.GitCommit, v.GoVersion).Set(1)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return metrics.HandlerFor(m.Registry, metrics.HandlerOpts{})
}

// ObservePodStatusRefused counts one pod status patch the API server refused, by reason.
func (m *Metrics) ObservePodStatusRefused(reason string) {
	m.PodStatusPatchErrors.WithLabelValues(reason).Inc()
}

// ObserveRegistrationAttempt counts one registration attempt by result: created, existing or error.
func (m *Metrics) ObserveRegistrationAttempt(result string) {
	m.RegistrationAttempts.WithLabelValues(result).Inc()
}

// ObserveRuntimeStatus records one CRI Status call: its result and, on success, the RuntimeReady and
// NetworkReady conditions (both 0 when the call failed).
func (m *Metrics) ObserveRuntimeStatus(err error, runtimeReady, networkReady bool) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.RuntimeStatusCalls.WithLabelValues(result).Inc()
	m.RuntimeCondition.WithLabelValues("RuntimeReady").Set(boolFloat(runtimeReady))
	m.RuntimeCondition.WithLabelValues("NetworkReady").Set(boolFloat(networkReady))
}

// ObserveLeaseRenewal records one successful Lease write that took d.
func (m *Metrics) ObserveLeaseRenewal(d time.Duration) { m.LeaseRenewDuration.Observe(d.Seconds()) }

// ObserveLeaseError counts one failed Lease write or read by reason.
func (m *Metrics) ObserveLeaseError(reason string) { m.LeaseRenewErrors.WithLabelValues(reason).Inc() }

// ObserveSync records one status sync: the sync count by result; for a PATCH its duration and, on
// error, its reason; after a successful sync the last-sync time, node_ready, the node_condition series
// of the condition types nodeagent sets (others written to the Node by anyone are not exported, and a
// type no longer on the Node loses its series) and, the first time the Node is Ready, the time from
// process start.
func (m *Metrics) ObserveSync(_ string, r statussync.SyncResult) {
	m.NodeStatusSyncs.WithLabelValues(string(r.Result)).Inc()
	for _, p := range r.Patches {
		if p.Reason == "" {
			m.NodeStatusPatchDuration.WithLabelValues("success").Observe(p.Duration.Seconds())
		} else {
			m.NodeStatusPatchDuration.WithLabelValues("error").Observe(p.Duration.Seconds())
			m.NodeStatusPatchErrors.WithLabelValues(p.Reason).Inc()
		}
	}
	if r.Node == nil {
		return
	}
	m.LastStatusSync.Set(float64(r.Time.Unix()))
	present := map[v1.NodeConditionType]v1.ConditionStatus{}
	for _, c := range r.Node.Status.Conditions {
		present[c.Type] = c.Status
	}
	m.mu.Lock()
	types := append([]v1.NodeConditionType(nil), m.conditionTypes...)
	m.mu.Unlock()
	for _, t := range types {
		status, ok := present[t]
		for _, s := range []v1.ConditionStatus{v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown} {
			if !ok {
				m.NodeCondition.DeleteLabelValues(string(t), string(s))
				continue
			}
			m.NodeCondition.WithLabelValues(string(t), string(s)).Set(boolFloat(status == s))
		}
	}
	ready := present[v1.NodeReady] == v1.ConditionTrue
	m.NodeReady.Set(boolFloat(ready))
	if ready {
		m.readyOnce.Do(func() { m.StartupDuration.Set(r.Time.Sub(m.ProcessStart).Seconds()) })
	}
}

// AddConditionTypes adds NodeCondition types to those exported by node_condition (e.g. a problem
// monitor's). The kubelet's four (Ready and the three pressures) are there from New.
func (m *Metrics) AddConditionTypes(types ...v1.NodeConditionType) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range types {
		if !slices.Contains(m.conditionTypes, t) {
			m.conditionTypes = append(m.conditionTypes, t)
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ManyNodes returns an observer for a process that runs many Nodes (the simulation): the counters
// and histograms add up over every Node; the gauges that describe one Node (node_ready,
// node_condition, runtime_condition, the last sync time, startup_to_ready, node_name) would read 0
// or flap between Nodes, so they are unregistered and never set.
func (m *Metrics) ManyNodes() ManyNodes {
	for _, c := range []metrics.Registerable{m.NodeReady, m.NodeCondition, m.RuntimeCondition,
		m.StartupDuration, m.LastStatusSync, m.NodeName} {
		m.Registry.Unregister(c)
	}
	return ManyNodes{m: m}
}

// ManyNodes is Metrics as the observer of many Nodes (see Metrics.ManyNodes).
type ManyNodes struct{ m *Metrics }

// ObserveRuntimeStatus counts one CRI Status call by result.
func (o ManyNodes) ObserveRuntimeStatus(err error, _, _ bool) {
	result := "success"
	if err != nil {
		result = "error"
	}
	o.m.RuntimeStatusCalls.WithLabelValues(result).Inc()
}

// ObserveLeaseRenewal records one Lease write's duration.
func (o ManyNodes) ObserveLeaseRenewal(d time.Duration) { o.m.ObserveLeaseRenewal(d) }

// ObserveLeaseError counts one failed Lease call by reason.
func (o ManyNodes) ObserveLeaseError(reason string) { o.m.ObserveLeaseError(reason) }

// ObservePodStatusRefused counts one pod status patch the API server refused, by reason.
func (o ManyNodes) ObservePodStatusRefused(reason string) { o.m.ObservePodStatusRefused(reason) }

// ObserveRegistrationAttempt counts one registration attempt by result.
func (o ManyNodes) ObserveRegistrationAttempt(result string) { o.m.ObserveRegistrationAttempt(result) }

// ObserveSync counts one status sync by result and its patches by duration and reason.
func (o ManyNodes) ObserveSync(_ string, r statussync.SyncResult) {
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
