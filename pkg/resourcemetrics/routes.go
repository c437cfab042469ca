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

// Handlers returns the handlers of SummaryPath and MetricsResourcePath for a Node (Virtual
// Kubelet's optional GetStatsSummary and GetMetricsResource): /stats/summary needs summary;
// /metrics/resource takes resource, else FromSummary of summary. A path without either (nil) answers
// 501 with the plain-text error "node <name> does not implement <method>", as the Node's other
// optional paths.
func Handlers(nodeName string, summary StatsSummaryGetter, resource MetricsResourceGetter) (summaryHandler, resourceHandler http.Handler) {
	notImplemented := func(method string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusNotImplemented, fmt.Sprintf("node %q does not implement %s", nodeName, method))
		})
	}
	summaryHandler, resourceHandler = notImplemented("GetStatsSummary"), notImplemented("GetMetricsResource")
	if summary != nil {
		summaryHandler = SummaryHandler(summary)
		resourceHandler = MetricsResourceHandler(FromSummary(summary))
	}
	if resource != nil {
		resourceHandler = MetricsResourceHandler(resource)
	}
	return summaryHandler, resourceHandler
}
