//go:build benchcompanion

package integration_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// benchResult is one system's row.
type benchResult struct {
	name                                   string
	idleRSS, floodRSS, floodHWM            int64
	idleCores, floodCores                  float64
	idleWritesPerMin                       float64
	logLatency, pluginLatency              time.Duration
	floodLines, oomLines, oomEventsCounted int
	deadlockAfterFlood                     string
}

// TestBenchCompanion is `make bench-companion`: nodeagent --companion, then node-problem-detector v1.36.0,
// each beside the reference kubelet of one Node on one control plane, each with NPD's custom-plugin-monitor.json
// and kernel-monitor-filelog.json (paths changed, fresh files), under the DaemonSet's ServiceAccount (so
// that the audit log tells their requests from the kubelet's). Per system: RSS and CPU after
// BENCH_COMPANION_IDLE (default 60 s) idle, API writes per minute in that window, the time from a matching
// kernel-log line to KernelDeadlock=True on the Node and from the plugin failing to NTPProblem=True (the
// plugin runs every 30 s, as shipped), then a kernel-log flood of 10 000 lines/s for BENCH_COMPANION_FLOOD
// (default 30 s) with an OOM kill every 1000 lines: CPU, RSS, peak RSS, OOMKilling Events counted, and
// KernelDeadlock still True. It prints a Markdown table (and writes it to BENCH_COMPANION_OUT if set).
func TestBenchCompanion(t *testing.T) {
	ctx := t.Context()
	idle := envDuration(t, "BENCH_COMPANION_IDLE", time.Minute)
	flood := envDuration(t, "BENCH_COMPANION_FLOOD", 30*time.Second)
	_, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	npdBin := buildNPD(t)
	const node = "bench-companion"
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir(), NodeNames: []string{node}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := cp.AdminClient
	ctrd := startContainerd(t, true)
	ds := applyManifests(t, cp)
	kubeconfig, err := cp.PodServiceAccountKubeconfig(ctx, ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName, node)
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ds.Namespace + ":" + ds.Spec.Template.Spec.ServiceAccountName
	framework.StartTestKubelet(ctx, t, framework.KubeletOptions{
		Dir: t.TempDir(), NodeName: node, Kubeconfig: cp.KubeconfigFor(node), RuntimeEndpoint: ctrd.Endpoint,
	})
	framework.WaitReady(ctx, t, admin, node, 2*time.Minute)

	var results []benchResult
	for _, system := range []string{"nodeagent --companion", "node-problem-detector v1.36.0"} {
		r := benchResult{name: system}
		mon := newMonitors(t)
		var pid int
		var stop func()
		start := time.Now()
		if strings.HasPrefix(system, "nodeagent") {
			a := framework.StartTestAgent(ctx, t, framework.AgentOptions{
				Dir: t.TempDir(), NodeName: node, Kubeconfig: kubeconfig, RuntimeEndpoint: ctrd.Endpoint,
				Args: append(daemonSetArgs(t, ds, node), mon.args()...),
			})
			pid, stop = a.PID, func() { _ = a.Stop() }
		} else {
			stop, pid = startNPDAs(t, npdBin, cp, kubeconfig, node, mon.args()...)
		}
		framework.WaitNode(ctx, t, admin, node, time.Minute, system+"'s conditions at their defaults", func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, conditionDeadlock)
			return c != nil && c.Status == corev1.ConditionFalse && c.LastHeartbeatTime.After(start.Add(-time.Second)) &&
				hasCondition(n, conditionNTP, corev1.ConditionFalse, "NTPIsUp")
		})

		// Idle.
		cpu0, idleStart := procCPU(t, pid), time.Now()
		time.Sleep(idle)
		r.idleCores = (procCPU(t, pid) - cpu0).Seconds() / time.Since(idleStart).Seconds()
		r.idleRSS = procStats(t, pid).RSS
		writes := 0
		events, err := framework.ReadAuditEventsBy(cp.AuditLogPath, user, func(framework.AuditEvent) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if framework.IsWriteVerb(e.Verb) && e.StageTimestamp.After(idleStart) {
				writes++
			}
		}
		r.idleWritesPerMin = float64(writes) / time.Since(idleStart).Minutes()

		// A matching kernel-log line, then a failing plugin.
		t0 := time.Now()
		mon.appendKernelLog(t, t0, "INFO: task docker:4321 blocked for more than 120 seconds.")
		_, r.logLatency = framework.WaitNode(ctx, t, admin, node, time.Minute, "KernelDeadlock=True", func(n *corev1.Node) bool {
			return hasCondition(n, conditionDeadlock, corev1.ConditionTrue, "DockerHung")
		})
		mon.setPlugin(t, 1, "ntp.service is not running")
		_, r.pluginLatency = framework.WaitNode(ctx, t, admin, node, 2*pluginInterval, "NTPProblem=True", func(n *corev1.Node) bool {
			return hasCondition(n, conditionNTP, corev1.ConditionTrue, "NTPIsDown")
		})

		// The flood.
		f, err := os.OpenFile(mon.logPath, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		cpu0 = procCPU(t, pid)
		floodStart := time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		for time.Since(floodStart) < flood {
			<-tick.C
			var b strings.Builder
			now := time.Now().Local().Format(time.Stamp)
			for range 100 {
				msg := "EXT4-fs (sda1): re-mounted. Opts: errors=remount-ro line " + strconv.Itoa(r.floodLines)
				if r.floodLines%1000 == 900 {
					msg = "Out of memory: Killed process " + strconv.Itoa(r.floodLines) + " (stress) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0"
					r.oomLines++
				}
				fmt.Fprintf(&b, "%s %s kernel: [%6d.%06d] %s\n", now, node, 86400+r.floodLines/1000, r.floodLines%1000000, msg)
				r.floodLines++
			}
			if _, err := f.WriteString(b.String()); err != nil {
				t.Fatal(err)
			}
		}
		tick.Stop()
		f.Close()
		time.Sleep(2 * time.Second) // the last poll
		r.floodCores = (procCPU(t, pid) - cpu0).Seconds() / time.Since(floodStart).Seconds()
		st := procStats(t, pid)
		r.floodRSS = st.RSS
		r.floodHWM = vmHWM(t, pid)
		time.Sleep(3 * time.Second) // events are sent asynchronously
		evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == "OOMKilling" && e.InvolvedObject.Name == node && e.LastTimestamp.After(floodStart.Add(-time.Second)) {
				r.oomEventsCounted += int(max(e.Count, 1))
			}
		}
		if n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			if c := framework.NodeCondition(n, conditionDeadlock); c != nil {
				r.deadlockAfterFlood = string(c.Status)
			}
		}
		stop()
		// Remove this system's Events, so the next counts only its own.
		if err := admin.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
		t.Logf("%+v", r)
	}

	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	var b strings.Builder
	fmt.Fprintf(&b, "| | %s | %s |\n|---|---:|---:|\n", results[0].name, results[1].name)
	row := func(label string, f func(r benchResult) string) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", label, f(results[0]), f(results[1]))
	}
	row(fmt.Sprintf("idle RSS after %v (MiB)", idle), func(r benchResult) string { return mib(r.idleRSS) })
	row("idle CPU (cores)", func(r benchResult) string { return fmt.Sprintf("%.4f", r.idleCores) })
	row("API writes per minute, idle", func(r benchResult) string { return fmt.Sprintf("%.1f", r.idleWritesPerMin) })
	row("kernel-log line → KernelDeadlock=True", func(r benchResult) string { return r.logLatency.Round(time.Millisecond).String() })
	row("plugin fails → NTPProblem=True (invoke_interval 30 s)", func(r benchResult) string { return r.pluginLatency.Round(time.Millisecond).String() })
	row(fmt.Sprintf("flood: CPU over %v at 10 000 lines/s (cores)", flood), func(r benchResult) string { return fmt.Sprintf("%.3f", r.floodCores) })
	row("flood: RSS after / peak (MiB)", func(r benchResult) string { return mib(r.floodRSS) + " / " + mib(r.floodHWM) })
	row("flood: OOM lines written / OOMKilling Events counted", func(r benchResult) string { return fmt.Sprintf("%d / %d", r.oomLines, r.oomEventsCounted) })
	row("flood: KernelDeadlock after", func(r benchResult) string { return r.deadlockAfterFlood })
	t.Logf("results:\n%s", b.String())
	if out := os.Getenv("BENCH_COMPANION_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	d, err := framework.ReadProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func procStats(t *testing.T, pid int) framework.ProcStats {
	t.Helper()
	s, err := framework.ReadProcStats(pid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// vmHWM is the process's peak RSS (VmHWM) in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
