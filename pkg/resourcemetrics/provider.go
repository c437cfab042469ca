package resourcemetrics

import (
	"context"

	dto "github.com/prometheus/client_model/go"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// StatsSummaryGetter is Virtual Kubelet's GetStatsSummary (its PodStatsSummaryHandlerFunc): the
// Node's Summary now. The kubelet's counterpart is pkg/kubelet/server/stats.SummaryProvider.Get. An
// error answers /stats/summary with 500 "Internal Error: <err>" and /metrics/resource with
// resource_scrape_error 1, as the kubelet's.
type StatsSummaryGetter interface {
	GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error)
}

// MetricsResourceGetter is Virtual Kubelet's GetMetricsResource (its
// PodMetricsResourceHandlerFunc): the metric families /metrics/resource writes. FromSummary builds
// one from a StatsSummaryGetter.
type MetricsResourceGetter interface {
	GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error)
}

// StatsSummaryFunc and MetricsResourceFunc adapt functions to the interfaces.
type (
	StatsSummaryFunc    func(ctx context.Context) (*statsv1alpha1.Summary, error)
	MetricsResourceFunc func(ctx context.Context) ([]*dto.MetricFamily, error)
)

// GetStatsSummary calls f.
func (f StatsSummaryFunc) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	return f(ctx)
}

// GetMetricsResource calls f.
func (f MetricsResourceFunc) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	return f(ctx)
}
