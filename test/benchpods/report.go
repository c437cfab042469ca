package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/nodeagent/nodeagent/test/benchkit"
	"github.com/nodeagent/nodeagent/test/framework"
)

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func secs(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }

// reachedSecs is took in seconds, or "> took (not reached)".
func reachedSecs(p phase) string {
	if !p.reached {
		return "> " + secs(p.took) + " (not reached)"
	}
	return secs(p.took)
}

// perThousand is cpu per 1000 of n, in CPU-seconds.
func perThousand(cpu time.Duration, n int) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", cpu.Seconds()*1000/float64(n))
}

// perPod is the writes on pods (and their subresources) per n.
func perPod(c cost, n int) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(c.writes("pods"))/float64(n))
}

// podWriteKinds lists the system's writes on pods and Events, "verb resource count".
func podWriteKinds(c cost) string {
	var out []string
	for _, k := range topRequests(c.requests, 20) {
		verb, rest, _ := strings.Cut(k, " ")
		if (strings.HasPrefix(rest, "pods") || strings.HasPrefix(rest, "events")) && framework.IsWriteVerb(verb) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func stuckText(s []string) string {
	if len(s) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (e.g. %s)", len(s), s[0])
}

func dupText(d []string) string {
	if len(d) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (e.g. %s)", len(d), d[0])
}

func lostText(m map[string]string) string {
	if len(m) == 0 {
		return "0"
	}
	for n, s := range m {
		return fmt.Sprintf("%d (e.g. %s %s)", len(m), n, s)
	}
	return ""
}

func cores(c cost, name string) string { return fmt.Sprintf("%.3f", c.components[name]) }

// rssPerPod is the KiB of RSS per pod: the phase's peak over the idle RSS.
func rssPerPod(p phase, idle int64, pods int) string {
	if pods == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(p.cost.rssMax-idle)/1024/float64(pods))
}

type table struct {
	b    *strings.Builder
	runs []*systemRun
}

func (t table) head(first string) {
	fmt.Fprintf(t.b, "| %s |", first)
	for _, r := range t.runs {
		fmt.Fprintf(t.b, " %s |", systemTitle(r.system))
	}
	t.b.WriteString("\n|---|")
	for range t.runs {
		t.b.WriteString("---:|")
	}
	t.b.WriteString("\n")
}

func (t table) row(name string, f func(r *systemRun) string) {
	fmt.Fprintf(t.b, "| %s |", name)
	for _, r := range t.runs {
		fmt.Fprintf(t.b, " %s |", f(r))
	}
	t.b.WriteString("\n")
}

func systemTitle(s string) string {
	switch s {
	case systemNodeagent:
		return "nodeagent simulate"
	case systemKWOK:
		return "KWOK"
	}
	return s
}

func render(o options, e *benchkit.Env, runs []*systemRun, km *kubemarkRun) string {
	b := &strings.Builder{}
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	p("%s", sectionBegin)
	p("## bench-pods: pods on nodeagent's simulated Nodes and on KWOK's, same run")
	p("")
	p("- Command: `make bench-pods` (`go run ./test/benchpods`: --one-node-pods %d, --nodes %d, --deployments %d × --replicas %d, --churn %d, --steady %v, --kubemark %d); started %s, took %v.",
		o.onePods, o.nodes, o.deployments, o.replicas, o.churn, o.steady, o.kubemark, e.Started.Format("2006-01-02 15:04 UTC"), e.Took.Round(time.Second))
	p("- Machine: %d CPUs (%s), %s, kernel %s, %s (load average 1, 5, 15 min at start: %s; at end: %s). Everything runs on it: the control plane, the system measured, this program's watches.",
		e.CPUs, e.CPUModel, e.Memory, e.Kernel, e.OS, e.LoadStart, e.LoadEnd)
	p("- Versions: %s (commit %s); KWOK %s with kwokctl's default Stages (node: node-initialize, node-heartbeat-with-lease; pod: kustomize/stage/pod/fast); etcd, kube-apiserver, kube-controller-manager, kube-scheduler: k8s.io/kubernetes %s; %s.",
		e.AgentVersion, e.Commit, e.KWOKVersion, e.K8sVersion, e.GoVersion)
	p("- Each system runs on control planes of its own (one per scenario group), as a service account bound to cluster-admin; the audit log counts its requests. kube-controller-manager: deployment, replicaset, nodelifecycle, nodeipam (pod CIDRs), podgc, garbagecollector, ttl; it and kube-scheduler at --kube-api-qps %d. nodeagent simulate runs with its defaults (no start or readiness delay, `--pod-api-qps` 1000); KWOK with its defaults (no client rate limit).", o.schedulerQPS)
	if len(o.simulateArgs) > 0 || len(o.simulateEnv) > 0 {
		p("- nodeagent simulate's extra arguments: %q; its environment: %q (--simulate-args, --simulate-env).", o.simulateArgs, o.simulateEnv)
	}
	p("- A pod start is a pod turning Ready; its latency is from its bind to its Ready, both as this program's watch saw them. A pod is stuck when not Ready %v after its bind, or not gone %v after its deletion. RSS per pod: the phase's peak over the RSS before any pod.", o.stuckAfter, o.stuckAfter)
	p("")
	t := table{b: b, runs: runs}
	if o.scenarios[scenarioOneNode] {
		p("**Scenario 1, KWOK's own benchmark:** %d pods created bound to one Node (32 creates at a time, as admin), then deleted, one DELETE per pod, 32 at a time.", o.onePods)
		p("")
		t.head("")
		t.row("the Node Ready after the process's start (s)", func(r *systemRun) string { return secs(r.oneReady) })
		t.row("**create → all Running and Ready (s)** (KWOK's bar: 60)", func(r *systemRun) string { return reachedSecs(r.oneCreate) })
		t.row("bind → Ready p50 / p99 (s)", func(r *systemRun) string {
			return secs(pct(r.oneCreate.starts.latencies, 0.5)) + " / " + secs(pct(r.oneCreate.starts.latencies, 0.99))
		})
		t.row("**delete → all gone (s)** (KWOK's bar: 90)", func(r *systemRun) string { return reachedSecs(r.oneDelete) })
		t.row("pods stuck (start; delete)", func(r *systemRun) string {
			return stuckText(r.oneCreate.starts.stuck) + "; " + stuckText(r.oneDelete.deletes.stuck)
		})
		t.row("pod IPs held by two live pods", func(r *systemRun) string { return dupText(r.oneDup) })
		t.row("process CPU, create (CPU-s; **per 1000 pod starts**)", func(r *systemRun) string {
			return fmt.Sprintf("%.1f; **%s**", r.oneCreate.cost.cpu.Seconds(), perThousand(r.oneCreate.cost.cpu, r.oneCreate.starts.ready))
		})
		t.row("process CPU, delete (CPU-s; per 1000 pod deletes)", func(r *systemRun) string {
			return fmt.Sprintf("%.1f; %s", r.oneDelete.cost.cpu.Seconds(), perThousand(r.oneDelete.cost.cpu, r.oneDelete.deletes.gone))
		})
		t.row("RSS before pods; peak with pods (MiB); **KiB per pod**", func(r *systemRun) string {
			return fmt.Sprintf("%.1f; %.1f; **%s**", mib(r.oneIdleRSS), mib(r.oneCreate.cost.rssMax), rssPerPod(r.oneCreate, r.oneIdleRSS, r.oneCreate.starts.ready))
		})
		t.row("**pod writes per pod start**", func(r *systemRun) string { return perPod(r.oneCreate.cost, r.oneCreate.starts.ready) })
		t.row("pod writes per pod delete", func(r *systemRun) string { return perPod(r.oneDelete.cost, r.oneDelete.deletes.gone) })
		t.row("writes, create phase", func(r *systemRun) string { return podWriteKinds(r.oneCreate.cost) })
		t.row("writes, delete phase", func(r *systemRun) string { return podWriteKinds(r.oneDelete.cost) })
		t.row("kube-apiserver; etcd cores (create)", func(r *systemRun) string {
			return cores(r.oneCreate.cost, "kube-apiserver") + "; " + cores(r.oneCreate.cost, "etcd")
		})
		t.row("kube-apiserver; etcd cores (delete)", func(r *systemRun) string {
			return cores(r.oneDelete.cost, "kube-apiserver") + "; " + cores(r.oneDelete.cost, "etcd")
		})
		p("")
	}
	if o.scenarios[scenarioSpread] {
		total := o.deployments * o.replicas
		p("**Scenarios 2 to 4:** %d Nodes; %d Deployments of %d (%d pods) created at once, through the real kube-scheduler; %v of steady state; a Deployment of %d rolled (maxSurge 25 %%) while they run; then every Deployment scaled to 0.",
			o.nodes, o.deployments, o.replicas, total, o.steady, o.churn)
		p("")
		t.head("")
		t.row("all Nodes Ready after the process's start (s)", func(r *systemRun) string { return secs(r.nodesReady) })
		t.row("**2: create → every Deployment Available (s)**", func(r *systemRun) string { return reachedSecs(r.create) })
		t.row("2: create → every pod Ready (s), as the watch saw them", func(r *systemRun) string {
			return fmt.Sprintf("%s (%d of %d)", secs(r.create.allReady), r.create.starts.ready, total)
		})
		t.row("2: bind → Ready p50 / p99 (s)", func(r *systemRun) string {
			return secs(pct(r.create.starts.latencies, 0.5)) + " / " + secs(pct(r.create.starts.latencies, 0.99))
		})
		t.row("2: process CPU (cores; **CPU-s per 1000 pod starts**)", func(r *systemRun) string {
			return fmt.Sprintf("%.3f; **%s**", r.create.cost.cores, perThousand(r.create.cost.cpu, r.create.starts.ready))
		})
		t.row("2: **pod writes per pod start**", func(r *systemRun) string { return perPod(r.create.cost, r.create.starts.ready) })
		t.row("2: writes", func(r *systemRun) string { return podWriteKinds(r.create.cost) })
		t.row("2: kube-apiserver; etcd; kube-scheduler; kube-controller-manager cores", func(r *systemRun) string {
			c := r.create.cost
			return cores(c, "kube-apiserver") + "; " + cores(c, "etcd") + "; " + cores(c, "kube-scheduler") + "; " + cores(c, "kube-controller-manager")
		})
		t.row("3: process CPU, steady (cores)", func(r *systemRun) string { return fmt.Sprintf("%.3f", r.steady.cost.cores) })
		t.row("3: RSS before pods; mean with pods (MiB); **KiB per pod**", func(r *systemRun) string {
			perPod := "–"
			if total > 0 {
				perPod = fmt.Sprintf("%.1f", float64(r.steady.cost.rssMean-r.idleRSS)/1024/float64(total))
			}
			return fmt.Sprintf("%.1f; %.1f; **%s**", mib(r.idleRSS), mib(r.steady.cost.rssMean), perPod)
		})
		t.row("3: Nodes lost (seen not Ready after all were)", func(r *systemRun) string { return lostText(r.nodesLost) })
		t.row("3: Lease renew interval p50 / **p99** (s)", func(r *systemRun) string { return secs(r.leaseP50) + " / **" + secs(r.leaseP99) + "**" })
		t.row("3: requests per minute (top, by verb and resource)", func(r *systemRun) string {
			var out []string
			for _, k := range topRequests(r.steady.cost.requests, 6) {
				i := strings.LastIndexByte(k, ' ')
				var n int
				fmt.Sscan(k[i+1:], &n)
				out = append(out, fmt.Sprintf("%s %.0f", k[:i], float64(n)/r.steady.cost.wall.Minutes()))
			}
			return strings.Join(out, ", ")
		})
		t.row("3: Events stored in the window (kind and reason)", func(r *systemRun) string { return r.steadyEvents })
		t.row("3: kube-apiserver; etcd cores", func(r *systemRun) string {
			return cores(r.steady.cost, "kube-apiserver") + "; " + cores(r.steady.cost, "etcd")
		})
		if o.churn > 0 {
			t.row("**4: rollout of the churn Deployment (s)**", func(r *systemRun) string { return reachedSecs(r.churn) })
			t.row("4: pod starts; deletes", func(r *systemRun) string {
				return fmt.Sprintf("%d; %d", r.churn.starts.ready, r.churn.deletes.gone)
			})
			t.row("4: process CPU (cores; CPU-s per 1000 pod starts)", func(r *systemRun) string {
				return fmt.Sprintf("%.3f; %s", r.churn.cost.cores, perThousand(r.churn.cost.cpu, r.churn.starts.ready))
			})
			t.row("4: writes", func(r *systemRun) string { return podWriteKinds(r.churn.cost) })
		}
		t.row("**scale to 0 → every pod gone (s)**", func(r *systemRun) string { return reachedSecs(r.del) })
		t.row("scale to 0: process CPU (CPU-s per 1000 pod deletes); pod writes per pod delete", func(r *systemRun) string {
			return perThousand(r.del.cost.cpu, r.del.deletes.gone) + "; " + perPod(r.del.cost, r.del.deletes.gone)
		})
		t.row("scale to 0: kube-apiserver; etcd; kube-controller-manager cores", func(r *systemRun) string {
			c := r.del.cost
			return cores(c, "kube-apiserver") + "; " + cores(c, "etcd") + "; " + cores(c, "kube-controller-manager")
		})
		t.row("pods stuck (2; 4; scale to 0)", func(r *systemRun) string {
			return stuckText(r.create.starts.stuck) + "; " + stuckText(append(r.churn.starts.stuck, r.churn.deletes.stuck...)) + "; " + stuckText(r.del.deletes.stuck)
		})
		t.row("pod IPs held by two live pods", func(r *systemRun) string { return dupText(r.dup) })
		p("")
	}
	if km != nil {
		km.render(b, runs, o)
	}
	p("%s", sectionEnd)
	return b.String()
}
