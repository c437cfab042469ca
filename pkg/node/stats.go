package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeagent/nodeagent/pkg/probemetrics"
	"github.com/nodeagent/nodeagent/pkg/resourcemetrics"
)

// The optional interfaces a PodProvider implements to serve its Node's resource usage through the
// kubelet's API, named as Virtual Kubelet's provider names them (see pkg/resourcemetrics for their
// contracts):
//
//   - StatsSummaryGetter (GetStatsSummary): /stats/summary (a stats/v1alpha1 Summary), and
//     /metrics/resource derived from it as the kubelet derives it (resourcemetrics.FromSummary);
//   - MetricsResourceGetter (GetMetricsResource): /metrics/resource from the provider's own families.
//
// metrics-server (kubectl top, the HorizontalPodAutoscaler) scrapes /metrics/resource: a Node whose
// CPU or memory is 0 is dropped by it. A path whose interface the provider lacks answers 501.
type (
	// StatsSummaryGetter is GetStatsSummary (/stats/summary, /metrics/resource).
	StatsSummaryGetter = resourcemetrics.StatsSummaryGetter
	// MetricsResourceGetter is GetMetricsResource (/metrics/resource).
	MetricsResourceGetter = resourcemetrics.MetricsResourceGetter
	// ProbeCountsGetter is GetProbeCounts (/metrics/probes: the kubelet's prober_probe_total and
	// prober_probe_duration_seconds from the provider's counts of its containers' probes).
	ProbeCountsGetter = probemetrics.Getter
)

// CadvisorCollectorsGetter is a Host that serves the kubelet's /metrics/cadvisor: cadvisor's
// Prometheus collectors (host.Stats for the agent's machine).
type CadvisorCollectorsGetter interface {
	CadvisorCollectors() []prometheus.Collector
}

// statsProvider returns what serves the Node's /stats/summary and /metrics/resource: the pod
// provider's StatsSummaryGetter and MetricsResourceGetter when it implements either, else the
// Host's (the agent's machine, no pods), else nil (501); and the Host's cadvisor collectors.
func (c *Controller) statsProvider(provider any) (StatsSummaryGetter, MetricsResourceGetter, []prometheus.Collector) {
	var (
		summary  StatsSummaryGetter
		resource MetricsResourceGetter
	)
	for _, p := range []any{provider, c.cfg.Host} {
		summary, _ = p.(StatsSummaryGetter)
		resource, _ = p.(MetricsResourceGetter)
		if summary != nil || resource != nil {
			break
		}
	}
	var cadvisor []prometheus.Collector
	if g, ok := c.cfg.Host.(CadvisorCollectorsGetter); ok {
		cadvisor = g.CadvisorCollectors()
	}
	return summary, resource, cadvisor
}
