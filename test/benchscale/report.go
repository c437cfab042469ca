package main

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodeagent/nodeagent/test/benchkit"
)

// The section of BENCHMARKS.md a run writes is its own node list's (and shard count's):
// BENCH_SCALE_NODES=5000 does not replace the tables of 100,1000, nor a sharded run an unsharded one.
func markers(nodes []int, shards int) (begin, end string) {
	list := make([]string, len(nodes))
	for i, n := range nodes {
		list[i] = fmt.Sprint(n)
	}
	l := strings.Join(list, ",")
	if shards > 1 {
		l += fmt.Sprintf(" shards=%d", shards)
	}
	return "<!-- BEGIN bench-scale nodes=" + l + " (written by make bench-scale) -->", "<!-- END bench-scale nodes=" + l + " -->"
}

const (
	// kubeletWritesPerMin is a real kubelet's steady write rate per node: a Lease renewal every 10 s
	// (BENCHMARKS.md's kubelet run measured 6.00 writes/min, all Lease updates, over 3 minutes) plus a
	// status patch at most every 5 min when nothing changes (0.2/min).
	kubeletWritesPerMin = 6.2
)

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// perNodeMin is a count in the window per Node per minute.
func (r *result) perNodeMin(c int) float64 {
	return float64(c) / float64(r.nodes) / r.window.Minutes()
}

// leasePct is the p-th quantile of the Lease renew intervals (sorted), nearest rank.
func (r *result) leasePct(p float64) time.Duration {
	return benchkit.NearestRank(r.leaseIntervals, p)
}

func (r *result) summary() string {
	return fmt.Sprintf("    %s %d: Ready after %.1fs; not Ready seen %d at start-up, %d after; lease p50 %.2fs p99 %.2fs; "+
		"CPU %.3f cores, RSS mean %.1f MiB max %.1f; %.2f writes/min/node, %.2f requests/min/node; "+
		"apiserver %.3f etcd %.3f kcm %.3f cores",
		r.system, r.nodes, r.readyAfter.Seconds(), len(r.badStartup), len(r.badWindow),
		r.leasePct(0.5).Seconds(), r.leasePct(0.99).Seconds(), r.cores, mib(r.rssMean), mib(r.rssMax),
		r.perNodeMin(r.writes), r.perNodeMin(r.total),
		r.componentCores["kube-apiserver"], r.componentCores["etcd"], r.componentCores["kube-controller-manager"])
}

func systemTitle(s string) string {
	if s == systemKWOK {
		return "KWOK"
	}
	return "nodeagent simulate"
}

// render returns the bench-scale section of BENCHMARKS.md, markers included.
func render(o options, e *benchkit.Env, rs []*result) string {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	nodes := make([]string, len(o.nodes))
	for i, n := range o.nodes {
		nodes[i] = fmt.Sprint(n)
	}
	beginMarker, endMarker := markers(o.nodes, o.shards)
	p("%s", beginMarker)
	shardText, shardMake, shardArg := "", "", ""
	if o.shards > 1 {
		shardText = fmt.Sprintf(" (nodeagent in %d shard processes)", o.shards)
		shardMake, shardArg = fmt.Sprintf(" BENCH_SCALE_SHARDS=%d", o.shards), fmt.Sprintf(" --shards %d", o.shards)
	}
	p("## bench-scale: `nodeagent simulate` vs KWOK, %s Nodes%s", strings.Join(nodes, " and "), shardText)
	p("")
	p("Written by `make bench-scale BENCH_SCALE_NODES=%s BENCH_SCALE_DURATION=%s BENCH_SCALE_SETTLE=%s%s`",
		strings.Join(nodes, ","), o.duration, o.settle, shardMake)
	p("(`go run ./test/benchscale --nodes %s --duration %s --settle %s%s`)", strings.Join(nodes, ","), o.duration, o.settle, shardArg)
	p("on %s; the run took %v. Each system ran alone, one after the other, each on a fresh control plane.",
		e.Started.Format("2006-01-02 15:04 UTC"), e.Took.Round(time.Second))
	if o.shards > 1 {
		p("nodeagent simulate ran as %d processes on this machine (`--shards %d --shard-index I`, nodes/%d Nodes each, as the", o.shards, o.shards, o.shards)
		p("StatefulSet of deploy/kubernetes/simulate runs them); its CPU and RSS are the sums over the shards, each shard's below.")
	}
	p("")
	p("- Machine: %d cores (%s), memory %s, kernel %s, %s; shared with other work that was not stopped",
		e.CPUs, e.CPUModel, e.Memory, e.Kernel, e.OS)
	p("  (load average 1, 5, 15 min at start: %s; at end: %s).", e.LoadStart, e.LoadEnd)
	p("- nodeagent: %s, commit %s; KWOK: sigs.k8s.io/kwok/cmd/kwok %s (hack/kwok, built by hack/build-kwok.sh);",
		e.AgentVersion, e.Commit, e.KWOKVersion)
	p("  etcd, kube-apiserver, kube-controller-manager: k8s.io/kubernetes %s (hack/tools); %s.", e.K8sVersion, e.GoVersion)
	p("")

	p("| metric | %s |", strings.Join(mapResults(rs, func(r *result) string {
		return fmt.Sprintf("%s, %d", systemTitle(r.system), r.nodes)
	}), " | "))
	p("|---|%s", strings.Repeat("---:|", len(rs)))
	row := func(name string, f func(r *result) string) {
		p("| %s | %s |", name, strings.Join(mapResults(rs, f), " | "))
	}
	row("Nodes created beforehand by an admin client (s)", func(r *result) string {
		if r.system != systemKWOK {
			return "–"
		}
		return fmt.Sprintf("%.1f", r.created.Seconds())
	})
	row("Time from the process's start until all Ready (s)", func(r *result) string {
		if r.notAllReady >= 0 {
			return fmt.Sprintf("**not reached**: %d Ready at %.0f s", r.notAllReady, r.readyAfter.Seconds())
		}
		return fmt.Sprintf("%.1f", r.readyAfter.Seconds())
	})
	row("Nodes Ready at the end of the window", func(r *result) string { return fmt.Sprint(r.readyAtEnd) })
	row(fmt.Sprintf("Window, starting %v after all Ready (s)", o.settle), func(r *result) string { return fmt.Sprintf("%.0f", r.window.Seconds()) })
	row("Nodes seen NotReady/Unknown before all Ready (or the timeout)", func(r *result) string { return describeBad(r.badStartup) })
	row("**Nodes seen NotReady/Unknown after all Ready (or the timeout)**", func(r *result) string { return "**" + describeBad(r.badWindow) + "**" })
	row("Lease renew interval p50 (s)", func(r *result) string { return fmt.Sprintf("%.2f", r.leasePct(0.5).Seconds()) })
	row("Lease renew interval p99 (s)", func(r *result) string { return fmt.Sprintf("%.2f", r.leasePct(0.99).Seconds()) })
	row("Lease renew interval max (s)", func(r *result) string { return fmt.Sprintf("%.2f", r.leasePct(1).Seconds()) })
	row("  renewals seen in the window", func(r *result) string { return fmt.Sprint(len(r.leaseIntervals)) })
	row("**Process CPU (cores)**", func(r *result) string { return fmt.Sprintf("**%.3f**", r.cores) })
	row("  per 1000 Nodes (cores)", func(r *result) string { return fmt.Sprintf("%.3f", r.cores*1000/float64(r.nodes)) })
	row("**Process RSS, mean (MiB)**", func(r *result) string { return fmt.Sprintf("**%.1f**", mib(r.rssMean)) })
	row("Process RSS, max (MiB)", func(r *result) string { return fmt.Sprintf("%.1f", mib(r.rssMax)) })
	row("  RSS mean ÷ Nodes (KiB)", func(r *result) string { return fmt.Sprintf("%.1f", float64(r.rssMean)/1024/float64(r.nodes)) })
	for i := range o.shards {
		if o.shards == 1 {
			break
		}
		row(fmt.Sprintf("  shard %d: CPU (cores), RSS mean / max (MiB)", i), func(r *result) string {
			if i >= len(r.shards) {
				return "–"
			}
			s := r.shards[i]
			return fmt.Sprintf("%.3f, %.1f / %.1f", s.cores, mib(s.rssMean), mib(s.rssMax))
		})
	}
	row("**API writes / min / Node**", func(r *result) string { return fmt.Sprintf("**%.2f**", r.perNodeMin(r.writes)) })
	row("API requests (all) / min / Node", func(r *result) string { return fmt.Sprintf("%.2f", r.perNodeMin(r.total)) })
	row("kube-apiserver CPU (cores)", func(r *result) string { return fmt.Sprintf("%.3f", r.componentCores["kube-apiserver"]) })
	row("etcd CPU (cores)", func(r *result) string { return fmt.Sprintf("%.3f", r.componentCores["etcd"]) })
	row("kube-controller-manager CPU (cores)", func(r *result) string {
		return fmt.Sprintf("%.3f", r.componentCores["kube-controller-manager"])
	})
	p("")

	p("API requests per minute per Node in the window, by verb and resource (watches counted when they start):")
	p("")
	keys := map[string]bool{}
	for _, r := range rs {
		for k := range r.requests {
			keys[k] = true
		}
	}
	sorted := slices.Sorted(maps.Keys(keys))
	p("| verb resource | %s |", strings.Join(mapResults(rs, func(r *result) string {
		return fmt.Sprintf("%s, %d", systemTitle(r.system), r.nodes)
	}), " | "))
	p("|---|%s", strings.Repeat("---:|", len(rs)))
	for _, k := range sorted {
		row(k, func(r *result) string {
			c := r.requests[k]
			if c == 0 {
				return "0"
			}
			return fmt.Sprintf("%.3f (%d)", r.perNodeMin(c), c)
		})
	}
	p("")

	p("### Targets (issue 11)")
	p("")
	for _, n := range o.nodes {
		na, kw := find(rs, systemNodeagent, n), find(rs, systemKWOK, n)
		for _, r := range []*result{na, kw} {
			if r == nil {
				continue
			}
			lost := len(r.badWindow)
			if r.notAllReady >= 0 {
				p("- %d Nodes, %s: 0 Nodes lost: %s — not all were ever Ready at once: %d of %d after %v; %d Ready at the end of the window; %d seen NotReady or Unknown before the window, %d in it",
					n, systemTitle(r.system), metText(false), r.notAllReady, n, r.readyAfter.Round(time.Second), r.readyAtEnd, len(r.badStartup), lost)
				continue
			}
			p("- %d Nodes, %s: 0 Nodes lost (none seen NotReady or Unknown after all were Ready): %s — %d seen%s",
				n, systemTitle(r.system), metText(lost == 0 && r.readyAtEnd == n), lost, startupNote(r))
		}
		if na != nil {
			w := na.perNodeMin(na.writes)
			p("- %d Nodes: nodeagent's writes per Node no higher than a real kubelet's (%.1f/min: a Lease every 10 s, "+
				"6.00/min in the kubelet run above, plus a status patch every 5 min): %s — %.2f/min (KWOK: %s)",
				n, kubeletWritesPerMin, metText(w <= kubeletWritesPerMin), w, kwokWrites(kw))
		}
		if na == nil || kw == nil || n < 1000 {
			continue
		}
		cpuRatio, rssRatio := na.cores/kw.cores, float64(na.rssMean)/float64(kw.rssMean)
		p("- %d Nodes: nodeagent's CPU at most half of KWOK's: %s — %.3f vs %.3f cores (%.2f×)",
			n, metText(cpuRatio <= 0.5), na.cores, kw.cores, cpuRatio)
		p("- %d Nodes: nodeagent's RSS at most half of KWOK's: %s — mean %.1f vs %.1f MiB (%.2f×; max %.1f vs %.1f MiB)",
			n, metText(rssRatio <= 0.5), mib(na.rssMean), mib(kw.rssMean), rssRatio, mib(na.rssMax), mib(kw.rssMax))
	}
	if !slices.Contains(o.nodes, 5000) {
		p("- 5000 Nodes: not in this run (`BENCH_SCALE_NODES=5000`; see its own section, if any).")
	}
	p("")
	p("### Method")
	p("")
	p("- Control plane: test/framework's etcd, kube-apiserver and the real kube-controller-manager (nodelifecycle,")
	p("  nodeipam, ttl; `--node-monitor-period=5s`, `--node-monitor-grace-period=40s`, the framework's defaults), all")
	p("  on 127.0.0.1, started fresh for each system and each N, removed after.")
	p("- nodeagent: `nodeagent simulate --nodes=N --node-name-prefix=sim-node- -v=1`, otherwise defaults (status every")
	p("  10 s, report every 5 min, 40 s Lease renewed every 10 s, `--kube-api-qps` 50 / burst 100, the default template).")
	p("- KWOK: N Nodes `kwok-node-NNNN` created first by an admin client, as KWOK's documentation shows them (annotation")
	p("  and taint `kwok.x-k8s.io/node=fake`, label `type=kwok`, no status), then `kwok")
	p("  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake --node-lease-duration-seconds=40")
	p("  --config=_output/bin/kwok-node-stages.yaml`: the node Stages kwokctl gives a cluster by default (node-initialize")
	p("  and node-heartbeat-with-lease, copied from the pinned module by hack/build-kwok.sh; the kwok binary has no")
	p("  built-in Stages); no pod Stages (no pods run). Its other options are its defaults.")
	p("- Each runs as a service account of its own bound to cluster-admin, so the framework's audit policy (Metadata")
	p("  level for service accounts and nodes) logs its requests and only its: the benchmark's own watches and KWOK's")
	p("  Node creation use the admin identity, which is not logged.")
	p("- Ready and lost: an informer on all Nodes, started before the process, follows each Node's Ready condition; the")
	p("  time is from the exec until the informer has seen all N Ready. A Node seen with Ready False or Unknown at any")
	p("  event counts, before or after that moment. Nodes without a Ready condition (KWOK's before it initializes")
	p("  them) count as neither.")
	p("- Steady state: the window starts %v after all N are Ready, so that start-up traffic (Lease creation, the", o.settle)
	p("  start-up Events, which nodeagent's events client sends at `--event-qps` 50) is not counted in it.")
	p("- Lease renew interval: an informer on kube-node-lease; for each Lease, the difference between consecutive")
	p("  `spec.renewTime`s, for the updates received during the window; p50/p99 nearest-rank.")
	p("- CPU: utime+stime(+children) delta from /proc/PID/stat over the window's wall time, for the system's process,")
	p("  kube-apiserver, etcd and kube-controller-manager. RSS: VmRSS every %v over the window (framework.ReadProcStats).", o.sample)
	p("  The control plane's CPU includes serving the benchmark's two watches, the same for both systems.")
	p("- API requests: the audit log lines written during the window (byte offsets at its start and end), one per")
	p("  ResponseComplete, watches once when they start; divided by N and by the window in minutes. Writes are")
	p("  create, update, patch, delete.")
	p("%s", endMarker)
	return b.String()
}

func mapResults(rs []*result, f func(*result) string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func find(rs []*result, sys string, n int) *result {
	for _, r := range rs {
		if r.system == sys && r.nodes == n {
			return r
		}
	}
	return nil
}

func metText(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

func kwokWrites(kw *result) string {
	if kw == nil {
		return "not run"
	}
	return fmt.Sprintf("%.2f/min", kw.perNodeMin(kw.writes))
}

func startupNote(r *result) string {
	if len(r.badStartup) == 0 {
		return "; none before all were Ready either"
	}
	return fmt.Sprintf("; %d seen not Ready before all were Ready (%s)", len(r.badStartup), describeBad(r.badStartup))
}

// describeBad summarises name → status: "0", or "3 (False 2, Unknown 1; e.g. n1)".
func describeBad(m map[string]string) string {
	if len(m) == 0 {
		return "0"
	}
	by := map[string]int{}
	names := make([]string, 0, len(m))
	for name, s := range m {
		by[s]++
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, s := range []string{"False", "Unknown"} {
		if by[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, by[s]))
		}
	}
	return fmt.Sprintf("%d (%s; e.g. %s)", len(m), strings.Join(parts, ", "), names[0])
}
