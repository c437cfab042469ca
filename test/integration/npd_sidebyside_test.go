package integration_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/companion"
	"github.com/nodeagent/nodeagent/test/framework"
)

// The side-by-side tests' Nodes: the reference kubelet's with nodeagent --companion beside it, and one
// the admin creates for node-problem-detector v1.36.0 (NPD does not care who registered the Node).
const (
	nodeStaleAgent = "stale-nodeagent"
	nodeStaleNPD   = "stale-npd"
	// conditionForeign is written by the admin (another field manager) and listed in nodeagent's
	// ownership annotation: it must never be removed.
	conditionForeign corev1.NodeConditionType = "OperatorProblem"
)

// buildNPD builds node-problem-detector v1.36.0 into _output/bin once (hack/build-npd.sh, cached by a
// stamp) and returns its path.
func buildNPD(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-npd.sh"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/build-npd.sh: %v\n%s", err, out)
	}
	return filepath.Join(root, "_output", "bin", "node-problem-detector")
}

// startNPD runs node-problem-detector for node with the given monitor flags until stop is called (or the
// test ends) and returns its PID.
func startNPD(t *testing.T, bin string, cp *framework.ControlPlane, node string, monitorArgs ...string) (stop func(), pid int) {
	t.Helper()
	return startNPDAs(t, bin, cp, cp.KubeconfigFor(node), node, monitorArgs...)
}

// startNPDAs is startNPD with the identity of kubeconfig.
func startNPDAs(t *testing.T, bin string, cp *framework.ControlPlane, kubeconfig, node string, monitorArgs ...string) (stop func(), pid int) {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "npd.log"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--apiserver-override=" + cp.APIServerURL + "?inClusterConfig=false&auth=" + kubeconfig,
		"--hostname-override=" + node, "--port=0", "--prometheus-port=0"}, monitorArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("node-problem-detector log:\n%s", framework.TailLines(string(b), 40))
		}
	})
	return stop, cmd.Process.Pid
}

func conditionTypes(n *corev1.Node) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, c := range n.Status.Conditions {
		out = append(out, c.Type)
	}
	slices.Sort(out)
	return out
}

// TestStaleConditionsSideBySide: a system log monitor's KernelDeadlock=True is on the Node, the monitor is
// removed from the config and the agent restarted. nodeagent --companion (beside the reference kubelet)
// removes KernelDeadlock on its first patch and keeps its other conditions, the kubelet's, and a condition
// the admin wrote even though it is listed in nodeagent's ownership annotation (another field manager owns
// it). node-problem-detector v1.36.0, given the same configs and the same restart on a Node of its own, is
// logged: it leaves KernelDeadlock=True with a frozen heartbeat (docs/npd-migration.md).
func TestStaleConditionsSideBySide(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if _, err := framework.BuildAgent(); err != nil {
		t.Fatal(err)
	}
	npdBin := buildNPD(t)
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: t.TempDir(), NodeNames: []string{nodeStaleAgent, nodeStaleNPD},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := cp.AdminClient
	ctrd := startContainerd(t, true)
	framework.StartTestKubelet(ctx, t, framework.KubeletOptions{
		Dir: t.TempDir(), NodeName: nodeStaleAgent, Kubeconfig: cp.KubeconfigFor(nodeStaleAgent), RuntimeEndpoint: ctrd.Endpoint,
	})
	framework.WaitReady(ctx, t, admin, nodeStaleAgent, 2*time.Minute)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeStaleNPD}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The admin's condition, on the kubelet's Node, written before nodeagent runs.
	foreign := `{"status":{"conditions":[{"type":"` + string(conditionForeign) + `","status":"False","reason":"Fine","lastHeartbeatTime":"` +
		time.Now().UTC().Format(time.RFC3339) + `","lastTransitionTime":"` + time.Now().UTC().Format(time.RFC3339) + `"}]}}`
	if _, err := admin.CoreV1().Nodes().Patch(ctx, nodeStaleAgent, types.StrategicMergePatchType, []byte(foreign), metav1.PatchOptions{FieldManager: "operator"}, "status"); err != nil {
		t.Fatal(err)
	}

	deadlocked := func(n *corev1.Node) bool {
		return hasCondition(n, conditionDeadlock, corev1.ConditionTrue, "DockerHung")
	}
	hung := "INFO: task docker:4321 blocked for more than 120 seconds."

	// Both monitors; KernelDeadlock turns True.
	mon := newMonitors(t)
	agentDir := t.TempDir()
	agent := framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: agentDir, NodeName: nodeStaleAgent, Kubeconfig: cp.KubeconfigFor(nodeStaleAgent), RuntimeEndpoint: ctrd.Endpoint,
		Args: append([]string{"--companion"}, mon.args()...),
	})
	stopNPD, _ := startNPD(t, npdBin, cp, nodeStaleNPD, mon.args()...)
	framework.WaitNode(ctx, t, admin, nodeStaleAgent, time.Minute, "nodeagent's conditions", func(n *corev1.Node) bool {
		return hasCondition(n, conditionNTP, corev1.ConditionFalse, "NTPIsUp") && hasCondition(n, conditionDeadlock, corev1.ConditionFalse, "KernelHasNoDeadlock")
	})
	framework.WaitNode(ctx, t, admin, nodeStaleNPD, time.Minute, "NPD's conditions", func(n *corev1.Node) bool {
		return hasCondition(n, conditionNTP, corev1.ConditionFalse, "NTPIsUp") && hasCondition(n, conditionDeadlock, corev1.ConditionFalse, "KernelHasNoDeadlock")
	})
	mon.appendKernelLog(t, time.Now(), hung)
	framework.WaitNode(ctx, t, admin, nodeStaleAgent, 30*time.Second, "nodeagent's KernelDeadlock=True", deadlocked)
	framework.WaitNode(ctx, t, admin, nodeStaleNPD, 30*time.Second, "NPD's KernelDeadlock=True", deadlocked)

	// The admin lists its own condition in nodeagent's annotation: ownership must still come from managedFields.
	n, err := admin.CoreV1().Nodes().Get(ctx, nodeStaleAgent, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	annotation := n.Annotations[companion.OwnedConditionsAnnotation]
	t.Logf("nodeagent's ownership annotation: %q", annotation)
	if annotation != "ContainerRuntimeUnhealthy,KernelDeadlock,NTPProblem" {
		t.Errorf("annotation %s = %q, want ContainerRuntimeUnhealthy,KernelDeadlock,NTPProblem", companion.OwnedConditionsAnnotation, annotation)
	}
	tampered := `{"metadata":{"annotations":{"` + companion.OwnedConditionsAnnotation + `":"` + annotation + "," + string(conditionForeign) + `"}}}`
	if _, err := admin.CoreV1().Nodes().Patch(ctx, nodeStaleAgent, types.StrategicMergePatchType, []byte(tampered), metav1.PatchOptions{FieldManager: "operator"}); err != nil {
		t.Fatal(err)
	}

	// Restart both without the system log monitor.
	if err := agent.Stop(); err != nil {
		t.Fatal(err)
	}
	stopNPD()
	restart := time.Now()
	framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: nodeStaleAgent, Kubeconfig: cp.KubeconfigFor(nodeStaleAgent), RuntimeEndpoint: ctrd.Endpoint,
		Args: []string{"--companion", "--config.custom-plugin-monitor=" + mon.pluginConfig},
	})
	startNPD(t, npdBin, cp, nodeStaleNPD, "--config.custom-plugin-monitor="+mon.pluginConfig)

	n, took := framework.WaitNode(ctx, t, admin, nodeStaleAgent, 30*time.Second, "KernelDeadlock removed by nodeagent", func(n *corev1.Node) bool {
		return !slices.Contains(conditionTypes(n), conditionDeadlock)
	})
	t.Logf("nodeagent: KernelDeadlock removed %v after the restart; conditions now %v", took.Round(time.Millisecond), conditionTypes(n))
	for _, want := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, conditionRuntime, conditionNTP, conditionForeign} {
		if !slices.Contains(conditionTypes(n), want) {
			t.Errorf("condition %s missing after the restart: %v", want, conditionTypes(n))
		}
	}
	if a := n.Annotations[companion.OwnedConditionsAnnotation]; a != "ContainerRuntimeUnhealthy,NTPProblem" {
		t.Errorf("annotation after the restart = %q, want ContainerRuntimeUnhealthy,NTPProblem", a)
	}

	// NPD, for the record: wait as long as nodeagent took plus 10 s.
	time.Sleep(took + 10*time.Second)
	npdNode, err := admin.CoreV1().Nodes().Get(ctx, nodeStaleNPD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, c := range npdNode.Status.Conditions {
		desc = append(desc, string(c.Type)+"="+string(c.Status)+" heartbeat "+c.LastHeartbeatTime.UTC().Format(time.RFC3339))
	}
	t.Logf("node-problem-detector v1.36.0, %v after the same restart: %s (restart at %s)", (took + 10*time.Second).Round(time.Second),
		strings.Join(desc, "; "), restart.UTC().Format(time.RFC3339))
}

// zombies returns the PIDs of pid's children that are zombies (state Z in /proc/<child>/stat).
func zombies(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			if child, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}

// TestFailingMonitorsSideBySide runs nodeagent --companion and node-problem-detector v1.36.0 with the same
// three monitors: a plugin whose grandchild keeps its stdout open (`setsid sleep 120 &`, exit 1, timeout 2 s;
// NPD issues 1050, 726), a plugin that hangs past its 1 s timeout, and a filelog kernel monitor whose file is
// missing (NPD issues 1168, 1174). nodeagent reports the first plugin's problem within its timeout, leaves no
// zombie, keeps running rounds, and shows the hung plugin and the missing file as failing named /healthz
// checks, in `nodeagent status` and in nodeagent_problem_monitor_healthy. What NPD does is logged.
func TestFailingMonitorsSideBySide(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	agentBin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	npdBin := buildNPD(t)
	const nodeAgent, nodeNPD = "failing-nodeagent", "failing-npd"
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir(), NodeNames: []string{nodeAgent, nodeNPD}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := cp.AdminClient
	for _, n := range []string{nodeAgent, nodeNPD} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctrd := startContainerd(t, false)

	dir := t.TempDir()
	pids := filepath.Join(dir, "sleeps")
	t.Cleanup(func() { // the sleeps left every process group either agent could kill
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	config := func(name, condition, path, interval, timeout string) string {
		p := filepath.Join(dir, name+".json")
		body := `{"plugin":"custom","source":"` + name + `","pluginConfig":{"invoke_interval":"` + interval + `","timeout":"` + timeout + `"},
			"conditions":[{"type":"` + condition + `","reason":"Fine","message":"fine"}],
			"rules":[{"type":"permanent","condition":"` + condition + `","reason":"Broken","path":"` + path + `"}]}`
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	grandchild := config("grandchild", "GrandchildProblem", script("grandchild.sh", "echo leaving\nsetsid sleep 120 &\necho $! >>"+pids+"\nexit 1"), "3s", "2s")
	hang := config("hang", "HangProblem", script("hang.sh", "sleep 30"), "2s", "1s")
	logConfig := filepath.Join(dir, "kernel-monitor-filelog.json")
	copyConfig(t, "kernel-monitor-filelog.json", logConfig, `"/var/log/kern.log"`, strconv.Quote(filepath.Join(dir, "missing", "kern.log")), 1)
	monitors := []string{"--config.custom-plugin-monitor=" + grandchild + "," + hang, "--config.system-log-monitor=" + logConfig}

	start := time.Now()
	agent := framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: nodeAgent, Kubeconfig: cp.KubeconfigFor(nodeAgent), RuntimeEndpoint: ctrd.Endpoint,
		Args: append([]string{"--companion"}, monitors...),
	})
	npdStart := time.Now()
	_, npdPID := startNPD(t, npdBin, cp, nodeNPD, monitors...)

	_, took := framework.WaitNode(ctx, t, admin, nodeAgent, 10*time.Second, "GrandchildProblem=True", func(n *corev1.Node) bool {
		return hasCondition(n, "GrandchildProblem", corev1.ConditionTrue, "Broken")
	})
	t.Logf("nodeagent: GrandchildProblem=True %v after its start (plugin timeout 2 s)", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("GrandchildProblem=True %v after the start, want within the 2 s timeout plus the patch", took)
	}

	// Failing checks, by name, in /healthz, /metrics and `nodeagent status`.
	failing := []string{"problem-monitor-hang", "problem-monitor-kernel-monitor-filelog"}
	if err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		code, body, err := agent.Get(ctx, "/healthz?verbose")
		if err != nil {
			return false, err
		}
		ok := code == 500 && strings.Contains(body, "[+]problem-monitor-grandchild ok")
		for _, f := range failing {
			ok = ok && strings.Contains(body, "[-]"+f+" failed")
		}
		return ok, nil
	}); err != nil {
		_, body, _ := agent.Get(ctx, "/healthz?verbose")
		t.Fatalf("healthz: %v\n%s", err, body)
	}
	if code, body, _ := agent.Get(ctx, "/healthz/problem-monitor-kernel-monitor-filelog"); code != 500 || !strings.Contains(body, "no such file or directory") {
		t.Errorf("/healthz/problem-monitor-kernel-monitor-filelog = %d %q", code, body)
	}
	m, err := agent.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for check, want := range map[string]float64{"problem-monitor-grandchild": 1, "problem-monitor-hang": 0, "problem-monitor-kernel-monitor-filelog": 0} {
		if v, ok := m.Get("nodeagent_problem_monitor_healthy", map[string]string{"check": check}); !ok || v != want {
			t.Errorf("nodeagent_problem_monitor_healthy{check=%q} = %v (present %v), want %v", check, v, ok, want)
		}
	}
	port := agent.HealthzURL[strings.LastIndexByte(agent.HealthzURL, ':')+1:]
	out, err := exec.CommandContext(ctx, agentBin, "status", "--healthz-port", port).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("nodeagent status: %v, want exit code 1\n%s", err, out)
	}
	for _, f := range failing {
		if !strings.Contains(string(out), f) {
			t.Errorf("nodeagent status does not name %s:\n%s", f, out)
		}
	}
	t.Logf("nodeagent status:\n%s", out)

	// Later rounds still run and leave no zombie behind.
	time.Sleep(7 * time.Second)
	if !agent.Running() {
		t.Fatal("nodeagent stopped")
	}
	if z := zombies(agent.PID); len(z) > 0 {
		t.Errorf("nodeagent %v after start: zombie children %v", time.Since(start).Round(time.Second), z)
	}

	// NPD, for the record, after as long.
	npdNode, err := admin.CoreV1().Nodes().Get(ctx, nodeNPD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, c := range npdNode.Status.Conditions {
		desc = append(desc, string(c.Type)+"="+string(c.Status)+" ("+c.Reason+")")
	}
	t.Logf("node-problem-detector v1.36.0, %v after its start: conditions %s; zombie children %v",
		time.Since(npdStart).Round(time.Second), strings.Join(desc, "; "), zombies(npdPID))
}

// TestLogFloodSideBySide appends kernel log lines at 10 000 a second for 10 s (among them, every 1000th, a
// DockerHung match and an OOM kill) to the file both nodeagent --companion and node-problem-detector
// v1.36.0 follow with NPD's kernel-monitor-filelog.json. nodeagent's watcher must survive it (its /healthz
// check passes after), KernelDeadlock=True must be on the Node, and the CPU nodeagent used during the flood
// is logged and bounded (below one core on average). NPD's CPU and condition are logged.
func TestLogFloodSideBySide(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if _, err := framework.BuildAgent(); err != nil {
		t.Fatal(err)
	}
	npdBin := buildNPD(t)
	const nodeAgent, nodeNPD = "flood-nodeagent", "flood-npd"
	const rate, seconds = 10000, 10
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir(), NodeNames: []string{nodeAgent, nodeNPD}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := cp.AdminClient
	for _, n := range []string{nodeAgent, nodeNPD} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctrd := startContainerd(t, false)
	mon := newMonitors(t)
	args := []string{"--config.system-log-monitor=" + mon.logConfig}
	agent := framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: nodeAgent, Kubeconfig: cp.KubeconfigFor(nodeAgent), RuntimeEndpoint: ctrd.Endpoint,
		Args: append([]string{"--companion"}, args...),
	})
	_, npdPID := startNPD(t, npdBin, cp, nodeNPD, args...)
	for _, n := range []string{nodeAgent, nodeNPD} {
		framework.WaitNode(ctx, t, admin, n, time.Minute, "KernelDeadlock=False", func(n *corev1.Node) bool {
			return hasCondition(n, conditionDeadlock, corev1.ConditionFalse, "KernelHasNoDeadlock")
		})
	}

	cpu := func(pid int) time.Duration {
		d, err := framework.ReadProcCPU(pid)
		if err != nil {
			t.Fatalf("cpu of %d: %v", pid, err)
		}
		return d
	}
	agentCPU0, npdCPU0, start := cpu(agent.PID), cpu(npdPID), time.Now()
	f, err := os.OpenFile(mon.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const batch = rate / 100 // every 10 ms
	written := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for written < rate*seconds {
		<-tick.C
		var b strings.Builder
		now := time.Now().Local().Format(time.Stamp)
		for range batch {
			msg := "EXT4-fs (sda1): re-mounted. Opts: errors=remount-ro flood line " + strconv.Itoa(written)
			switch written % 1000 {
			case 500:
				msg = "INFO: task docker:" + strconv.Itoa(written) + " blocked for more than 120 seconds."
			case 900:
				msg = "Out of memory: Killed process " + strconv.Itoa(written) + " (stress) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0"
			}
			fmt.Fprintf(&b, "%s flood kernel: [%6d.%06d] %s\n", now, 86400+written/1000, written%1000000, msg)
			written++
		}
		if _, err := f.WriteString(b.String()); err != nil {
			t.Fatal(err)
		}
	}
	wall := time.Since(start)
	// Let both read the rest (at most 5 s), then measure.
	framework.WaitNode(ctx, t, admin, nodeAgent, 15*time.Second, "nodeagent's KernelDeadlock=True", func(n *corev1.Node) bool {
		return hasCondition(n, conditionDeadlock, corev1.ConditionTrue, "DockerHung")
	})
	time.Sleep(2 * time.Second)
	wall2 := time.Since(start)
	agentCPU, npdCPU := cpu(agent.PID)-agentCPU0, cpu(npdPID)-npdCPU0
	t.Logf("%d lines in %v; CPU until %v later: nodeagent %v (%.2f cores), node-problem-detector v1.36.0 %v (%.2f cores)",
		written, wall.Round(time.Millisecond), wall2.Round(time.Millisecond), agentCPU, agentCPU.Seconds()/wall2.Seconds(), npdCPU, npdCPU.Seconds()/wall2.Seconds())
	if cores := agentCPU.Seconds() / wall2.Seconds(); cores > 1 {
		t.Errorf("nodeagent used %.2f cores during the flood, want below 1", cores)
	}
	if !agent.Running() {
		t.Fatal("nodeagent stopped during the flood")
	}
	if code, body, err := agent.Get(ctx, "/healthz/problem-monitor-kernel-monitor-filelog"); err != nil || code != 200 {
		t.Errorf("/healthz/problem-monitor-kernel-monitor-filelog after the flood = %d %q %v", code, body, err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, nodeNPD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == conditionDeadlock {
			t.Logf("node-problem-detector v1.36.0 after the flood: KernelDeadlock=%s (%s)", c.Status, c.Reason)
		}
	}
}
