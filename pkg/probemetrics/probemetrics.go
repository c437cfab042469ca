// Package probemetrics serves the kubelet's /metrics/probes: prober_probe_total and
// prober_probe_duration_seconds (pkg/kubelet/prober/prober_manager.go at v1.37.2: ProberResults and
// ProberDuration, the same names, help, stability levels and labels) and process_start_time_seconds,
// registered as pkg/kubelet/server.Server.InstallAuthNotRequiredHandlers registers them (a
// component-base KubeRegistry, ContinueOnError).
//
// The kubelet's prober workers increment those vectors as they probe; here a Getter gives the
// counts of a Node's probes when /metrics/probes is read, and the handler writes them as the
// kubelet's registry would: one prober_probe_total series per container probe and result that has
// counted at least once (the kubelet's vectors make a child at its first Inc), and one
// prober_probe_duration_seconds histogram per container probe with a successful or unknown result
// (the kubelet observes those two only, under the same labels).
package probemetrics

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
)

// Path is the kubelet's proberMetricsPath.
const Path = "/metrics/probes"

// The probe types as the kubelet's probeType.String names them (the probe_type label).
const (
	Readiness = "Readiness"
	Liveness  = "Liveness"
	Startup   = "Startup"
)

// Count is what one probe of one container ran: its labels and how many probes gave each result.
// The counts are cumulative (a Prometheus counter): they never go down while the pod is on the
// Node, across the container's restarts (the kubelet keeps one prober worker per pod, container and
// probe type, and deletes its series when the worker stops).
type Count struct {
	// ProbeType is Readiness, Liveness or Startup.
	ProbeType                         string
	Namespace, Pod, PodUID, Container string
	// Successful, Failed and Unknown are the probes by result (the result label's "successful",
	// "failed" and "unknown").
	Successful, Failed, Unknown uint64
	// DurationSeconds is the sum of the durations of the successful and unknown probes, in seconds
	// (the histogram's sum); the buckets count each of them at their mean. A simulated probe takes no
	// time: 0, every probe in the first bucket.
	DurationSeconds float64
}

// Getter gives the probe counts of a Node's containers now. An error answers /metrics/probes with
// 500 "Internal Error: <err>".
type Getter interface {
	GetProbeCounts(ctx context.Context) ([]Count, error)
}

// GetterFunc adapts a function to Getter.
type GetterFunc func(ctx context.Context) ([]Count, error)

// GetProbeCounts calls f.
func (f GetterFunc) GetProbeCounts(ctx context.Context) ([]Count, error) { return f(ctx) }

// The kubelet's descriptors, with the help text component-base writes for their stability level.
var (
	probeTotalDesc = prometheus.NewDesc("prober_probe_total",
		"[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
		[]string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}, nil)
	probeDurationDesc = prometheus.NewDesc("prober_probe_duration_seconds",
		"[ALPHA] Duration in seconds for a probe response.",
		[]string{"probe_type", "container", "pod", "namespace"}, nil)
)

// Handler returns the handler of Path over g: a nil g is the kubelet's registry with no prober
// worker (a Node that runs no pods, or none with a probe): process_start_time_seconds only.
func Handler(g Getter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var counts []Count
		if g != nil {
			var err error
			if counts, err = g.GetProbeCounts(r.Context()); err != nil {
				klog.FromContext(r.Context()).Error(err, "Failed to get the probe counts")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = fmt.Fprintf(w, "Internal Error: %v", err)
				return
			}
		}
		reg := metrics.NewKubeRegistry()
		_ = metrics.RegisterProcessStartTime(reg.Register)
		reg.RawMustRegister(collector(counts))
		metrics.HandlerFor(reg, metrics.HandlerOpts{ErrorHandling: metrics.ContinueOnError}).ServeHTTP(w, r)
	})
}

// collector writes counts as the kubelet's ProberResults and ProberDuration.
type collector []Count

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- probeTotalDesc
	ch <- probeDurationDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c {
		for _, r := range []struct {
			result string
			n      uint64
		}{{"successful", n.Successful}, {"failed", n.Failed}, {"unknown", n.Unknown}} {
			if r.n > 0 {
				ch <- prometheus.MustNewConstMetric(probeTotalDesc, prometheus.CounterValue, float64(r.n),
					n.ProbeType, r.result, n.Container, n.Pod, n.Namespace, n.PodUID)
			}
		}
		if observed := n.Successful + n.Unknown; observed > 0 {
			buckets := make(map[float64]uint64, len(prometheus.DefBuckets))
			for _, b := range prometheus.DefBuckets {
				if n.DurationSeconds/float64(observed) <= b {
					buckets[b] = observed
				}
			}
			ch <- prometheus.MustNewConstHistogram(probeDurationDesc, observed, n.DurationSeconds, buckets,
				n.ProbeType, n.Container, n.Pod, n.Namespace)
		}
	}
}
