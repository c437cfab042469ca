package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a scrape: its labels (without __name__) and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Metrics is one scrape of a Prometheus text endpoint, parsed with expfmt. Series are keyed by the name
// they are exposed under: a histogram or summary family "x" appears as x_count, x_sum, x_bucket{le=...}
// (or x{quantile=...}), as in the text format.
type Metrics struct {
	series map[string][]Sample
	types  map[string]string // family name → "counter", "gauge", "histogram", ...
}

// ParseMetrics parses the Prometheus text exposition format.
func ParseMetrics(r io.Reader) (*Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	m := &Metrics{series: map[string][]Sample{}, types: map[string]string{}}
	for name, f := range families {
		m.types[name] = strings.ToLower(f.GetType().String())
		samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, f)
		if err != nil {
			return nil, fmt.Errorf("parse metrics: family %s: %w", name, err)
		}
		for _, s := range samples {
			labels := make(map[string]string, len(s.Metric))
			for k, v := range s.Metric {
				if k != model.MetricNameLabel {
					labels[string(k)] = string(v)
				}
			}
			series := string(s.Metric[model.MetricNameLabel])
			m.series[series] = append(m.series[series], Sample{Labels: labels, Value: float64(s.Value)})
		}
	}
	return m, nil
}

// ScrapeMetrics GETs url (for example Agent.HealthzURL+"/metrics") with client (http.DefaultClient if
// nil) and a 5 s timeout, and parses the answer. A status other than 200 is an error.
func ScrapeMetrics(ctx context.Context, client *http.Client, url string) (*Metrics, error) {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: HTTP %d", url, resp.StatusCode)
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return m, nil
}

// matches reports whether labels has every key of want with the same value.
func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Get returns the value of the first series called name whose labels include every pair of want (nil
// matches any series), and whether there is one. Label values are compared whole.
func (m *Metrics) Get(name string, want map[string]string) (float64, bool) {
	for _, s := range m.series[name] {
		if matches(s.Labels, want) {
			return s.Value, true
		}
	}
	return 0, false
}

// Value is Get's value alone: 0 when there is no such series.
func (m *Metrics) Value(name string, want map[string]string) float64 {
	v, _ := m.Get(name, want)
	return v
}

// Sum adds up the values of every series called name whose labels include every pair of want.
func (m *Metrics) Sum(name string, want map[string]string) float64 {
	var total float64
	for _, s := range m.series[name] {
		if matches(s.Labels, want) {
			total += s.Value
		}
	}
	return total
}

// Has reports whether there is a series called name, or name_count (a histogram or summary family).
func (m *Metrics) Has(name string) bool {
	return len(m.series[name]) > 0 || len(m.series[name+"_count"]) > 0
}

// Type returns the type of family name as the text format's # TYPE line gives it ("counter", "gauge",
// "histogram", "summary", "untyped"), or "" if the scrape has no such family.
func (m *Metrics) Type(name string) string { return m.types[name] }

// Dump lists the series whose names start with prefix (histogram buckets left out), one a line and
// sorted, for failure messages. A nil Metrics dumps as "(no scrape)".
func (m *Metrics) Dump(prefix string) string {
	if m == nil {
		return "(no scrape)"
	}
	var lines []string
	for name, samples := range m.series {
		if !strings.HasPrefix(name, prefix) || strings.HasSuffix(name, "_bucket") {
			continue
		}
		for _, s := range samples {
			lines = append(lines, fmt.Sprintf("%s%v %v", name, s.Labels, s.Value))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
