package faults

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
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

// TestCase08RBACRevoked is case 8: nodeagent runs as the DaemonSet's ServiceAccount, authorized by
// RBAC alone (deploy/kubernetes/{namespace,serviceaccount,rbac}.yaml applied as they are; the Node
// authorizer only covers system:node: users). An admin edits the ClusterRole to take away patch on
// nodes/status: nodeagent logs the Forbidden error, which names the verb and the resource, keeps
// retrying as the kubelet does (up to 5 tries per sync, then one status period: no hot loop), and
// its status patches succeed again once the rule is restored.
func TestCase08RBACRevoked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := nodeRBAC
	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml"} {
		applyManifest(ctx, t, f)
	}
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

// applyManifest creates (or, when it exists, updates) every object of deploy/kubernetes/file with
// the admin client. It knows the kinds those files hold.
func applyManifest(ctx context.Context, t *testing.T, file string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifest(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	c := suite.cp.AdminClient
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = c.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: cannot apply a %T", file, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: create %T: %v", file, obj, err)
		}
	}
}

// decodeManifest decodes every non-empty YAML document of data into a typed object.
func decodeManifest(data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, obj)
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
