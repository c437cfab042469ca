package faults

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestCase09AgentKilled is case 9: nodeagent SIGKILLed. The real node lifecycle controller
// (kube-controller-manager, --node-monitor-grace-period=20s here instead of the default, to keep the
// case short) marks the node Ready=Unknown once the grace period passes without a Lease renewal;
// nodeagent started again turns it Ready within 1 s of its start, reusing the Node and the Lease.
func TestCase09AgentKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	name := nodeKilled
	a := startAgent(ctx, t, name)
	node := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	lease := framework.WaitLease(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "owner reference to the Node",
		framework.LeaseOwnedBy(node))

	a.Kill()
	killed := time.Now()
	unknown, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, name, nodeMonitorGracePeriod+time.Minute, "Ready=Unknown",
		func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionUnknown
		})
	t.Logf("node lifecycle controller marked the node %v after the kill (grace period %v): %s; taints %v",
		time.Since(killed).Round(time.Millisecond), nodeMonitorGracePeriod, framework.DescribeReady(unknown), unknown.Spec.Taints)
	if c := framework.NodeCondition(unknown, corev1.NodeReady); c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status." {
		t.Errorf("Ready=Unknown with reason %q message %q, want the node lifecycle controller's NodeStatusUnknown", c.Reason, c.Message)
	}

	w, _ := watchNode(ctx, t, name)
	started := time.Now()
	b := startAgent(ctx, t, name)
	ev, err := w.next(time.Minute, func(ev watchedNode) bool { return framework.IsReady(ev.Node) })
	if err != nil {
		t.Fatalf("node not Ready after nodeagent restarted: %v", err)
	}
	seen := ev.Time.Sub(started)
	// The watch may deliver the Ready Node before the agent has handled its patch's response.
	var startup float64
	mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	defer mcancel()
	_ = framework.WaitFor(mctx, 50*time.Millisecond, func() (bool, error) {
		m, err := b.Metrics(mctx)
		if err != nil {
			return false, err
		}
		startup = m.Value("nodeagent_startup_to_ready_duration_seconds", nil)
		return startup > 0, nil
	})
	t.Logf("Ready again: nodeagent reports %.3fs from its start to the Ready patch; the test saw Ready %v after exec (including process start-up and watch delivery)",
		startup, seen.Round(time.Millisecond))
	if startup <= 0 || startup > 1 {
		t.Errorf("nodeagent_startup_to_ready_duration_seconds = %v, want Ready within 1 s of start", startup)
	}
	if ev.Node.UID != node.UID {
		t.Errorf("Node UID changed from %s to %s: not reused", node.UID, ev.Node.UID)
	}
	renewed := framework.WaitLease(ctx, t, suite.cp.AdminClient, name, renewInterval+slack+time.Second, "renewal by the new process",
		framework.LeaseRenewedAfter(started))
	if renewed.UID != lease.UID {
		t.Errorf("Lease UID changed from %s to %s: not reused", lease.UID, renewed.UID)
	}
	if !framework.LeaseOwnedBy(node)(renewed) {
		t.Errorf("Lease owner references %v, want the Node %s", renewed.OwnerReferences, node.UID)
	}
	creates := auditEvents(t, nodeUser(name), func(e framework.AuditEvent) bool {
		return e.Verb == "create" && e.Code() < 300 && e.ObjectRef != nil && (e.ObjectRef.Resource == "nodes" || e.ObjectRef.Resource == "leases")
	})
	if len(creates) != 2 {
		t.Errorf("audit log: %d successful creates of nodes and leases by %s, want 2 (the first start's)", len(creates), nodeUser(name))
	}
}
