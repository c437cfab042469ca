package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodeagent/nodeagent/pkg/host"
)

// machineStatsHost is machineHost with its usage from cadvisor (host.Stats): the node's
// StatsSummaryGetter and CadvisorCollectorsGetter for the kubelet API.
type machineStatsHost struct {
	machineHost
	stats *host.Stats
}

// GetStatsSummary is host.Stats's.
func (h machineStatsHost) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	return h.stats.GetStatsSummary(ctx)
}

// CadvisorCollectors is host.Stats's.
func (h machineStatsHost) CadvisorCollectors() []prometheus.Collector {
	return h.stats.CadvisorCollectors()
}
