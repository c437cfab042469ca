package integration_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestLeaseRenewal: with default flags the Lease in kube-node-lease is held by the node, lasts 40 s, is
// renewed about every 10 s, and is owned by the Node.
func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeLease
	client := e.cp.AdminClient
	startAgent(t, e.cp, name, e.ctrd)
	node := framework.WaitReady(t.Context(), t, client, name, 2*time.Minute)

	times := framework.WaitLeaseRenewals(t.Context(), t, client, name, 2, 90*time.Second)
	for i := 1; i < len(times); i++ {
		gap := times[i].Sub(times[i-1])
		t.Logf("renewal %d: renewTime %s (+%v)", i, times[i].Format(time.RFC3339Nano), gap.Round(time.Millisecond))
	}
	// times[0] may be any renewal; the gap between the two renewals seen from start to end is one period.
	if gap := times[2].Sub(times[1]); gap < 9*time.Second || gap > 16*time.Second {
		t.Errorf("lease renewed %v after the previous renewal, want about 10 s (9–16 s allowed)", gap)
	}

	l, err := framework.GetLease(t.Context(), client, name)
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != name {
		t.Errorf("lease holderIdentity = %v, want %q", l.Spec.HolderIdentity, name)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("lease leaseDurationSeconds = %v, want 40", l.Spec.LeaseDurationSeconds)
	}
	if len(l.OwnerReferences) != 1 {
		t.Fatalf("lease owner references = %v, want one, to the Node", l.OwnerReferences)
	}
	ref := l.OwnerReferences[0]
	if ref.APIVersion != "v1" || ref.Kind != "Node" || ref.Name != name || ref.UID != node.UID {
		t.Errorf("lease owner reference = %s %s %s %s, want v1 Node %s %s", ref.APIVersion, ref.Kind, ref.Name, ref.UID, name, node.UID)
	}
}

// TestContainerdDownAndUp: stopping containerd turns the node NotReady with the kubelet's message within
// 45 s; starting it again turns it Ready within 15 s (default frequencies).
func TestContainerdDownAndUp(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeRuntimeDown
	client := e.cp.AdminClient
	c := startContainerd(t, true)
	a := startAgent(t, e.cp, name, c)
	framework.WaitReady(t.Context(), t, client, name, 2*time.Minute)
	// The Node is created Ready; the agent counts its status as posted after its first sync (/readyz).
	if err := a.WaitHTTP(t.Context(), "/readyz", http.StatusOK); err != nil {
		t.Fatal(err)
	}
	checkStatus(t, a, 0, "Node "+name+": Ready", "Health: ping ok, log ok, syncloop ok")

	stopped := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	node, _ := framework.WaitNode(t.Context(), t, client, name, 2*time.Minute, "Ready=False after containerd stopped",
		func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionFalse
		})
	notReadyAfter := time.Since(stopped)
	t.Logf("NotReady %v after containerd was stopped: %s", notReadyAfter.Round(time.Millisecond), framework.DescribeReady(node))
	if notReadyAfter > 45*time.Second {
		t.Errorf("NotReady took %v after containerd stopped, want ≤ 45 s", notReadyAfter)
	}
	cond := framework.NodeCondition(node, corev1.NodeReady)
	if cond.Reason != "KubeletNotReady" {
		t.Errorf("Ready reason = %q, want KubeletNotReady", cond.Reason)
	}
	if !strings.Contains(cond.Message, "container runtime is down") && !strings.Contains(cond.Message, "container runtime not ready") {
		t.Errorf("Ready message = %q, want it to say the container runtime is down", cond.Message)
	}
	// nodeagent status names the reason (issue 12).
	checkStatus(t, a, 1, "Node "+name+": NotReady", "Why:", "- runtime: container runtime is down")

	started := time.Now()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	node, _ = framework.WaitNode(t.Context(), t, client, name, 2*time.Minute, "Ready=True after containerd started", framework.IsReady)
	readyAfter := time.Since(started)
	t.Logf("Ready %v after containerd was started: %s", readyAfter.Round(time.Millisecond), framework.DescribeReady(node))
	if readyAfter > 15*time.Second {
		t.Errorf("Ready took %v after containerd started, want ≤ 15 s", readyAfter)
	}
}

// TestCNIConfigRemoved: removing the CNI config turns the node NotReady with the runtime network message;
// restoring it turns the node Ready again.
func TestCNIConfigRemoved(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeCNI
	client := e.cp.AdminClient
	c := startContainerd(t, true)
	a := startAgent(t, e.cp, name, c)
	framework.WaitReady(t.Context(), t, client, name, 2*time.Minute)

	if err := c.SetCNI(false); err != nil {
		t.Fatal(err)
	}
	node, d := framework.WaitNode(t.Context(), t, client, name, 2*time.Minute, "Ready=False after the CNI config was removed",
		func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionFalse
		})
	t.Logf("NotReady %v after the CNI config was removed: %s", d.Round(time.Millisecond), framework.DescribeReady(node))
	msg := framework.NodeCondition(node, corev1.NodeReady).Message
	for _, want := range []string{"container runtime network not ready", "NetworkReady=false", "cni plugin not initialized"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message = %q, want it to contain %q", msg, want)
		}
	}
	checkStatus(t, a, 1, "Node "+name+": NotReady", "- network: container runtime network not ready: NetworkReady=false")

	if err := c.SetCNI(true); err != nil {
		t.Fatal(err)
	}
	node, d = framework.WaitNode(t.Context(), t, client, name, 2*time.Minute, "Ready=True after the CNI config was restored",
		framework.IsReady)
	t.Logf("Ready %v after the CNI config was restored: %s", d.Round(time.Millisecond), framework.DescribeReady(node))
}

// TestStaysReadyUnderNodeLifecycleController: under the real kube-controller-manager's node lifecycle
// controller (node-monitor-period 5 s, the framework's default grace 40 s) a node with default flags stays
// Ready for 5 minutes: never Unknown or False, never tainted unreachable or not-ready.
func TestStaysReadyUnderNodeLifecycleController(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeLifecycle
	client := e.cp.AdminClient
	startAgent(t, e.cp, name, e.ctrd)
	framework.WaitReady(t.Context(), t, client, name, 2*time.Minute)
	// The controller manager is alive and sees the node: its TTL controller annotates every node.
	framework.WaitNode(t.Context(), t, client, name, 2*time.Minute, "node.alpha.kubernetes.io/ttl annotation from kube-controller-manager",
		func(n *corev1.Node) bool { _, ok := n.Annotations["node.alpha.kubernetes.io/ttl"]; return ok })
	// Let any start-up taint the controller may have put on before the first status clear.
	framework.WaitNode(t.Context(), t, client, name, time.Minute, "no not-ready/unreachable taint",
		func(n *corev1.Node) bool { return badTaint(n) == "" })

	const soak = 5 * time.Minute
	start := time.Now()
	checks := 0
	ctx, cancel := context.WithTimeout(t.Context(), soak)
	defer cancel()
	_ = framework.WaitFor(ctx, time.Second, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("get node at %v: %v", time.Since(start).Round(time.Second), err)
			return false, nil
		}
		checks++
		if !framework.IsReady(n) {
			t.Errorf("at %v into the soak: %s", time.Since(start).Round(time.Second), framework.DescribeReady(n))
		}
		if taint := badTaint(n); taint != "" {
			t.Errorf("at %v into the soak: taint %s", time.Since(start).Round(time.Second), taint)
		}
		return false, nil
	})
	if time.Since(start) < soak-time.Second {
		t.Fatalf("soak ended early after %v", time.Since(start))
	}
	t.Logf("node stayed Ready with no lifecycle taint for %v (%d checks)", time.Since(start).Round(time.Second), checks)
}

// badTaint returns the node lifecycle controller's unreachable or not-ready taint on n, or "".
func badTaint(n *corev1.Node) string {
	for _, tn := range n.Spec.Taints {
		if tn.Key == corev1.TaintNodeUnreachable || tn.Key == corev1.TaintNodeNotReady {
			return tn.ToString()
		}
	}
	return ""
}

// TestSIGTERMExitsCleanly: SIGTERM makes the agent exit 0 within 2 s, every loop stopped. The node lifecycle controller then
// notices the silence and marks the node Unknown and unreachable, which also shows that it is really judging
// the nodes of the soak test above.
func TestSIGTERMExitsCleanly(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeSigterm
	client := e.cp.AdminClient
	a := startAgent(t, e.cp, name, e.ctrd)
	framework.WaitReady(t.Context(), t, client, name, 2*time.Minute)
	framework.WaitLeaseRenewals(t.Context(), t, client, name, 1, time.Minute)

	start := time.Now()
	err := a.Stop()
	took := time.Since(start)
	t.Logf("agent exited %v after SIGTERM (err %v)", took.Round(time.Millisecond), err)
	if err != nil {
		t.Errorf("agent exit after SIGTERM: %v, want exit status 0", err)
	}
	// Run gives its loops 5 s and then exits anyway: a clean stop is well inside that, and says nothing
	// about loops left running.
	if took > 2*time.Second {
		t.Errorf("agent took %v to exit after SIGTERM, want ≤ 2 s (Run's own bound is 5 s)", took)
	}
	log := a.Logs()
	if !strings.Contains(log, "Shutting down") {
		t.Errorf("agent log has no shutdown line:\n%s", framework.TailLines(log, 20))
	}
	if strings.Contains(log, "did not stop") {
		t.Errorf("agent's loops did not all stop after SIGTERM:\n%s", framework.TailLines(log, 20))
	}

	node, d := framework.WaitNode(t.Context(), t, client, name, 3*time.Minute, "Ready=Unknown from the node lifecycle controller",
		func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionUnknown && slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool {
				return tn.Key == corev1.TaintNodeUnreachable
			})
		})
	t.Logf("node lifecycle controller marked the stopped node %s and unreachable %v after SIGTERM", framework.DescribeReady(node),
		(d + took).Round(time.Second))
}
