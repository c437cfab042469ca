package integration_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/test/framework"
)

// identityFieldManager marks every write the test makes as the DaemonSet's identity, so that B's
// managedFields show whether any of them landed.
const identityFieldManager = "identity-test"

// TestDaemonSetIdentityOwnNodeOnly installs deploy/kubernetes (`kubectl apply -k`) and acts as the
// DaemonSet's pod on node A: with the ServiceAccount's token bound to a pod whose spec.nodeName is A (the
// token the kubelet would mount), it may write A's status, labels there and Events about A, but every write
// to another node B (status, labels, taints, delete), to a Node of another name and to Events about B is
// refused, and B is left as it was; Leases, A's included, are not the DaemonSet's to write at all (companion
// mode: the kubelet renews them). A node-restriction.kubernetes.io/ label on A is refused too, and a token
// of the same account bound to no pod writes nothing. Each refusal is checked to come from the layer meant
// to make it: the admission policy for what RBAC allows (writes to nodes/status and events of other nodes),
// RBAC for the rest.
func TestDaemonSetIdentityOwnNodeOnly(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	admin := e.cp.AdminClient
	const nodeA, nodeB, nodeC = nodeIdentityA, nodeIdentityB, nodeIdentityC

	ds := applyDeployManifests(t, e)
	ns, sa := ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName

	// Nodes A and B and B's Lease, as their kubelets or agents would have made them.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, n := range []string{nodeA, nodeB, nodeC} {
			if err := framework.DeleteNode(cctx, admin, n); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	})
	for _, n := range []string{nodeA, nodeB} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, newNodeLease(nodeB), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leaseB, err := framework.GetLease(ctx, admin, nodeB)
	if err != nil {
		t.Fatal(err)
	}

	// The pod-bound token carries node A; a token bound to nothing carries no node.
	boundPath, err := e.cp.PodServiceAccountKubeconfig(ctx, ns, sa, nodeA)
	if err != nil {
		t.Fatal(err)
	}
	unboundPath, err := e.cp.ServiceAccountKubeconfig(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	bound, unbound := clientFor(t, boundPath), clientFor(t, unboundPath)
	review, err := bound.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, []string{nodeA}) {
		t.Fatalf("pod-bound token: user info extra node-name %q, want [%s] (user info %+v)", got, nodeA, review.Status.UserInfo)
	}

	patchOpts := metav1.PatchOptions{FieldManager: identityFieldManager}
	patchStatus := func(c kubernetes.Interface, node, patch string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), patchOpts, "status")
			return err
		}
	}
	patchNode := func(c kubernetes.Interface, node, patch string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), patchOpts)
			return err
		}
	}
	leases := bound.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renew := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: identityFieldManager})
			return err
		}
	}
	event := func(node string) func(context.Context) error {
		return func(ctx context.Context) error {
			ev := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: node + ".", Namespace: metav1.NamespaceDefault},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)},
				Reason:         "IdentityTest", Message: "written as the agent on " + nodeA, Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "nodeagent", Host: nodeA},
			}
			_, err := bound.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{FieldManager: identityFieldManager})
			return err
		}
	}
	const (
		allowed  = ""
		byRBAC   = "RBAC"
		byPolicy = "the admission policy"
	)
	for _, tc := range []struct {
		name      string
		write     func(context.Context) error
		refusedBy string // allowed, byRBAC or byPolicy
	}{
		{"own status", patchStatus(bound, nodeA, `{"status":{"conditions":[{"type":"IdentityTest","status":"True","reason":"OwnNode"}]}}`), allowed},
		{"own label through nodes/status", patchStatus(bound, nodeA, `{"metadata":{"labels":{"example.com/agent":"set"}}}`), allowed},
		{"own node-restriction.kubernetes.io/ label", patchStatus(bound, nodeA, `{"metadata":{"labels":{"node-restriction.kubernetes.io/pool":"trusted"}}}`), byPolicy},
		{"own *.node-restriction.kubernetes.io/ label", patchStatus(bound, nodeA, `{"metadata":{"labels":{"team.node-restriction.kubernetes.io/pool":"trusted"}}}`), byPolicy},
		{"own Lease create", func(ctx context.Context) error {
			_, err := leases.Create(ctx, newNodeLease(nodeA), metav1.CreateOptions{FieldManager: identityFieldManager})
			return err
		}, byRBAC},
		{"Event about own Node", event(nodeA), allowed},

		{"other's status", patchStatus(bound, nodeB, `{"status":{"conditions":[{"type":"IdentityTest","status":"True","reason":"OtherNode"}]}}`), byPolicy},
		{"other's label through nodes/status", patchStatus(bound, nodeB, `{"metadata":{"labels":{"example.com/agent":"set"}}}`), byPolicy},
		{"other's label", patchNode(bound, nodeB, `{"metadata":{"labels":{"example.com/agent":"set"}}}`), byRBAC},
		{"other's taints", patchNode(bound, nodeB, `{"spec":{"taints":[{"key":"example.com/identity","effect":"NoSchedule"}]}}`), byRBAC},
		{"other's delete", func(ctx context.Context) error {
			return bound.CoreV1().Nodes().Delete(ctx, nodeB, metav1.DeleteOptions{})
		}, byRBAC},
		{"other's Lease renew", renew(nodeB), byRBAC},
		{"other's Lease delete", func(ctx context.Context) error {
			return leases.Delete(ctx, nodeB, metav1.DeleteOptions{})
		}, byRBAC},
		{"another Node's registration", func(ctx context.Context) error {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeC}}
			_, err := bound.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{FieldManager: identityFieldManager})
			return err
		}, byRBAC},
		{"Event about another Node", event(nodeB), byPolicy},

		{"own status with a token bound to no pod", patchStatus(unbound, nodeA, `{"status":{"conditions":[{"type":"IdentityTest","status":"False","reason":"Unbound"}]}}`), byPolicy},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			err := tc.write(ctx)
			switch {
			case tc.refusedBy == allowed && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refusedBy == allowed:
			case !apierrors.IsForbidden(err):
				t.Errorf("got %v, want Forbidden by %s", err, tc.refusedBy)
			case tc.refusedBy == byPolicy && !strings.Contains(err.Error(), deniedByPolicy):
				t.Errorf("refused, but not by the admission policy: %v", err)
			case tc.refusedBy == byRBAC && !strings.Contains(err.Error(), "cannot "):
				t.Errorf("refused, but not by RBAC: %v", err)
			default:
				t.Logf("refused: %v", err)
			}
		})
	}

	// What was allowed happened; what was refused did not.
	a, err := admin.CoreV1().Nodes().Get(ctx, nodeA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := framework.NodeCondition(a, "IdentityTest"); c == nil || c.Reason != "OwnNode" {
		t.Errorf("node A condition IdentityTest = %+v, want the allowed patch's (reason OwnNode)", c)
	}
	if a.Labels["example.com/agent"] != "set" {
		t.Errorf("node A labels %v lack the allowed example.com/agent", a.Labels)
	}
	for k := range a.Labels {
		if strings.Contains(k, "node-restriction.kubernetes.io/") {
			t.Errorf("node A has the refused label %s", k)
		}
	}
	b, err := admin.CoreV1().Nodes().Get(ctx, nodeB, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node B after the refused delete: %v", err)
	}
	if c := framework.NodeCondition(b, "IdentityTest"); c != nil {
		t.Errorf("node B has the refused condition %+v", c)
	}
	if _, ok := b.Labels["example.com/agent"]; ok || slices.ContainsFunc(b.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == "example.com/identity" }) {
		t.Errorf("node B has a refused label or taint: labels %v taints %v", b.Labels, b.Spec.Taints)
	}
	for _, mf := range b.ManagedFields {
		if mf.Manager == identityFieldManager {
			t.Errorf("node B has fields written by the DaemonSet's identity: %+v", mf)
		}
	}
	if l, err := framework.GetLease(ctx, admin, nodeB); err != nil || l.ResourceVersion != leaseB.ResourceVersion {
		t.Errorf("lease B after the refused writes: %v (resourceVersion %s, was %s)", err, l.GetResourceVersion(), leaseB.ResourceVersion)
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, nodeC, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node C after its refused registration: %v, want NotFound", err)
	}
	evs, err := framework.ListNodeEvents(ctx, admin, nodeB)
	if err != nil {
		t.Fatal(err)
	}
	if n := framework.EventCount(evs, "IdentityTest"); n != 0 {
		t.Errorf("%d refused IdentityTest events about node B exist", n)
	}
}

// newNodeLease is a Lease for node name in kube-node-lease as a node agent would create it.
func newNodeLease(name string) *coordinationv1.Lease {
	holder, duration := name, int32(40)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration,
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
}

// clientFor returns a clientset for the kubeconfig at path.
func clientFor(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", path, err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}
