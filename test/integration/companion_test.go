package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/companion"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/test/framework"
)

// The companion tests run on a control plane of their own (the reference kubelet needs a node identity,
// and the audit log is then theirs alone): etcd + kube-apiserver, no kube-controller-manager (nothing else
// writes the Nodes).
const (
	// nodeCompanion is the reference kubelet's Node, with nodeagent --companion beside it.
	nodeCompanion = "companion"
	// nodeStandalone is nodeagent alone (its own node identity), with the same monitors.
	nodeStandalone = "companion-standalone"

	// companionWindow is how long nodeagent runs beside the kubelet (issue 10: at least 5 minutes).
	companionWindow = 5 * time.Minute
	// pluginInterval is custom-plugin-monitor.json's invoke_interval, as NPD ships it.
	pluginInterval = 30 * time.Second
	// runtimePollPeriod is nodeagent's CRI Status poll period.
	runtimePollPeriod = 5 * time.Second
	// pluginOffset is how long after seeing a flip the test changes the plugin's exit code: mid-interval,
	// so that the next flip shows how long the change waited for the plugin's next run.
	pluginOffset = 10 * time.Second
	// slack is what a change may take beyond its period here: the plugin or the CRI call, the patch, the
	// test's 100 ms poll of the Node, on a 2-core machine shared with other builds.
	slack = 3 * time.Second
	// companionHeartbeat is --k8s-exporter-heartbeat-period in the test (default 5 m): more condition
	// patches in the window, each one a chance to clobber the kubelet's fields.
	companionHeartbeat = time.Minute

	// What the monitors' configs declare (test/testdata/npd).
	conditionRuntime  corev1.NodeConditionType = "ContainerRuntimeUnhealthy"
	conditionNTP      corev1.NodeConditionType = "NTPProblem"
	conditionDeadlock corev1.NodeConditionType = "KernelDeadlock"
	sourcePlugin                               = "ntp-custom-plugin-monitor"
	sourceKernel                               = "kernel-monitor"
	sourceRuntime                              = "health-checker"
)

// agentConditions are the condition types nodeagent writes in companion mode with the test's monitors.
var agentConditions = []corev1.NodeConditionType{conditionRuntime, conditionNTP, conditionDeadlock}

// problemReasons are the reasons of the monitors' rules, the labels of nodeagent_problem_counter.
var problemReasons = []string{"NTPIsDown", "OOMKilling", "TaskHung", "UnregisterNetDevice", "KernelOops", "DockerHung"}

// problemGaugeReasons are the reasons nodeagent_problem_gauge can have for each of the monitors' condition
// types: the permanent rule's first, then the condition's default.
var problemGaugeReasons = map[corev1.NodeConditionType][]string{
	conditionNTP:      {"NTPIsDown", "NTPIsUp"},
	conditionDeadlock: {"DockerHung", "KernelHasNoDeadlock"},
}

// TestCompanionBesideKubelet runs the reference kubelet for a node and, beside it, nodeagent --companion as
// the DaemonSet of deploy/kubernetes runs it (its RBAC and admission policy applied with `kubectl apply -k`,
// its arguments, a ServiceAccount token bound to a pod on that node), with NPD's shipped custom plugin and
// filelog kernel monitor configs (only their paths changed), for five minutes. In that window, in parallel:
//   - the plugin's exit code goes 0 → 1 → 2 → 0 and NTPProblem follows False → True → Unknown → False, each
//     within one invoke_interval, with the plugin's output as message, and its temporary rule records
//     Events with the config's source as component;
//   - kernel log lines make kernel-monitor-filelog.json's rules fire: KernelDeadlock=True (DockerHung), and
//     OOMKilling and TaskHung Events; a line older than the lookback does not;
//   - containerd stops: ContainerRuntimeUnhealthy=True within a poll period; it restarts: False again;
//   - an image imported, then removed, makes the kubelet patch its status twice;
//   - nodeagent standalone (its own node, no kubelet) with the same monitors shows their conditions in
//     its own status;
//   - nodeagent_problem_counter and nodeagent_problem_gauge agree with the Events and conditions.
//
// Every version of the Node in the window is recorded from a watch: no write changes both the kubelet's
// fields and nodeagent's conditions, nodeagent's conditions are in every version once they appeared
// (through every kubelet status patch), and the kubelet's fields at the end are those at the start but
// for the kubelet's own heartbeats and images. The audit log shows nodeagent's identity only reading
// Nodes, patching nodes/status and writing Events, never refused; the Node's managedFields show it owning
// only its own conditions.
func TestCompanionBesideKubelet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if _, err := framework.BuildAgent(); err != nil {
		t.Fatal(err)
	}
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: t.TempDir(), NodeNames: []string{nodeCompanion, nodeStandalone},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := cp.AdminClient
	ctrd := startContainerd(t, true)

	// deploy/kubernetes, as `kubectl apply -k` installs it.
	ds := applyManifests(t, cp)
	kubeconfig, err := cp.PodServiceAccountKubeconfig(ctx, ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName, nodeCompanion)
	if err != nil {
		t.Fatal(err)
	}
	agentUser := "system:serviceaccount:" + ds.Namespace + ":" + ds.Spec.Template.Spec.ServiceAccountName

	// The kubelet owns the Node.
	kubelet := framework.StartTestKubelet(ctx, t, framework.KubeletOptions{
		Dir: t.TempDir(), NodeName: nodeCompanion, Kubeconfig: cp.KubeconfigFor(nodeCompanion), RuntimeEndpoint: ctrd.Endpoint,
	})
	framework.WaitReady(ctx, t, admin, nodeCompanion, 2*time.Minute)
	before, err := admin.CoreV1().Nodes().Get(ctx, nodeCompanion, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	history := recordNode(watchCtx, admin, before)

	// nodeagent beside it, as the DaemonSet runs it.
	mon := newMonitors(t)
	args := append(daemonSetArgs(t, ds, nodeCompanion), mon.args()...)
	args = append(args, "--k8s-exporter-heartbeat-period="+companionHeartbeat.String())
	t.Logf("nodeagent as %s with %q", agentUser, args)
	agentStart := time.Now()
	agent := framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: nodeCompanion, Kubeconfig: kubeconfig, RuntimeEndpoint: ctrd.Endpoint, Args: args,
	})
	n, took := framework.WaitNode(ctx, t, admin, nodeCompanion, time.Minute, "nodeagent's conditions at their defaults", func(n *corev1.Node) bool {
		return hasCondition(n, conditionRuntime, corev1.ConditionFalse, "ContainerRuntimeIsHealthy") &&
			hasCondition(n, conditionNTP, corev1.ConditionFalse, "NTPIsUp") &&
			hasCondition(n, conditionDeadlock, corev1.ConditionFalse, "KernelHasNoDeadlock")
	})
	t.Logf("nodeagent's conditions on the kubelet's Node %v after its start: %s", took.Round(time.Millisecond), describeConditions(n, agentConditions))
	waitProblemMetrics(t, agent, admin, nodeCompanion)

	t.Run("window", func(t *testing.T) {
		t.Run("custom plugin", func(t *testing.T) {
			t.Parallel()
			testPluginFlips(t, admin, agent, mon)
		})
		t.Run("kernel log", func(t *testing.T) {
			t.Parallel()
			testKernelLog(t, admin, agent, mon)
		})
		t.Run("kubelet patch and runtime", func(t *testing.T) {
			t.Parallel()
			testKubeletPatchAndRuntime(t, admin, ctrd)
		})
		t.Run("standalone", func(t *testing.T) {
			t.Parallel()
			testStandaloneMonitors(t, cp)
		})
	})

	// The rest of the window: both keep running.
	rest := time.Until(agentStart.Add(companionWindow))
	t.Logf("checks done %v after nodeagent started; running on for %v", time.Since(agentStart).Round(time.Second), rest.Round(time.Second))
	deadline := time.NewTimer(rest)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-deadline.C:
			waiting = false
		case <-tick.C:
		}
		if !agent.Running() || !kubelet.Running() {
			t.Fatalf("after %v: nodeagent running %t, kubelet running %t", time.Since(agentStart).Round(time.Second), agent.Running(), kubelet.Running())
		}
	}
	after, err := admin.CoreV1().Nodes().Get(ctx, nodeCompanion, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Let the watch catch up with that version, then stop it.
	catchUp, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := framework.WaitFor(catchUp, 50*time.Millisecond, func() (bool, error) {
		if err := history.error(); err != nil {
			return false, fmt.Errorf("%w: %w", framework.ErrStop, err)
		}
		return history.has(after.ResourceVersion), nil
	}); err != nil {
		t.Fatalf("the watch did not see version %s of the Node: %v", after.ResourceVersion, err)
	}
	stopWatch()
	versions := history.stop()
	t.Logf("window: %v, %d versions of the Node", time.Since(agentStart).Round(time.Second), len(versions))

	t.Run("history", func(t *testing.T) { checkHistory(t, versions) })
	t.Run("kubelet fields", func(t *testing.T) { checkKubeletFields(t, before, after) })
	t.Run("managed fields", func(t *testing.T) { checkManagedFields(t, after) })
	t.Run("heartbeat", func(t *testing.T) { checkHeartbeats(t, versions) })
	t.Run("audit", func(t *testing.T) { checkAudit(t, cp.AuditLogPath, agentUser, nodeCompanion) })
	t.Run("metrics", func(t *testing.T) { waitProblemMetrics(t, agent, admin, nodeCompanion) })
}

// applyManifests runs `kubectl apply -k deploy/kubernetes` on cp, checks that the ConfigMap of monitor configs
// was created, waits until the admission policy is in force (it refuses a dry-run Event by the DaemonSet's
// ServiceAccount with a token bound to no pod) and returns the DaemonSet as the API server holds it.
func applyManifests(t *testing.T, cp *framework.ControlPlane) *appsv1.DaemonSet {
	t.Helper()
	ctx := t.Context()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cp.Kubectl(ctx, "apply", "-k", filepath.Join(root, "deploy", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range deployKinds {
		if !strings.Contains(out, "\n"+kind) && !strings.HasPrefix(out, kind) {
			t.Errorf("kubectl apply -k deploy/kubernetes created no %s...:\n%s", kind, out)
		}
	}
	unbound, err := cp.ServiceAccountKubeconfig(ctx, "nodeagent-system", "nodeagent")
	if err != nil {
		t.Fatal(err)
	}
	sa := clientFor(t, unbound)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = framework.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		probe := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "policy-probe.", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "policy-probe"},
			Reason:         "PolicyProbe", Type: corev1.EventTypeNormal,
		}
		_, err := sa.CoreV1().Events(metav1.NamespaceDefault).Create(wctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, fmt.Errorf("dry-run event by a token bound to no pod allowed")
		}
		return strings.Contains(err.Error(), deniedByPolicy), err
	})
	if err != nil {
		t.Fatalf("admission policy of deploy/kubernetes not in force: %v", err)
	}
	ds, err := cp.AdminClient.AppsV1().DaemonSets("nodeagent-system").Get(ctx, "nodeagent", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the DaemonSet of deploy/kubernetes: %v", err)
	}
	return ds
}

// daemonSetArgs returns the nodeagent container's arguments in ds, with $(NODE_NAME) set to nodeName, less
// those the harness owns: the node name, runtime endpoint, paths, ports, and the problem monitors' configs
// (whose paths are the container's).
func daemonSetArgs(t *testing.T, ds *appsv1.DaemonSet, nodeName string) []string {
	t.Helper()
	var args []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "nodeagent" {
			continue
		}
		for _, a := range c.Args {
			name, _, _ := strings.Cut(a, "=")
			switch name {
			case "--hostname-override", "--container-runtime-endpoint", "--root-dir", "--healthz-bind-address", "--healthz-port",
				"--kubeconfig", "--config.system-log-monitor", "--config.custom-plugin-monitor":
				continue
			}
			args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", nodeName))
		}
	}
	if !slices.Contains(args, "--companion") {
		t.Fatalf("the DaemonSet's arguments %q do not include --companion", args)
	}
	return args
}

// monitors are NPD's shipped configs (test/testdata/npd) with only their paths changed, in a directory of
// the test's own: custom-plugin-monitor.json's rules run a script that prints a message and exits with a
// code, both read from a file the test rewrites; kernel-monitor-filelog.json reads a log file the test
// appends to.
type monitors struct {
	pluginConfig, logConfig, state, logPath string
}

func newMonitors(t *testing.T) *monitors {
	t.Helper()
	dir := t.TempDir()
	m := &monitors{
		pluginConfig: filepath.Join(dir, "custom-plugin-monitor.json"),
		logConfig:    filepath.Join(dir, "kernel-monitor-filelog.json"),
		state:        filepath.Join(dir, "plugin-state"),
		logPath:      filepath.Join(dir, "kern.log"),
	}
	script := filepath.Join(dir, "check_ntp.sh")
	// First line of the state file: the exit code; the rest: the output.
	if err := os.WriteFile(script, []byte("#!/bin/sh\n{ read -r code; cat; } < '"+m.state+"'\nexit \"$code\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m.setPlugin(t, 0, "ntp.service is running")
	if err := os.WriteFile(m.logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	copyConfig(t, "custom-plugin-monitor.json", m.pluginConfig, `"./plugin/check_ntp.sh"`, strconv.Quote(script), 2)
	copyConfig(t, "kernel-monitor-filelog.json", m.logConfig, `"/var/log/kern.log"`, strconv.Quote(m.logPath), 1)
	return m
}

// copyConfig copies test/testdata/npd/name to dst with the n occurrences of old replaced by new.
func copyConfig(t *testing.T, name, dst, old, new string, n int) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "test", "testdata", "npd", name))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), old); got != n {
		t.Fatalf("%s: %d occurrences of %s, want %d", name, got, old, n)
	}
	if err := os.WriteFile(dst, []byte(strings.ReplaceAll(string(b), old, new)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// args are nodeagent's flags for the two configs.
func (m *monitors) args() []string {
	return []string{"--config.custom-plugin-monitor=" + m.pluginConfig, "--config.system-log-monitor=" + m.logConfig}
}

// setPlugin makes the plugin print output and exit with code from its next run on (the state file is
// replaced in one rename, so a run reads the old state or the new one).
func (m *monitors) setPlugin(t *testing.T, code int, output string) {
	t.Helper()
	tmp := m.state + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(code)+"\n"+output+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, m.state); err != nil {
		t.Fatal(err)
	}
}

// appendKernelLog appends kernel messages to the log file as syslog writes kern.log, with the timestamp at
// (local time, no year, as the config's timestampFormat "Jan _2 15:04:05" expects).
func (m *monitors) appendKernelLog(t *testing.T, at time.Time, messages ...string) {
	t.Helper()
	f, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	for i, msg := range messages {
		fmt.Fprintf(&b, "%s companion kernel: [%6d.%06d] %s\n", at.Local().Format(time.Stamp), 86400+i, 123456, msg)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
}

// testPluginFlips switches the plugin's exit code 0 → 1 → 2 → 0 and checks that NTPProblem follows within
// one invoke_interval each, with the plugin's output as message while True or Unknown and the default
// reason and message while False, that its temporary rule records NTPIsDown Events with the plugin's
// output and the config's source, and that the problem metrics follow.
func testPluginFlips(t *testing.T, admin kubernetes.Interface, agent *framework.Agent, mon *monitors) {
	ctx := t.Context()
	steps := []struct {
		code    int
		output  string
		status  corev1.ConditionStatus
		reason  string
		message string // "" means the output
	}{
		{1, "ntp.service is not running (step 1)", corev1.ConditionTrue, "NTPIsDown", ""},
		{2, "systemctl: cannot ask systemd (step 2)", corev1.ConditionUnknown, "NTPIsUp", ""},
		{0, "ntp.service is running (step 3)", corev1.ConditionFalse, "NTPIsUp", "ntp service is up"},
	}
	var latencies []string
	for _, s := range steps {
		want := s.message
		if want == "" {
			want = s.output
		}
		// Not a wait for a condition: the change lands mid-interval on purpose.
		time.Sleep(pluginOffset)
		counterBefore := scrape(t, agent).Value("nodeagent_problem_counter", map[string]string{"reason": "NTPIsDown"})
		mon.setPlugin(t, s.code, s.output)
		n, took := framework.WaitNode(ctx, t, admin, nodeCompanion, pluginInterval+slack,
			fmt.Sprintf("NTPProblem=%s %s %q after exit code %d", s.status, s.reason, want, s.code), func(n *corev1.Node) bool {
				c := framework.NodeCondition(n, conditionNTP)
				return c != nil && c.Status == s.status && c.Reason == s.reason && c.Message == want
			})
		latencies = append(latencies, fmt.Sprintf("exit %d → %s in %v", s.code, s.status, took.Round(10*time.Millisecond)))
		t.Logf("exit code %d: NTPProblem=%s after %v (invoke_interval %v): %s", s.code, s.status, took.Round(10*time.Millisecond),
			pluginInterval, describeConditions(n, []corev1.NodeConditionType{conditionNTP}))
		ms := waitProblemMetrics(t, agent, admin, nodeCompanion)
		counter := ms.Value("nodeagent_problem_counter", map[string]string{"reason": "NTPIsDown"})
		gauge := ms.Value("nodeagent_problem_gauge", map[string]string{"type": string(conditionNTP), "reason": "NTPIsDown"})
		switch s.status {
		case corev1.ConditionTrue:
			// The temporary rule's event and the condition's "is now: True" event are both problems.
			if counter < counterBefore+2 || gauge != 1 {
				t.Errorf("after NTPProblem turned True: problem_counter{NTPIsDown} %v (was %v, want +2 or more), problem_gauge{NTPProblem,NTPIsDown} %v (want 1)",
					counter, counterBefore, gauge)
			}
			evs := problemEvents(t, admin, nodeCompanion, sourcePlugin, "NTPIsDown")
			if !slices.ContainsFunc(evs, func(e corev1.Event) bool { return e.Message == s.output && e.Type == corev1.EventTypeWarning }) {
				t.Errorf("no Warning event NTPIsDown from %s with the plugin's output %q; events: %s", sourcePlugin, s.output, describeSourcedEvents(evs))
			}
		case corev1.ConditionUnknown:
			if counter <= counterBefore || gauge != 0 {
				t.Errorf("after NTPProblem turned Unknown: problem_counter{NTPIsDown} %v (was %v, want more: the temporary rule reports unknown states), problem_gauge{NTPProblem,NTPIsDown} %v (want 0)",
					counter, counterBefore, gauge)
			}
		case corev1.ConditionFalse:
			if gauge != 0 {
				t.Errorf("after NTPProblem turned False: problem_gauge{NTPProblem,NTPIsDown} %v, want 0", gauge)
			}
		}
	}
	t.Logf("NTPProblem flips: %s", strings.Join(latencies, "; "))
}

// testKernelLog appends kernel log lines and checks kernel-monitor-filelog.json's rules: an OOM kill and a
// hung task each record an Event (OOMKilling, TaskHung) with the line as message and the config's source,
// a hung docker task also sets KernelDeadlock=True (DockerHung), and an OOM line older than the config's
// lookback (5m) records nothing.
func testKernelLog(t *testing.T, admin kubernetes.Interface, agent *framework.Agent, mon *monitors) {
	ctx := t.Context()
	const (
		old  = "Killed process 1111 (ancient) total-vm:1000kB, anon-rss:100kB, file-rss:0kB, shmem-rss:0kB"
		oom  = "Out of memory: Killed process 4242 (stress) total-vm:123456kB, anon-rss:65432kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:260kB oom_score_adj:0"
		hung = "INFO: task jbd2/sda1-8:312 blocked for more than 120 seconds."
		dock = "INFO: task docker:4321 blocked for more than 120 seconds."
	)
	mon.appendKernelLog(t, time.Now().Add(-10*time.Minute), old)
	start := time.Now()
	mon.appendKernelLog(t, start, "Tainted: G        W", oom, hung)
	oomEvents := waitProblemEvents(t, admin, nodeCompanion, sourceKernel, "OOMKilling", 1)
	hungEvents := waitProblemEvents(t, admin, nodeCompanion, sourceKernel, "TaskHung", 1)
	t.Logf("OOMKilling and TaskHung events %v after the lines were written", time.Since(start).Round(10*time.Millisecond))
	if !slices.ContainsFunc(oomEvents, func(e corev1.Event) bool { return strings.Contains(e.Message, "Killed process 4242 (stress)") }) {
		t.Errorf("no OOMKilling event with the OOM line: %s", describeSourcedEvents(oomEvents))
	}
	if slices.ContainsFunc(oomEvents, func(e corev1.Event) bool { return strings.Contains(e.Message, "1111") }) {
		t.Errorf("an OOMKilling event for a line older than the lookback: %s", describeSourcedEvents(oomEvents))
	}
	if !slices.ContainsFunc(hungEvents, func(e corev1.Event) bool { return e.Message == hung && e.Type == corev1.EventTypeWarning }) {
		t.Errorf("no Warning TaskHung event with message %q: %s", hung, describeSourcedEvents(hungEvents))
	}
	if c := framework.NodeCondition(getNode(t, admin, nodeCompanion), conditionDeadlock); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("KernelDeadlock after a hung task that is not docker's: %+v, want False", c)
	}

	start = time.Now()
	mon.appendKernelLog(t, start, dock)
	n, took := framework.WaitNode(ctx, t, admin, nodeCompanion, 10*time.Second, "KernelDeadlock=True DockerHung", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, conditionDeadlock)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "DockerHung" && c.Message == dock
	})
	t.Logf("KernelDeadlock=True %v after the line was written: %s", took.Round(10*time.Millisecond), describeConditions(n, []corev1.NodeConditionType{conditionDeadlock}))
	waitProblemEvents(t, admin, nodeCompanion, sourceKernel, "TaskHung", 2)
	ms := waitProblemMetrics(t, agent, admin, nodeCompanion)
	for reason, atLeast := range map[string]float64{"OOMKilling": 1, "TaskHung": 2, "DockerHung": 1} {
		if v := ms.Value("nodeagent_problem_counter", map[string]string{"reason": reason}); v < atLeast {
			t.Errorf("problem_counter{%s} %v, want at least %v", reason, v, atLeast)
		}
	}
	if v := ms.Value("nodeagent_problem_gauge", map[string]string{"type": string(conditionDeadlock), "reason": "DockerHung"}); v != 1 {
		t.Errorf("problem_gauge{KernelDeadlock,DockerHung} %v, want 1", v)
	}
}

// testKubeletPatchAndRuntime imports an image, so that the kubelet patches its status with a new image
// list while nodeagent's conditions are on the Node, then stops containerd until ContainerRuntimeUnhealthy
// turns True (within one poll period) and starts it again until it turns False, then removes the image for
// another kubelet status patch. The outage is kept well under the kubelet's 30 s runtime threshold, so the
// kubelet's own Ready stays as it was.
func testKubeletPatchAndRuntime(t *testing.T, admin kubernetes.Interface, ctrd *framework.Containerd) {
	ctx := t.Context()
	const image = "example.com/nodeagent/companion-test:v1"
	tar := filepath.Join(t.TempDir(), "image.tar")
	if err := framework.WriteImageTar(tar, image, map[string][]byte{"/hello": []byte("hello\n")}); err != nil {
		t.Fatal(err)
	}
	if err := ctrd.ImportImage(ctx, tar); err != nil {
		t.Fatal(err)
	}
	_, took := framework.WaitNode(ctx, t, admin, nodeCompanion, 2*time.Minute, "the kubelet's image list with "+image, func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Status.Images, func(i corev1.ContainerImage) bool { return slices.Contains(i.Names, image) })
	})
	t.Logf("the kubelet patched its image list %v after the import", took.Round(10*time.Millisecond))

	stopAt := time.Now()
	if err := ctrd.Stop(); err != nil {
		t.Fatal(err)
	}
	exited := time.Now()
	n, took := framework.WaitNode(ctx, t, admin, nodeCompanion, runtimePollPeriod+slack, "ContainerRuntimeUnhealthy=True", func(n *corev1.Node) bool {
		return hasCondition(n, conditionRuntime, corev1.ConditionTrue, "ContainerdUnhealthy")
	})
	t.Logf("containerd stopped (SIGTERM to exit %v): ContainerRuntimeUnhealthy=True %v after it exited (poll period %v): %s",
		exited.Sub(stopAt).Round(10*time.Millisecond), took.Round(10*time.Millisecond), runtimePollPeriod,
		describeConditions(n, []corev1.NodeConditionType{conditionRuntime}))
	if c := framework.NodeCondition(n, conditionRuntime); c.Message == "" {
		t.Errorf("ContainerRuntimeUnhealthy=True with no message")
	}
	if err := ctrd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n, took = framework.WaitNode(ctx, t, admin, nodeCompanion, runtimePollPeriod+slack, "ContainerRuntimeUnhealthy=False", func(n *corev1.Node) bool {
		return hasCondition(n, conditionRuntime, corev1.ConditionFalse, "ContainerRuntimeIsHealthy")
	})
	t.Logf("containerd started: ContainerRuntimeUnhealthy=False %v later (outage %v): %s", took.Round(10*time.Millisecond),
		time.Since(stopAt).Round(10*time.Millisecond), describeConditions(n, []corev1.NodeConditionType{conditionRuntime}))
	evs := problemEvents(t, admin, nodeCompanion, sourceRuntime, "ContainerdUnhealthy")
	if len(evs) == 0 {
		t.Errorf("no ContainerdUnhealthy event from %s", sourceRuntime)
	}

	if _, err := ctrd.ImageClient().RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		t.Fatal(err)
	}
	_, took = framework.WaitNode(ctx, t, admin, nodeCompanion, 2*time.Minute, "the kubelet's image list without "+image, func(n *corev1.Node) bool {
		return !slices.ContainsFunc(n.Status.Images, func(i corev1.ContainerImage) bool { return slices.Contains(i.Names, image) })
	})
	t.Logf("the kubelet patched its image list %v after the image was removed", took.Round(10*time.Millisecond))
}

// testStandaloneMonitors runs nodeagent standalone (its own node identity: it registers the Node and keeps
// its whole status) with the same monitors, on files of its own and a containerd of its own (the other
// one is stopped meanwhile), and checks that their conditions are in its own status: at their defaults
// first, then NTPProblem=True and KernelDeadlock=True, written by nodeagent's status patches (its
// managedFields) through one setter per monitor after the kubelet's.
func testStandaloneMonitors(t *testing.T, cp *framework.ControlPlane) {
	ctx := t.Context()
	admin := cp.AdminClient
	ctrd := startContainerd(t, true)
	mon := newMonitors(t)
	agent := startAgent(t, cp, nodeStandalone, ctrd, mon.args()...)
	n := framework.WaitReady(ctx, t, admin, nodeStandalone, time.Minute)
	n, _ = framework.WaitNode(ctx, t, admin, nodeStandalone, 30*time.Second, "the monitors' conditions at their defaults", func(n *corev1.Node) bool {
		return hasCondition(n, conditionNTP, corev1.ConditionFalse, "NTPIsUp") && hasCondition(n, conditionDeadlock, corev1.ConditionFalse, "KernelHasNoDeadlock")
	})
	if c := framework.NodeCondition(n, conditionRuntime); c != nil {
		t.Errorf("standalone node has %s (companion mode's): %+v", conditionRuntime, c)
	}

	start := time.Now()
	mon.setPlugin(t, 1, "ntp.service is not running (standalone)")
	mon.appendKernelLog(t, start, "INFO: task docker:777 blocked for more than 120 seconds.")
	n, took := framework.WaitNode(ctx, t, admin, nodeStandalone, pluginInterval+slack, "NTPProblem=True and KernelDeadlock=True", func(n *corev1.Node) bool {
		return hasCondition(n, conditionNTP, corev1.ConditionTrue, "NTPIsDown") && hasCondition(n, conditionDeadlock, corev1.ConditionTrue, "DockerHung")
	})
	t.Logf("standalone: both conditions True %v after the changes: %s", took.Round(10*time.Millisecond),
		describeConditions(n, []corev1.NodeConditionType{conditionNTP, conditionDeadlock}))
	if !framework.IsReady(n) {
		t.Errorf("standalone node not Ready with the problems: %s", framework.DescribeReady(n))
	}
	// nodeagent's own status patches carry them: it owns them in the Node's managedFields.
	owned, _ := ownedConditions(t, n)
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, conditionNTP, conditionDeadlock} {
		if !owned[c] {
			t.Errorf("standalone: nodeagent's managedFields do not hold condition %s (it holds %v)", c, slices.Sorted(maps.Keys(owned)))
		}
	}
	// One setter per monitor, after the kubelet's.
	code, body, err := agent.Get(ctx, node.DebugPath)
	if err != nil || code != 200 {
		t.Fatalf("GET %s: %d %v", node.DebugPath, code, err)
	}
	var r node.Report
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Nodes) != 1 {
		t.Fatalf("%s: %v (%d nodes)", node.DebugPath, err, len(r.Nodes))
	}
	var names []string
	for _, s := range r.Nodes[0].Setters {
		names = append(names, s.Name)
	}
	want := []string{"ProblemMonitor(" + sourcePlugin + ")", "ProblemMonitor(" + sourceKernel + ")"}
	if len(names) < 3 || !slices.Equal(names[len(names)-2:], want) {
		t.Errorf("setters %q, want the kubelet's then %q", names, want)
	}
	for _, s := range r.Nodes[0].Setters {
		if s.LastError != "" {
			t.Errorf("setter %s: %s", s.Name, s.LastError)
		}
	}
}

// hasCondition reports whether n has condition typ with status and reason.
func hasCondition(n *corev1.Node, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) bool {
	c := framework.NodeCondition(n, typ)
	return c != nil && c.Status == status && c.Reason == reason
}

// describeConditions summarises n's conditions of types for messages.
func describeConditions(n *corev1.Node, types []corev1.NodeConditionType) string {
	var out []string
	for _, typ := range types {
		c := framework.NodeCondition(n, typ)
		if c == nil {
			out = append(out, string(typ)+" absent")
			continue
		}
		out = append(out, fmt.Sprintf("%s=%s %s %q (transition %s, heartbeat %s)", typ, c.Status, c.Reason, c.Message,
			c.LastTransitionTime.Format(time.TimeOnly), c.LastHeartbeatTime.Format(time.TimeOnly)))
	}
	return strings.Join(out, "; ")
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func scrape(t *testing.T, a *framework.Agent) *framework.Metrics {
	t.Helper()
	m, err := a.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// problemEvents lists the Events about Node name recorded by source (the component) with reason ("" for
// any).
func problemEvents(t *testing.T, c kubernetes.Interface, name, source, reason string) []corev1.Event {
	t.Helper()
	evs, err := framework.ListNodeEvents(t.Context(), c, name)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(evs, func(e corev1.Event) bool {
		return e.Source.Component != source || (reason != "" && e.Reason != reason)
	})
}

// waitProblemEvents waits up to 10 s for at least n (by count) Events from source with reason.
func waitProblemEvents(t *testing.T, c kubernetes.Interface, name, source, reason string, n int32) []corev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var evs []corev1.Event
	err := framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		evs = problemEvents(t, c, name, source, reason)
		return framework.EventCount(evs, reason) >= n, nil
	})
	if err != nil {
		t.Fatalf("%d %s events from %s not seen: %v; seen: %s", n, reason, source, err, describeSourcedEvents(evs))
	}
	return evs
}

func describeSourcedEvents(evs []corev1.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("[%s %s %s x%d %q]", e.Source.Component, e.Type, e.Reason, max(e.Count, 1), e.Message))
	}
	return strings.Join(out, " ")
}

// waitProblemMetrics waits up to 15 s for nodeagent's problem metrics to agree with the API server (the
// events are recorded asynchronously): nodeagent_problem_counter{reason} is the number of Warning Events
// with that reason from the problem monitors' sources (each problem that became active: a temporary rule's
// event or a condition turning True), and nodeagent_problem_gauge{type,reason} is 1 exactly when the Node
// has condition type True with that reason. It returns the agreeing scrape.
func waitProblemMetrics(t *testing.T, a *framework.Agent, c kubernetes.Interface, name string) *framework.Metrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	var last *framework.Metrics
	err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		ms, err := a.Metrics(ctx)
		if err != nil {
			return false, err
		}
		last = ms
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		evs, err := framework.ListNodeEvents(ctx, c, name)
		if err != nil {
			return false, err
		}
		var bad []string
		for _, reason := range problemReasons {
			var want int32
			for _, e := range evs {
				if (e.Source.Component == sourcePlugin || e.Source.Component == sourceKernel) && e.Reason == reason && e.Type == corev1.EventTypeWarning {
					want += max(e.Count, 1)
				}
			}
			got, ok := ms.Get("nodeagent_problem_counter", map[string]string{"reason": reason})
			if !ok || got != float64(want) {
				bad = append(bad, fmt.Sprintf("problem_counter{%s}=%v (present %t), %d Warning events", reason, got, ok, want))
			}
		}
		for typ, reasons := range problemGaugeReasons {
			cond := framework.NodeCondition(n, typ)
			for _, reason := range reasons {
				got, ok := ms.Get("nodeagent_problem_gauge", map[string]string{"type": string(typ), "reason": reason})
				if !ok {
					continue
				}
				want := 0.0
				if cond != nil && cond.Status == corev1.ConditionTrue && cond.Reason == reason {
					want = 1
				}
				if got != want {
					bad = append(bad, fmt.Sprintf("problem_gauge{%s,%s}=%v, condition %s", typ, reason, got, describeConditions(n, []corev1.NodeConditionType{typ})))
				}
			}
			// NPD creates one for each permanent rule at start.
			if _, ok := ms.Get("nodeagent_problem_gauge", map[string]string{"type": string(typ), "reason": reasons[0]}); !ok {
				bad = append(bad, fmt.Sprintf("no problem_gauge{%s,%s}", typ, reasons[0]))
			}
		}
		if len(bad) > 0 {
			return false, fmt.Errorf("%s", strings.Join(bad, "; "))
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("nodeagent's problem metrics do not agree with the Node and its Events: %v; last scrape:\n%s", err, last.Dump("nodeagent_problem"))
	}
	return last
}

// nodeHistory records every version of a Node, from a watch that starts at a version the caller got.
type nodeHistory struct {
	done chan struct{}

	mu       sync.Mutex
	versions []*corev1.Node
	rvs      map[string]bool
	err      error
}

// recordNode starts recording the versions of from's Node after from (which is the first) until ctx ends.
func recordNode(ctx context.Context, c kubernetes.Interface, from *corev1.Node) *nodeHistory {
	h := &nodeHistory{done: make(chan struct{}), versions: []*corev1.Node{from}, rvs: map[string]bool{from.ResourceVersion: true}}
	go func() {
		defer close(h.done)
		rv := from.ResourceVersion
		sel := fields.OneTermEqualSelector("metadata.name", from.Name).String()
		for ctx.Err() == nil {
			w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
			if err != nil {
				h.fail(err)
				return
			}
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified:
					n := ev.Object.(*corev1.Node)
					rv = n.ResourceVersion
					h.mu.Lock()
					h.versions = append(h.versions, n)
					h.rvs[rv] = true
					h.mu.Unlock()
				case watch.Error:
					h.fail(apierrors.FromObject(ev.Object))
					w.Stop()
					return
				default:
					h.fail(fmt.Errorf("unexpected watch event %s", ev.Type))
				}
			}
			w.Stop()
		}
	}()
	return h
}

func (h *nodeHistory) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = fmt.Errorf("node watch: %w", err)
	}
}

func (h *nodeHistory) error() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *nodeHistory) has(rv string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rvs[rv]
}

// stop waits for the watch to end (after its ctx) and returns the versions.
func (h *nodeHistory) stop() []*corev1.Node {
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.versions
}

// kubeletView is the part of a Node the kubelet writes (and nodeagent --companion must not): metadata
// labels and annotations, the spec, and the status but for nodeagent's conditions; with the kubelet's
// lastHeartbeatTimes cleared when noHeartbeats, and its images left out when noImages.
func kubeletView(n *corev1.Node, noHeartbeats, noImages bool) any {
	st := n.Status.DeepCopy()
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c corev1.NodeCondition) bool { return slices.Contains(agentConditions, c.Type) })
	if noHeartbeats {
		for i := range st.Conditions {
			st.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
	}
	if noImages {
		st.Images = nil
	}
	annotations := maps.Clone(n.Annotations)
	delete(annotations, companion.OwnedConditionsAnnotation) // nodeagent's, not the kubelet's
	return struct {
		Labels, Annotations map[string]string
		Spec                corev1.NodeSpec
		Status              corev1.NodeStatus
	}{n.Labels, annotations, n.Spec, *st}
}

// agentView is nodeagent's conditions on a Node, by type.
func agentView(n *corev1.Node) map[corev1.NodeConditionType]corev1.NodeCondition {
	out := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range n.Status.Conditions {
		if slices.Contains(agentConditions, c.Type) {
			out[c.Type] = c
		}
	}
	return out
}

// checkHistory checks every version of the Node: no single write changed both the kubelet's part and
// nodeagent's conditions; once nodeagent's conditions were all there, every later version has them all;
// and at least one version after that was the kubelet's status patch (its Ready heartbeat moved), so they
// survived kubelet patches.
func checkHistory(t *testing.T, versions []*corev1.Node) {
	present := false
	var kubeletPatches, agentWrites int
	for i := 1; i < len(versions); i++ {
		prev, cur := versions[i-1], versions[i]
		kubeletChanged := !apiequality.Semantic.DeepEqual(kubeletView(prev, false, false), kubeletView(cur, false, false))
		agentChanged := !apiequality.Semantic.DeepEqual(agentView(prev), agentView(cur))
		if kubeletChanged && agentChanged {
			t.Errorf("version %s changed both the kubelet's fields and nodeagent's conditions:\nbefore: %s\nafter:  %s",
				cur.ResourceVersion, describeConditions(prev, allConditionTypes(prev, cur)), describeConditions(cur, allConditionTypes(prev, cur)))
		}
		if agentChanged {
			agentWrites++
		}
		have := len(agentView(cur)) == len(agentConditions)
		if present && !have {
			t.Errorf("version %s lost nodeagent's conditions: %s (kubelet write: %t)", cur.ResourceVersion,
				describeConditions(cur, agentConditions), kubeletChanged)
		}
		ready, readyPrev := framework.NodeCondition(cur, corev1.NodeReady), framework.NodeCondition(prev, corev1.NodeReady)
		if present && have && ready != nil && readyPrev != nil && !ready.LastHeartbeatTime.Equal(&readyPrev.LastHeartbeatTime) {
			kubeletPatches++
		}
		present = present || have
	}
	t.Logf("%d versions: %d writes of nodeagent's conditions, %d kubelet status patches after they were all there", len(versions), agentWrites, kubeletPatches)
	// The test makes the kubelet patch twice (an image imported, then removed); its 5-minute report may
	// add one.
	if kubeletPatches < 2 {
		t.Errorf("%d kubelet status patches after nodeagent's conditions were there, want at least 2", kubeletPatches)
	}
	if !present {
		t.Errorf("nodeagent's conditions %v never all on the Node", agentConditions)
	}
}

func allConditionTypes(nodes ...*corev1.Node) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, n := range nodes {
		for _, c := range n.Status.Conditions {
			if !slices.Contains(out, c.Type) {
				out = append(out, c.Type)
			}
		}
	}
	return out
}

// checkKubeletFields compares the kubelet's part of the Node before nodeagent started and at the end of
// the window: the same, but for the kubelet's own heartbeats and its image list (the test imported an
// image).
func checkKubeletFields(t *testing.T, before, after *corev1.Node) {
	b, a := kubeletView(before, true, true), kubeletView(after, true, true)
	if !apiequality.Semantic.DeepEqual(b, a) {
		bj, _ := json.MarshalIndent(b, "", "  ")
		aj, _ := json.MarshalIndent(a, "", "  ")
		t.Errorf("the kubelet's fields changed in the window:\nbefore: %s\nafter:  %s", bj, aj)
	}
	if !framework.IsReady(after) {
		t.Errorf("kubelet's node not Ready at the end: %s", framework.DescribeReady(after))
	}
}

// ownedConditions returns the condition types that nodeagent's field manager ("nodeagent", from its user
// agent) holds in n's managedFields, and every other field it holds (as "subresource:f:top.f:field") but
// its ownership annotation (pkg/companion.OwnedConditionsAnnotation) written through nodes/status.
func ownedConditions(t *testing.T, n *corev1.Node) (conds map[corev1.NodeConditionType]bool, other []string) {
	t.Helper()
	conds = map[corev1.NodeConditionType]bool{}
	for _, mf := range n.ManagedFields {
		if mf.Manager != "nodeagent" || mf.FieldsV1 == nil {
			continue
		}
		var f map[string]map[string]json.RawMessage
		if err := json.Unmarshal(mf.FieldsV1.Raw, &f); err != nil {
			t.Fatalf("nodeagent's managedFields: %v: %s", err, mf.FieldsV1.Raw)
		}
		for top, sub := range f {
			for field, raw := range sub {
				if top == "f:metadata" && field == "f:annotations" && mf.Subresource == "status" &&
					string(raw) == `{"f:`+companion.OwnedConditionsAnnotation+`":{}}` {
					continue // its record of the condition types it writes (pkg/companion)
				}
				if top != "f:status" || field != "f:conditions" {
					other = append(other, mf.Subresource+":"+top+"."+field)
					continue
				}
				var keys map[string]json.RawMessage
				if err := json.Unmarshal(raw, &keys); err != nil {
					t.Fatalf("nodeagent's managedFields conditions: %v: %s", err, raw)
				}
				for key := range keys {
					if key == "." {
						continue
					}
					var k struct{ Type corev1.NodeConditionType }
					if err := json.Unmarshal([]byte(strings.TrimPrefix(key, "k:")), &k); err != nil {
						t.Fatalf("nodeagent's managedFields condition key %s: %v", key, err)
					}
					conds[k.Type] = true
					if mf.Subresource != "status" {
						other = append(other, mf.Subresource+":conditions "+string(k.Type))
					}
				}
			}
		}
	}
	return conds, other
}

// checkManagedFields checks that on the kubelet's Node nodeagent's field manager holds exactly its own
// conditions, written through nodes/status, and nothing else.
func checkManagedFields(t *testing.T, n *corev1.Node) {
	owned, other := ownedConditions(t, n)
	if len(other) > 0 {
		t.Errorf("nodeagent's managedFields hold more than its conditions in nodes/status: %q", other)
	}
	for _, c := range agentConditions {
		if !owned[c] {
			t.Errorf("nodeagent's managedFields lack its condition %s", c)
		}
	}
	for c := range owned {
		if !slices.Contains(agentConditions, c) {
			t.Errorf("nodeagent's managedFields hold the kubelet's condition %s", c)
		}
	}
	var managers []string
	for _, mf := range n.ManagedFields {
		managers = append(managers, fmt.Sprintf("%s (%s %s)", mf.Manager, mf.Operation, mf.Subresource))
	}
	t.Logf("field managers: %s; nodeagent holds conditions %v", strings.Join(managers, ", "), slices.Sorted(maps.Keys(owned)))
}

// checkHeartbeats checks that nodeagent refreshed its unchanged conditions' lastHeartbeatTime every
// --k8s-exporter-heartbeat-period: ContainerRuntimeUnhealthy's heartbeat moved at least every period (plus
// slack) once it was there, however long it stayed unchanged.
func checkHeartbeats(t *testing.T, versions []*corev1.Node) {
	var beats []time.Time
	for _, n := range versions {
		c := framework.NodeCondition(n, conditionRuntime)
		if c != nil && (len(beats) == 0 || !c.LastHeartbeatTime.Time.Equal(beats[len(beats)-1])) {
			beats = append(beats, c.LastHeartbeatTime.Time)
		}
	}
	for i := 1; i < len(beats); i++ {
		if gap := beats[i].Sub(beats[i-1]); gap > companionHeartbeat+slack {
			t.Errorf("ContainerRuntimeUnhealthy's heartbeat did not move for %v (%s to %s), heartbeat period %v", gap,
				beats[i-1].Format(time.TimeOnly), beats[i].Format(time.TimeOnly), companionHeartbeat)
		}
	}
	if len(beats) < int(companionWindow/companionHeartbeat) {
		t.Errorf("ContainerRuntimeUnhealthy's heartbeat moved %d times in %v, want about one every %v", len(beats)-1, companionWindow, companionHeartbeat)
	}
	t.Logf("ContainerRuntimeUnhealthy heartbeats: %d", len(beats))
}

// checkAudit reads the audit log for the requests of nodeagent's identity (user, with a token bound to a pod
// on node) and checks that it only read Nodes, patched nodes/status and wrote Events, none refused, and did
// patch and create.
func checkAudit(t *testing.T, path, user, nodeName string) {
	events, err := framework.ReadAuditEventsBy(path, user, func(e framework.AuditEvent) bool {
		return slices.Equal(e.User.Extra["authentication.kubernetes.io/node-name"], []string{nodeName})
	})
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"get nodes", "list nodes", "watch nodes", "patch nodes/status", "create events", "patch events"}
	counts := map[string]int{}
	for _, ev := range events {
		if ev.ObjectRef == nil {
			t.Errorf("request without an object: %s %s", ev.Verb, ev.RequestURI)
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		call := ev.Verb + " " + res
		counts[call]++
		if !slices.Contains(allowed, call) {
			t.Errorf("nodeagent made %s (%s, code %d)", call, ev.RequestURI, ev.Code())
		}
		if ev.Code() >= 400 {
			t.Errorf("nodeagent's %s refused or failed: code %d (%s)", call, ev.Code(), ev.RequestURI)
		}
		if ev.ObjectRef.Resource == "nodes" && ev.ObjectRef.Name != "" && ev.ObjectRef.Name != nodeName {
			t.Errorf("nodeagent on %s: %s of Node %s", nodeName, call, ev.ObjectRef.Name)
		}
	}
	for _, want := range []string{"patch nodes/status", "create events"} {
		if counts[want] == 0 {
			t.Errorf("no %s by nodeagent in the audit log", want)
		}
	}
	t.Logf("nodeagent's requests (%s on %s): %v", user, nodeName, counts)
}
