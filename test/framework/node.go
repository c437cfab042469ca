package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// NodeCondition returns node's condition of type typ, or nil (also for a nil node).
func NodeCondition(node *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	if node == nil {
		return nil
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// IsReady reports whether node's Ready condition is True.
func IsReady(node *corev1.Node) bool {
	c := NodeCondition(node, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// HasReadyStatus returns a condition for WaitNode: the Ready condition is present with status.
func HasReadyStatus(status corev1.ConditionStatus) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		c := NodeCondition(n, corev1.NodeReady)
		return c != nil && c.Status == status
	}
}

// DescribeReady summarises node's Ready condition for messages: status, reason, message, heartbeat.
func DescribeReady(node *corev1.Node) string {
	if node == nil {
		return "node never seen"
	}
	c := NodeCondition(node, corev1.NodeReady)
	if c == nil {
		return "no Ready condition"
	}
	return fmt.Sprintf("Ready=%s reason=%q message=%q heartbeat=%s", c.Status, c.Reason, c.Message,
		c.LastHeartbeatTime.Format(time.RFC3339))
}

// WaitNode polls the Node called name every 100 ms until cond holds, and returns it and how long that
// took. It fails the test after timeout (or when ctx ends), naming what it waited for and the last Ready
// condition seen.
func WaitNode(ctx context.Context, t testing.TB, client kubernetes.Interface, name string, timeout time.Duration,
	what string, cond func(*corev1.Node) bool) (*corev1.Node, time.Duration) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *corev1.Node
	err := WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("node %s: %s not seen within %v: %v (last: %s)", name, what, timeout, err, DescribeReady(last))
	}
	return last, time.Since(start)
}

// WaitReady waits up to timeout for the Node called name to be Ready=True, logs how long it took, and
// returns it; it fails the test otherwise.
func WaitReady(ctx context.Context, t testing.TB, client kubernetes.Interface, name string, timeout time.Duration) *corev1.Node {
	t.Helper()
	n, d := WaitNode(ctx, t, client, name, timeout, "Ready=True", IsReady)
	t.Logf("node %s Ready after %v", name, d.Round(time.Millisecond))
	return n
}

// GetLease returns the Lease of node name in kube-node-lease.
func GetLease(ctx context.Context, client kubernetes.Interface, name string) (*coordinationv1.Lease, error) {
	return client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
}

// LeaseOwnedBy returns a condition for WaitLease: the Lease has exactly one owner reference, to node (v1
// Node, same name and UID).
func LeaseOwnedBy(node *corev1.Node) func(*coordinationv1.Lease) bool {
	return func(lease *coordinationv1.Lease) bool {
		refs := lease.OwnerReferences
		return len(refs) == 1 && refs[0].APIVersion == "v1" && refs[0].Kind == "Node" && refs[0].Name == node.Name &&
			refs[0].UID == node.UID
	}
}

// LeaseRenewedAfter returns a condition for WaitLease: the Lease's renewTime is after t.
func LeaseRenewedAfter(t time.Time) func(*coordinationv1.Lease) bool {
	return func(lease *coordinationv1.Lease) bool {
		return lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(t)
	}
}

// DescribeLease summarises lease for messages: UID, renewTime and owner references.
func DescribeLease(l *coordinationv1.Lease) string {
	if l == nil {
		return "lease never seen"
	}
	renew := "<nil>"
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("uid=%s renewTime=%s owners=%v", l.UID, renew, l.OwnerReferences)
}

// WaitLease polls the Lease of node name every 50 ms until cond holds and returns it; it fails the test
// after timeout, naming what it waited for and the last Lease seen.
func WaitLease(ctx context.Context, t testing.TB, client kubernetes.Interface, name string, timeout time.Duration,
	what string, cond func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *coordinationv1.Lease
	err := WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		l, err := GetLease(ctx, client, name)
		if err != nil {
			return false, err
		}
		last = l
		return cond(l), nil
	})
	if err != nil {
		t.Fatalf("lease %s: %s not seen within %v: %v (last: %s)", name, what, timeout, err, DescribeLease(last))
	}
	return last
}

// WaitLeaseRenewals waits for n renewals of node name's Lease (its renewTime advancing n times) and
// returns the renew times seen, the first being the one current when it started (so n+1 of them). It fails
// the test after timeout.
func WaitLeaseRenewals(ctx context.Context, t testing.TB, client kubernetes.Interface, name string, n int, timeout time.Duration) []time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var times []time.Time
	err := WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		l, err := GetLease(ctx, client, name)
		if err != nil {
			return false, err
		}
		if l.Spec.RenewTime == nil {
			return false, fmt.Errorf("lease %s has no renewTime", name)
		}
		rt := l.Spec.RenewTime.Time
		if len(times) == 0 || rt.After(times[len(times)-1]) {
			times = append(times, rt)
		}
		return len(times) > n, nil
	})
	if err != nil {
		t.Fatalf("lease %s: %d renewals not seen within %v (saw renew times %v): %v", name, n, timeout, times, err)
	}
	return times
}

// DeleteNode deletes the Node called name and its Lease in kube-node-lease; either being absent is not
// an error.
func DeleteNode(ctx context.Context, client kubernetes.Interface, name string) error {
	if err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete lease %s: %w", name, err)
	}
	return nil
}

// ListNodeEvents lists the Events about Node name (namespace default, involvedObject kind Node), as the
// kubelet and nodeagent write them.
func ListNodeEvents(ctx context.Context, client kubernetes.Interface, name string) ([]corev1.Event, error) {
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name}.AsSelector().String()
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// EventCount sums the counts of the events with reason (an event without a count counts once).
func EventCount(events []corev1.Event, reason string) int32 {
	var n int32
	for _, e := range events {
		if e.Reason == reason {
			n += max(e.Count, 1)
		}
	}
	return n
}
