package node

import (
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
)
