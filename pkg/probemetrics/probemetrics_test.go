package probemetrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestHandler: /metrics/probes as the kubelet's registry writes it: process_start_time_seconds always;
// prober_probe_total per container probe and result counted at least once, labelled as the kubelet's
// ProberResults; prober_probe_duration_seconds per container probe with a successful or unknown probe;
// a Getter's error answers 500.
func TestHandler(t *testing.T) {
	counts := []Count{
		{ProbeType: Readiness, Namespace: "ns", Pod: "p", PodUID: "u1", Container: "c", Successful: 4, Failed: 2},
		{ProbeType: Liveness, Namespace: "ns", Pod: "p", PodUID: "u1", Container: "c", Failed: 3},
	}
	for _, tc := range []struct {
		name      string
		g         Getter
		code      int
		want, not []string
	}{
		{name: "no prober worker", code: 200, want: []string{"# TYPE process_start_time_seconds gauge"}, not: []string{"prober_"}},
		{name: "counts", g: GetterFunc(func(context.Context) ([]Count, error) { return counts, nil }), code: 200, want: []string{
			"# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
			"# TYPE prober_probe_total counter",
			`prober_probe_total{container="c",namespace="ns",pod="p",pod_uid="u1",probe_type="Readiness",result="successful"} 4`,
			`prober_probe_total{container="c",namespace="ns",pod="p",pod_uid="u1",probe_type="Readiness",result="failed"} 2`,
			`prober_probe_total{container="c",namespace="ns",pod="p",pod_uid="u1",probe_type="Liveness",result="failed"} 3`,
			"# HELP prober_probe_duration_seconds [ALPHA] Duration in seconds for a probe response.",
			"# TYPE prober_probe_duration_seconds histogram",
			`prober_probe_duration_seconds_bucket{container="c",namespace="ns",pod="p",probe_type="Readiness",le="0.005"} 4`,
			`prober_probe_duration_seconds_bucket{container="c",namespace="ns",pod="p",probe_type="Readiness",le="+Inf"} 4`,
			`prober_probe_duration_seconds_count{container="c",namespace="ns",pod="p",probe_type="Readiness"} 4`,
			"process_start_time_seconds",
		}, not: []string{`result="unknown"`, `probe_type="Liveness",result="successful"`, `prober_probe_duration_seconds_count{container="c",namespace="ns",pod="p",probe_type="Liveness"}`}},
		{name: "error", g: GetterFunc(func(context.Context) ([]Count, error) { return nil, errors.New("no pods") }), code: 500,
			want: []string{"Internal Error: no pods"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Handler(tc.g).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
			b, _ := io.ReadAll(rec.Body)
			body := string(b)
			if rec.Code != tc.code {
				t.Errorf("code %d, want %d: %s", rec.Code, tc.code, body)
			}
			lines := strings.Split(body, "\n")
			for _, w := range tc.want {
				if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }) {
					t.Errorf("no line %q in:\n%s", w, body)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(body, n) {
					t.Errorf("%q in:\n%s", n, body)
				}
			}
		})
	}
}
