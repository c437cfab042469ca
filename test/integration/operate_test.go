package integration_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// healthyMetrics are the metrics a healthy, Ready agent exposes (with the labels that must be there).
var healthyMetrics = []struct {
	name   string
	labels map[string]string
}{
	{"nodeagent_node_status_patch_duration_seconds_count", map[string]string{"result": "success"}},
	{"nodeagent_node_status_syncs_total", map[string]string{"result": "patched"}},
	{"nodeagent_node_registration_attempts_total", map[string]string{"result": "created"}},
	{"nodeagent_lease_renew_duration_seconds_count", nil},
	{"nodeagent_runtime_status_calls_total", map[string]string{"result": "success"}},
	{"nodeagent_runtime_condition", map[string]string{"condition": "RuntimeReady"}},
	{"nodeagent_runtime_condition", map[string]string{"condition": "NetworkReady"}},
	{"nodeagent_node_ready", nil},
	{"nodeagent_node_condition", map[string]string{"condition": "Ready", "status": "True"}},
	{"nodeagent_startup_to_ready_duration_seconds", nil},
	{"nodeagent_node_status_last_sync_timestamp_seconds", nil},
	{"nodeagent_build_info", nil},
	{"go_goroutines", nil},
	{"process_resident_memory_bytes", nil},
}

// TestHealthzAPIServerDown: /healthz (and /healthz/ping, /healthz/syncloop, ?verbose), /readyz and /livez
// answer 200 while healthy; with the API server gone for longer than the heartbeats' bound (3 status
// periods of 2 s, 3 renew intervals of 8 s / 4) /healthz still answers 200, as the loops are alive (health
// never means "the API server answers": the systemd watchdog must not kill an agent that only waits),
// while `nodeagent status` exits 1 saying the Lease and the syncs are late and failing. The outage also makes the error metrics appear, so every metric is checked here.
// Its own control plane: stopping the API server would disturb the other tests.
func TestHealthzAPIServerDown(t *testing.T) {
	t.Parallel()
	const name = nodeHealthz
	cp, err := framework.StartControlPlane(t.Context(), framework.ControlPlaneOptions{Dir: t.TempDir(), NodeNames: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	c := startContainerd(t, true)
	a := startAgent(t, cp, name, c, "--node-status-update-frequency=2s", "--node-lease-duration-seconds=8",
		"--node-status-report-frequency=2s")
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 2*time.Minute)
	if err := a.WaitHealthy(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// /readyz turns 200 once the first status sync after registration is done (a readiness probe polls).
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	err = a.WaitHTTP(rctx, "/readyz", http.StatusOK)
	rcancel()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		path     string
		contains []string
	}{
		{"/healthz", []string{"ok"}},
		{"/healthz/ping", []string{"ok"}},
		{"/healthz/syncloop", []string{"ok"}},
		{"/healthz?verbose", []string{"[+]ping ok", "[+]log ok", "[+]syncloop ok", "healthz check passed"}},
		{"/readyz?verbose", []string{"[+]ping ok", "[+]registered ok"}},
		{"/livez?verbose", []string{"[+]ping ok"}},
	} {
		code, body, err := a.Get(ctx, tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200; body %q", tc.path, code, body)
		}
		for _, want := range tc.contains {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s body %q does not contain %q", tc.path, body, want)
			}
		}
	}

	// Both loops have succeeded at least once (a status sync above, a Lease write here) before the outage.
	framework.WaitMetrics(t.Context(), t, a, time.Minute, "a lease renewal", func(ms *framework.Metrics) bool {
		v, _ := ms.Get("nodeagent_lease_renew_duration_seconds_count", nil)
		return v > 0
	})
	stopped := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		// With clients' watches open, kube-apiserver's graceful shutdown outlasts the framework's 15 s grace
		// and it is killed: it is down either way, and its listener closed at SIGTERM.
		t.Logf("stop kube-apiserver: %v", firstLine(err.Error()))
	}
	// Past the heartbeats' bound (6 s from the last success): the loops run, so /healthz stays 200.
	for time.Since(stopped) < 15*time.Second {
		code, body, err := a.Get(ctx, "/healthz/syncloop")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET /healthz/syncloop %v into the outage = %d %q (%v), want 200: the loops are alive", time.Since(stopped).Round(time.Second), code, body, err)
		}
		time.Sleep(time.Second)
	}
	if code, body, err := a.Get(ctx, "/livez"); err != nil || code != http.StatusOK {
		t.Errorf("GET /livez during the outage = %d %q (%v), want 200: the process is alive", code, body, err)
	}
	// Failed lease writes and status syncs are counted. (Whether a status PATCH is even tried during an
	// outage depends on the first read; patch errors by reason are proven in TestMetricsErrorsByReason.)
	framework.WaitMetrics(t.Context(), t, a, time.Minute, "lease write and status sync errors counted", func(ms *framework.Metrics) bool {
		leaseErrs, _ := ms.Get("nodeagent_lease_renew_errors_total", map[string]string{"reason": "Transport"})
		syncErrs, _ := ms.Get("nodeagent_node_status_syncs_total", map[string]string{"result": "error"})
		return leaseErrs > 0 && syncErrs > 0
	})
	// nodeagent status says why (issue 12): the Lease is stale and failing, the sync fails, syncloop fails.
	checkStatus(t, a, 1, "last lease renewal", "- lease renewal failing", "- last status sync failed", "syncloop ok")

	restarted := time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitHealthy(ctx); err != nil {
		t.Fatalf("/healthz after the API server came back: %v", err)
	}
	t.Logf("/healthz 200 again %v after the API server was started", time.Since(restarted).Round(time.Millisecond))
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 2*time.Minute)

	// The healthy metrics are all there after the outage, the lease error counter too.
	ms, _ := framework.WaitMetrics(t.Context(), t, a, time.Minute, "a status patch after the outage", func(ms *framework.Metrics) bool {
		v, _ := ms.Get("nodeagent_node_status_syncs_total", map[string]string{"result": "patched"})
		return v >= 2
	})
	for _, m := range healthyMetrics {
		if _, ok := ms.Get(m.name, m.labels); !ok {
			t.Errorf("metric %s%v missing", m.name, m.labels)
		}
	}
	if ms.Type("nodeagent_lease_renew_errors_total") != "counter" {
		t.Error("metric family nodeagent_lease_renew_errors_total missing after the outage")
	}
}

// TestMetricsErrorsByReason runs the agent with a ServiceAccount whose RBAC lacks "patch nodes/status" and
// "update leases": status patches and lease renewals then fail with Forbidden, and
// nodeagent_node_status_patch_errors_total, nodeagent_node_status_patch_duration_seconds{result="error"}
// and nodeagent_lease_renew_errors_total count them by that reason.
func TestMetricsErrorsByReason(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	const name, ns, sa = nodeMetricsErrors, "nodeagent-limited", "nodeagent"
	kubeconfig, err := e.cp.ServiceAccountKubeconfig(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	rbac := e.cp.AdminClient.RbacV1()
	steps := []func() error{
		func() error {
			_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-limited"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"},
					Verbs: []string{"get", "list", "watch", "create", "patch"}}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-limited"}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nodeagent-limited"},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.Roles(corev1.NamespaceNodeLease).Create(ctx, &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-limited"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
					Verbs: []string{"get", "create"}}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.RoleBindings(corev1.NamespaceNodeLease).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-limited"}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "nodeagent-limited"},
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	a := framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: name, Kubeconfig: kubeconfig, RuntimeEndpoint: e.ctrd.Endpoint,
		Args: []string{"--node-status-update-frequency=2s", "--node-status-report-frequency=2s", "--node-lease-duration-seconds=8"},
	})
	forbidden := map[string]string{"reason": "Forbidden"}
	ms, _ := framework.WaitMetrics(t.Context(), t, a, 2*time.Minute, "Forbidden status patches and lease writes counted",
		func(ms *framework.Metrics) bool {
			patchErrs, _ := ms.Get("nodeagent_node_status_patch_errors_total", forbidden)
			leaseErrs, _ := ms.Get("nodeagent_lease_renew_errors_total", forbidden)
			return patchErrs > 0 && leaseErrs > 0
		})
	if v, _ := ms.Get("nodeagent_node_status_patch_duration_seconds_count", map[string]string{"result": "error"}); v == 0 {
		t.Errorf(`nodeagent_node_status_patch_duration_seconds_count{result="error"} = 0 with status patches forbidden`)
	}
	if v, _ := ms.Get("nodeagent_node_registration_attempts_total", map[string]string{"result": "created"}); v != 1 {
		t.Errorf(`nodeagent_node_registration_attempts_total{result="created"} = %v, want 1 (create is allowed)`, v)
	}
}

// TestMetrics: /metrics has every metric of a healthy agent; the sync, patch, runtime-call and lease counts
// grow; nodeagent_runtime_condition{condition="RuntimeReady"} and nodeagent_node_ready go 1→0 when
// containerd stops and back to 1 when it starts.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeMetrics
	c := startContainerd(t, true)
	a := startAgent(t, e.cp, name, c, "--node-status-update-frequency=2s", "--node-status-report-frequency=4s")
	framework.WaitReady(t.Context(), t, e.cp.AdminClient, name, 2*time.Minute)
	rtReady := map[string]string{"condition": "RuntimeReady"}

	// Registration posts the first status; with --node-status-report-frequency=4s a periodic patch follows.
	first, _ := framework.WaitMetrics(t.Context(), t, a, time.Minute, "node_ready 1, a status patch and a lease renewal",
		func(ms *framework.Metrics) bool {
			ready, _ := ms.Get("nodeagent_node_ready", nil)
			leases, _ := ms.Get("nodeagent_lease_renew_duration_seconds_count", nil)
			patches, _ := ms.Get("nodeagent_node_status_syncs_total", map[string]string{"result": "patched"})
			return ready == 1 && leases > 0 && patches > 0
		})
	for _, m := range healthyMetrics {
		if _, ok := first.Get(m.name, m.labels); !ok {
			t.Errorf("metric %s%v missing", m.name, m.labels)
		}
	}
	for _, check := range []struct {
		name   string
		labels map[string]string
		want   func(float64) bool
		what   string
	}{
		{"nodeagent_node_ready", nil, func(v float64) bool { return v == 1 }, "1"},
		{"nodeagent_runtime_condition", rtReady, func(v float64) bool { return v == 1 }, "1"},
		{"nodeagent_runtime_condition", map[string]string{"condition": "NetworkReady"}, func(v float64) bool { return v == 1 }, "1"},
		{"nodeagent_node_registration_attempts_total", map[string]string{"result": "created"}, func(v float64) bool { return v == 1 }, "1"},
		{"nodeagent_node_condition", map[string]string{"condition": "Ready", "status": "True"}, func(v float64) bool { return v == 1 }, "1"},
		{"nodeagent_node_condition", map[string]string{"condition": "Ready", "status": "False"}, func(v float64) bool { return v == 0 }, "0"},
		{"nodeagent_startup_to_ready_duration_seconds", nil, func(v float64) bool { return v > 0 && v < 120 }, "in (0, 120)"},
		{"nodeagent_node_status_last_sync_timestamp_seconds", nil, func(v float64) bool {
			return time.Since(time.Unix(int64(v), 0)) < time.Minute
		}, "within the last minute"},
		{"nodeagent_build_info", nil, func(v float64) bool { return v == 1 }, "1"},
		{"nodeagent_node_name", map[string]string{"node": name}, func(v float64) bool { return v == 1 }, "1"},
		{"go_goroutines", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"process_resident_memory_bytes", nil, func(v float64) bool { return v > 0 }, "> 0"},
	} {
		v, ok := first.Get(check.name, check.labels)
		if !ok || !check.want(v) {
			t.Errorf("%s%v = %v (present %v), want %s", check.name, check.labels, v, ok, check.what)
		}
	}

	// The counts move.
	patched := func(ms *framework.Metrics) float64 {
		v, _ := ms.Get("nodeagent_node_status_patch_duration_seconds_count", map[string]string{"result": "success"})
		return v
	}
	statusCalls := func(ms *framework.Metrics) float64 {
		v, _ := ms.Get("nodeagent_runtime_status_calls_total", map[string]string{"result": "success"})
		return v
	}
	leases := func(ms *framework.Metrics) float64 {
		v, _ := ms.Get("nodeagent_lease_renew_duration_seconds_count", nil)
		return v
	}
	framework.WaitMetrics(t.Context(), t, a, 2*time.Minute, "syncs, patches, runtime status calls and lease renewals growing",
		func(ms *framework.Metrics) bool {
			return ms.Sum("nodeagent_node_status_syncs_total", nil) >= first.Sum("nodeagent_node_status_syncs_total", nil)+3 &&
				patched(ms) >= patched(first)+2 && statusCalls(ms) >= statusCalls(first)+2 && leases(ms) > leases(first)
		})

	// Ready gauge and runtime condition flip with containerd down and up.
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	_, d := framework.WaitMetrics(t.Context(), t, a, 2*time.Minute, `runtime_condition{RuntimeReady} 0 after containerd stopped`,
		func(ms *framework.Metrics) bool {
			v, ok := ms.Get("nodeagent_runtime_condition", rtReady)
			return ok && v == 0
		})
	t.Logf("runtime_condition{RuntimeReady} 0 %v after containerd stopped", d.Round(time.Millisecond))
	ms, d := framework.WaitMetrics(t.Context(), t, a, 2*time.Minute, "node_ready 0 after containerd stopped",
		func(ms *framework.Metrics) bool {
			v, ok := ms.Get("nodeagent_node_ready", nil)
			return ok && v == 0
		})
	t.Logf("node_ready 0 %v later", d.Round(time.Millisecond))
	if v, _ := ms.Get("nodeagent_runtime_status_calls_total", map[string]string{"result": "error"}); v == 0 {
		t.Errorf(`nodeagent_runtime_status_calls_total{result="error"} = 0 with containerd down`)
	}
	if v, _ := ms.Get("nodeagent_node_condition", map[string]string{"condition": "Ready", "status": "False"}); v != 1 {
		t.Errorf(`nodeagent_node_condition{condition="Ready",status="False"} = %v with containerd down, want 1`, v)
	}

	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, d = framework.WaitMetrics(t.Context(), t, a, 2*time.Minute, "runtime_condition{RuntimeReady} and node_ready back to 1",
		func(ms *framework.Metrics) bool {
			rt, _ := ms.Get("nodeagent_runtime_condition", rtReady)
			ready, _ := ms.Get("nodeagent_node_ready", nil)
			return rt == 1 && ready == 1
		})
	t.Logf("runtime_condition{RuntimeReady} and node_ready 1 again %v after containerd started", d.Round(time.Millisecond))
}

// TestInvalidConfigRefusesToStart: a config file with several bad fields makes the agent exit 1 at once,
// with one line on stderr naming every bad field and its value, before it touches the cluster; unknown
// fields are errors too (strict decoding).
func TestInvalidConfigRefusesToStart(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeBadConfig
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		config string
		want   []string // substrings of the error line: field names and values
	}{{
		name: "several bad values",
		config: `apiVersion: nodeagent.io/v1alpha1
kind: NodeAgentConfiguration
maxPods: -3
nodeStatusUpdateFrequency: -5s
nodeLeaseDurationSeconds: -1
healthzPort: 70000
healthzBindAddress: not-an-ip
cloudProvider: aws
containerRuntimeEndpoint: tcp://127.0.0.1:1234
evictionHard:
  memory.available: lots
`,
		want: []string{"maxPods", "-3", "nodeStatusUpdateFrequency", "-5s", "nodeLeaseDurationSeconds", "-1",
			"healthzPort", "70000", "healthzBindAddress", "not-an-ip", "cloudProvider", "aws",
			"containerRuntimeEndpoint", "tcp://127.0.0.1:1234", "evictionHard", "lots"},
	}, {
		name: "unknown field",
		config: `apiVersion: nodeagent.io/v1alpha1
kind: NodeAgentConfiguration
maxPods: 20
nodeStatusUpdateFrequncy: 10s
`,
		want: []string{"nodeStatusUpdateFrequncy"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(t.Context(), bin, "--config="+path, "--kubeconfig="+e.cp.KubeconfigFor(name),
				"--hostname-override="+name, "--root-dir="+filepath.Join(t.TempDir(), "root"))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
				t.Fatalf("nodeagent with an invalid config: %v, want exit status 1; stderr %q", err, stderr.String())
			}
			t.Logf("exit 1 after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
			line := stderr.String()
			if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
				t.Errorf("stderr is not one line: %q", line)
			}
			if !strings.HasPrefix(line, "nodeagent: ") {
				t.Errorf("stderr %q does not start with \"nodeagent: \"", line)
			}
			for _, want := range tc.want {
				if !strings.Contains(line, want) {
					t.Errorf("error line does not name %q: %q", want, line)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout not empty: %q", stdout.String())
			}
		})
	}
	events, err := framework.ReadAuditEvents(e.cp.AuditLogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.User.Username == "system:node:"+name {
			t.Errorf("agent with an invalid config made an API request: %s %s", ev.Verb, ev.RequestURI)
		}
	}
}

// TestEvents: the agent records, on its Node (namespace default, involvedObject kind Node), Starting and the
// pressure conditions' initial events; NodeNotReady when the runtime network goes away and NodeReady when it
// is back.
func TestEvents(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeEvents
	client := e.cp.AdminClient
	c := startContainerd(t, true)
	startAgent(t, e.cp, name, c)
	framework.WaitReady(t.Context(), t, client, name, 2*time.Minute)

	var events []corev1.Event
	waitEvents := func(what string, cond func([]corev1.Event) bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
			var err error
			events, err = framework.ListNodeEvents(ctx, client, name)
			return err == nil && cond(events), err
		})
		if err != nil {
			t.Fatalf("events on node %s: %s not seen: %v; events: %s", name, what, err, describeEvents(events))
		}
	}
	// As the kubelet's ReadyCondition setter, no NodeReady at start-up: the Node is created Ready, and the
	// event marks a transition of an existing condition.
	startReasons := []string{"Starting", "NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"}
	waitEvents("start-up events", func(evs []corev1.Event) bool {
		for _, r := range startReasons {
			if framework.EventCount(evs, r) == 0 {
				return false
			}
		}
		return true
	})
	for _, ev := range events {
		if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != name || ev.Namespace != "default" {
			t.Errorf("event %s on %s %s/%s, want Node %s in namespace default", ev.Reason, ev.InvolvedObject.Kind,
				ev.Namespace, ev.InvolvedObject.Name, name)
		}
		if ev.Reason != "RegisteredNode" && (ev.Source.Component != "nodeagent" || ev.Source.Host != name) {
			t.Errorf("event %s source = %+v, want component nodeagent, host %s", ev.Reason, ev.Source, name)
		}
	}
	readyBefore := framework.EventCount(events, "NodeReady")

	if err := c.SetCNI(false); err != nil {
		t.Fatal(err)
	}
	waitEvents("NodeNotReady", func(evs []corev1.Event) bool { return framework.EventCount(evs, "NodeNotReady") > 0 })
	if err := c.SetCNI(true); err != nil {
		t.Fatal(err)
	}
	waitEvents("NodeReady after the network came back", func(evs []corev1.Event) bool { return framework.EventCount(evs, "NodeReady") > readyBefore })
	t.Logf("events: %s", describeEvents(events))
}

func describeEvents(evs []corev1.Event) string {
	var parts []string
	for _, e := range evs {
		parts = append(parts, e.Reason+"×"+itoa(max(e.Count, 1))+" ("+e.Message+")")
	}
	return strings.Join(parts, ", ")
}
