// Package resourcemetrics serves a Node's resource usage in the kubelet's two shapes, over a provider
// named as Virtual Kubelet names it:
//
//   - /stats/summary: a k8s.io/kubelet/pkg/apis/stats/v1alpha1 Summary (the Node, its system
//     containers, its pods and their containers), JSON, GET or POST, with the kubelet's
//     only_cpu_and_memory=true query (pkg/kubelet/server/stats handleSummary);
//   - /metrics/resource: the Prometheus text the kubelet's resource metrics collector writes
//     (pkg/kubelet/metrics/collectors/resource_metrics.go at v1.37.2: node_cpu_usage_seconds_total,
//     node_memory_working_set_bytes, node_swap_usage_bytes, container_cpu_usage_seconds_total,
//     container_memory_working_set_bytes, container_swap_usage_bytes, container_swap_limit_bytes,
//     container_start_time_seconds, pod_cpu_usage_seconds_total, pod_memory_working_set_bytes,
//     pod_swap_usage_bytes, resource_scrape_error; the same help, stability, labels and sample
//     timestamps), which metrics-server v0.8 scrapes.
//
// A provider implements StatsSummaryGetter (Virtual Kubelet's GetStatsSummary) and may implement
// MetricsResourceGetter (GetMetricsResource); FromSummary derives the second from the first exactly as
// the kubelet derives /metrics/resource from its summary provider.
package resourcemetrics
