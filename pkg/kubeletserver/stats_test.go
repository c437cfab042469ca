package kubeletserver

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

type statsProvider struct{ logsOnly }

func (statsProvider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	ts := metav1.NewTime(time.Unix(1_800_000_000, 0))
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: "n1",
		CPU:    &statsv1alpha1.CPUStats{Time: ts, UsageCoreNanoSeconds: ptr.To[uint64](3_000_000_000)},
		Memory: &statsv1alpha1.MemoryStats{Time: ts, WorkingSetBytes: ptr.To[uint64](42)}}}, nil
}

// TestServerStats: /stats/summary and /metrics/resource from the provider's GetStatsSummary (501
// without it), /metrics/cadvisor from the collectors (501 without), authorized as the kubelet's
// nodes/stats and nodes/metrics; /metrics/probes (nodes/metrics) without a probemetrics.Getter is the
// kubelet's registry with no prober worker.
func TestServerStats(t *testing.T) {
	with := newTestServer(t, statsProvider{})
	without := newTestServer(t, &logsOnly{})
	pods := fakePods{}
	srv, err := New(Config{NodeName: "n1", Pods: pods, Auth: &Auth{Authenticator: tokenAuth, Authorizer: allowAdminAndViewerHealthz{authorizerfactory.NewAlwaysAllowAuthorizer()}},
		CadvisorCollectors: []prometheus.Collector{prometheus.NewGauge(prometheus.GaugeOpts{Name: "machine_cpu_cores", Help: "cores"})}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, token string
		without                   bool
		code                      int
		body                      string
	}{
		{name: "summary", method: "GET", path: "/stats/summary", token: "admin", code: 200, body: `"nodeName": "n1"`},
		{name: "summary POST", method: "POST", path: "/stats/summary?only_cpu_and_memory=true", token: "admin", code: 200, body: `"workingSetBytes": 42`},
		{name: "summary PUT", method: "PUT", path: "/stats/summary", token: "admin", code: 405, body: "Method Not Allowed"},
		{name: "resource", method: "GET", path: "/metrics/resource", token: "admin", code: 200, body: "node_cpu_usage_seconds_total 3 1800000000000"},
		{name: "viewer on summary", method: "GET", path: "/stats/summary", token: "viewer", code: 403, body: "subresource(s)=[stats]"},
		{name: "viewer on resource", method: "GET", path: "/metrics/resource", token: "viewer", code: 403, body: "subresource(s)=[metrics]"},
		{name: "no GetStatsSummary", method: "GET", path: "/stats/summary", token: "admin", without: true, code: 501, body: `node "n1" does not implement GetStatsSummary`},
		{name: "no GetMetricsResource", method: "GET", path: "/metrics/resource", token: "admin", without: true, code: 501, body: `node "n1" does not implement GetMetricsResource`},
		{name: "no cadvisor", method: "GET", path: "/metrics/cadvisor", token: "admin", code: 501, body: `node "n1" does not implement cadvisor metrics`},
		{name: "probes, no prober", method: "GET", path: "/metrics/probes", token: "admin", code: 200, body: "process_start_time_seconds"},
		{name: "viewer on probes", method: "GET", path: "/metrics/probes", token: "viewer", code: 403, body: "subresource(s)=[metrics]"},
		{name: "probes POST", method: "POST", path: "/metrics/probes", token: "admin", code: 405, body: "Method Not Allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := with
			if tc.without {
				ts = without
			}
			code, body := do(t, ts, tc.method, tc.path, tc.token)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, code, body, tc.code, tc.body)
			}
		})
	}
	// The collectors are served as the kubelet's /metrics/cadvisor.
	ts := httptest.NewTLSServer(srv)
	t.Cleanup(ts.Close)
	if code, body := do(t, ts, "GET", "/metrics/cadvisor", "admin"); code != 200 || !strings.Contains(body, "machine_cpu_cores 0") {
		t.Errorf("/metrics/cadvisor: %d %q", code, body)
	}
}
