package integration_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestDeployManifestsRBAC installs deploy/kubernetes with its one command, `kubectl apply -k` (namespace,
// ServiceAccount, ClusterRole, Roles, bindings, the admission policy and the DaemonSet object, which no
// kubelet runs here), then runs nodeagent as a pod of that DaemonSet would: with a ServiceAccount token bound
// to a pod on its node, and the DaemonSet's own arguments. Registration, status patches (Ready, NotReady
// when the CNI config goes, Ready again), Lease renewals and events succeed with exactly those permissions,
// no request is Forbidden, and what the manifests do not grant is refused.
func TestDeployManifestsRBAC(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	admin := e.cp.AdminClient
	const name = nodeServiceAcct

	ds := applyDeployManifests(t, e)
	saNamespace, saName := ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName
	kubeconfig, err := e.cp.PodServiceAccountKubeconfig(ctx, saNamespace, saName, name)
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + saNamespace + ":" + saName

	// The DaemonSet's arguments, less those this harness must own (endpoint, paths, ports, node name).
	var args []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "nodeagent" {
			continue
		}
		for _, a := range c.Args {
			owned := false
			for _, p := range []string{"--hostname-override", "--container-runtime-endpoint", "--root-dir", "--healthz-bind-address", "--healthz-port", "--kubeconfig"} {
				owned = owned || a == p || strings.HasPrefix(a, p+"=")
			}
			if !owned {
				args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", name))
			}
		}
	}
	t.Logf("running nodeagent as %s with the DaemonSet's extra args %q", user, args)
	c := startContainerd(t, true)
	a := framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: name, Kubeconfig: kubeconfig, RuntimeEndpoint: c.Endpoint, Args: args,
	})
	framework.WaitReady(t.Context(), t, admin, name, 2*time.Minute)
	// A status change, so that nodes/status is patched (an unchanged status is only re-posted every
	// --node-status-report-frequency, 5 m): the runtime network goes away and comes back.
	if err := c.SetCNI(false); err != nil {
		t.Fatal(err)
	}
	framework.WaitNode(t.Context(), t, admin, name, 2*time.Minute, "Ready=False without a CNI config", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeReady)
		return c != nil && c.Status == corev1.ConditionFalse
	})
	if err := c.SetCNI(true); err != nil {
		t.Fatal(err)
	}
	node := framework.WaitReady(t.Context(), t, admin, name, 2*time.Minute)
	times := framework.WaitLeaseRenewals(t.Context(), t, admin, name, 2, 90*time.Second)
	t.Logf("lease renewed at %v", times)
	l, err := framework.GetLease(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != node.UID {
		t.Errorf("lease owner references %v, want the Node %s", l.OwnerReferences, node.UID)
	}
	for _, reason := range []string{"Starting", "NodeNotReady", "NodeReady"} {
		waitEventsWith(t, admin, name, reason)
	}
	// A few status periods, so that whatever the agent does periodically is in the audit log (an unchanged
	// status is read from the informer and not patched until --node-status-report-frequency).
	framework.WaitMetrics(t.Context(), t, a, time.Minute, "three status syncs without error", func(ms *framework.Metrics) bool {
		errs, _ := ms.Get("nodeagent_node_status_syncs_total", map[string]string{"result": "error"})
		return ms.Sum("nodeagent_node_status_syncs_total", nil) >= 3 && errs == 0
	})
	if !a.Running() {
		t.Fatal("agent exited")
	}

	// The audit log: every request of the account succeeded (no 403), and the writes it needs were made.
	// Only this agent's requests: other tests use the same ServiceAccount with tokens bound to other nodes.
	events, err := framework.ReadAuditEventsBy(e.cp.AuditLogPath, user, func(e framework.AuditEvent) bool {
		return e.ObjectRef != nil && slices.Equal(e.User.Extra["authentication.kubernetes.io/node-name"], []string{name})
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range events {
		code := ev.Code()
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		if code == 403 {
			t.Errorf("Forbidden: %s %s (%s)", ev.Verb, res, ev.RequestURI)
		}
		if code < 300 {
			seen[ev.Verb+" "+res] = true
		}
	}
	for _, want := range []string{"create nodes", "patch nodes/status", "update leases", "create events"} {
		if !seen[want] {
			t.Errorf("audit log has no successful %q by %s; seen %v", want, user, seen)
		}
	}
	if log := a.Logs(); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("agent log mentions forbidden:\n%s", grepLines(log, "orbidden"))
	}

	// Least privilege: what the manifests do not grant is refused.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	if err := sa.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account deleting a Node: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Secrets(saNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account listing secrets: %v, want Forbidden", err)
	}
	if _, err := sa.CoordinationV1().Leases(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account listing leases outside kube-node-lease: %v, want Forbidden", err)
	}
}

// deployKinds are the kinds of object `kubectl apply -k deploy/kubernetes` must create, as kubectl names
// them in its output.
var deployKinds = []string{
	"namespace/", "serviceaccount/", "clusterrole.rbac.authorization.k8s.io/",
	"clusterrolebinding.rbac.authorization.k8s.io/", "role.rbac.authorization.k8s.io/",
	"rolebinding.rbac.authorization.k8s.io/", "validatingadmissionpolicy.admissionregistration.k8s.io/",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/", "daemonset.apps/",
}

// deniedByPolicy is how the API server words a refusal by deploy/kubernetes/admission-policy.yaml.
const deniedByPolicy = "ValidatingAdmissionPolicy 'nodeagent-own-node'"

// applyDeploy runs `kubectl apply -k deploy/kubernetes` once on the shared control plane (tests applying
// the same objects at once would race to create them), waits until the admission policy is in force, and
// returns kubectl's output.
var applyDeploy = sync.OnceValues(func() (string, error) {
	e, err := sharedOnce()
	if err != nil {
		return "", err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := e.cp.Kubectl(ctx, "apply", "-k", filepath.Join(root, "deploy", "kubernetes"))
	if err != nil {
		return out, err
	}
	// The API server takes a new policy up asynchronously: wait until it refuses a dry-run registration
	// by the DaemonSet's ServiceAccount with a token that names no node.
	kubeconfig, err := e.cp.ServiceAccountKubeconfig(ctx, "nodeagent-system", "nodeagent")
	if err != nil {
		return out, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return out, err
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return out, err
	}
	err = framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}}
		_, err := sa.CoreV1().Nodes().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, errors.New("dry-run registration allowed")
		}
		return strings.Contains(err.Error(), deniedByPolicy), err
	})
	if err != nil {
		return out, fmt.Errorf("admission policy of deploy/kubernetes not in force: %w", err)
	}
	return out, nil
})

// applyDeployManifests installs deploy/kubernetes on the shared control plane with `kubectl apply -k`
// (once per package run), checks that every kind nodeagent deploys was created, and returns the
// DaemonSet as the API server holds it, once its admission policy is in force.
func applyDeployManifests(t *testing.T, e *sharedEnv) *appsv1.DaemonSet {
	t.Helper()
	out, err := applyDeploy()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range deployKinds {
		if !strings.Contains(out, "\n"+kind) && !strings.HasPrefix(out, kind) {
			t.Errorf("kubectl apply -k deploy/kubernetes created no %s...:\n%s", kind, out)
		}
	}
	ds, err := e.cp.AdminClient.AppsV1().DaemonSets("nodeagent-system").Get(t.Context(), "nodeagent", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the DaemonSet of deploy/kubernetes: %v", err)
	}
	return ds
}

// waitEventsWith waits for an event with reason on Node name.
func waitEventsWith(t *testing.T, c kubernetes.Interface, name, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		evs, err := framework.ListNodeEvents(ctx, c, name)
		return err == nil && framework.EventCount(evs, reason) > 0, err
	})
	if err != nil {
		t.Fatalf("no %s event on node %s: %v", reason, name, err)
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
