package framework

import (
	"strings"
	"testing"
)

const exposition = `# HELP nodeagent_node_status_syncs_total Status syncs by result.
# TYPE nodeagent_node_status_syncs_total counter
nodeagent_node_status_syncs_total{result="patched"} 2
nodeagent_node_status_syncs_total{result="unchanged"} 20
nodeagent_node_status_syncs_total{result="error"} 0
# HELP nodeagent_lease_renew_duration_seconds Lease renewal latency.
# TYPE nodeagent_lease_renew_duration_seconds histogram
nodeagent_lease_renew_duration_seconds_bucket{le="0.1"} 3
nodeagent_lease_renew_duration_seconds_bucket{le="+Inf"} 4
nodeagent_lease_renew_duration_seconds_sum 0.5
nodeagent_lease_renew_duration_seconds_count 4
# HELP nodeagent_node_condition Node conditions.
# TYPE nodeagent_node_condition gauge
nodeagent_node_condition{condition="Ready",status="True"} 1
nodeagent_node_condition{condition="NotReady\"quoted\\",status="True"} 7
# TYPE go_goroutines gauge
go_goroutines 42
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		found  bool
	}{
		{"nodeagent_node_status_syncs_total", map[string]string{"result": "patched"}, 2, true},
		{"nodeagent_node_status_syncs_total", map[string]string{"result": "unchanged"}, 20, true},
		// A label value must match whole: "patch" is not "patched".
		{"nodeagent_node_status_syncs_total", map[string]string{"result": "patch"}, 0, false},
		{"nodeagent_node_status_syncs_total", map[string]string{"other": "x"}, 0, false},
		{"nodeagent_lease_renew_duration_seconds_count", nil, 4, true},
		{"nodeagent_lease_renew_duration_seconds_sum", nil, 0.5, true},
		{"nodeagent_lease_renew_duration_seconds_bucket", map[string]string{"le": "0.1"}, 3, true},
		{"nodeagent_node_condition", map[string]string{"condition": "Ready", "status": "True"}, 1, true},
		{"nodeagent_node_condition", map[string]string{"condition": `NotReady"quoted\`}, 7, true},
		{"go_goroutines", nil, 42, true},
		{"nodeagent_missing", nil, 0, false},
	} {
		got, found := m.Get(tc.name, tc.labels)
		if got != tc.want || found != tc.found {
			t.Errorf("Get(%s, %v) = %v, %v; want %v, %v", tc.name, tc.labels, got, found, tc.want, tc.found)
		}
	}
	if got := m.Sum("nodeagent_node_status_syncs_total", nil); got != 22 {
		t.Errorf("Sum(syncs) = %v, want 22", got)
	}
	if !m.Has("nodeagent_lease_renew_duration_seconds") || m.Has("nodeagent_missing") {
		t.Error("Has: want true for a histogram family by its name, false for a missing one")
	}
	if got := m.Type("nodeagent_lease_renew_duration_seconds"); got != "histogram" {
		t.Errorf("Type(histogram family) = %q", got)
	}
	if _, err := ParseMetrics(strings.NewReader("metric{label=\"unterminated} 1\n")); err == nil {
		t.Error("ParseMetrics accepted a malformed line")
	}
}
