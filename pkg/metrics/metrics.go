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
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/component-base/metrics"

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
	RuntimeCondition        *metrics.GaugeVec   // condition: RuntimeReady, NetworkReady
	NodeReady               *metrics.Gauge
	NodeCondition           *metrics.GaugeVec // condition, status
	StartupDuration         *metrics.Gauge
	LastStatusSync          *metrics.Gauge
	BuildInfo               *metrics.GaugeVec
	NodeName                *metrics.GaugeVec
}

// New creates every metric and registers it, with the Go and process collectors, on a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: metrics.NewKubeRegistry(),
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
			Help: "1 for the status (True, False, Unknown) of each NodeCondition type last posted, else 0.", StabilityLevel: metrics.ALPHA,
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
		m.LeaseRenewDuration, m.LeaseRenewErrors, m.RuntimeStatusCalls, m.RuntimeCondition, m.NodeReady, m.NodeCondition,
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

// ObservePatch records one PATCH nodes/status: its duration and, on error, its reason.
func (m *Metrics) ObservePatch(d time.Duration, reason string) {
	if reason == "" {
		m.NodeStatusPatchDuration.WithLabelValues("success").Observe(d.Seconds())
		return
	}
	m.NodeStatusPatchDuration.WithLabelValues("error").Observe(d.Seconds())
	m.NodeStatusPatchErrors.WithLabelValues(reason).Inc()
}

// SetRuntimeCondition sets the runtime_condition gauge for one condition.
func (m *Metrics) SetRuntimeCondition(condition string, ok bool) {
	m.RuntimeCondition.WithLabelValues(condition).Set(boolFloat(ok))
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
