package faults

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodeagent/nodeagent/pkg/statussync"
	"github.com/nodeagent/nodeagent/test/framework"
)

// The DaemonSet's identity, from deploy/kubernetes.
const (
	saNamespace   = "nodeagent-system"
	saName        = "nodeagent"
	saUser        = "system:serviceaccount:" + saNamespace + ":" + saName
	saClusterRole = "nodeagent"
)

// TestCase08RBACRevoked is case 8: nodeagent runs standalone as the DaemonSet's ServiceAccount, authorized by
// RBAC alone (deploy/kubernetes/{namespace,serviceaccount,rbac}.yaml applied as they are, with kubectl, plus
// the Node-create and Lease rights standalone mode needs beyond companion mode's; the
// Node authorizer only covers system:node: users, and the admission policy, which would refuse the token
// bound to no pod used here, is not applied: test/integration covers it). An admin edits the ClusterRole to take away patch on
// nodes/status: nodeagent logs the Forbidden error, which names the verb and the resource, keeps
// retrying as the kubelet does (up to 5 tries per sync, then one status period: no hot loop), and
// its status patches succeed again once the rule is restored.
func TestCase08RBACRevoked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := nodeRBAC
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"apply"}
	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml"} {
		args = append(args, "-f", filepath.Join(root, "deploy", "kubernetes", f))
	}
	if _, err := suite.cp.Kubectl(ctx, args...); err != nil {
		t.Fatal(err)
	}
	// The shipped RBAC is companion mode's (no Node create, no Lease). This case runs the agent
	// standalone, so it grants the two extra rights deploy/README.md names for that, in roles of its
	// own: the rule revoked below is still the shipped ClusterRole's nodes/status patch.
	grantStandaloneExtras(ctx, t)
	kubeconfig, err := suite.cp.ServiceAccountKubeconfig(ctx, saNamespace, saName)
	if err != nil {
		t.Fatal(err)
	}
	// --node-status-report-frequency=1s: every sync patches nodes/status, so the revoked verb is used.
	a := startAgentWith(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, name), NodeName: name, Kubeconfig: kubeconfig, RuntimeEndpoint: suite.ctrd.Endpoint,
		Args: append(agentArgs(), "--node-status-report-frequency=1s"),
	})
	node := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	pid := a.PID
	statusPatches := func(want int) int {
		return len(auditEvents(t, saUser, func(e framework.AuditEvent) bool {
			return e.Is("patch", "nodes", "status") && e.ObjectRef.Name == name && e.Code() == want
		}))
	}
	err = framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) { return statusPatches(http.StatusOK) > 0, nil })
	if err != nil {
		t.Fatalf("audit log: no successful status patch by %s: %v", saUser, err)
	}

	// Revoke: drop the rule granting patch on nodes/status.
	roles := suite.cp.AdminClient.RbacV1().ClusterRoles()
	var original []rbacv1.PolicyRule
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cr, err := roles.Get(ctx, saClusterRole, metav1.GetOptions{})
		if err != nil {
			return err
		}
		original = cr.Rules
		cr.Rules = slices.DeleteFunc(slices.Clone(cr.Rules), func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.Resources, "nodes/status")
		})
		if len(cr.Rules) == len(original) {
			return fmt.Errorf("ClusterRole %s has no nodes/status rule: %+v", saClusterRole, original)
		}
		_, err = roles.Update(ctx, cr, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("revoke nodes/status patch: %v", err)
	}
	revoked := time.Now()
	restore := func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cr, err := roles.Get(context.Background(), saClusterRole, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cr.Rules = original
			_, err = roles.Update(context.Background(), cr, metav1.UpdateOptions{})
			return err
		})
	}
	t.Cleanup(restore)

	err = framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) { return statusPatches(http.StatusForbidden) > 0, nil })
	if err != nil {
		t.Fatalf("no Forbidden status patch after the revocation: %v", err)
	}
	t.Logf("first Forbidden status patch %v after the revocation", time.Since(revoked).Round(time.Millisecond))

	// Watch the retries for a few status periods: they go on, at most NodeStatusUpdateRetry per sync.
	const window = 5 * statusFrequency
	before := statusPatches(http.StatusForbidden)
	time.Sleep(window)
	tries := statusPatches(http.StatusForbidden) - before
	maxTries := statussync.NodeStatusUpdateRetry * (int(window/statusFrequency) + 1)
	t.Logf("%d Forbidden status patches in %v (status period %v, at most %d tries per sync)", tries, window, statusFrequency, statussync.NodeStatusUpdateRetry)
	if tries < int(window/statusFrequency)-1 {
		t.Errorf("only %d status patch tries in %v while Forbidden: nodeagent stopped retrying", tries, window)
	}
	if tries > maxTries {
		t.Errorf("%d status patch tries in %v while Forbidden, want at most %d (%d per sync): a hot loop", tries, window, maxTries, statussync.NodeStatusUpdateRetry)
	}
	if !a.Running() || a.PID != pid {
		t.Fatalf("nodeagent restarted or exited while Forbidden (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}

	// The log names the error, the verb and the resource.
	var forbidden []string
	for _, l := range errorLines(a.Logs(), revoked, time.Time{}) {
		text := strings.ReplaceAll(l.Text, `\"`, `"`)
		if strings.Contains(text, "forbidden") && strings.Contains(text, `cannot patch resource "nodes/status"`) {
			forbidden = append(forbidden, l.Text)
		}
	}
	if len(forbidden) == 0 {
		t.Errorf("no error log line with the Forbidden error naming patch and nodes/status; errors since the revocation:\n%s",
			joinLines(errorLines(a.Logs(), revoked, time.Time{}), 10))
	} else {
		t.Logf("%d Forbidden log lines; first: %s", len(forbidden), forbidden[0])
	}

	// The Lease (a separate Role) is still renewed: the node does not go Unknown.
	framework.WaitLease(ctx, t, suite.cp.AdminClient, name, renewInterval+slack, "renewal while status is Forbidden",
		func(l *coordinationv1.Lease) bool {
			return framework.LeaseRenewedAfter(time.Now().Add(-renewInterval))(l)
		})

	// Restore: status patches succeed again.
	okBefore := statusPatches(http.StatusOK)
	restore()
	restored := time.Now()
	err = framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) { return statusPatches(http.StatusOK) > okBefore, nil })
	if err != nil {
		t.Fatalf("no successful status patch after the rule was restored: %v", err)
	}
	t.Logf("status patched again %v after the rule was restored", time.Since(restored).Round(time.Millisecond))
	after, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "a Ready heartbeat after the restore",
		func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.After(restored.Add(-time.Second))
		})
	if after.UID != node.UID {
		t.Errorf("Node UID changed from %s to %s", node.UID, after.UID)
	}
	waitHealthz(ctx, t, a, "/healthz/syncloop", http.StatusOK, 30*time.Second)
	if !a.Running() || a.PID != pid {
		t.Errorf("nodeagent restarted or exited (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}
}

func joinLines(lines []logLine, n int) string {
	var b strings.Builder
	for i, l := range lines {
		if i == n {
			break
		}
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

// grantStandaloneExtras gives the DaemonSet's ServiceAccount what standalone mode needs beyond the
// shipped companion RBAC: create on nodes, and get/create/update on Leases in kube-node-lease.
func grantStandaloneExtras(ctx context.Context, t *testing.T) {
	t.Helper()
	rbac := suite.cp.AdminClient.RbacV1()
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: saName, Namespace: saNamespace}}
	const name = "nodeagent-standalone-extras"
	steps := []func() error{
		func() error {
			_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.Roles(corev1.NamespaceNodeLease).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
					Verbs: []string{"get", "create", "update"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.RoleBindings(corev1.NamespaceNodeLease).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}}, metav1.CreateOptions{})
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}
