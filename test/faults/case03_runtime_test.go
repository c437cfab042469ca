package faults

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestCase03ContainerdKilled is case 3: containerd SIGKILLed, then started again. The node turns
// NotReady with the kubelet's reason and message ("container runtime is down", once the last good
// CRI Status is older than 30 s), then Ready again after the restart, with the same nodeagent
// process: the CRI connection is re-established without restarting the agent.
func TestCase03ContainerdKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A containerd of its own, so that killing it touches no other case.
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: filepath.Join(agentDir(t, "containerd")), CNI: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrd.Close)
	if err := ctrd.WaitNetwork(ctx, true); err != nil {
		t.Fatal(err)
	}
	a := startAgentWith(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, nodeRuntime), NodeName: nodeRuntime, Kubeconfig: suite.cp.KubeconfigFor(nodeRuntime),
		RuntimeEndpoint: ctrd.Endpoint, Args: agentArgs(),
	})
	framework.WaitReady(ctx, t, suite.cp.AdminClient, nodeRuntime, time.Minute)
	pid := a.PID
	before := mustScrape(ctx, t, a)

	ctrd.Kill()
	killed := time.Now()
	t.Logf("containerd killed at %s", killed.Format(time.RFC3339Nano))

	// The kubelet's runtimeState reports "container runtime is down" once the last successful
	// Status is older than maxWaitForContainerRuntime (30 s); the poller runs every 5 s and the
	// status every 2 s, so NotReady is expected about 30–37 s after the kill.
	notReady, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, nodeRuntime, 90*time.Second, "Ready=False with \"container runtime is down\"",
		func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "container runtime is down")
		})
	t.Logf("NotReady %v after the kill: %s", time.Since(killed).Round(time.Millisecond), framework.DescribeReady(notReady))
	if c := framework.NodeCondition(notReady, corev1.NodeReady); c.Reason != "KubeletNotReady" {
		t.Errorf("Ready reason = %q, want the kubelet's KubeletNotReady", c.Reason)
	}
	if !a.Running() {
		t.Fatalf("nodeagent exited while containerd was down: %v", a.Wait(ctx))
	}
	m := mustScrape(ctx, t, a)
	callErrors := map[string]string{"result": "error"}
	if got := m.Sum("nodeagent_runtime_status_calls_total", callErrors); got <= before.Sum("nodeagent_runtime_status_calls_total", callErrors) {
		t.Errorf("nodeagent_runtime_status_calls_total{result=\"error\"} did not grow while containerd was down (%v)", got)
	}
	successesDown := m.Sum("nodeagent_runtime_status_calls_total", map[string]string{"result": "success"})

	if err := ctrd.Start(ctx); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	restarted := time.Now()
	if err := ctrd.WaitNetwork(ctx, true); err != nil {
		t.Fatal(err)
	}
	ready, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, nodeRuntime, time.Minute, "Ready=True after the restart",
		framework.IsReady)
	t.Logf("Ready %v after containerd restarted: %s", time.Since(restarted).Round(time.Millisecond), framework.DescribeReady(ready))

	if !a.Running() || a.PID != pid {
		t.Errorf("nodeagent restarted or exited (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}
	m = mustScrape(ctx, t, a)
	if got := m.Sum("nodeagent_runtime_status_calls_total", map[string]string{"result": "success"}); got <= successesDown {
		t.Errorf("no successful CRI Status call after the restart (%v, %v before)", got, successesDown)
	}
	if got := m.Sum("nodeagent_runtime_condition", map[string]string{"condition": "RuntimeReady"}); got != 1 {
		t.Errorf("nodeagent_runtime_condition{condition=\"RuntimeReady\"} = %v after the restart, want 1", got)
	}
	if errs := errorLines(a.Logs(), killed, restarted); len(errs) == 0 {
		t.Errorf("nodeagent logged no error while containerd was down")
	} else {
		t.Logf("%d error lines while containerd was down; first: %s", len(errs), errs[0].Text)
	}
}
