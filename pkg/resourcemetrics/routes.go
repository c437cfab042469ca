package resourcemetrics

import (
	"fmt"
	"net/http"
)

// Paths of the kubelet's API that this package serves (pkg/kubelet/server: statsPath + "summary",
// resourceMetricsPath).
const (
	SummaryPath         = "/stats/summary"
	MetricsResourcePath = "/metrics/resource"
)

// Handlers returns the handlers of SummaryPath and MetricsResourcePath for a Node's provider, which
// may implement StatsSummaryGetter and MetricsResourceGetter (Virtual Kubelet's optional
// GetStatsSummary and GetMetricsResource): /stats/summary needs the first; /metrics/resource takes
// the second, else FromSummary of the first. A path whose interface the provider lacks (or a nil
// provider) answers 501 with the plain-text error "node <name> does not implement <method>", as the
// Node's other optional paths.
func Handlers(nodeName string, provider any) (summary, resource http.Handler) {
	notImplemented := func(method string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusNotImplemented, fmt.Sprintf("node %q does not implement %s", nodeName, method))
		})
	}
	summary, resource = notImplemented("GetStatsSummary"), notImplemented("GetMetricsResource")
	if g, ok := provider.(StatsSummaryGetter); ok && g != nil {
		summary = SummaryHandler(g)
		resource = MetricsResourceHandler(FromSummary(g))
	}
	if g, ok := provider.(MetricsResourceGetter); ok && g != nil {
		resource = MetricsResourceHandler(g)
	}
	return summary, resource
}
