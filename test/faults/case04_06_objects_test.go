package faults

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/nodeagent/nodeagent/test/framework"
)

// Labels and taints the suite registers nodes with or adds as an admin.
const (
	caseLabel    = "faults.nodeagent.io/case"
	caseTaintKey = "faults.nodeagent.io/dedicated"
	adminLabel   = "faults.nodeagent.io/admin-label"
	adminTaint   = "faults.nodeagent.io/admin-taint"
)

// TestCase04NodeDeleted is case 4: an admin deletes the Node while nodeagent runs. nodeagent notices
// (its status sync finds the Node gone) and registers it again within one status period, with its
// labels and taints, and points the Lease's owner reference at the new Node (new UID). The kubelet
// does not do this; nodeagent does.
func TestCase04NodeDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := nodeDeleteNode
	a := startAgent(ctx, t, name, "--node-labels="+caseLabel+"=node-deleted",
		"--register-with-taints="+caseTaintKey+"=faults:NoSchedule")
	old := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	framework.WaitLease(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "owner reference to the Node", framework.LeaseOwnedBy(old))
	if old.Labels[caseLabel] != "node-deleted" || !hasTaint(old, caseTaintKey, "faults", corev1.TaintEffectNoSchedule) {
		t.Fatalf("registered node lacks its --node-labels/--register-with-taints: labels %v taints %v", old.Labels, old.Spec.Taints)
	}
	pid := a.PID

	w, _ := watchNode(ctx, t, name)
	uid := old.UID
	if err := suite.cp.AdminClient.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	ev, err := w.next(time.Minute, func(ev watchedNode) bool { return ev.Type == watch.Added && ev.Node.UID != old.UID })
	if err != nil {
		t.Fatalf("node %s not registered again after it was deleted: %v", name, err)
	}
	reregistered := ev.Time.Sub(deleted)
	t.Logf("node registered again %v after the delete (status period %v), new UID %s", reregistered.Round(time.Millisecond), statusFrequency, ev.Node.UID)
	if reregistered > statusFrequency+slack {
		t.Errorf("node registered again %v after the delete, want within one status period (%v, + %v slack)", reregistered.Round(time.Millisecond), statusFrequency, slack)
	}

	// Labels (defaults, --node-labels), annotation and taints as at first registration.
	node := ev.Node
	for k, v := range old.Labels {
		if node.Labels[k] != v {
			t.Errorf("re-registered node: label %s=%q, want %q", k, node.Labels[k], v)
		}
	}
	if node.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] != "true" {
		t.Errorf("re-registered node lacks the controller-managed-attach-detach annotation: %v", node.Annotations)
	}
	if !hasTaint(node, caseTaintKey, "faults", corev1.TaintEffectNoSchedule) {
		t.Errorf("re-registered node lacks its --register-with-taints taint: %v", node.Spec.Taints)
	}

	// The Lease's owner reference follows the new UID within one renew interval of the new Node.
	lease := framework.WaitLease(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "owner reference to the new Node",
		framework.LeaseOwnedBy(node))
	t.Logf("Lease owner reference points at the new Node %v after it was seen (renew interval %v); lease %s",
		time.Since(ev.Time).Round(time.Millisecond), renewInterval, framework.DescribeLease(lease))
	if d := time.Since(ev.Time); d > renewInterval+slack {
		t.Errorf("Lease owner reference updated %v after the node was registered again, want within one renew interval (%v, + %v slack)",
			d.Round(time.Millisecond), renewInterval, slack)
	}

	ready, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "Ready=True on the new Node",
		func(n *corev1.Node) bool { return n.UID == node.UID && framework.IsReady(n) })
	t.Logf("new Node: %s", framework.DescribeReady(ready))
	if !a.Running() || a.PID != pid {
		t.Errorf("nodeagent restarted or exited (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}
	creates := auditEvents(t, nodeUser(name), func(e framework.AuditEvent) bool {
		return e.Is("create", "nodes", "") && e.Code() < 300
	})
	if len(creates) != 2 {
		t.Errorf("audit log: %d successful node creates by %s, want 2 (registration, re-registration)", len(creates), nodeUser(name))
	}
}

// TestCase05LeaseDeleted is case 5: an admin deletes the node Lease; nodeagent creates it again
// within one renew interval, held by the node and owned by the Node.
func TestCase05LeaseDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := nodeDeleteLease
	a := startAgent(ctx, t, name)
	node := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	old := framework.WaitLease(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "owner reference to the Node",
		framework.LeaseOwnedBy(node))
	pid := a.PID

	uid := old.UID
	err := suite.cp.AdminClient.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	lease := framework.WaitLease(ctx, t, suite.cp.AdminClient, name, time.Minute, "a new Lease",
		func(l *coordinationv1.Lease) bool { return l.UID != old.UID })
	seen := time.Since(deleted)
	// The new Lease's renewTime is the agent's clock when it built it: creation time without the round trip.
	created := lease.Spec.RenewTime.Sub(deleted)
	t.Logf("Lease created again %v after the delete (seen after %v; renew interval %v): %s",
		created.Round(time.Millisecond), seen.Round(time.Millisecond), renewInterval, framework.DescribeLease(lease))
	if created > renewInterval+slack {
		t.Errorf("Lease created again %v after the delete, want within one renew interval (%v, + %v slack)", created.Round(time.Millisecond), renewInterval, slack)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != name {
		t.Errorf("new Lease holderIdentity = %v, want %q", h, name)
	}
	if d := lease.Spec.LeaseDurationSeconds; d == nil || *d != leaseDurationSeconds {
		t.Errorf("new Lease leaseDurationSeconds = %v, want %d", d, leaseDurationSeconds)
	}
	if !framework.LeaseOwnedBy(node)(lease) {
		// The owner reference is set on create when the agent has the Node cached; allow one renewal.
		lease = framework.WaitLease(ctx, t, suite.cp.AdminClient, name, renewInterval+slack, "owner reference to the Node",
			framework.LeaseOwnedBy(node))
	}
	// Renewals go on on the new Lease.
	framework.WaitLease(ctx, t, suite.cp.AdminClient, name, 2*renewInterval+slack, "renewal of the new Lease",
		func(l *coordinationv1.Lease) bool {
			return l.UID == lease.UID && l.Spec.RenewTime.After(lease.Spec.RenewTime.Time)
		})
	if !a.Running() || a.PID != pid {
		t.Errorf("nodeagent restarted or exited (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}
	if n := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute); n.UID != node.UID {
		t.Errorf("Node UID changed from %s to %s", node.UID, n.UID)
	}
}

// TestCase06AdminEdits is case 6: an admin adds a label and a taint to the Node while nodeagent
// runs; after 3 status periods, each with a status patch (--node-status-report-frequency=1s
// makes every sync patch), both are still there: status patches never clobber spec or metadata.
func TestCase06AdminEdits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := nodeAdminEdit
	a := startAgent(ctx, t, name, "--node-status-report-frequency=1s", "--node-labels="+caseLabel+"=admin-edit")
	framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	pid := a.PID

	nodes := suite.cp.AdminClient.CoreV1().Nodes()
	var edited *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels[adminLabel] = "added"
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: adminTaint, Value: "added", Effect: corev1.TaintEffectNoSchedule})
		edited, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("admin edit: %v", err)
	}
	editedAt := time.Now()
	patchesBefore := len(auditEvents(t, nodeUser(name), func(e framework.AuditEvent) bool {
		return e.Is("patch", "nodes", "status") && e.Code() == 200
	}))

	// Watch every state of the Node for 3 status periods and until 3 more status patches landed.
	checks, patches := 0, 0
	for time.Since(editedAt) < 3*statusFrequency || patches < 3 {
		if time.Since(editedAt) > time.Minute {
			t.Fatalf("only %d status patches in the minute after the admin edit, want 3", patches)
		}
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[adminLabel] != "added" {
			t.Fatalf("admin label %s gone %v after the edit: labels %v", adminLabel, time.Since(editedAt).Round(time.Millisecond), n.Labels)
		}
		if !hasTaint(n, adminTaint, "added", corev1.TaintEffectNoSchedule) {
			t.Fatalf("admin taint %s gone %v after the edit: taints %v", adminTaint, time.Since(editedAt).Round(time.Millisecond), n.Spec.Taints)
		}
		if n.Labels[caseLabel] != "admin-edit" {
			t.Fatalf("registration label %s gone: labels %v", caseLabel, n.Labels)
		}
		checks++
		patches = len(auditEvents(t, nodeUser(name), func(e framework.AuditEvent) bool {
			return e.Is("patch", "nodes", "status") && e.Code() == 200
		})) - patchesBefore
		time.Sleep(100 * time.Millisecond)
	}
	final, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !final.Status.Conditions[0].LastHeartbeatTime.After(edited.Status.Conditions[0].LastHeartbeatTime.Time) {
		t.Errorf("no status heartbeat after the edit: %v", final.Status.Conditions)
	}
	t.Logf("label and taint intact across %d status patches in %v (%d checks); %s", patches,
		time.Since(editedAt).Round(time.Millisecond), checks, framework.DescribeReady(final))
	if !a.Running() || a.PID != pid {
		t.Errorf("nodeagent restarted or exited (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}
}

// hasTaint reports whether node has a taint with key, value and effect.
func hasTaint(node *corev1.Node, key, value string, effect corev1.TaintEffect) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Value == value && t.Effect == effect {
			return true
		}
	}
	return false
}
