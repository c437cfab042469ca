package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/nodeagent/nodeagent/pkg/problem"
)

const (
	manifestDir   = "deploy/kubernetes"
	kustomization = "kustomization.yaml"
	namespace     = "nodeagent-system"
	saName        = "nodeagent"
	// problemConfigMap is the ConfigMap of problem monitor configs that kustomization.yaml generates.
	problemConfigMap = "nodeagent-problem-detection"
)

// strictDecoder decodes any type client-go knows, failing on unknown and
// duplicate fields.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decodeDocs strictly decodes every YAML document in data, skipping documents
// that hold only comments. Errors name the document by its index.
func decodeDocs(data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		obj, _, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
}

// manifestFiles returns the YAML files of deploy/kubernetes other than the
// kustomization, sorted.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), manifestDir, "*.yaml"))
	if err != nil {
		t.Fatalf("glob: %v", err)
	}
	var files []string
	for _, p := range paths {
		if filepath.Base(p) != kustomization {
			files = append(files, filepath.Base(p))
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", manifestDir)
	}
	return files
}

// manifests holds every object of deploy/kubernetes, by type.
type manifests struct {
	namespaces          []*corev1.Namespace
	serviceAccounts     []*corev1.ServiceAccount
	clusterRoles        []*rbacv1.ClusterRole
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
	roles               []*rbacv1.Role
	roleBindings        []*rbacv1.RoleBinding
	daemonSets          []*appsv1.DaemonSet
	policies            []*admissionregistrationv1.ValidatingAdmissionPolicy
	policyBindings      []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// loadManifests strictly decodes every manifest, failing the test on any
// error or on an object of a type nodeagent does not deploy.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	var m manifests
	for _, f := range manifestFiles(t) {
		objs, err := decodeDocs([]byte(readRepoFile(t, filepath.Join(manifestDir, f))))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, obj := range objs {
			switch o := obj.(type) {
			case *corev1.Namespace:
				m.namespaces = append(m.namespaces, o)
			case *corev1.ServiceAccount:
				m.serviceAccounts = append(m.serviceAccounts, o)
			case *rbacv1.ClusterRole:
				m.clusterRoles = append(m.clusterRoles, o)
			case *rbacv1.ClusterRoleBinding:
				m.clusterRoleBindings = append(m.clusterRoleBindings, o)
			case *rbacv1.Role:
				m.roles = append(m.roles, o)
			case *rbacv1.RoleBinding:
				m.roleBindings = append(m.roleBindings, o)
			case *appsv1.DaemonSet:
				m.daemonSets = append(m.daemonSets, o)
			case *admissionregistrationv1.ValidatingAdmissionPolicy:
				m.policies = append(m.policies, o)
			case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
				m.policyBindings = append(m.policyBindings, o)
			default:
				t.Fatalf("%s: unexpected object %T", f, obj)
			}
		}
	}
	return m
}

// TestStrictDecoderRejects proves the decoder used on the manifests is strict:
// each broken manifest here must fail to decode.
func TestStrictDecoderRejects(t *testing.T) {
	tests := []struct {
		name string
		doc  string
	}{
		{name: "unknown field", doc: "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\nautomount: true\n"},
		{name: "duplicate field", doc: "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  name: b\n"},
		{name: "unknown kind", doc: "apiVersion: apps/v1\nkind: DaemonSett\nmetadata:\n  name: a\n"},
		{name: "misplaced field", doc: "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: a\nspec:\n  hostNetwork: true\n"},
		{name: "wrong type", doc: "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: a\nrules:\n  - verbs: get\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeDocs([]byte(tc.doc)); err == nil {
				t.Errorf("decoded %q without error", tc.doc)
			}
		})
	}
}

// TestManifestsDecode decodes every manifest strictly and checks that each
// object is labelled and namespaced where nodeagent expects it.
func TestManifestsDecode(t *testing.T) {
	m := loadManifests(t)
	type named struct {
		kind, namespace, name string
		labels                map[string]string
	}
	var all []named
	for _, o := range m.namespaces {
		all = append(all, named{"Namespace", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.serviceAccounts {
		all = append(all, named{"ServiceAccount", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.clusterRoles {
		all = append(all, named{"ClusterRole", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.clusterRoleBindings {
		all = append(all, named{"ClusterRoleBinding", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.roles {
		all = append(all, named{"Role", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.roleBindings {
		all = append(all, named{"RoleBinding", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.daemonSets {
		all = append(all, named{"DaemonSet", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.policies {
		all = append(all, named{"ValidatingAdmissionPolicy", o.Namespace, o.Name, o.Labels})
	}
	for _, o := range m.policyBindings {
		all = append(all, named{"ValidatingAdmissionPolicyBinding", o.Namespace, o.Name, o.Labels})
	}

	wantNamespace := map[string][]string{
		"Namespace":                        {""},
		"ClusterRole":                      {""},
		"ClusterRoleBinding":               {""},
		"ValidatingAdmissionPolicy":        {""},
		"ValidatingAdmissionPolicyBinding": {""},
		"ServiceAccount":                   {namespace},
		"DaemonSet":                        {namespace},
		// Events about a Node go to default.
		"Role":        {"default"},
		"RoleBinding": {"default"},
	}
	counts := map[string]int{}
	for _, o := range all {
		counts[o.kind]++
		if !slices.Contains(wantNamespace[o.kind], o.namespace) {
			t.Errorf("%s %s: namespace %q, want one of %q", o.kind, o.name, o.namespace, wantNamespace[o.kind])
		}
		if o.labels["app.kubernetes.io/name"] != "nodeagent" {
			t.Errorf("%s %s/%s: label app.kubernetes.io/name=%q, want nodeagent", o.kind, o.namespace, o.name, o.labels["app.kubernetes.io/name"])
		}
	}
	wantCounts := map[string]int{
		"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
		"Role": 1, "RoleBinding": 1, "DaemonSet": 1, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1,
	}
	for kind, want := range wantCounts {
		if counts[kind] != want {
			t.Errorf("%d objects of kind %s, want %d", counts[kind], kind, want)
		}
	}
	if len(m.namespaces) == 1 {
		ns := m.namespaces[0]
		if ns.Name != namespace {
			t.Errorf("namespace %q, want %q", ns.Name, namespace)
		}
		// hostNetwork and hostPath are beyond the baseline Pod Security Standard.
		if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
			t.Errorf("namespace pod-security enforce=%q, want privileged", got)
		}
	}
	if len(m.serviceAccounts) == 1 && m.serviceAccounts[0].Name != saName {
		t.Errorf("service account %q, want %q", m.serviceAccounts[0].Name, saName)
	}
}

// TestKustomization checks that kustomization.yaml lists exactly the manifests
// of the directory and sets no namespace, which would move the Events Role out
// of default, and that its one ConfigMap generator makes the DaemonSet's
// problem-detection ConfigMap from files that exist.
func TestKustomization(t *testing.T) {
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
		Generators []struct {
			Name      string   `json:"name"`
			Namespace string   `json:"namespace"`
			Files     []string `json:"files"`
			Options   struct {
				Labels map[string]string `json:"labels"`
			} `json:"options"`
		} `json:"configMapGenerator"`
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	data := readRepoFile(t, filepath.Join(manifestDir, kustomization))
	if err := yaml.UnmarshalStrict([]byte(data), &k); err != nil {
		t.Fatalf("%s: %v", kustomization, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", k.APIVersion, k.Kind)
	}
	if k.Namespace != "" {
		t.Errorf("namespace %q set; it would move the Events Role out of default", k.Namespace)
	}
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	if want := manifestFiles(t); !slices.Equal(got, want) {
		t.Errorf("resources %q, want every manifest %q", got, want)
	}
	if len(k.Generators) != 1 {
		t.Fatalf("%d configMapGenerators, want 1 (the problem monitors' configs)", len(k.Generators))
	}
	g := k.Generators[0]
	if g.Name != problemConfigMap || g.Namespace != namespace || g.Options.Labels["app.kubernetes.io/name"] != "nodeagent" {
		t.Errorf("configMapGenerator %s/%s labels %v, want %s/%s labelled app.kubernetes.io/name=nodeagent",
			g.Namespace, g.Name, g.Options.Labels, namespace, problemConfigMap)
	}
	for _, f := range g.Files {
		readRepoFile(t, filepath.Join(manifestDir, f))
	}
	ds := loadManifests(t).daemonSets
	if len(ds) != 1 || len(k.Images) != 1 {
		t.Fatalf("want one DaemonSet and one image override, got %d and %d", len(ds), len(k.Images))
	}
	image := ds[0].Spec.Template.Spec.Containers[0].Image
	if name, _, _ := strings.Cut(image, ":"); name != k.Images[0].Name {
		t.Errorf("images[0].name %q does not match the DaemonSet image %q", k.Images[0].Name, image)
	}
}

// grant is one permission: a verb on a resource of an API group, cluster-wide
// (Namespace "") or in one namespace.
type grant struct {
	Namespace, Group, Resource, Verb string
}

func (g grant) String() string {
	scope := "cluster"
	if g.Namespace != "" {
		scope = "ns/" + g.Namespace
	}
	group := g.Group
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("%s %s/%s %s", scope, group, g.Resource, g.Verb)
}

// grantsTo returns every permission the manifests give the ServiceAccount, by
// following its bindings to their roles. It fails the test on a binding to a
// role not in the manifests, on any wildcard and on nonResourceURLs.
func grantsTo(t *testing.T, m manifests, ns, name string) []grant {
	t.Helper()
	bound := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == ns && s.Name == name {
				return true
			}
		}
		return false
	}
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	for _, r := range m.clusterRoles {
		clusterRoles[r.Name] = r.Rules
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, r := range m.roles {
		roles[r.Namespace+"/"+r.Name] = r.Rules
	}
	var grants []grant
	add := func(binding, scope string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, field := range [][]string{r.Verbs, r.APIGroups, r.Resources, r.NonResourceURLs, r.ResourceNames} {
				if slices.Contains(field, "*") {
					t.Errorf("%s: wildcard in rule %+v", binding, r)
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s: nonResourceURLs %q granted", binding, r.NonResourceURLs)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						grants = append(grants, grant{Namespace: scope, Group: g, Resource: res, Verb: v})
					}
				}
			}
		}
	}
	for _, b := range m.clusterRoleBindings {
		if !bound(b.Subjects) {
			continue
		}
		rules, ok := clusterRoles[b.RoleRef.Name]
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName || !ok {
			t.Errorf("ClusterRoleBinding %s: roleRef %+v is not a ClusterRole in the manifests", b.Name, b.RoleRef)
			continue
		}
		add("ClusterRoleBinding "+b.Name, "", rules)
	}
	for _, b := range m.roleBindings {
		if !bound(b.Subjects) {
			continue
		}
		var rules []rbacv1.PolicyRule
		var ok bool
		switch b.RoleRef.Kind {
		case "Role":
			rules, ok = roles[b.Namespace+"/"+b.RoleRef.Name]
		case "ClusterRole":
			rules, ok = clusterRoles[b.RoleRef.Name]
		}
		if !ok || b.RoleRef.APIGroup != rbacv1.GroupName {
			t.Errorf("RoleBinding %s/%s: roleRef %+v is not a role in the manifests", b.Namespace, b.Name, b.RoleRef)
			continue
		}
		add("RoleBinding "+b.Namespace+"/"+b.Name, b.Namespace, rules)
	}
	return grants
}

// TestRBAC checks that the ServiceAccount gets exactly the permissions for the
// calls nodeagent makes in companion mode (the DaemonSet's), each in the
// narrowest scope, and nothing else: no Node creation and no Lease at all, which
// belong to the node's kubelet.
func TestRBAC(t *testing.T) {
	want := []struct {
		namespace, group, resource string
		verbs                      []string
	}{
		// Reading the Node (NPD's read rights: get, list, watch).
		{"", "", "nodes", []string{"get", "list", "watch"}},
		// The agent's own conditions: a strategic merge patch of nodes/status.
		{"", "", "nodes/status", []string{"patch"}},
		// Events about the Node, which land in default: client-go's recorder creates and patches core/v1 Events.
		{"default", "", "events", []string{"create", "patch"}},
	}
	var wantGrants []string
	for _, w := range want {
		for _, v := range w.verbs {
			wantGrants = append(wantGrants, grant{w.namespace, w.group, w.resource, v}.String())
		}
	}
	sort.Strings(wantGrants)

	m := loadManifests(t)
	var got []string
	for _, g := range grantsTo(t, m, namespace, saName) {
		got = append(got, g.String())
	}
	sort.Strings(got)
	got = slices.Compact(got)

	for _, g := range got {
		if !slices.Contains(wantGrants, g) {
			t.Errorf("extra permission: %s", g)
		}
	}
	for _, w := range wantGrants {
		if !slices.Contains(got, w) {
			t.Errorf("missing permission: %s", w)
		}
	}

	// No other subject is bound to the agent's roles.
	for _, b := range m.clusterRoleBindings {
		for _, s := range b.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != namespace || s.Name != saName {
				t.Errorf("ClusterRoleBinding %s binds %+v", b.Name, s)
			}
		}
	}
	for _, b := range m.roleBindings {
		for _, s := range b.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != namespace || s.Name != saName {
				t.Errorf("RoleBinding %s/%s binds %+v", b.Namespace, b.Name, s)
			}
		}
	}
}

// daemonSet returns the single DaemonSet and its single container.
func daemonSet(t *testing.T) (*appsv1.DaemonSet, *corev1.Container) {
	t.Helper()
	m := loadManifests(t)
	if len(m.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want 1", len(m.daemonSets))
	}
	ds := m.daemonSets[0]
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("DaemonSet has %d containers, want 1", n)
	}
	return ds, &ds.Spec.Template.Spec.Containers[0]
}

// argValues returns the container's --flag=value arguments by flag.
func argValues(c *corev1.Container) map[string]string {
	args := map[string]string{}
	for _, a := range append(slices.Clone(c.Command[1:]), c.Args...) {
		name, value, _ := strings.Cut(a, "=")
		args[name] = value
	}
	return args
}

func TestDaemonSetPod(t *testing.T) {
	ds, c := daemonSet(t)
	pod := ds.Spec.Template.Spec
	args := argValues(c)
	flags := documentedFlags(t)

	tests := []struct {
		name  string
		check func() error
	}{
		{"selector matches the pod labels", func() error {
			sel, err := podSelector(ds)
			if err != nil {
				return err
			}
			if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
				return fmt.Errorf("selector %s does not match %v", sel, ds.Spec.Template.Labels)
			}
			return nil
		}},
		{"service account", func() error {
			return equal("serviceAccountName", pod.ServiceAccountName, saName)
		}},
		{"host network", func() error {
			if !pod.HostNetwork {
				return errors.New("hostNetwork is false")
			}
			if pod.HostPID || pod.HostIPC {
				return fmt.Errorf("hostPID=%t hostIPC=%t, want neither", pod.HostPID, pod.HostIPC)
			}
			return nil
		}},
		{"priority class", func() error {
			return equal("priorityClassName", pod.PriorityClassName, "system-node-critical")
		}},
		{"tolerates every taint", func() error {
			if len(pod.Tolerations) != 1 {
				return fmt.Errorf("tolerations %+v, want one", pod.Tolerations)
			}
			tol := pod.Tolerations[0]
			if tol.Operator != corev1.TolerationOpExists || tol.Key != "" || tol.Effect != "" || tol.TolerationSeconds != nil {
				return fmt.Errorf("toleration %+v, want only operator: Exists", tol)
			}
			return nil
		}},
		{"node name from the downward API", func() error {
			for _, e := range c.Env {
				if e.Name == "NODE_NAME" {
					if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
						return fmt.Errorf("NODE_NAME %+v, want fieldRef spec.nodeName", e)
					}
					return equal("--hostname-override", args["--hostname-override"], "$(NODE_NAME)")
				}
			}
			return errors.New("no NODE_NAME env")
		}},
		{"companion mode, beside the node's kubelet", func() error {
			v, ok := args["--companion"]
			if !ok || (v != "" && v != "true") {
				return fmt.Errorf("--companion %q (set: %t), want it on", v, ok)
			}
			return nil
		}},
		{"in-cluster config", func() error {
			if _, ok := args["--kubeconfig"]; ok {
				return errors.New("--kubeconfig set; the pod must use its ServiceAccount")
			}
			if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
				return errors.New("automountServiceAccountToken is false")
			}
			return nil
		}},
		{"flags are in docs/flags.md", func() error {
			for name := range args {
				if !flags[name] {
					return fmt.Errorf("flag %s is not in docs/flags.md", name)
				}
			}
			return nil
		}},
		{"small requests", func() error {
			return errors.Join(
				equalQuantity("cpu request", c.Resources.Requests[corev1.ResourceCPU], "10m"),
				equalQuantity("memory request", c.Resources.Requests[corev1.ResourceMemory], "32Mi"),
			)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestDaemonSetMounts(t *testing.T) {
	ds, c := daemonSet(t)
	args := argValues(c)
	volumes := map[string]corev1.Volume{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	tests := []struct {
		name      string
		hostPath  string // "" for the ConfigMap
		configMap string
		mountPath string
		readOnly  bool
	}{
		// The directory of the CRI socket, which survives containerd restarts.
		{name: "cri socket dir", hostPath: "/run/containerd", mountPath: "/run/containerd", readOnly: true},
		{name: "sysfs", hostPath: "/sys", mountPath: "/sys", readOnly: true},
		// Where cAdvisor looks for the host's /proc from inside a container.
		{name: "procfs", hostPath: "/proc", mountPath: "/rootfs/proc", readOnly: true},
		{name: "root dir", hostPath: "/var/lib/nodeagent", mountPath: "/var/lib/nodeagent"},
		// The problem monitors: their configs, the host's log files, and its time zone (kern.log's
		// timestamps are local time), as node-problem-detector's DaemonSet mounts them.
		{name: "problem monitor configs", configMap: problemConfigMap, mountPath: problemConfigDir, readOnly: true},
		{name: "host logs", hostPath: "/var/log", mountPath: "/var/log", readOnly: true},
		{name: "host time zone", hostPath: "/etc/localtime", mountPath: "/etc/localtime", readOnly: true},
	}
	if n := len(c.VolumeMounts); n != len(tests) {
		t.Errorf("%d volume mounts, want %d", n, len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == tc.mountPath })
			if i < 0 {
				t.Fatalf("nothing mounted at %s", tc.mountPath)
			}
			m := c.VolumeMounts[i]
			v, ok := volumes[m.Name]
			switch {
			case !ok:
				t.Fatalf("mount %s: no volume %q", tc.mountPath, m.Name)
			case tc.configMap != "":
				if v.ConfigMap == nil || v.ConfigMap.Name != tc.configMap {
					t.Errorf("mount %s: volume %q is not ConfigMap %s: %+v", tc.mountPath, m.Name, tc.configMap, v.VolumeSource)
				}
			case v.HostPath == nil:
				t.Fatalf("mount %s: volume %q is not a hostPath", tc.mountPath, m.Name)
			case v.HostPath.Path != tc.hostPath:
				t.Errorf("mount %s: hostPath %s, want %s", tc.mountPath, v.HostPath.Path, tc.hostPath)
			}
			if m.ReadOnly != tc.readOnly {
				t.Errorf("mount %s: readOnly %t, want %t", tc.mountPath, m.ReadOnly, tc.readOnly)
			}
			if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
				t.Errorf("mount %s: propagation %s, want None", tc.mountPath, *m.MountPropagation)
			}
		})
	}

	t.Run("runtime endpoint is under a mount", func(t *testing.T) {
		endpoint := args["--container-runtime-endpoint"]
		sock, ok := strings.CutPrefix(endpoint, "unix://")
		if !ok {
			t.Fatalf("--container-runtime-endpoint %q is not unix://", endpoint)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return strings.HasPrefix(sock, m.MountPath+"/")
		}) {
			t.Errorf("socket %s is not under any mount", sock)
		}
	})
	t.Run("root dir is the mount", func(t *testing.T) {
		if got := args["--root-dir"]; got != "/var/lib/nodeagent" {
			t.Errorf("--root-dir %q, want /var/lib/nodeagent", got)
		}
	})
}

func TestDaemonSetProbes(t *testing.T) {
	ds, c := daemonSet(t)
	args := argValues(c)
	// hostNetwork: the pod IP is the node IP, so probes of a loopback-bound
	// server must target 127.0.0.1 explicitly.
	if !ds.Spec.Template.Spec.HostNetwork {
		t.Fatal("not hostNetwork")
	}
	bind, port := args["--healthz-bind-address"], args["--healthz-port"]
	if bind != "127.0.0.1" {
		t.Errorf("--healthz-bind-address %q, want 127.0.0.1", bind)
	}
	// The node's kubelet owns 127.0.0.1:10248 in the shared network namespace.
	if port == "" || port == "10248" || port == "0" {
		t.Errorf("--healthz-port %q: want a port other than the kubelet's 10248", port)
	}
	tests := []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{name: "startup", probe: c.StartupProbe, path: "/livez"},
		{name: "liveness", probe: c.LivenessProbe, path: "/livez"},
		{name: "readiness", probe: c.ReadinessProbe, path: "/readyz"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.probe == nil || tc.probe.HTTPGet == nil {
				t.Fatalf("no httpGet %s probe", tc.name)
			}
			g := tc.probe.HTTPGet
			if g.Host != bind {
				t.Errorf("host %q, want the bind address %q", g.Host, bind)
			}
			if g.Port.String() != port {
				t.Errorf("port %s, want --healthz-port %s", g.Port.String(), port)
			}
			if g.Path != tc.path {
				t.Errorf("path %q, want %q", g.Path, tc.path)
			}
			if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
				t.Errorf("scheme %s, want HTTP", g.Scheme)
			}
		})
	}
}

func TestDaemonSetSecurityContext(t *testing.T) {
	ds, c := daemonSet(t)
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no container securityContext")
	}
	podSC := ds.Spec.Template.Spec.SecurityContext
	tests := []struct {
		name  string
		check func() error
	}{
		{"root for the CRI socket", func() error {
			if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
				return fmt.Errorf("runAsUser %v, want 0", sc.RunAsUser)
			}
			return nil
		}},
		{"not privileged", func() error {
			if sc.Privileged != nil && *sc.Privileged {
				return errors.New("privileged")
			}
			return nil
		}},
		{"no privilege escalation", func() error {
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				return errors.New("allowPrivilegeEscalation not false")
			}
			return nil
		}},
		{"read-only root filesystem", func() error {
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				return errors.New("readOnlyRootFilesystem not true")
			}
			return nil
		}},
		{"no capabilities", func() error {
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
				return fmt.Errorf("capabilities %+v, want drop [ALL] and no add", sc.Capabilities)
			}
			return nil
		}},
		{"seccomp RuntimeDefault", func() error {
			p := sc.SeccompProfile
			if p == nil && podSC != nil {
				p = podSC.SeccompProfile
			}
			if p == nil || p.Type != corev1.SeccompProfileTypeRuntimeDefault {
				return fmt.Errorf("seccompProfile %+v, want RuntimeDefault", p)
			}
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDaemonSetCommandIsImageEntrypoint checks that the DaemonSet runs the
// binary where the Dockerfile puts it.
func TestDaemonSetCommandIsImageEntrypoint(t *testing.T) {
	_, c := daemonSet(t)
	df := parseDockerfile(t, readRepoFile(t, "Dockerfile"))
	final := df.stages[len(df.stages)-1]
	entry := final.last("ENTRYPOINT")
	if len(c.Command) == 0 || entry == "" {
		t.Fatalf("command %q, ENTRYPOINT %q", c.Command, entry)
	}
	if want := fmt.Sprintf("[%q]", c.Command[0]); entry != want {
		t.Errorf("Dockerfile ENTRYPOINT %s, DaemonSet command %q", entry, c.Command)
	}
}

func equal(what, got, want string) error {
	if got != want {
		return fmt.Errorf("%s %q, want %q", what, got, want)
	}
	return nil
}

func equalQuantity(what string, got resource.Quantity, want string) error {
	if got.Cmp(resource.MustParse(want)) != 0 {
		return fmt.Errorf("%s %s, want %s", what, got.String(), want)
	}
	return nil
}

// podSelector returns the DaemonSet's selector as a labels.Selector.
func podSelector(ds *appsv1.DaemonSet) (labels.Selector, error) {
	if ds.Spec.Selector == nil {
		return nil, errors.New("no selector")
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector: %w", err)
	}
	return sel, nil
}

// policyWrites are the writes the admission policy must cover whatever the RBAC grants: companion mode's
// (the DaemonSet's, see rbac.yaml) and those standalone mode would need (registering the Node, creating and
// renewing its Lease), so that granting the ServiceAccount more never lets a pod write beyond its node.
var policyWrites = []grant{
	{Group: "", Resource: "nodes/status", Verb: "patch"},
	{Namespace: "default", Group: "", Resource: "events", Verb: "create"},
	{Namespace: "default", Group: "", Resource: "events", Verb: "patch"},
	{Group: "", Resource: "nodes", Verb: "create"},
	{Namespace: "kube-node-lease", Group: "coordination.k8s.io", Resource: "leases", Verb: "create"},
	{Namespace: "kube-node-lease", Group: "coordination.k8s.io", Resource: "leases", Verb: "update"},
}

// admissionOperation is the admission operation of a write verb ("" for a read).
func admissionOperation(verb string) admissionregistrationv1.OperationType {
	switch verb {
	case "create":
		return admissionregistrationv1.Create
	case "update", "patch":
		return admissionregistrationv1.Update
	case "delete", "deletecollection":
		return admissionregistrationv1.Delete
	}
	return ""
}

// covers reports whether one of rules matches operation op on resource res of API group group.
func covers(rules []admissionregistrationv1.NamedRuleWithOperations, group, res string, op admissionregistrationv1.OperationType) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.APIVersions, "*") || slices.Contains(r.APIVersions, "v1")) &&
			slices.Contains(r.Resources, res) &&
			(slices.Contains(r.Operations, op) || slices.Contains(r.Operations, admissionregistrationv1.OperationAll)) {
			return true
		}
	}
	return false
}

// TestAdmissionPolicy checks the ValidatingAdmissionPolicy that keeps each agent pod to its own node's
// objects: it is bound with Deny and fails closed, applies to the DaemonSet's ServiceAccount, and covers
// every write the ServiceAccount's RBAC allows plus those of standalone mode. (What it allows and refuses
// is tested against the real API server in test/integration, TestDaemonSetIdentityOwnNodeOnly.)
func TestAdmissionPolicy(t *testing.T) {
	m := loadManifests(t)
	if len(m.policies) != 1 || len(m.policyBindings) != 1 {
		t.Fatalf("%d ValidatingAdmissionPolicies and %d bindings, want 1 and 1", len(m.policies), len(m.policyBindings))
	}
	p, b := m.policies[0], m.policyBindings[0]
	ds, _ := daemonSet(t)
	user := "system:serviceaccount:" + ds.Namespace + ":" + ds.Spec.Template.Spec.ServiceAccountName

	t.Run("binding", func(t *testing.T) {
		if b.Spec.PolicyName != p.Name {
			t.Errorf("binding %s binds policy %q, want %q", b.Name, b.Spec.PolicyName, p.Name)
		}
		if !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			t.Errorf("validationActions %v, want [Deny]", b.Spec.ValidationActions)
		}
		if b.Spec.MatchResources != nil || b.Spec.ParamRef != nil {
			t.Errorf("binding narrows the policy (matchResources %+v, paramRef %+v); want it everywhere", b.Spec.MatchResources, b.Spec.ParamRef)
		}
	})
	t.Run("fails closed", func(t *testing.T) {
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("failurePolicy %v, want Fail", p.Spec.FailurePolicy)
		}
	})
	t.Run("applies to the DaemonSet's ServiceAccount", func(t *testing.T) {
		want := "request.userInfo.username == '" + user + "'"
		if len(p.Spec.MatchConditions) != 1 || strings.TrimSpace(p.Spec.MatchConditions[0].Expression) != want {
			t.Errorf("matchConditions %+v, want exactly %q", p.Spec.MatchConditions, want)
		}
	})
	t.Run("covers every write", func(t *testing.T) {
		if p.Spec.MatchConstraints == nil {
			t.Fatal("no matchConstraints")
		}
		rules := p.Spec.MatchConstraints.ResourceRules
		writes := slices.Clone(policyWrites)
		for _, g := range grantsTo(t, m, namespace, saName) {
			if admissionOperation(g.Verb) != "" && !slices.Contains(writes, g) {
				writes = append(writes, g)
			}
		}
		for _, g := range writes {
			if !covers(rules, g.Group, g.Resource, admissionOperation(g.Verb)) {
				t.Errorf("%s is not covered by the policy's resourceRules", g)
			}
		}
		// Deleting a Node or Lease is never granted, and would be refused for other nodes' anyway.
		for _, res := range [][2]string{{"", "nodes"}, {"coordination.k8s.io", "leases"}} {
			if !covers(rules, res[0], res[1], admissionregistrationv1.Delete) {
				t.Errorf("DELETE of %s/%s not covered", res[0], res[1])
			}
		}
	})
	t.Run("checks the token's node", func(t *testing.T) {
		var text strings.Builder
		for _, v := range p.Spec.Variables {
			text.WriteString(v.Expression + "\n")
		}
		for _, v := range p.Spec.Validations {
			text.WriteString(v.Expression + "\n")
			if v.Reason == nil || *v.Reason != metav1.StatusReasonForbidden {
				t.Errorf("validation %q: reason %v, want Forbidden", v.Expression, v.Reason)
			}
		}
		for _, want := range []string{"authentication.kubernetes.io/node-name", "node-restriction", "kube-node-lease", "involvedObject"} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("no variable or validation mentions %q", want)
			}
		}
	})
}

// problemConfigDir is where the DaemonSet mounts the problem monitors' ConfigMap.
const problemConfigDir = "/etc/nodeagent/npd"

// problemConfigFiles returns the files of kustomization.yaml's problem-detection ConfigMap generator, by
// ConfigMap key (the file's base name, as kustomize names them), as paths relative to the repository.
func problemConfigFiles(t *testing.T) map[string]string {
	t.Helper()
	var k struct {
		Generators []struct {
			Name  string   `json:"name"`
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.Unmarshal([]byte(readRepoFile(t, filepath.Join(manifestDir, kustomization))), &k); err != nil {
		t.Fatalf("%s: %v", kustomization, err)
	}
	files := map[string]string{}
	for _, g := range k.Generators {
		if g.Name != problemConfigMap {
			continue
		}
		for _, f := range g.Files {
			files[filepath.Base(f)] = filepath.Join(manifestDir, f)
		}
	}
	return files
}

// TestDaemonSetProblemMonitors checks the node-problem-detector monitors the DaemonSet runs: there is at
// least one, passed with NPD's flags; every config named is a file of the generated ConfigMap, at the
// path where the ConfigMap is mounted; every file of the ConfigMap is used; each system log monitor loads
// with nodeagent's own loader (pkg/problem, which refuses bad configs at start) and reads its log from a
// read-only host mount; each custom plugin's executable is under a mount too.
func TestDaemonSetProblemMonitors(t *testing.T) {
	_, c := daemonSet(t)
	args := argValues(c)
	files := problemConfigFiles(t)
	underMount := func(path string) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.ReadOnly && strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		})
	}
	used := map[string]bool{}
	configs := func(flag string) []string {
		var repoPaths []string
		for _, p := range strings.Split(args[flag], ",") {
			if p == "" {
				continue
			}
			key, ok := strings.CutPrefix(p, problemConfigDir+"/")
			if !ok {
				t.Errorf("%s %s is not in the ConfigMap's mount %s", flag, p, problemConfigDir)
				continue
			}
			rel, ok := files[key]
			if !ok {
				t.Errorf("%s %s: no file %q in the ConfigMap generator (files %v)", flag, p, key, files)
				continue
			}
			used[key] = true
			repoPaths = append(repoPaths, rel)
		}
		return repoPaths
	}
	logMonitors, pluginMonitors := configs("--config.system-log-monitor"), configs("--config.custom-plugin-monitor")
	if len(logMonitors)+len(pluginMonitors) == 0 {
		t.Fatal("the DaemonSet passes no --config.system-log-monitor or --config.custom-plugin-monitor")
	}
	for key := range files {
		if !used[key] {
			t.Errorf("ConfigMap file %s is passed to no monitor flag", key)
		}
	}
	for _, rel := range logMonitors {
		abs := filepath.Join(repoRoot(t), rel)
		if _, err := problem.New(problem.Config{SystemLogMonitors: []string{abs}}); err != nil {
			t.Errorf("nodeagent refuses %s: %v", rel, err)
		}
		var cfg struct {
			Plugin  string `json:"plugin"`
			LogPath string `json:"logPath"`
		}
		if err := json.Unmarshal([]byte(readRepoFile(t, rel)), &cfg); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		switch cfg.Plugin {
		case "filelog":
			if !underMount(cfg.LogPath) {
				t.Errorf("%s: logPath %s is under no read-only mount", rel, cfg.LogPath)
			}
		case "kmsg":
			t.Errorf("%s: the kmsg source needs /dev/kmsg, which an unprivileged container cannot read", rel)
		}
	}
	for _, rel := range pluginMonitors {
		var cfg struct {
			Rules []struct {
				Path string `json:"path"`
			} `json:"rules"`
		}
		if err := json.Unmarshal([]byte(readRepoFile(t, rel)), &cfg); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for i, r := range cfg.Rules {
			if !underMount(r.Path) {
				t.Errorf("%s: rules[%d].path %s is under no read-only mount (the image has nothing but nodeagent)", rel, i, r.Path)
			}
		}
	}
}
