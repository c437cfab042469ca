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
// ServiceAccount, ClusterRole, Role, bindings, the admission policy, the problem monitors' ConfigMap and the
// DaemonSet object, which no kubelet runs here), then runs nodeagent as a pod of that DaemonSet would: with
// a ServiceAccount token bound to a pod on its node, and the DaemonSet's own arguments (companion mode),
// on a Node registered as its kubelet would have. Its condition patches and events succeed with exactly
// those permissions, no request is Forbidden, and what the manifests do not grant (registering or deleting
// a Node, Leases, Secrets) is refused. TestCompanionBesideKubelet runs the same beside the real kubelet.
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

	// The DaemonSet's arguments, less those this harness must own (endpoint, paths, ports, node name) and
	// the problem monitors, whose configs read the host's /var/log/kern.log (TestCompanionBesideKubelet
	// runs them on files of its own).
	var args []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "nodeagent" {
			continue
		}
		for _, a := range c.Args {
			owned := false
			for _, p := range []string{"--hostname-override", "--container-runtime-endpoint", "--root-dir", "--healthz-bind-address",
				"--healthz-port", "--kubeconfig", "--config.system-log-monitor", "--config.custom-plugin-monitor"} {
				owned = owned || a == p || strings.HasPrefix(a, p+"=")
			}
			if !owned {
				args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", name))
			}
		}
	}
	if !slices.Contains(args, "--companion") {
		t.Fatalf("the DaemonSet's arguments %q do not include --companion", args)
	}
	// The Node, as the node's kubelet registers it.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := framework.DeleteNode(cctx, admin, name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("running nodeagent as %s with the DaemonSet's extra args %q", user, args)
	c := startContainerd(t, true)
	a := framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: name, Kubeconfig: kubeconfig, RuntimeEndpoint: c.Endpoint, Args: args,
	})
	framework.WaitNode(t.Context(), t, admin, name, time.Minute, "ContainerRuntimeUnhealthy=False", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, "ContainerRuntimeUnhealthy")
		return c != nil && c.Status == corev1.ConditionFalse
	})
	waitEventsWith(t, admin, name, "Starting")
	if err := a.WaitHTTP(ctx, "/readyz", 200); err != nil {
		t.Fatal(err)
	}
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
	for _, want := range []string{"patch nodes/status", "create events"} {
		if !seen[want] {
			t.Errorf("audit log has no successful %q by %s; seen %v", want, user, seen)
		}
	}
	if log := a.Logs(); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("agent log mentions forbidden:\n%s", grepLines(log, "orbidden"))
	}

	// Least privilege: what the manifests do not grant is refused, by RBAC.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for what, err := range map[string]error{
		"deleting a Node": sa.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}),
		"registering a Node": func() error {
			_, err := sa.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name + "-new"}}, dryRun)
			return err
		}(),
		"creating its Lease": func() error {
			_, err := sa.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, newNodeLease(name), dryRun)
			return err
		}(),
		"reading its Lease": func() error {
			_, err := sa.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			return err
		}(),
		"listing secrets": func() error {
			_, err := sa.CoreV1().Secrets(saNamespace).List(ctx, metav1.ListOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot ") {
			t.Errorf("service account %s: %v, want Forbidden by RBAC", what, err)
		}
	}
}

// deployKinds are the kinds of object `kubectl apply -k deploy/kubernetes` must create, as kubectl names
// them in its output.
var deployKinds = []string{
	"namespace/", "serviceaccount/", "clusterrole.rbac.authorization.k8s.io/",
	"clusterrolebinding.rbac.authorization.k8s.io/", "role.rbac.authorization.k8s.io/",
	"rolebinding.rbac.authorization.k8s.io/", "validatingadmissionpolicy.admissionregistration.k8s.io/",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/", "configmap/", "daemonset.apps/",
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
	// The API server takes a new policy up asynchronously: wait until it refuses a dry-run Event (which
	// the RBAC grants) by the DaemonSet's ServiceAccount with a token that names no node.
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
		probe := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "policy-probe.", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "policy-probe"},
			Reason:         "PolicyProbe", Type: corev1.EventTypeNormal,
		}
		_, err := sa.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, errors.New("dry-run event by a token bound to no pod allowed")
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
