package chart

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/diff"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/nodeagent/nodeagent/test/framework"
)

const (
	chartDir    = "deploy/helm/nodeagent"
	companionK  = "deploy/kubernetes"
	simulateK   = "deploy/kubernetes/simulate"
	releaseName = "nodeagent"
)

// tools returns the repository root and the binaries directory, after hack/install-deps.sh (which
// builds kubectl and, through hack/build-helm.sh, helm).
func tools(t *testing.T) (root, bin string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err = framework.EnsureBinaries()
	if err != nil {
		t.Fatal(err)
	}
	return root, bin
}

// run runs bin/name with args in root and returns its standard output; the error carries stderr.
func run(ctx context.Context, root, bin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// helmTemplate renders the chart with `helm template` and the given --set values.
func helmTemplate(t *testing.T, set ...string) string {
	t.Helper()
	return helmTemplateValues(t, "", set...)
}

// helmTemplateValues renders the chart with `helm template`, the values file holding values (unless
// empty) and the given --set values.
func helmTemplateValues(t *testing.T, values string, set ...string) string {
	t.Helper()
	root, bin := tools(t)
	args := []string{"template", releaseName, chartDir}
	if values != "" {
		path := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(path, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", path)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := run(t.Context(), root, bin, "helm", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kustomize renders a kustomization directory with kubectl's kustomize.
func kustomize(t *testing.T, dir string) string {
	t.Helper()
	root, bin := tools(t)
	out, err := run(t.Context(), root, bin, "kubectl", "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// strict decodes any type client-go knows, failing on unknown and duplicate fields.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decode strictly decodes every YAML document of a rendering, keyed "Kind namespace/name". Documents
// that hold only comments are skipped; a kind client-go does not know (the monitoring.coreos.com ones)
// is kept as unstructured JSON. A repeated key fails the test.
func decode(t *testing.T, rendered string) map[string]runtime.Object {
	t.Helper()
	objs := map[string]runtime.Object{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(rendered)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if len(m) == 0 {
			continue
		}
		var obj runtime.Object
		if strings.HasPrefix(fmt.Sprint(m["apiVersion"]), "monitoring.coreos.com/") {
			obj = &runtime.Unknown{Raw: mustJSON(t, m)}
		} else if obj, _, err = strict.Decode(doc, nil, nil); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		md := m["metadata"].(map[string]any)
		key := fmt.Sprintf("%s %v/%v", m["kind"], md["namespace"], md["name"])
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		objs[key] = obj
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keys returns the sorted keys of objs.
func keys(objs map[string]runtime.Object) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// compare fails the test unless got and want hold the same keys and semantically equal objects.
func compare(t *testing.T, got, want map[string]runtime.Object) {
	t.Helper()
	if !slices.Equal(keys(got), keys(want)) {
		t.Errorf("the chart renders\n  %s\nthe kustomize bases\n  %s", strings.Join(keys(got), "\n  "), strings.Join(keys(want), "\n  "))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			continue
		}
		if !equality.Semantic.DeepEqual(g, w) {
			t.Errorf("%s differs between the chart (-) and kustomize (+):\n%s", k, diff.Diff(g, w))
		}
	}
}

// TestHelmLint: helm lint --strict with the default values and with every part enabled.
func TestHelmLint(t *testing.T) {
	root, bin := tools(t)
	for _, set := range [][]string{nil, {"simulate.enabled=true,simulate.kubeletAPI.enabled=true,simulate.kubeletAPI.tlsSecret=sim-tls,monitoring.prometheusRule.enabled=true,monitoring.podMonitors.enabled=true,monitoring.dashboard.enabled=true"}} {
		args := []string{"lint", "--strict", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := run(t.Context(), root, bin, "helm", args...)
		if err != nil {
			t.Errorf("%v", err)
		}
		t.Logf("%s", out)
	}
}

// TestHelmChartMatchesKustomize: the chart's objects with the default values are exactly the kustomize
// base deploy/kubernetes's (the companion DaemonSet, its RBAC, admission policy, namespace and
// ConfigMap), and with simulate.enabled=true those plus deploy/kubernetes/simulate's (the StatefulSet,
// its RBAC, namespace and Service).
func TestHelmChartMatchesKustomize(t *testing.T) {
	companion := decode(t, kustomize(t, companionK))
	simulate := decode(t, kustomize(t, simulateK))
	for _, want := range []string{"DaemonSet nodeagent-system/nodeagent", "ValidatingAdmissionPolicy <nil>/nodeagent-own-node", "ClusterRole <nil>/nodeagent"} {
		if _, ok := companion[want]; !ok {
			t.Fatalf("%s renders no %s: %v", companionK, want, keys(companion))
		}
	}
	if _, ok := simulate["StatefulSet nodeagent-simulation/nodeagent-simulate"]; !ok {
		t.Fatalf("%s renders no StatefulSet: %v", simulateK, keys(simulate))
	}

	t.Run("default values", func(t *testing.T) {
		compare(t, decode(t, helmTemplate(t)), companion)
	})
	t.Run("simulate enabled", func(t *testing.T) {
		both := map[string]runtime.Object{}
		for k, v := range companion {
			both[k] = v
		}
		for k, v := range simulate {
			both[k] = v
		}
		compare(t, decode(t, helmTemplate(t, "simulate.enabled=true")), both)
	})
	t.Run("simulate only", func(t *testing.T) {
		compare(t, decode(t, helmTemplate(t, "simulate.enabled=true", "companion.enabled=false")), simulate)
	})
}

// TestHelmValues: values change what they say: simulate.replicas is the StatefulSet's replicas and its
// pods' --shards; companion.namespace moves the companion and the ServiceAccount the admission policy
// names; an extra problem monitor config is in the ConfigMap, passed with its flag, and changes the
// ConfigMap's name (so that the pods roll); the image is the one given.
func TestHelmValues(t *testing.T) {
	objs := decode(t, helmTemplateValues(t, `
companion:
  problemDetection:
    extraFiles:
      my-plugin-monitor.json: '{"plugin":"custom"}'
    customPluginMonitors: [my-plugin-monitor.json]
`, "simulate.enabled=true", "simulate.replicas=5", "companion.namespace=agents",
		"image.repository=registry.example/nodeagent", "image.tag=v0.1.0"))
	sts := objs["StatefulSet nodeagent-simulation/nodeagent-simulate"].(*appsv1.StatefulSet)
	if *sts.Spec.Replicas != 5 || !slices.Contains(sts.Spec.Template.Spec.Containers[0].Args, "--shards=5") {
		t.Errorf("replicas %d, args %q: want 5 and --shards=5", *sts.Spec.Replicas, sts.Spec.Template.Spec.Containers[0].Args)
	}
	ds, ok := objs["DaemonSet agents/nodeagent"].(*appsv1.DaemonSet)
	if !ok {
		t.Fatalf("no DaemonSet in namespace agents: %v", keys(objs))
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example/nodeagent:v0.1.0" {
		t.Errorf("image %s", c.Image)
	}
	if !slices.Contains(c.Args, "--config.custom-plugin-monitor=/etc/nodeagent/npd/my-plugin-monitor.json") {
		t.Errorf("args %q lack the custom plugin monitor", c.Args)
	}
	vap := objs["ValidatingAdmissionPolicy <nil>/nodeagent-own-node"].(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if want := "'system:serviceaccount:agents:nodeagent'"; !strings.Contains(vap.Spec.MatchConditions[0].Expression, want) {
		t.Errorf("admission policy match %q, want the ServiceAccount %s", vap.Spec.MatchConditions[0].Expression, want)
	}
	var cm *corev1.ConfigMap
	for k, o := range objs {
		if strings.HasPrefix(k, "ConfigMap agents/nodeagent-problem-detection-") {
			cm = o.(*corev1.ConfigMap)
		}
	}
	if cm == nil || cm.Data["my-plugin-monitor.json"] != `{"plugin":"custom"}` || cm.Data["kernel-monitor-filelog.json"] == "" {
		t.Fatalf("ConfigMap %v: want both configs", cm)
	}
	defaults := decode(t, helmTemplate(t))
	for k := range defaults {
		if strings.HasPrefix(k, "ConfigMap nodeagent-system/nodeagent-problem-detection-") && strings.TrimPrefix(k, "ConfigMap nodeagent-system/") == cm.Name {
			t.Errorf("the ConfigMap's name %s did not change with its contents", cm.Name)
		}
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name != cm.Name {
			t.Errorf("the DaemonSet mounts ConfigMap %s, the chart renders %s", v.ConfigMap.Name, cm.Name)
		}
	}
}

// TestHelmMonitoring: with monitoring enabled, the PrometheusRule carries the groups of
// deploy/monitoring/nodeagent.rules.yaml, the dashboard ConfigMap the dashboard JSON, and the
// PodMonitors name the jobs the rules select.
func TestHelmMonitoring(t *testing.T) {
	root, _ := tools(t)
	objs := decode(t, helmTemplate(t, "simulate.enabled=true", "monitoring.prometheusRule.enabled=true",
		"monitoring.podMonitors.enabled=true", "monitoring.dashboard.enabled=true"))
	raw, ok := objs["PrometheusRule default/nodeagent"].(*runtime.Unknown)
	if !ok {
		t.Fatalf("no PrometheusRule: %v", keys(objs))
	}
	var pr struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(raw.Raw, &pr); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join(root, "deploy/monitoring/nodeagent.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(rules, &want); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(pr.Spec, want) {
		t.Errorf("the PrometheusRule's spec differs from deploy/monitoring/nodeagent.rules.yaml:\n%s", diff.Diff(pr.Spec, want))
	}
	dash, err := os.ReadFile(filepath.Join(root, "deploy/monitoring/nodeagent-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm, ok := objs["ConfigMap default/nodeagent-dashboard"].(*corev1.ConfigMap)
	if !ok || cm.Data["nodeagent-dashboard.json"] != strings.TrimRight(string(dash), "\n") {
		t.Errorf("the dashboard ConfigMap does not hold deploy/monitoring/nodeagent-dashboard.json")
	}
	for key, job := range map[string]string{
		"PodMonitor nodeagent-system/nodeagent-companion":    "nodeagent-companion",
		"PodMonitor nodeagent-simulation/nodeagent-simulate": "nodeagent-simulate",
	} {
		u, ok := objs[key].(*runtime.Unknown)
		if !ok {
			t.Errorf("no %s", key)
			continue
		}
		if !bytes.Contains(u.Raw, []byte(`"replacement":"`+job+`","targetLabel":"job"`)) {
			t.Errorf("%s does not set job %s: %s", key, job, u.Raw)
		}
	}
}

// TestHelmDryRunServer applies the chart's rendering with `kubectl apply --dry-run=server` on the
// harness's API server: with the default values, and with the simulation enabled. The namespaces are
// created first (a dry-run Namespace is not created, and the namespaced objects need theirs).
func TestHelmDryRunServer(t *testing.T) {
	ctx := t.Context()
	tools(t)
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	for _, ns := range []string{"nodeagent-system", "nodeagent-simulation"} {
		if _, err := cp.Kubectl(ctx, "create", "namespace", ns, "--save-config"); err != nil {
			t.Fatal(err)
		}
	}
	for _, set := range [][]string{nil, {"simulate.enabled=true"}} {
		rendered := helmTemplate(t, set...)
		path := filepath.Join(t.TempDir(), "rendered.yaml")
		if err := os.WriteFile(path, []byte(rendered), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := cp.Kubectl(ctx, "apply", "--dry-run=server", "-f", path)
		if err != nil {
			t.Fatalf("values %v: %v", set, err)
		}
		n := 0
		for _, o := range decode(t, rendered) {
			if _, err := meta.Accessor(o); err == nil {
				n++
			}
		}
		if got := strings.Count(out, "(server dry run)"); got != n {
			t.Errorf("values %v: %d objects applied in the dry run, the chart renders %d:\n%s", set, got, n, out)
		}
		t.Logf("values %v:\n%s", set, out)
	}
}

// TestHelmSimulateKubeletAPI: simulate.kubeletAPI serves the simulated Nodes' kubelet API on the pod
// IP (--node-ip=$(POD_IP) from the downward API) by default, the client CA from kube-system's
// extension-apiserver-authentication ConfigMap (a RoleBinding to its reader Role) unless clientCAFile
// is set and, with tlsSecret, the Secret's certificate mounted and passed; enabled=false: --port=0.
func TestHelmSimulateKubeletAPI(t *testing.T) {
	container := func(set ...string) (args []string, env []string, mounts []string, volumes []string) {
		objs := decode(t, helmTemplate(t, append([]string{"simulate.enabled=true"}, set...)...))
		sts := objs["StatefulSet nodeagent-simulation/nodeagent-simulate"].(*appsv1.StatefulSet)
		c := sts.Spec.Template.Spec.Containers[0]
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env = append(env, e.Name+"="+e.ValueFrom.FieldRef.FieldPath)
			}
		}
		for _, m := range c.VolumeMounts {
			mounts = append(mounts, m.Name+":"+m.MountPath)
		}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				volumes = append(volumes, v.Name+":"+v.Secret.SecretName)
			}
		}
		return c.Args, env, mounts, volumes
	}
	args, env, _, _ := container("simulate.kubeletAPI.enabled=false")
	if !slices.Contains(args, "--port=0") || slices.Contains(env, "POD_IP=status.podIP") {
		t.Errorf("enabled=false: args %q env %q: want --port=0 and no POD_IP", args, env)
	}
	if objs := decode(t, helmTemplate(t, "simulate.enabled=true", "simulate.kubeletAPI.enabled=false")); objs["RoleBinding kube-system/nodeagent-simulator-authentication-reader"] != nil {
		t.Errorf("enabled=false: the RoleBinding to extension-apiserver-authentication-reader is rendered")
	}
	args, env, _, _ = container()
	if !slices.Contains(args, "--node-ip=$(POD_IP)") || !slices.Contains(args, "--port=10250") || !slices.Contains(env, "POD_IP=status.podIP") ||
		slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--client-ca-file") }) {
		t.Errorf("default: args %q env %q: want the kubelet API on the pod IP, the client CA from the ConfigMap", args, env)
	}
	if objs := decode(t, helmTemplate(t, "simulate.enabled=true")); objs["RoleBinding kube-system/nodeagent-simulator-authentication-reader"] == nil {
		t.Errorf("default: no RoleBinding kube-system/nodeagent-simulator-authentication-reader")
	}
	args, env, mounts, volumes := container("simulate.kubeletAPI.clientCAFile=/etc/ca.crt", "simulate.kubeletAPI.tlsSecret=sim-tls")
	for _, want := range []string{"--node-ip=$(POD_IP)", "--port=10250", "--client-ca-file=/etc/ca.crt",
		"--tls-cert-file=/etc/nodeagent/tls/tls.crt", "--tls-private-key-file=/etc/nodeagent/tls/tls.key"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if !slices.Contains(env, "POD_IP=status.podIP") || !slices.Contains(mounts, "kubelet-api-tls:/etc/nodeagent/tls") ||
		!slices.Contains(volumes, "kubelet-api-tls:sim-tls") {
		t.Errorf("env %q mounts %q volumes %q: want POD_IP from status.podIP and the Secret sim-tls mounted", env, mounts, volumes)
	}
}
