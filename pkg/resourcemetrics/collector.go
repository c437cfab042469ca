package resourcemetrics

import (
	"context"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's resource metrics, pkg/kubelet/metrics/collectors/resource_metrics.go at v1.37.2: the
// same names, help, stability levels and labels. scrape_error (ALPHA, deprecated in 1.29.0) is not
// declared: component-base hides an ALPHA metric from the minor after its deprecation, so the
// v1.37.2 kubelet does not write it, while this process (whose component-base version is not the
// kubelet's) would.
var (
	nodeCPUUsageDesc = metrics.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds",
		nil, nil, metrics.STABLE, "")
	nodeMemoryUsageDesc = metrics.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes",
		nil, nil, metrics.STABLE, "")
	nodeSwapUsageDesc = metrics.NewDesc("node_swap_usage_bytes",
		"Current swap usage of the node in bytes. Reported only on non-windows systems",
		nil, nil, metrics.ALPHA, "")
	containerCPUUsageDesc = metrics.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds",
		[]string{"container", "pod", "namespace"}, nil, metrics.STABLE, "")
	containerMemoryUsageDesc = metrics.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes",
		[]string{"container", "pod", "namespace"}, nil, metrics.STABLE, "")
	containerSwapUsageDesc = metrics.NewDesc("container_swap_usage_bytes",
		"Current amount of the container swap usage in bytes. Reported only on non-windows systems",
		[]string{"container", "pod", "namespace"}, nil, metrics.ALPHA, "")
	containerSwapLimitDesc = metrics.NewDesc("container_swap_limit_bytes",
		"Current amount of the container swap limit in bytes. Reported only on non-windows systems",
		[]string{"container", "pod", "namespace"}, nil, metrics.ALPHA, "")
	podCPUUsageDesc = metrics.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds",
		[]string{"pod", "namespace"}, nil, metrics.STABLE, "")
	podMemoryUsageDesc = metrics.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes",
		[]string{"pod", "namespace"}, nil, metrics.STABLE, "")
	podSwapUsageDesc = metrics.NewDesc("pod_swap_usage_bytes",
		"Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
		[]string{"pod", "namespace"}, nil, metrics.ALPHA, "")
	resourceScrapeErrorResultDesc = metrics.NewDesc("resource_scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise",
		nil, nil, metrics.STABLE, "")
	containerStartTimeDesc = metrics.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds",
		[]string{"container", "pod", "namespace"}, nil, metrics.STABLE, "")
)

// FromSummary returns the MetricsResourceGetter the kubelet's /metrics/resource is over a summary
// provider: each call gets g's Summary and gathers the kubelet's resource metrics collector over it
// (a fresh component-base KubeRegistry per call, so the collector reads the call's ctx). An error
// of g's is logged and written as resource_scrape_error 1 with no other sample, as the kubelet's;
// the returned error is the registry's only.
func FromSummary(g StatsSummaryGetter) MetricsResourceGetter {
	return MetricsResourceFunc(func(ctx context.Context) ([]*dto.MetricFamily, error) {
		r := metrics.NewKubeRegistry()
		if err := r.CustomRegister(&resourceMetricsCollector{ctx: ctx, provider: g}); err != nil {
			return nil, fmt.Errorf("registering the resource metrics collector: %w", err)
		}
		return r.Gather()
	})
}

// resourceMetricsCollector is the kubelet's resourceMetricsCollector over a StatsSummaryGetter,
// reading the ctx of the one call it is made for (FromSummary); the kubelet's reads a background context.
type resourceMetricsCollector struct {
	metrics.BaseStableCollector
	ctx      context.Context
	provider StatsSummaryGetter
}

var _ metrics.StableCollector = &resourceMetricsCollector{}

// DescribeWithStability implements metrics.StableCollector.
func (rc *resourceMetricsCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- nodeCPUUsageDesc
	ch <- nodeMemoryUsageDesc
	ch <- nodeSwapUsageDesc
	ch <- containerStartTimeDesc
	ch <- containerCPUUsageDesc
	ch <- containerMemoryUsageDesc
	ch <- containerSwapUsageDesc
	ch <- containerSwapLimitDesc
	ch <- podCPUUsageDesc
	ch <- podMemoryUsageDesc
	ch <- podSwapUsageDesc
	ch <- resourceScrapeErrorResultDesc
}

// CollectWithStability implements metrics.StableCollector, as the kubelet's: the Node, then per pod
// its containers' start time, CPU, memory and swap, then the pod's, and resource_scrape_error.
func (rc *resourceMetricsCollector) CollectWithStability(ch chan<- metrics.Metric) {
	var errorCount float64
	defer func() {
		ch <- metrics.NewLazyConstMetric(resourceScrapeErrorResultDesc, metrics.GaugeValue, errorCount)
	}()
	s, err := rc.provider.GetStatsSummary(rc.ctx)
	if err == nil && s == nil {
		err = fmt.Errorf("the provider returned no Summary")
	}
	if err != nil {
		errorCount = 1
		klog.FromContext(rc.ctx).Error(err, "Error getting summary for resourceMetric prometheus endpoint")
		return
	}
	collectNode(ch, s.Node)
	for _, pod := range s.Pods {
		for _, c := range pod.Containers {
			collectContainer(ch, pod, c)
		}
		collectPod(ch, pod)
	}
}

func seconds(ns uint64) float64 { return float64(ns) / float64(time.Second) }

func collectNode(ch chan<- metrics.Metric, s statsv1alpha1.NodeStats) {
	if s.CPU != nil && s.CPU.UsageCoreNanoSeconds != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(s.CPU.Time.Time,
			metrics.NewLazyConstMetric(nodeCPUUsageDesc, metrics.CounterValue, seconds(*s.CPU.UsageCoreNanoSeconds)))
	}
	if s.Memory != nil && s.Memory.WorkingSetBytes != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(s.Memory.Time.Time,
			metrics.NewLazyConstMetric(nodeMemoryUsageDesc, metrics.GaugeValue, float64(*s.Memory.WorkingSetBytes)))
	}
	if s.Swap != nil && s.Swap.SwapUsageBytes != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(s.Swap.Time.Time,
			metrics.NewLazyConstMetric(nodeSwapUsageDesc, metrics.GaugeValue, float64(*s.Swap.SwapUsageBytes)))
	}
}

func collectContainer(ch chan<- metrics.Metric, pod statsv1alpha1.PodStats, s statsv1alpha1.ContainerStats) {
	labels := []string{s.Name, pod.PodRef.Name, pod.PodRef.Namespace}
	if s.StartTime.Unix() > 0 {
		ch <- metrics.NewLazyConstMetric(containerStartTimeDesc, metrics.GaugeValue, float64(s.StartTime.UnixNano())/float64(time.Second), labels...)
	}
	if s.CPU != nil && s.CPU.UsageCoreNanoSeconds != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(s.CPU.Time.Time,
			metrics.NewLazyConstMetric(containerCPUUsageDesc, metrics.CounterValue, seconds(*s.CPU.UsageCoreNanoSeconds), labels...))
	}
	if s.Memory != nil && s.Memory.WorkingSetBytes != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(s.Memory.Time.Time,
			metrics.NewLazyConstMetric(containerMemoryUsageDesc, metrics.GaugeValue, float64(*s.Memory.WorkingSetBytes), labels...))
	}
	if s.Swap == nil {
		return
	}
	swapUsage := float64(0)
	if s.Swap.SwapUsageBytes != nil {
		swapUsage = float64(*s.Swap.SwapUsageBytes)
		ch <- metrics.NewLazyMetricWithTimestamp(s.Swap.Time.Time,
			metrics.NewLazyConstMetric(containerSwapUsageDesc, metrics.GaugeValue, swapUsage, labels...))
	}
	if s.Swap.SwapAvailableBytes != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(s.Swap.Time.Time,
			metrics.NewLazyConstMetric(containerSwapLimitDesc, metrics.GaugeValue, float64(*s.Swap.SwapAvailableBytes)+swapUsage, labels...))
	}
}

func collectPod(ch chan<- metrics.Metric, pod statsv1alpha1.PodStats) {
	labels := []string{pod.PodRef.Name, pod.PodRef.Namespace}
	if pod.CPU != nil && pod.CPU.UsageCoreNanoSeconds != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(pod.CPU.Time.Time,
			metrics.NewLazyConstMetric(podCPUUsageDesc, metrics.CounterValue, seconds(*pod.CPU.UsageCoreNanoSeconds), labels...))
	}
	if pod.Memory != nil && pod.Memory.WorkingSetBytes != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(pod.Memory.Time.Time,
			metrics.NewLazyConstMetric(podMemoryUsageDesc, metrics.GaugeValue, float64(*pod.Memory.WorkingSetBytes), labels...))
	}
	if pod.Swap != nil && pod.Swap.SwapUsageBytes != nil {
		ch <- metrics.NewLazyMetricWithTimestamp(pod.Swap.Time.Time,
			metrics.NewLazyConstMetric(podSwapUsageDesc, metrics.GaugeValue, float64(*pod.Swap.SwapUsageBytes), labels...))
	}
}
