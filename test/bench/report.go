package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodeagent/nodeagent/test/framework"
)

// result is everything measured for one component.
type result struct {
	name, node  string
	binarySize  int64
	warmupReady time.Duration
	runs        []runRecord

	// Steady-state window.
	window                time.Duration
	counts                map[string]int // "verb resource" → requests in the window
	cpuCores, cpuSeconds  float64
	rss, rssAnon, rssFile []float64
	fds, threads          []float64
	// RSS and its file-backed part after the window, once the file-backed pages were paged out and the
	// process ran on for options.pageout (-1: paging out failed; 0: not measured).
	rssAfterPageout, rssFileAfterPageout int64
	goroutinesStart, goroutinesEnd       int
	sizes                                nodeSizes

	// From the whole audit log.
	startupRequests, startupWrites []float64     // per timed cold start, exec → Ready
	patchBodies, steadyPatchBodies []float64     // nodes/status patch documents, bytes
	flipPatchBodies                []float64     // those sent while NetworkReady went off and on again
	notReadyAfter, readyAgainAfter time.Duration // from removing / restoring the CNI config to the Node showing it
	leaseBodies                    []float64     // Lease update bodies in the window (as JSON), bytes
	writeTimes                     []time.Time   // when each write in the window was received
}

func (r *result) readyMillis() []float64 {
	out := make([]float64, 0, len(r.runs))
	for _, rec := range r.runs {
		out = append(out, float64(rec.ready)/float64(time.Millisecond))
	}
	return out
}

// perMinute returns the steady-state requests per minute whose verb satisfies keep.
func (r *result) perMinute(keep func(verb string) bool) float64 {
	n := 0
	for k, v := range r.counts {
		if keep(strings.SplitN(k, " ", 2)[0]) {
			n += v
		}
	}
	return float64(n) / r.window.Minutes()
}

func (r *result) writesPerMin() float64 { return r.perMinute(framework.IsWriteVerb) }

// writeInterval is the mean time between consecutive writes in the window (-1 with fewer than 3).
// Unlike a count over the window, it does not depend on where the window's edges fall between two
// periodic writes: 17 or 18 Lease renewals fit in 3 minutes at one every 10.2 s.
func (r *result) writeInterval() time.Duration {
	t := append([]time.Time(nil), r.writeTimes...)
	if len(t) < 3 {
		return -1
	}
	sort.Slice(t, func(i, j int) bool { return t[i].Before(t[j]) })
	return t[len(t)-1].Sub(t[0]) / time.Duration(len(t)-1)
}

// writesPerMinByInterval is 60 s ÷ writeInterval, or the count over the window with fewer than 3 writes.
func (r *result) writesPerMinByInterval() float64 {
	if d := r.writeInterval(); d > 0 {
		return time.Minute.Seconds() / d.Seconds()
	}
	return r.writesPerMin()
}

func seconds(d time.Duration) float64 {
	if d < 0 {
		return math.NaN()
	}
	return d.Seconds()
}
func (r *result) getsPerMin() float64 {
	return r.perMinute(func(v string) bool { return v == "get" })
}
func (r *result) totalPerMin() float64 { return r.perMinute(func(string) bool { return true }) }

// timedEvent is an audit event with its time and, at Request level, its request body (for a patch,
// the patch document verbatim).
type timedEvent struct {
	framework.AuditEvent
	RequestReceivedTimestamp time.Time       `json:"requestReceivedTimestamp"`
	RequestObject            json.RawMessage `json:"requestObject"`
}

// readTimedEvents parses the whole audit log (lines that do not parse, such as one still being
// written, are skipped).
func readTimedEvents(path string) ([]timedEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	var out []timedEvent
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for s.Scan() {
		var e timedEvent
		if err := json.Unmarshal(s.Bytes(), &e); err == nil {
			out = append(out, e)
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read audit log %s: %w", path, err)
	}
	return out, nil
}

// counted reports whether e is one request for requestCounts' rules (watches when they start).
func counted(e framework.AuditEvent) bool {
	if e.Verb == "watch" {
		return e.Stage == "ResponseStarted"
	}
	return e.Stage == "ResponseComplete"
}

// fromAudit fills the per-start request counts and the body sizes of user's requests; [w0, w1] is
// the steady-state window.
func (r *result) fromAudit(events []timedEvent, user string, w0, w1, flip0, flip1 time.Time) {
	for _, rec := range r.runs {
		end := rec.start.Add(rec.ready)
		var reqs, writes float64
		for _, e := range events {
			t := e.RequestReceivedTimestamp
			if e.User.Username != user || !counted(e.AuditEvent) || t.Before(rec.start) || t.After(end) {
				continue
			}
			reqs++
			if framework.IsWriteVerb(e.Verb) {
				writes++
			}
		}
		r.startupRequests = append(r.startupRequests, reqs)
		r.startupWrites = append(r.startupWrites, writes)
	}
	for _, e := range events {
		if e.User.Username != user || e.Stage != "ResponseComplete" {
			continue
		}
		inWindow := !e.RequestReceivedTimestamp.Before(w0) && !e.RequestReceivedTimestamp.After(w1)
		if inWindow && framework.IsWriteVerb(e.Verb) {
			r.writeTimes = append(r.writeTimes, e.RequestReceivedTimestamp)
		}
		if len(e.RequestObject) == 0 || e.ObjectRef == nil {
			continue
		}
		size := float64(compactLen(e.RequestObject))
		switch {
		case e.Verb == "patch" && e.ObjectRef.Resource == "nodes" && e.ObjectRef.Subresource == "status":
			r.patchBodies = append(r.patchBodies, size)
			if inWindow {
				r.steadyPatchBodies = append(r.steadyPatchBodies, size)
			}
			if !flip0.IsZero() && !e.RequestReceivedTimestamp.Before(flip0) && !e.RequestReceivedTimestamp.After(flip1) {
				r.flipPatchBodies = append(r.flipPatchBodies, size)
			}
		case e.Verb == "update" && e.ObjectRef.Resource == "leases" && inWindow:
			r.leaseBodies = append(r.leaseBodies, size)
		}
	}
}

// env describes the machine and the versions of what ran.
type env struct {
	date, duration            string
	cpuModel, kernel, osName  string
	cores                     int
	memTotal                  string
	cgroup                    string
	loadStart, loadEnd        string
	commit                    string
	kubelet, agent, apiserver string
	etcd, containerd, benchGo string
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func collectEnv(root string) *env {
	e := &env{date: time.Now().UTC().Format("2006-01-02 15:04 MST"), cores: runtime.NumCPU(), benchGo: runtime.Version()}
	e.kernel = readTrim("/proc/sys/kernel/osrelease")
	for _, line := range strings.Split(readTrim("/proc/cpuinfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			e.cpuModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			break
		}
	}
	for _, line := range strings.Split(readTrim("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			e.memTotal = fmt.Sprintf("%.1f GiB (MemTotal %d kB)", float64(kb)/(1<<20), kb)
		}
	}
	for _, line := range strings.Split(readTrim("/etc/os-release"), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			e.osName = strings.Trim(v, `"`)
		}
	}
	e.cgroup = "v1"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		e.cgroup = "v2"
	}
	e.loadStart = loadavg()
	e.commit = "?"
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		e.commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			e.commit += " (the working tree had uncommitted changes)"
		}
	}
	return e
}

func loadavg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// moduleVersion returns "<module version> (<go version>)" of a dependency dep of the Go binary bin.
func moduleVersion(bin, dep string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "?"
	}
	for _, d := range bi.Deps {
		if d.Path == dep {
			v := d.Version
			if d.Replace != nil {
				v = d.Replace.Version
			}
			return fmt.Sprintf("%s %s, %s", dep, v, bi.GoVersion)
		}
	}
	return bi.GoVersion
}

func (e *env) versions(binDir, agentBin string) {
	e.kubelet = moduleVersion(filepath.Join(binDir, "kubelet"), "k8s.io/kubernetes")
	e.apiserver = moduleVersion(filepath.Join(binDir, "kube-apiserver"), "k8s.io/kubernetes")
	e.etcd = moduleVersion(filepath.Join(binDir, "etcd"), "go.etcd.io/etcd/server/v3")
	if out, err := exec.Command(agentBin, "version").Output(); err == nil {
		e.agent = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("containerd", "--version").Output(); err == nil {
		e.containerd = strings.TrimSpace(string(out))
	}
}

func (e *env) finish(began time.Time) {
	e.loadEnd = loadavg()
	e.duration = time.Since(began).Round(time.Second).String()
}

// report renders the results.
type report struct {
	env            *env
	opts           options
	kubelet, agent *result
}

type row struct{ metric, kubelet, agent, ratio string }

func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// ratio is nodeagent / kubelet.
func ratio(k, a float64) string {
	if math.IsNaN(k) || math.IsNaN(a) || k < 0 || a < 0 {
		return "n/a"
	}
	if k == 0 {
		if a == 0 {
			return "="
		}
		return "∞"
	}
	r := a / k
	if r < 0.1 {
		return fmt.Sprintf("%.3f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

func numRow(metric string, k, a float64, prec int) row {
	return row{metric, num(k, prec), num(a, prec), ratio(k, a)}
}

const mib = 1 << 20

func goroutinesVal(n int) float64 {
	if n < 0 {
		return math.NaN()
	}
	return float64(n)
}

func (rp *report) rows() []row {
	k, a := rp.kubelet, rp.agent
	km, am := k.readyMillis(), a.readyMillis()
	rows := []row{
		numRow("Time to Ready, median (ms)", median(km), median(am), 0),
		numRow("Time to Ready, p90 (ms)", percentile(km, 90), percentile(am, 90), 0),
		{"Time to Ready, min – max (ms)", num(percentile(km, 0), 0) + " – " + num(maxOf(km), 0),
			num(percentile(am, 0), 0) + " – " + num(maxOf(am), 0), ""},
		numRow("API requests exec → Ready, median per start", median(k.startupRequests), median(a.startupRequests), 0),
		numRow("Steady state: writes / min (count in the window)", k.writesPerMin(), a.writesPerMin(), 2),
		numRow("Steady state: mean interval between writes (s)", seconds(k.writeInterval()), seconds(a.writeInterval()), 2),
		numRow("Steady state: writes / min (from that interval)", k.writesPerMinByInterval(), a.writesPerMinByInterval(), 2),
		numRow("Steady state: GETs / min", k.getsPerMin(), a.getsPerMin(), 2),
		numRow("Steady state: all requests / min", k.totalPerMin(), a.totalPerMin(), 2),
		numRow("Node object, JSON GET (bytes, incl. managedFields)", float64(k.sizes.json), float64(a.sizes.json), 0),
		numRow("Node object, `kubectl get -o json` (bytes)", float64(k.sizes.kubectlJSON), float64(a.sizes.kubectlJSON), 0),
		numRow("Node object, protobuf GET (bytes)", float64(k.sizes.protobuf), float64(a.sizes.protobuf), 0),
		numRow("Status patch body, median of all (bytes)", median(k.patchBodies), median(a.patchBodies), 0),
		numRow("Status patch body, max (bytes)", maxOf(k.patchBodies), maxOf(a.patchBodies), 0),
		numRow("Status patches, whole run (count)", float64(len(k.patchBodies)), float64(len(a.patchBodies)), 0),
		numRow("  of which empty ({}, heartbeat within the same second)", countEmpty(k.patchBodies), countEmpty(a.patchBodies), 0),
		numRow("Non-empty status patch body, median (bytes)", median(nonEmpty(k.patchBodies)), median(nonEmpty(a.patchBodies)), 0),
		numRow("Status patches in the steady window (count)", float64(len(k.steadyPatchBodies)), float64(len(a.steadyPatchBodies)), 0),
	}
	if rp.opts.flip {
		rows = append(rows,
			numRow("CNI config removed → Node NotReady (s, one sample)", k.notReadyAfter.Seconds(), a.notReadyAfter.Seconds(), 1),
			numRow("CNI config restored → Node Ready (s, one sample)", k.readyAgainAfter.Seconds(), a.readyAgainAfter.Seconds(), 1),
			numRow("Status patches, NetworkReady off and on (count)", float64(len(k.flipPatchBodies)), float64(len(a.flipPatchBodies)), 0),
			numRow("  their bodies, median (bytes)", median(k.flipPatchBodies), median(a.flipPatchBodies), 0),
			numRow("  their bodies, max (bytes)", maxOf(k.flipPatchBodies), maxOf(a.flipPatchBodies), 0))
	}
	rows = append(rows,
		numRow("Lease update body, median (bytes, as JSON)", median(k.leaseBodies), median(a.leaseBodies), 0),
		numRow("RSS, mean (MiB)", mean(k.rss)/mib, mean(a.rss)/mib, 1),
		numRow("RSS, max (MiB)", maxOf(k.rss)/mib, maxOf(a.rss)/mib, 1),
		numRow("  of which anonymous (heap, stacks), mean (MiB)", mean(k.rssAnon)/mib, mean(a.rssAnon)/mib, 1),
		numRow("  of which file-backed (mapped binary, libs), mean (MiB)", mean(k.rssFile)/mib, mean(a.rssFile)/mib, 1),
	)
	if rp.opts.pageout > 0 {
		rows = append(rows,
			numRow(fmt.Sprintf("RSS %s after file pages paged out (MiB)", rp.opts.pageout), refMiB(k.rssAfterPageout), refMiB(a.rssAfterPageout), 1),
			numRow("  of which file-backed (MiB)", refMiB(k.rssFileAfterPageout), refMiB(a.rssFileAfterPageout), 1))
	}
	rows = append(rows,
		numRow("CPU, mean over the window (cores)", k.cpuCores, a.cpuCores, 4),
		numRow("Goroutines (end of window)", goroutinesVal(k.goroutinesEnd), goroutinesVal(a.goroutinesEnd), 0),
		numRow("Open fds, max", maxOf(k.fds), maxOf(a.fds), 0),
		numRow("OS threads, max", maxOf(k.threads), maxOf(a.threads), 0),
		numRow("Binary size (MiB)", float64(k.binarySize)/mib, float64(a.binarySize)/mib, 1),
	)
	return rows
}

// table is the plain-text table printed at the end of a run.
func (rp *report) table() string {
	rows := append([]row{{"metric", "kubelet", "nodeagent", "ratio"}}, rp.rows()...)
	w := [4]int{}
	for _, r := range rows {
		for i, c := range []string{r.metric, r.kubelet, r.agent, r.ratio} {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	pad := func(s string, n int) string { return s + strings.Repeat(" ", n-len([]rune(s))) }
	for i, r := range rows {
		fmt.Fprintf(&b, "%s | %s | %s | %s\n", pad(r.metric, w[0]), pad(r.kubelet, w[1]), pad(r.agent, w[2]), r.ratio)
		if i == 0 {
			fmt.Fprintf(&b, "%s-|-%s-|-%s-|-%s\n", strings.Repeat("-", w[0]), strings.Repeat("-", w[1]), strings.Repeat("-", w[2]), strings.Repeat("-", w[3]))
		}
	}
	return b.String()
}

// target is one of issue 5's targets for nodeagent, with whether this run met it.
type target struct {
	met       bool
	what, got string
}

func (rp *report) targets() []target {
	k, a := rp.kubelet, rp.agent
	med := median(a.readyMillis())
	rssMean, rssMax := mean(a.rss)/mib, maxOf(a.rss)/mib
	afterPageout := ""
	if a.rssAfterPageout > 0 {
		afterPageout = fmt.Sprintf("; %.1f MiB %s after its file pages were paged out", refMiB(a.rssAfterPageout), rp.opts.pageout)
	}
	return []target{
		{med <= 150, "median time to Ready ≤ 150 ms", fmt.Sprintf("%.0f ms (kubelet %.0f ms)", med, median(k.readyMillis()))},
		{rssMax <= 25, "RSS ≤ 25 MiB (judged on the max VmRSS over the window)", fmt.Sprintf(
			"mean %.1f MiB, max %.1f MiB, of which %.1f MiB anonymous and %.1f MiB file-backed%s (kubelet: mean %.1f MiB)",
			rssMean, rssMax, mean(a.rssAnon)/mib, mean(a.rssFile)/mib, afterPageout, mean(k.rss)/mib)},
		{a.cpuCores <= k.cpuCores/3, "idle CPU ≤ ⅓ of the kubelet's", fmt.Sprintf("%.4f cores (%.2f CPU-s in %s) vs kubelet %.4f cores (%.2f CPU-s); ratio %s",
			a.cpuCores, a.cpuSeconds, a.window.Round(time.Second), k.cpuCores, k.cpuSeconds, ratio(k.cpuCores, a.cpuCores))},
		{a.writesPerMinByInterval() <= k.writesPerMinByInterval()*1.01, "steady-state writes ≤ the kubelet's (rates from the mean interval between writes; within 1% counts as equal)",
			fmt.Sprintf("%.2f/min (one every %.2f s; %d in the window) vs kubelet %.2f/min (one every %.2f s; %d in the window)",
				a.writesPerMinByInterval(), seconds(a.writeInterval()), len(a.writeTimes),
				k.writesPerMinByInterval(), seconds(k.writeInterval()), len(k.writeTimes))},
		{a.getsPerMin() == 0, "no periodic GETs in steady state", fmt.Sprintf("%.2f GETs/min (kubelet %.2f/min)", a.getsPerMin(), k.getsPerMin())},
	}
}

// fileHeader opens BENCHMARKS.md: what the file is, and its sections (those below analysisMarker are written by
// hand or by the other bench programs; keep the list in step with their headings).
const fileHeader = "# Benchmarks\n" +
	"\n" +
	"Today's figures, one section per benchmark: the latest run's table with its command, machine, date and commit,\n" +
	"what limits it, and a \"Changes\" line on what moved a figure. Runs that later runs replaced are not kept here:\n" +
	"`git log -p BENCHMARKS.md` has them. The programs rewrite their own parts (`make bench` everything above its\n" +
	"marker below, the others what lies between their BEGIN and END markers); the rest is written by hand.\n" +
	"\n" +
	"- [make bench](#make-bench-the-agent-vs-the-reference-kubelet): the agent vs the reference kubelet, one Node each\n" +
	"  (time to Ready, RSS, idle CPU, API requests).\n" +
	"- bench-scale, `nodeagent simulate` vs KWOK, Nodes without pods: [100](#bench-scale-nodeagent-simulate-vs-kwok-100-nodes),\n" +
	"  [1000 and 5000](#bench-scale-nodeagent-simulate-vs-kwok-1000-and-5000-nodes),\n" +
	"  [5000 in 5 shards](#bench-scale-nodeagent-simulate-vs-kwok-5000-nodes-nodeagent-in-5-shard-processes),\n" +
	"  [10 000](#bench-scale-nodeagent-simulate-vs-kwok-10000-nodes) Nodes.\n" +
	"- [bench-pods](#bench-pods-pods-on-nodeagents-simulated-nodes-and-on-kwoks-same-run): pods on simulated Nodes vs\n" +
	"  KWOK and kubemark; [the pod status patch](#the-pod-status-patch-built-from-what-changed);\n" +
	"  [bench-sim-pods](#pods-on-simulated-nodes-make-bench-sim-pods).\n" +
	"- [Memory per mode and bench-companion](#memory-per-mode-and-make-bench-companion-nodeagent-standalone-and---companion-vs-node-problem-detector-v1360):\n" +
	"  `--companion` vs node-problem-detector.\n" +
	"- [bench-kubelet-api](#bench-kubelet-api-the-simulated-nodes-kubelet-api): the simulated Nodes' kubelet API;\n" +
	"  [bench-metrics](#bench-metrics-1000-nodes--10-pods-scraped-by-metrics-server-v080-every-15-s): metrics-server scraping them.\n" +
	"- [Sandbox](#sandbox-one-interpreted-command): a container command interpreted;\n" +
	"  [e2e-sig-apps](#e2e-sig-apps-kubernetes-sig-apps-conformance-specs-on-nodeagents-and-kwoks-nodes): conformance pass counts.\n" +
	"- [DRA devices](#dra-devices-on-simulated-nodes-1000-nodes--8-gpus): ResourceSlices of 1000 Nodes × 8 GPUs, 4000 pods with claims.\n" +
	"- [bench-karpenter](#bench-karpenter-karpenters-kwok-provider-scaling-to-3000-pods-nodeagent-simulate-vs-kwok-v080): Karpenter's kwok provider with nodeagent or KWOK as its Nodes.\n" +
	"- [e2e-sig-node](#e2e-sig-node-kubernetes-sig-node-conformance-specs-on-nodeagents-and-kwoks-nodes): sig-node conformance pass counts, nodeagent vs KWOK.\n"

// analysisMarker separates the generated part of BENCHMARKS.md from hand-written notes kept across runs.
const analysisMarker = "<!-- Everything below this line is written by hand and kept when `make bench` rewrites the file. -->"

// write writes the markdown report to path, keeping whatever followed analysisMarker in the old file.
func (rp *report) write(path string) error {
	kept := ""
	if old, err := os.ReadFile(path); err == nil {
		if _, after, ok := strings.Cut(string(old), analysisMarker); ok {
			kept = strings.TrimLeft(after, "\n")
		}
	}
	e, k, a := rp.env, rp.kubelet, rp.agent
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	b.WriteString(fileHeader)
	p("")
	p("## make bench: the agent vs the reference kubelet")
	p("")
	p("Written by `make bench` (`go run ./test/bench`) on %s; the run took %s.", e.date, e.duration)
	p("Both ran on one control plane and one containerd, side by side; see [Method](#method).")
	p("")
	p("### Machine")
	p("")
	p("- CPU: %d cores (%s)", e.cores, e.cpuModel)
	p("- Memory: %s", e.memTotal)
	p("- Kernel: %s; OS: %s; cgroup %s", e.kernel, e.osName, e.cgroup)
	p("- Load average (1, 5, 15 min) at start: %s; at end: %s. The machine is shared: other work was not stopped, so", e.loadStart, e.loadEnd)
	p("  timings carry its noise (both columns alike, as the cold starts alternate).")
	p("")
	p("### Versions")
	p("")
	p("- kubelet: %s (built by hack/install-deps.sh from hack/tools; `kubelet --version` says v0.0.0-master because it is built without the release ldflags)", e.kubelet)
	p("- nodeagent: %s, commit %s", e.agent, e.commit)
	p("- kube-apiserver, kube-controller-manager: %s; etcd: %s", e.apiserver, e.etcd)
	p("- containerd: %s", e.containerd)
	p("- bench program: %s", e.benchGo)
	p("")
	p("### Results")
	p("")
	p("Ratio is nodeagent ÷ kubelet. %d timed cold starts each; steady-state window %s.", len(a.runs), k.window.Round(time.Second))
	p("")
	p("| metric | kubelet | nodeagent | ratio |")
	p("|---|---:|---:|---:|")
	for _, r := range rp.rows() {
		p("| %s | %s | %s | %s |", r.metric, r.kubelet, r.agent, r.ratio)
	}
	p("")
	p("#### Steady-state requests per minute, by verb and resource")
	p("")
	p("| verb resource | kubelet | nodeagent |")
	p("|---|---:|---:|")
	keys := map[string]bool{}
	for kk := range k.counts {
		keys[kk] = true
	}
	for kk := range a.counts {
		keys[kk] = true
	}
	sorted := slices.Sorted(maps.Keys(keys))
	for _, kk := range sorted {
		p("| %s | %.2f | %.2f |", kk, float64(k.counts[kk])/k.window.Minutes(), float64(a.counts[kk])/a.window.Minutes())
	}
	if len(sorted) == 0 {
		p("| (none) | 0 | 0 |")
	}
	p("")
	p("#### Cold starts, exec → Ready (ms)")
	p("")
	for _, r := range []*result{k, a} {
		ms := r.readyMillis()
		parts := make([]string, len(ms))
		for i, m := range ms {
			parts[i] = fmt.Sprintf("%.0f", m)
		}
		p("- %s: %s (untimed warm-up start: %.0f ms); requests exec → Ready per start: %s",
			r.name, strings.Join(parts, ", "), float64(r.warmupReady)/float64(time.Millisecond), joinFloats(r.startupRequests))
	}
	p("")
	p("#### Host cost samples")
	p("")
	for _, r := range []*result{k, a} {
		p("- %s: %d samples; RSS %.1f–%.1f MiB; CPU %.2f s over %s; goroutines %s at the start of the window, %s at the end",
			r.name, len(r.rss), minOf(r.rss)/mib, maxOf(r.rss)/mib, r.cpuSeconds, r.window.Round(time.Second),
			num(goroutinesVal(r.goroutinesStart), 0), num(goroutinesVal(r.goroutinesEnd), 0))
	}
	p("")
	p("### Targets (issue 5)")
	p("")
	for _, t := range rp.targets() {
		mark := "not met"
		if t.met {
			mark = "**met**"
		}
		p("- %s: %s — %s", t.what, mark, t.got)
	}
	p("")
	p("### Method")
	p("")
	p("- Control plane: test/framework's etcd, kube-apiserver (Node,RBAC authorization, NodeRestriction) and")
	p("  kube-controller-manager (nodelifecycle, nodeipam, ttl), all on 127.0.0.1. Each agent has its own node name")
	p("  (`%s`, `%s`) and its own `system:node:<name>` token identity.", kubeletNode, agentNode)
	p("- One containerd (Debian's, with a bridge CNI config so NetworkReady is true) is shared by both: they only")
	p("  read from it (Status, Version, ListImages, ImageFsInfo; no pods run), both see the same runtime and images,")
	p("  and its own cost is in neither column.")
	p("- kubelet: KubeletConfiguration of shared/reference/real-components.md (cgroupfs, failSwapOn false,")
	p("  failCgroupV1 false, cgroupsPerQOS false, enforceNodeAllocatable [], webhook authn off, AlwaysAllow,")
	p("  localStorageCapacityIsolation false, readOnlyPort 0) with `--root-dir --cert-dir --hostname-override --v=2`;")
	p("  one change: anonymous authentication on, so `go_goroutines` can be read from its `:port/metrics` (127.0.0.1).")
	p("  nodeagent: framework.StartAgent defaults (`--v=2`, healthz on 127.0.0.1) and its kubelet API on (`--port`, its")
	p("  defaults: the self-signed certificate in --cert-dir, webhook authn/authz). Both use their default periods")
	p("  (status every 10 s, report every 5 min, 40 s lease renewed every 10 s).")
	p("- Time to Ready: before each start the Node, its Lease and its CSINode are deleted (and gone) and the previous")
	p("  process has exited (its mounts removed). A watch on the Node (from a fresh list's resourceVersion) is opened,")
	p("  then the clock starts and the binary is exec'd; the time is taken when the watch delivers the first event")
	p("  with Ready=True. One untimed warm-up start each first, then %d timed starts each, alternating which", rp.opts.runs)
	p("  component goes first; root dirs are kept between starts (as across a node's restarts). Median of an even")
	p("  count is the mean of the middle two; p90 is nearest-rank.")
	p("- Steady state: both started (one after the other) and Ready, then %s of warm-up, then a %s window.", rp.opts.warmup, rp.opts.steady)
	p("  API load: the audit log lines written during the window are read with framework.ReadAuditEvents and")
	p("  counted per user (`system:node:<name>`): one per ResponseComplete event, watches once when they start.")
	p("  Writes are create/update/patch/delete; GETs are verb get (lists and watches are listed separately above).")
	p("  A count over the window depends on where its edges fall between periodic writes (17 or 18 renewals at one")
	p("  every 10.2 s fit in 3 minutes), so the write rate is also given as 60 s ÷ the mean interval between")
	p("  consecutive writes (audit requestReceivedTimestamp), and the writes target is judged on that.")
	p("- Bytes: the Node is fetched by an admin client at the end of the window as JSON (the API's compact JSON,")
	p("  managedFields included), rendered as `kubectl get node -o json` prints it (4-space indent, managedFields")
	p("  hidden), and as protobuf. Status patch bodies come from an extra audit rule (level Request for")
	p("  nodes/status patches from system:nodes, via --audit-policy-file): the audit event's requestObject is the")
	p("  patch document as sent (compacted). Lease update bodies are logged the same way, but the audit log holds")
	p("  them re-encoded as JSON, so their size is the JSON equivalent, not the protobuf bytes on the wire.")
	if rp.opts.flip {
		p("  Neither sends a status patch in a quiet steady state (the report period is 5 min), so after the window the")
		p("  CNI config is removed until both nodes are NotReady and restored until both are Ready again: the status")
		p("  patches of that change are reported on their own rows, with how long each Node took to show the change")
		p("  (polled every 100 ms; containerd itself needs about 2 s to notice the CNI config change).")
	}
	p("- Host cost over the same window: RSS (VmRSS), threads and open fds (/proc/PID/fd) sampled every %s;", rp.opts.sample)
	p("  RSS is split into RssAnon and RssFile from /proc/PID/status. Both binaries are private copies in the run's")
	p("  directory, freshly written, so their pages are in the page cache when they start and the kernel maps")
	p("  whole neighbourhoods of them per fault (fault-around): RssFile counts those pages whether used or not.")
	p("  CPU = (utime+stime+cutime+cstime) delta from /proc/PID/stat ÷ wall time; goroutines = go_goroutines from")
	p("  each process's /metrics, scraped just before and just after the window (outside the CPU measurement).")
	if rp.opts.pageout > 0 {
		p("- Working set, after the window: each process's file-backed pages are paged out with")
		p("  process_madvise(MADV_PAGEOUT) (pages other processes map, e.g. libc's, are left alone; anonymous memory")
		p("  stays, there is no swap), both run on for %s (status syncs and lease renewals continue), and VmRSS is", rp.opts.pageout)
		p("  read again: what came back is what the process uses in steady state (still rounded up by the kernel's")
		p("  read-around and fault-around).")
	}
	p("")
	p(analysisMarker)
	if kept != "" {
		p("")
		b.WriteString(kept)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func refMiB(b int64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return float64(b) / mib
}

// countEmpty counts patch bodies of 2 bytes ("{}").
func countEmpty(sizes []float64) float64 {
	return float64(len(sizes) - len(nonEmpty(sizes)))
}

func nonEmpty(sizes []float64) []float64 {
	var out []float64
	for _, s := range sizes {
		if s > 2 {
			out = append(out, s)
		}
	}
	return out
}

func minOf(xs []float64) float64 { return percentile(xs, 0) }

func joinFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}
