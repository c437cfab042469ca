package integration_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// skewVersionsEnv lists the older control-plane minors TestVersionSkewSmoke runs against besides the
// hack/tools one, comma-separated (e.g. "v1.34"); `make test-skew` sets it. Each is built by
// hack/install-deps.sh --skew <version> from hack/tools-<version>.
const skewVersionsEnv = "NODEAGENT_SKEW_VERSIONS"

// TestVersionSkewSmoke: nodeagent, built with the Kubernetes 1.37 libraries, against kube-apiserver and
// kube-controller-manager of each supported minor: it registers, turns Ready, renews its Lease, patches
// its status when (and only when) something changed, records Events on its Node, and registers again
// when the Node is deleted. `make test` runs it against the hack/tools control plane (1.37); `make
// test-skew` adds the oldest supported one (v1.34).
func TestVersionSkewSmoke(t *testing.T) {
	versions := []string{""}
	for _, v := range strings.Split(os.Getenv(skewVersionsEnv), ",") {
		if v = strings.TrimSpace(v); v != "" {
			versions = append(versions, v)
		}
	}
	for _, version := range versions {
		name := version
		if name == "" {
			name = "hack-tools"
		}
		t.Run(name, func(t *testing.T) { skewSmoke(t, version) })
	}
}

func skewSmoke(t *testing.T, version string) {
	ctx := t.Context()
	const node = "skew-node"
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(startCtx, framework.ControlPlaneOptions{
		Dir: t.TempDir(), NodeNames: []string{node}, ControllerManager: true, Version: version,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	info, err := cp.AdminClient.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s", info.GitVersion)
	if version != "" && !strings.HasPrefix(info.GitVersion, version+".") {
		t.Fatalf("kube-apiserver is %s, want %s.x", info.GitVersion, version)
	}

	ctrd := startContainerd(t, true)
	client := cp.AdminClient
	// A 2 s Lease renewal (duration 8 s) and a 1 s status period, so that renewals and empty syncs
	// show within seconds.
	a := startAgent(t, cp, node, ctrd, "--node-lease-duration-seconds=8", "--node-status-update-frequency=1s")

	// Register and turn Ready.
	n := framework.WaitReady(ctx, t, client, node, time.Minute)
	uid := n.UID

	// The Lease: owned by the Node, renewed.
	framework.WaitLease(ctx, t, client, node, 30*time.Second, "owned by the Node", framework.LeaseOwnedBy(n))
	renewals := framework.WaitLeaseRenewals(ctx, t, client, node, 2, 30*time.Second)
	t.Logf("Lease renewed at %v", renewals)

	// Status patched on change only: over quiet seconds at a 1 s status period, no patch (every field
	// the agent sets must survive the API server's decoding, or it would patch it again every sync).
	quietFrom := time.Now()
	time.Sleep(6 * time.Second)
	patches := nodeStatusPatches(t, cp, node, quietFrom)
	if len(patches) != 0 {
		t.Errorf("%d status patches in 6 quiet seconds at a 1 s status period, want none (patch on change only)", len(patches))
	}

	// A change is patched: the network goes, Ready=False with the kubelet's message; it comes back.
	if err := ctrd.SetCNI(false); err != nil {
		t.Fatal(err)
	}
	framework.WaitNode(ctx, t, client, node, 30*time.Second, "Ready=False when the CNI config is removed", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeReady)
		return c != nil && c.Status == corev1.ConditionFalse && strings.HasPrefix(c.Message, "container runtime network not ready")
	})
	if err := ctrd.SetCNI(true); err != nil {
		t.Fatal(err)
	}
	framework.WaitReady(ctx, t, client, node, 30*time.Second)

	// Events on the Node: Starting, then NodeNotReady and NodeReady, the latter with the Node's UID.
	var events []corev1.Event
	err = framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		var err error
		events, err = framework.ListNodeEvents(ctx, client, node)
		return err == nil && framework.EventCount(events, "Starting") > 0 && framework.EventCount(events, "NodeNotReady") > 0, err
	})
	if err != nil {
		t.Fatalf("Events on the Node: %v; have %d", err, len(events))
	}
	for _, ev := range events {
		if ev.Reason == "NodeNotReady" && ev.InvolvedObject.UID != uid {
			t.Errorf("NodeNotReady event names UID %q, want the Node's %q", ev.InvolvedObject.UID, uid)
		}
	}

	if errs := errorLogLines(a.Logs()); len(errs) > 0 {
		t.Errorf("nodeagent logged %d error or warning lines against %s; first: %s", len(errs), info.GitVersion, errs[0])
	}

	// Re-registration: the Node deleted, the agent creates it again and it turns Ready. (The garbage
	// collector deletes the Lease with its Node, and the lease controller logs its failed update, as the
	// kubelet's: no log check from here.)
	if err := framework.DeleteNode(ctx, client, node); err != nil {
		t.Fatal(err)
	}
	again, _ := framework.WaitNode(ctx, t, client, node, time.Minute, "registered again, Ready", func(n *corev1.Node) bool {
		return n.UID != uid && framework.IsReady(n)
	})
	framework.WaitLease(ctx, t, client, node, 30*time.Second, "owned by the new Node", framework.LeaseOwnedBy(again))
	if !a.Running() {
		t.Error("nodeagent exited")
	}
}

// nodeStatusPatches returns the successful patches of nodes/status by node's identity since from, from
// the audit log.
func nodeStatusPatches(t *testing.T, cp *framework.ControlPlane, node string, from time.Time) []framework.AuditEvent {
	t.Helper()
	events, err := framework.ReadAuditEventsBy(cp.AuditLogPath, "system:node:"+node, func(e framework.AuditEvent) bool {
		return e.Is("patch", "nodes", "status") && e.Code() < 300 && !e.StageTimestamp.Time.Before(from)
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// errorLogLines returns the agent's klog lines at error or warning level (E or W), but for those the
// agent logs on purpose during this test: the network removed.
func errorLogLines(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if len(line) == 0 || (line[0] != 'E' && line[0] != 'W') {
			continue
		}
		if strings.Contains(line, "network not ready") || strings.Contains(line, "NetworkReady=false") {
			continue
		}
		out = append(out, line)
	}
	return out
}
