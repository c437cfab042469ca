package resourcemetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// SummaryHandler serves /stats/summary as the kubelet's stats handler (handleSummary): GET or POST
// (405 otherwise); with the form value only_cpu_and_memory=true (query or POST body) the Summary is
// cut to what the kubelet's GetCPUAndMemoryStats returns (CPUAndMemory); the body is the Summary as
// indented JSON (go-restful's WriteAsJson), Content-Type application/json. A form that does not
// parse, or an error of g's, answers 500 "Internal Error: <err>" in plain text.
func SummaryHandler(g StatsSummaryGetter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			writeError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		ctx := r.Context()
		if err := r.ParseForm(); err != nil {
			internalError(ctx, w, fmt.Errorf("parse form failed: %w", err))
			return
		}
		onlyCPUAndMemory := false
		if v, ok := r.Form["only_cpu_and_memory"]; ok && len(v) == 1 && v[0] == "true" {
			onlyCPUAndMemory = true
		}
		s, err := g.GetStatsSummary(ctx)
		if err == nil && s == nil {
			err = fmt.Errorf("the provider returned no Summary")
		}
		if err != nil {
			internalError(ctx, w, err)
			return
		}
		if onlyCPUAndMemory {
			s = CPUAndMemory(s)
		}
		data, err := json.MarshalIndent(s, "", " ")
		if err != nil {
			internalError(ctx, w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data)
	})
}

// MetricsResourceHandler serves /metrics/resource as the kubelet's: component-base's HandlerFor
// (content negotiation, ContinueOnError) over g's families of the request.
func MetricsResourceHandler(g MetricsResourceGetter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gather := gathererFunc(func() ([]*dto.MetricFamily, error) { return g.GetMetricsResource(r.Context()) })
		metrics.HandlerFor(gather, metrics.HandlerOpts{ErrorHandling: metrics.ContinueOnError}).ServeHTTP(w, r)
	})
}

type gathererFunc func() ([]*dto.MetricFamily, error)

func (f gathererFunc) Gather() ([]*dto.MetricFamily, error) { return f() }

func internalError(ctx context.Context, w http.ResponseWriter, err error) {
	klog.FromContext(ctx).Error(err, "HTTP InternalServerError serving", "request", "/stats/summary")
	writeError(w, http.StatusInternalServerError, fmt.Sprintf("Internal Error: %v", err))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

// CPUAndMemory returns the part of s the kubelet's summary provider returns from
// GetCPUAndMemoryStats (/stats/summary?only_cpu_and_memory=true): the Node's name, start time, CPU,
// memory, swap and system containers (name, start time, CPU, memory, swap); each pod's reference,
// start time, CPU, memory, swap and its containers' (name, start time, CPU, memory, swap). s is not
// changed; the result shares its pointers.
func CPUAndMemory(s *statsv1alpha1.Summary) *statsv1alpha1.Summary {
	out := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{
		NodeName: s.Node.NodeName, StartTime: s.Node.StartTime,
		CPU: s.Node.CPU, Memory: s.Node.Memory, Swap: s.Node.Swap,
		SystemContainers: cpuAndMemoryContainers(s.Node.SystemContainers),
	}}
	if s.Pods != nil {
		out.Pods = make([]statsv1alpha1.PodStats, 0, len(s.Pods))
	}
	for _, p := range s.Pods {
		out.Pods = append(out.Pods, statsv1alpha1.PodStats{
			PodRef: p.PodRef, StartTime: p.StartTime,
			Containers: cpuAndMemoryContainers(p.Containers),
			CPU:        p.CPU, Memory: p.Memory, Swap: p.Swap,
		})
	}
	return out
}

func cpuAndMemoryContainers(cs []statsv1alpha1.ContainerStats) []statsv1alpha1.ContainerStats {
	if cs == nil {
		return nil
	}
	out := make([]statsv1alpha1.ContainerStats, 0, len(cs))
	for _, c := range cs {
		out = append(out, statsv1alpha1.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory, Swap: c.Swap})
	}
	return out
}
