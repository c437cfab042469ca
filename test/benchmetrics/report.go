package main

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nodeagent/nodeagent/test/benchkit"
)

func title(sys string) string {
	if sys == systemKWOK {
		return "KWOK v0.8.0 (metrics-usage)"
	}
	return "nodeagent simulate"
}

func ms(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f ms", s*1000)
}

// render writes the bench-metrics section: how it was run, then one column per system.
func render(o options, e *benchkit.Env, rs []*result) string {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("%s", beginMarker)
	p("## bench-metrics: %d Nodes × %d pods scraped by metrics-server v0.8.0 every 15 s", o.nodes, o.podsPerNode)
	p("")
	args := fmt.Sprintf("--nodes %d --pods-per-node %d --duration %s --settle %s --systems %s", o.nodes, o.podsPerNode, o.duration, o.settle, strings.Join(o.systems, ","))
	p("Written by `go run ./test/benchmetrics %s` (`make bench-metrics BENCH_METRICS_ARGS=\"%s\"`)", args, args)
	p("on %s; the run took %v. Each system ran alone, one after the other, on a fresh control plane (etcd,", e.Started.Format("2006-01-02 15:04 UTC"), e.Took.Round(time.Second))
	p("kube-apiserver with kubeadm's front-proxy flags, kube-controller-manager); pods bound by `spec.nodeName`, one container")
	p("requesting 100m/64Mi and using 10m/16Mi by annotation (nodeagent.io/cpu-usage; KWOK: kwok.x-k8s.io/usage-cpu, read by")
	p("kwokctl's usage-from-annotation). metrics-server: _output/bin/metrics-server with its release manifest's flags")
	p("(`--metric-resolution=15s`, `--kubelet-use-node-status-port`, InternalIP first) and `--kubelet-insecure-tls`, registered as")
	p("v1beta1.metrics.k8s.io. KWOK ran with kwokctl's metrics-usage configuration from its module (the Metric `metrics-resource`")
	p("and the ClusterResourceUsage `usage-from-annotation`, as `--config` files), serving HTTPS on this host's address, its")
	p("Nodes annotated `metrics.k8s.io/resource-metrics-path`. Two windows of %s each, %s after the pods Running (\"without\")", o.duration, o.settle)
	p("and %s after metrics.k8s.io first served every Node (\"with\"). Scrape latency is metrics-server's own", o.settle)
	p("`metrics_server_kubelet_request_duration_seconds` (one request per Node per scrape) over the \"with\" window, p50/p99")
	p("interpolated within its buckets (0.005 … 10 s) as histogram_quantile does; a tick is one scrape of every Node.")
	p("")
	p("- Machine: %d cores (%s), memory %s, kernel %s, %s; shared with other work that was not stopped", e.CPUs, e.CPUModel, e.Memory, e.Kernel, e.OS)
	p("  (load average 1, 5, 15 min at start: %s; at end: %s).", e.LoadStart, e.LoadEnd)
	p("- nodeagent: %s, commit %s; KWOK: %s; k8s.io/kubernetes %s; %s.", e.AgentVersion, e.Commit, e.KWOKVersion, e.K8sVersion, e.GoVersion)
	p("")
	cols := make([]string, len(rs))
	for i, r := range rs {
		cols[i] = title(r.system)
	}
	p("| | %s |", strings.Join(cols, " | "))
	p("|---|%s", strings.Repeat("---:|", len(rs)))
	row := func(name string, f func(r *result) string) {
		v := make([]string, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		p("| %s | %s |", name, strings.Join(v, " | "))
	}
	row("all Nodes Ready after start", func(r *result) string { return fmt.Sprintf("%.1f s", r.readyAfter.Seconds()) })
	row("all pods Running after the first create", func(r *result) string { return fmt.Sprintf("%.1f s", r.podsAfter.Seconds()) })
	row("process CPU without → with metrics-server (cores)", func(r *result) string {
		return fmt.Sprintf("%.3f → %.3f (**%+.3f**)", r.without.cores, r.with.cores, r.with.cores-r.without.cores)
	})
	row("process RSS mean without → with (MiB)", func(r *result) string {
		return fmt.Sprintf("%.0f → %.0f (**%+.0f**)", mib(r.without.rssMean), mib(r.with.rssMean), mib(r.with.rssMean-r.without.rssMean))
	})
	row("process RSS max without → with (MiB)", func(r *result) string {
		return fmt.Sprintf("%.0f → %.0f", mib(r.without.rssMax), mib(r.with.rssMax))
	})
	row("Lease renew interval p50 / p99 without", func(r *result) string {
		return fmt.Sprintf("%.1f / %.1f s (%d)", r.without.leaseP50.Seconds(), r.without.leaseP99.Seconds(), r.without.leases)
	})
	row("Lease renew interval p50 / p99 with", func(r *result) string {
		return fmt.Sprintf("%.1f / **%.1f** s (%d)", r.with.leaseP50.Seconds(), r.with.leaseP99.Seconds(), r.with.leases)
	})
	row("Nodes seen NotReady/Unknown in the windows", func(r *result) string { return fmt.Sprintf("%d / %d", r.without.notReady, r.with.notReady) })
	row("metrics.k8s.io serves every Node after metrics-server's start", func(r *result) string { return fmt.Sprintf("%.1f s", r.firstScrape.Seconds()) })
	row("scrape latency p50 / p99 (per Node request)", func(r *result) string { return ms(r.scrapeP50) + " / **" + ms(r.scrapeP99) + "**" })
	row("one scrape of every Node (tick) p50 / p99", func(r *result) string { return ms(r.tickP50) + " / " + ms(r.tickP99) })
	row("kubelet requests in the window: ok / failed", func(r *result) string { return fmt.Sprintf("%.0f / %.0f", r.scrapes, r.scrapeErrors) })
	row("metrics-server CPU (cores) / RSS (MiB)", func(r *result) string { return fmt.Sprintf("%.3f / %.0f", r.with.msCores, mib(r.with.msRSSMean)) })
	row("kube-apiserver CPU without → with (cores)", func(r *result) string {
		return fmt.Sprintf("%.3f → %.3f", r.without.apiserverCores, r.with.apiserverCores)
	})
	row("metrics.k8s.io at the end: Nodes / pods", func(r *result) string { return fmt.Sprintf("%d / %d", r.metricsNodes, r.metricsPods) })
	p("")
	p("%s", endMarker)
	return b.String()
}
