package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestDeployManifestsRBAC applies deploy/kubernetes (namespace, ServiceAccount, ClusterRole, Roles,
// bindings and the DaemonSet object, which no kubelet runs here) to the real API server, then runs nodeagent
// with that ServiceAccount's token and the DaemonSet's own arguments: registration, status patches (Ready,
// NotReady when the CNI config goes, Ready again), Lease renewals and events succeed with exactly those
// permissions, no request is Forbidden, and what the manifests do not grant is refused.
func TestDeployManifestsRBAC(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	admin := e.cp.AdminClient
	const name = nodeServiceAcct

	objs := readManifests(t)
	var ds *appsv1.DaemonSet
	kinds := map[string]int{}
	for _, obj := range objs {
		if err := createObject(t, admin, obj); err != nil {
			t.Fatalf("apply %T: %v", obj, err)
		}
		kinds[fmt.Sprintf("%T", obj)]++
		if d, ok := obj.(*appsv1.DaemonSet); ok {
			ds = d
		}
	}
	t.Logf("applied %v", kinds)
	for _, k := range []string{"*v1.Namespace", "*v1.ServiceAccount", "*v1.ClusterRole", "*v1.ClusterRoleBinding", "*v1.Role", "*v1.RoleBinding", "*v1.DaemonSet"} {
		if kinds[k] == 0 {
			t.Errorf("manifests have no %s", k)
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet in deploy/kubernetes")
	}
	saNamespace, saName := ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName
	kubeconfig, err := e.cp.ServiceAccountKubeconfig(ctx, saNamespace, saName)
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
	events, err := framework.ReadAuditEventsBy(e.cp.AuditLogPath, user, func(e framework.AuditEvent) bool { return e.ObjectRef != nil })
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

// readManifests strictly decodes every object in deploy/kubernetes/*.yaml but the kustomization.
func readManifests(t *testing.T) []runtime.Object {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	decoder := scheme.Codecs.UniversalDeserializer()
	var objs []runtime.Object
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			objs = append(objs, obj)
		}
	}
	// Namespaces and accounts before what refers to them.
	order := func(o runtime.Object) int {
		switch o.(type) {
		case *corev1.Namespace:
			return 0
		case *corev1.ServiceAccount:
			return 1
		case *appsv1.DaemonSet:
			return 3
		default:
			return 2
		}
	}
	sorted := make([]runtime.Object, 0, len(objs))
	for rank := 0; rank <= 3; rank++ {
		for _, o := range objs {
			if order(o) == rank {
				sorted = append(sorted, o)
			}
		}
	}
	return sorted
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// createObject creates one decoded manifest object with the admin client.
func createObject(t *testing.T, c kubernetes.Interface, obj runtime.Object) error {
	ctx := t.Context()
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, o, opts)
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	case *appsv1.DaemonSet:
		_, err = c.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
	default:
		return fmt.Errorf("unexpected kind %T in deploy/kubernetes", obj)
	}
	return err
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
