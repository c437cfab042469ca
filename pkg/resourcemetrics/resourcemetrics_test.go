package resourcemetrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(30 * time.Second))
)

func summary() *statsv1alpha1.Summary {
	cpu := func(ns uint64) *statsv1alpha1.CPUStats {
		return &statsv1alpha1.CPUStats{Time: t1, UsageCoreNanoSeconds: ptr.To(ns), UsageNanoCores: ptr.To(uint64(1000))}
	}
	mem := func(b uint64) *statsv1alpha1.MemoryStats {
		return &statsv1alpha1.MemoryStats{Time: t1, WorkingSetBytes: ptr.To(b), UsageBytes: ptr.To(b + 10)}
	}
	return &statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{
			NodeName: "n1", StartTime: t0, CPU: cpu(12_500_000_000), Memory: mem(1 << 30),
			Swap:             &statsv1alpha1.SwapStats{Time: t1, SwapUsageBytes: ptr.To(uint64(42))},
			Fs:               &statsv1alpha1.FsStats{Time: t1, CapacityBytes: ptr.To(uint64(100))},
			SystemContainers: []statsv1alpha1.ContainerStats{{Name: "pods", StartTime: t0, CPU: cpu(1), Memory: mem(2), Rootfs: &statsv1alpha1.FsStats{}}},
		},
		Pods: []statsv1alpha1.PodStats{{
			PodRef:    statsv1alpha1.PodReference{Name: "web-1", Namespace: "default", UID: "u1"},
			StartTime: t0,
			Containers: []statsv1alpha1.ContainerStats{
				{Name: "app", StartTime: t0, CPU: cpu(2_000_000_000), Memory: mem(100 << 20),
					Swap:   &statsv1alpha1.SwapStats{Time: t1, SwapUsageBytes: ptr.To(uint64(5)), SwapAvailableBytes: ptr.To(uint64(95))},
					Rootfs: &statsv1alpha1.FsStats{Time: t1}},
				// No start time, no swap usage but a swap limit.
				{Name: "side", CPU: cpu(500_000_000), Memory: mem(1 << 20),
					Swap: &statsv1alpha1.SwapStats{Time: t1, SwapAvailableBytes: ptr.To(uint64(7))}},
			},
			CPU: cpu(2_500_000_000), Memory: mem(101 << 20),
			Network: &statsv1alpha1.NetworkStats{Time: t1},
		}},
	}
}

// The kubelet's v1.37.2 /metrics/resource text for summary(): its collector's help, stability,
// labels and timestamps (resource_metrics_test.go's expectations, for these values).
const wantResource = `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web-1"} 2 1795762830000
container_cpu_usage_seconds_total{container="side",namespace="default",pod="web-1"} 0.5 1795762830000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web-1"} 1.048576e+08 1795762830000
container_memory_working_set_bytes{container="side",namespace="default",pod="web-1"} 1.048576e+06 1795762830000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web-1"} 1.7957628e+09
# HELP container_swap_limit_bytes [ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems
# TYPE container_swap_limit_bytes gauge
container_swap_limit_bytes{container="app",namespace="default",pod="web-1"} 100 1795762830000
container_swap_limit_bytes{container="side",namespace="default",pod="web-1"} 7 1795762830000
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container="app",namespace="default",pod="web-1"} 5 1795762830000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 12.5 1795762830000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.073741824e+09 1795762830000
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 42 1795762830000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="web-1"} 2.5 1795762830000
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="default",pod="web-1"} 1.05906176e+08 1795762830000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`

const wantResourceError = `# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 1
`

func get(t *testing.T, h http.Handler, method, target string) (int, http.Header, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, rec.Result().Header, string(body)
}

func TestMetricsResourceHandler(t *testing.T) {
	for _, tc := range []struct {
		name     string
		summary  *statsv1alpha1.Summary
		err      error
		wantBody string
	}{
		{name: "node, pod and containers", summary: summary(), wantBody: wantResource},
		{name: "provider error", err: errors.New("runtime down"), wantBody: wantResourceError},
		{name: "no summary", wantBody: wantResourceError},
		{name: "empty node", summary: &statsv1alpha1.Summary{}, wantBody: strings.Replace(wantResourceError, " 1\n", " 0\n", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := StatsSummaryFunc(func(context.Context) (*statsv1alpha1.Summary, error) { return tc.summary, tc.err })
			code, hdr, body := get(t, MetricsResourceHandler(FromSummary(g)), http.MethodGet, "/metrics/resource")
			if code != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", code, body)
			}
			if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
				t.Errorf("Content-Type %q, want the Prometheus text format", ct)
			}
			if body != tc.wantBody {
				t.Errorf("body:\n%s\nwant:\n%s", body, tc.wantBody)
			}
		})
	}
}

func TestSummaryHandler(t *testing.T) {
	full := summary()
	cut := summary()
	cut.Node.Fs = nil
	cut.Node.SystemContainers[0].Rootfs = nil
	cut.Pods[0].Containers[0].Rootfs = nil
	cut.Pods[0].Network = nil
	for _, tc := range []struct {
		name, method, target string
		err                  error
		wantCode             int
		want                 *statsv1alpha1.Summary
		wantText             string
	}{
		{name: "GET", method: http.MethodGet, target: "/stats/summary", wantCode: 200, want: full},
		{name: "POST", method: http.MethodPost, target: "/stats/summary", wantCode: 200, want: full},
		{name: "only cpu and memory", method: http.MethodGet, target: "/stats/summary?only_cpu_and_memory=true", wantCode: 200, want: cut},
		{name: "only_cpu_and_memory not true", method: http.MethodGet, target: "/stats/summary?only_cpu_and_memory=1", wantCode: 200, want: full},
		{name: "only_cpu_and_memory twice", method: http.MethodGet, target: "/stats/summary?only_cpu_and_memory=true&only_cpu_and_memory=true", wantCode: 200, want: full},
		{name: "PUT", method: http.MethodPut, target: "/stats/summary", wantCode: 405, wantText: "Method Not Allowed"},
		{name: "provider error", method: http.MethodGet, target: "/stats/summary", err: errors.New("runtime down"), wantCode: 500, wantText: "Internal Error: runtime down"},
		{name: "bad query", method: http.MethodGet, target: "/stats/summary?a=%zz", wantCode: 500, wantText: `Internal Error: parse form failed: invalid URL escape "%zz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := StatsSummaryFunc(func(context.Context) (*statsv1alpha1.Summary, error) {
				if tc.err != nil {
					return nil, tc.err
				}
				return summary(), nil
			})
			code, hdr, body := get(t, SummaryHandler(g), tc.method, tc.target)
			if code != tc.wantCode {
				t.Fatalf("status %d, want %d: %s", code, tc.wantCode, body)
			}
			if tc.want == nil {
				if body != tc.wantText {
					t.Errorf("body %q, want %q", body, tc.wantText)
				}
				return
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var got statsv1alpha1.Summary
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("body is not a Summary: %v\n%s", err, body)
			}
			if !apiequality.Semantic.DeepEqual(tc.want, &got) {
				want, _ := json.MarshalIndent(tc.want, "", " ")
				t.Errorf("Summary:\n%s\nwant:\n%s", body, want)
			}
		})
	}
}

// metricsOnly implements GetMetricsResource only.
type metricsOnly struct{}

func (metricsOnly) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return []*dto.MetricFamily{{Name: ptr.To("own_metric"), Type: dto.MetricType_GAUGE.Enum(),
		Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: ptr.To(1.0)}}}}}, nil
}

func TestHandlers(t *testing.T) {
	summaryOnly := StatsSummaryFunc(func(context.Context) (*statsv1alpha1.Summary, error) { return summary(), nil })
	for _, tc := range []struct {
		name                     string
		summary                  StatsSummaryGetter
		resource                 MetricsResourceGetter
		wantSummary, wantMetrics int
		wantSummaryBody, wantRes string
	}{
		{name: "neither", wantSummary: 501, wantMetrics: 501,
			wantSummaryBody: `node "n1" does not implement GetStatsSummary`, wantRes: `node "n1" does not implement GetMetricsResource`},
		{name: "GetStatsSummary: both paths", summary: summaryOnly, wantSummary: 200, wantMetrics: 200,
			wantSummaryBody: `"nodeName": "n1"`, wantRes: "node_cpu_usage_seconds_total 12.5 1795762830000"},
		{name: "both: GetMetricsResource serves /metrics/resource", summary: summaryOnly, resource: metricsOnly{}, wantSummary: 200, wantMetrics: 200,
			wantSummaryBody: `"nodeName": "n1"`, wantRes: "own_metric 1"},
		{name: "GetMetricsResource only", resource: metricsOnly{}, wantSummary: 501, wantMetrics: 200,
			wantSummaryBody: `node "n1" does not implement GetStatsSummary`, wantRes: "own_metric 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r := Handlers("n1", tc.summary, tc.resource)
			code, _, body := get(t, s, http.MethodGet, SummaryPath)
			if code != tc.wantSummary || !strings.Contains(body, tc.wantSummaryBody) {
				t.Errorf("%s: %d %q, want %d with %q", SummaryPath, code, body, tc.wantSummary, tc.wantSummaryBody)
			}
			code, _, body = get(t, r, http.MethodGet, MetricsResourcePath)
			if code != tc.wantMetrics || !strings.Contains(body, tc.wantRes) {
				t.Errorf("%s: %d %q, want %d with %q", MetricsResourcePath, code, body, tc.wantMetrics, tc.wantRes)
			}
		})
	}
}
