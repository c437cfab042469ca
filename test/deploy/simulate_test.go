package deploy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const simDir = "deploy/kubernetes/simulate"

// simObjects strictly decodes every manifest of deploy/kubernetes/simulate.
func simObjects(t *testing.T) (sts *appsv1.StatefulSet, roles map[string][]rbacv1.PolicyRule, svc *corev1.Service, np *networkingv1.NetworkPolicy) {
	t.Helper()
	roles = map[string][]rbacv1.PolicyRule{}
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), simDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if filepath.Base(p) == kustomization {
			continue
		}
		objs, err := decodeDocs([]byte(readRepoFile(t, filepath.Join(simDir, filepath.Base(p)))))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, obj := range objs {
			switch o := obj.(type) {
			case *appsv1.StatefulSet:
				sts = o
			case *corev1.Service:
				svc = o
			case *networkingv1.NetworkPolicy:
				np = o
			case *rbacv1.ClusterRole:
				roles["cluster/"+o.Name] = o.Rules
			case *rbacv1.Role:
				roles[o.Namespace+"/"+o.Name] = o.Rules
			case *corev1.Namespace, *corev1.ServiceAccount, *rbacv1.ClusterRoleBinding, *rbacv1.RoleBinding:
			default:
				t.Fatalf("%s: unexpected object %T", p, obj)
			}
		}
	}
	if sts == nil || svc == nil || np == nil {
		t.Fatalf("%s: want a StatefulSet, a Service and a NetworkPolicy", simDir)
	}
	return sts, roles, svc, np
}

// TestSimulateOverlay: the StatefulSet is what docs/simulation.md says (Parallel, the pod name from the
// downward API, the shard index from it, --shards from the replicas through the kustomization's
// replacement, Nodes deleted on exit, no --control-allow-proxy, a NetworkPolicy, resources without a CPU
// limit), its Service is headless, and the roles grant exactly what a shard does.
func TestSimulateOverlay(t *testing.T) {
	sts, roles, svc, np := simObjects(t)
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || sts.Spec.ServiceName != svc.Name {
		t.Errorf("service %s clusterIP %q, StatefulSet serviceName %q: want a headless governing Service", svc.Name, svc.Spec.ClusterIP, sts.Spec.ServiceName)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"simulate", "--shards=REPLICAS", "--shard-index-from-pod-name", "--delete-nodes-on-exit=true"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %q", c.Args, want)
		}
	}
	// Issue 45: the control API trusts no header (the removed --control-allow-proxy obeyed a forgeable
	// X-Forwarded-Uri); ctl comes through port-forward. The NetworkPolicy admits ingress to the shards'
	// pods on the http port and the kubelet API's range only.
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--control-allow-proxy") }) {
		t.Errorf("args %q: --control-allow-proxy is removed (a start with it fails)", c.Args)
	}
	if np.Namespace != sts.Namespace || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != sts.Spec.Template.Labels["app.kubernetes.io/name"] ||
		!slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("NetworkPolicy %s/%s selects %v, types %v: want the StatefulSet's pods, Ingress", np.Namespace, np.Name, np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes)
	}
	var admitted []string
	for _, rule := range np.Spec.Ingress {
		if len(rule.From) != 0 {
			t.Errorf("NetworkPolicy rule %+v: peers are not restricted by the policy (the API servers' addresses are the cluster's)", rule)
		}
		for _, p := range rule.Ports {
			end := int32(0)
			if p.EndPort != nil {
				end = *p.EndPort
			}
			admitted = append(admitted, fmt.Sprintf("%s/%s-%d", *p.Protocol, p.Port.String(), end))
		}
	}
	if want := []string{"TCP/10248-0", "TCP/10250-12249"}; !slices.Equal(admitted, want) {
		t.Errorf("NetworkPolicy admits %v, want %v (the http port; the kubelet API's ports of 2000 Nodes)", admitted, want)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("env %v: want POD_NAME and POD_NAMESPACE from the downward API", env)
	}
	// Issue 47: the kubelet API on the pod IP, so that the shards take the same ports on different IPs.
	if env["POD_IP"] != "status.podIP" || !slices.Contains(c.Args, "--node-ip=$(POD_IP)") || !slices.Contains(c.Args, "--port=10250") {
		t.Errorf("env %v, args %q: want the kubelet API on --node-ip=$(POD_IP), POD_IP from status.podIP, --port=10250", env, c.Args)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %v: want CPU and memory requests and a memory limit", c.Resources)
	}
	if !c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("CPU limit %v: throttling would delay the Leases", c.Resources.Limits.Cpu())
	}

	var k struct {
		Replicas []struct {
			Name  string `json:"name"`
			Count int32  `json:"count"`
		} `json:"replicas"`
		Replacements []struct {
			Source struct {
				Kind, Name, FieldPath string
			} `json:"source"`
			Targets []struct {
				FieldPaths []string `json:"fieldPaths"`
			} `json:"targets"`
		} `json:"replacements"`
	}
	if err := yaml.Unmarshal([]byte(readRepoFile(t, filepath.Join(simDir, kustomization))), &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Replicas) != 1 || k.Replicas[0].Name != sts.Name || sts.Spec.Replicas == nil || k.Replicas[0].Count != *sts.Spec.Replicas {
		t.Errorf("kustomization replicas %+v, StatefulSet replicas %v: want one entry for %s, equal", k.Replicas, sts.Spec.Replicas, sts.Name)
	}
	if len(k.Replacements) != 1 || k.Replacements[0].Source.FieldPath != "spec.replicas" || len(k.Replacements[0].Targets) != 1 ||
		!strings.Contains(strings.Join(k.Replacements[0].Targets[0].FieldPaths, ","), "--shards=REPLICAS") {
		t.Errorf("replacements %+v: want spec.replicas copied into --shards=", k.Replacements)
	}

	type grant struct{ scope, group, resource, verb string }
	var got []grant
	for scope, rules := range roles {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						got = append(got, grant{strings.SplitN(scope, "/", 2)[0], g, res, v})
					}
				}
			}
		}
	}
	want := []grant{
		{"cluster", "", "nodes", "create"}, {"cluster", "", "nodes", "get"}, {"cluster", "", "nodes", "list"},
		{"cluster", "", "nodes", "watch"}, {"cluster", "", "nodes", "patch"}, {"cluster", "", "nodes", "delete"},
		{"cluster", "", "nodes/status", "patch"},
		// The pods bound to the simulated Nodes (docs/simulation.md, "Pods"), and Events about them in
		// their namespaces.
		{"cluster", "", "pods", "get"}, {"cluster", "", "pods", "list"}, {"cluster", "", "pods", "watch"},
		{"cluster", "", "pods", "delete"}, {"cluster", "", "pods/status", "patch"},
		{"cluster", "", "events", "create"}, {"cluster", "", "events", "patch"},
		{"kube-node-lease", "coordination.k8s.io", "leases", "create"}, {"kube-node-lease", "coordination.k8s.io", "leases", "get"},
		{"kube-node-lease", "coordination.k8s.io", "leases", "update"},
		{"default", "", "events", "create"}, {"default", "", "events", "patch"},
		// The simulated Nodes' kubelet API (--port): the kubelet's webhook authentication and
		// authorization.
		{"cluster", "authentication.k8s.io", "tokenreviews", "create"},
		{"cluster", "authorization.k8s.io", "subjectaccessreviews", "create"},
		// A ConfigMap's lines as a simulated pod's log (nodeagent.io/log-configmap), and the
		// check of the pods' ConfigMap volumes.
		{"cluster", "", "configmaps", "get"},
		// A template's devices (docs/simulation.md, "Devices"): each Node's ResourceSlices, published as
		// a kubelet plugin publishes them, and the pods' claims, read before they are prepared.
		{"cluster", "resource.k8s.io", "resourceslices", "list"}, {"cluster", "resource.k8s.io", "resourceslices", "watch"},
		{"cluster", "resource.k8s.io", "resourceslices", "patch"},
		{"cluster", "resource.k8s.io", "resourceslices", "delete"},
		{"cluster", "resource.k8s.io", "resourceclaims", "get"},
		{"cluster", "", "services", "list"},
	}
	cmp := func(a, b grant) int {
		return strings.Compare(a.scope+a.group+a.resource+a.verb, b.scope+b.group+b.resource+b.verb)
	}
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Errorf("grants\n%v\nwant exactly\n%v", got, want)
	}
}
