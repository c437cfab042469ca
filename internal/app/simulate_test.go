package app

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodeagent/nodeagent/pkg/simulation"
)

// TestSimulateBadInput: each bad command line exits 1 with one "nodeagent: ..." line naming the flag
// (or file) and the value, before any request reaches the API server but one: the kubelet API's
// read of the cluster's client CA (on by default), which comes before the template's Nodes are checked
// (simulation.NewProcess takes the kubelet API); a read, never a write.
func TestSimulateBadInput(t *testing.T) {
	var requests atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		requests.Add(1)
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer api.Close()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+api.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	badTemplate := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(badTemplate, []byte("apiVersion: v1\nkind: Pod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Issue 27, items 2 and 3: templates whose Nodes the API server would refuse on every registration.
	template := func(name, manifest string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cpuOverflow := template("cpu.yaml", "apiVersion: v1\nkind: Node\nstatus: {capacity: {cpu: \"9223372036854775807\"}}\n")
	memOverflow := template("mem.yaml", "apiVersion: v1\nkind: Node\nstatus: {capacity: {memory: 64Ei}}\n")
	var labels strings.Builder
	labels.WriteString("apiVersion: v1\nkind: Node\nmetadata:\n  labels:\n")
	for i := range 20000 {
		fmt.Fprintf(&labels, "    example.com/label-%05d: %s\n", i, strings.Repeat("v", 63))
	}
	manyLabels := template("labels.yaml", labels.String())
	if st, err := os.Stat(manyLabels); err != nil || st.Size() > simulation.MaxTemplateBytes || st.Size() < 1500000 {
		t.Fatalf("labels.yaml: %v %v: want 1.5 MB to the 4 MiB file limit", st.Size(), err)
	}
	for _, tc := range []struct {
		desc string
		args []string
		want []string
	}{
		{"cpu beyond int64 millicores", []string{"--node-template=" + cpuOverflow}, []string{`--node-template "`, `status.capacity[cpu] "9223372036854775807": must be at most 9223372036854775 CPUs`}},
		{"memory capped by the parser", []string{"--node-template=" + memOverflow}, []string{`status.capacity[memory] "64Ei": must be at most 9223372036854775806`}},
		{"a Node etcd refuses", []string{"--node-template=" + manyLabels}, []string{`--node-template "`, "labels.yaml", "node sim-node-0099 would take", "20008 labels",
			"over etcd's default request limit of 1.50 MiB (--max-request-bytes=1572864)"}},
		{"no nodes", []string{"--nodes=0"}, []string{`--nodes 0: must be between 1 and 10000`}},
		{"too many nodes", []string{"--nodes=10001"}, []string{`--nodes 10001: must be between 1 and 10000`}},
		{"negative nodes", []string{"--nodes=-5"}, []string{`--nodes -5`}},
		{"not a number", []string{"--nodes=many"}, []string{`"many"`, "--nodes"}},
		{"upper-case prefix", []string{"--node-name-prefix=Sim-"}, []string{`--node-name-prefix "Sim-": makes invalid node names such as "Sim-0000"`}},
		{"long prefix", []string{"--node-name-prefix=" + strings.Repeat("a", 60)}, []string{`--node-name-prefix "aaaa`, "must be no more than 63"}},
		{"empty prefix", []string{"--node-name-prefix="}, []string{`--node-name-prefix "": must not be empty`}},
		{"missing template", []string{"--node-template=" + filepath.Join(dir, "none.yaml")}, []string{`--node-template "`, "none.yaml", "no such file"}},
		{"template not a Node", []string{"--node-template=" + badTemplate}, []string{`--node-template "`, `apiVersion/kind "v1/Pod": must be v1/Node`}},
		{"host flag", []string{"--hostname-override=x"}, []string{"unknown flag: --hostname-override"}},
		{"runtime flag", []string{"--container-runtime-endpoint=unix:///x.sock"}, []string{"unknown flag: --container-runtime-endpoint"}},
		{"bad event qps", []string{"--event-qps=0"}, []string{"--event-qps 0"}},
		{"bad pod api qps", []string{"--pod-api-qps=0"}, []string{"--pod-api-qps 0 --pod-api-burst 2000: must be greater than 0"}},
		{"negative pod start delay", []string{"--pod-container-start-delay=-1s"}, []string{"--pod-container-start-delay -1s: must be between 0 and 1h"}},
		{"pod stop delay beyond an hour", []string{"--pod-stop-delay=2h"}, []string{"--pod-stop-delay 2h0m0s: must be between 0 and 1h"}},
		{"too many pod workers", []string{"--pod-workers=1001"}, []string{"--pod-workers 1001: must be between 0 (one per 20 Nodes, 32 to 128) and 1000"}},
		{"bad cluster domain", []string{"--cluster-domain=Cluster_Local"}, []string{`--cluster-domain "Cluster_Local": a lowercase RFC 1123 subdomain`}},
		{"bad frequency", []string{"--node-status-update-frequency=-1s"}, []string{`invalid nodeStatusUpdateFrequency "-1s"`}},
		{"bad taint", []string{"--register-with-taints=a:Never"}, []string{"--register-with-taints", "Never"}},
		{"missing kubeconfig", []string{"--kubeconfig=" + filepath.Join(dir, "nope")}, []string{`--kubeconfig "`, "no such file"}},
		{"no shards", []string{"--shards=0"}, []string{"--shards 0: must be between 1 and 1000"}},
		{"negative shards", []string{"--shards=-2"}, []string{"--shards -2: must be between 1 and 1000"}},
		{"index beyond shards", []string{"--shards=3", "--shard-index=3"}, []string{"--shard-index 3: must be in [0, 3) (--shards 3)"}},
		{"negative index", []string{"--shard-index=-1"}, []string{"--shard-index -1: must be in [0, 1)"}},
		{"pod name without ordinal", []string{"--shards=3", "--shard-index-from-pod-name"}, []string{`--shard-index-from-pod-name: pod name "nodeagent" (POD_NAME) has no ordinal`}},
		{"both index flags", []string{"--shards=3", "--shard-index=1", "--shard-index-from-pod-name"}, []string{"--shard-index 1: give either --shard-index or --shard-index-from-pod-name"}},
		{"too many nodes in all for the prefix", []string{"--node-name-prefix=" + strings.Repeat("a", 59), "--shards=2", "--nodes=10000"}, []string{`--node-name-prefix "aaaa`, "must be no more than 63"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Setenv("POD_NAME", "nodeagent")
			args := append([]string{"simulate", "--kubeconfig=" + kubeconfig, "--healthz-port=0"}, tc.args...)
			code, out := runMain(t, args)
			if code != 1 {
				t.Errorf("Main(%q) = %d, want 1; stderr:\n%s", args, code, out)
			}
			line := nodeagentLine(out)
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("error line %q lacks %q (stderr:\n%s)", line, w, out)
				}
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests reached the API server", n)
	}
}

// TestSimulateFlags: the agent's flags that describe this machine or its runtime are not offered.
func TestSimulateFlags(t *testing.T) {
	_, fs := simulateFlags()
	for _, name := range []string{"kubeconfig", "nodes", "node-name-prefix", "node-template", "simulated-taint", "kube-api-qps",
		"kube-api-burst", "event-qps", "node-status-update-frequency", "node-lease-duration-seconds", "healthz-port", "v", "logging-format",
		"node-ip", "address", "port", "tls-cert-file", "client-ca-file", "authorization-mode", "cluster-domain"} {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s missing", name)
		}
	}
	for _, name := range []string{"hostname-override", "root-dir", "container-runtime-endpoint", "max-pods", "eviction-hard",
		"system-reserved", "companion", "config", "provider-id", "register-node"} {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s offered: it does not apply to simulated nodes", name)
		}
	}
}

// TestSimulateShardFlags: the shard index from the pod name (POD_NAME, else the host name), the
// removed --control-allow-proxy, --port-forward-target, and the shard count bound, each bad one naming the flag.
func TestSimulateShardFlags(t *testing.T) {
	for _, tc := range []struct {
		desc      string
		args      []string
		env       map[string]string
		host      string
		wantIndex int
		wantErr   string
	}{
		{"defaults", nil, nil, "h", 0, ""},
		{"explicit", []string{"--shards=4", "--shard-index=3"}, nil, "h", 3, ""},
		{"from POD_NAME", []string{"--shards=3", "--shard-index-from-pod-name"}, map[string]string{"POD_NAME": "nodeagent-simulate-2"}, "other-0", 2, ""},
		{"from the host name", []string{"--shards=3", "--shard-index-from-pod-name"}, nil, "nodeagent-simulate-1", 1, ""},
		{"ordinal beyond --shards", []string{"--shards=3", "--shard-index-from-pod-name"}, map[string]string{"POD_NAME": "nodeagent-simulate-3"}, "h", 0,
			`--shard-index-from-pod-name: pod name "nodeagent-simulate-3" (POD_NAME): shard 3 is not in [0, 3) (--shards 3)`},
		{"unreadable host name", []string{"--shard-index-from-pod-name"}, nil, "", 0, "--shard-index-from-pod-name: POD_NAME is not set and the host name cannot be read"},
		{"the removed proxy allowance", []string{"--control-allow-proxy"}, map[string]string{"POD_NAME": "p-0", "POD_NAMESPACE": "ns"}, "h", 0, "--control-allow-proxy: removed"},
		{"a port-forward target without the kubelet API", []string{"--port=0", "--port-forward-target=db=127.0.0.1:5432"}, nil, "h", 0, "port-forward needs the kubelet's API (--port)"},
		{"a bad port-forward target", []string{"--port-forward-target=127.0.0.1:5432"}, nil, "h", 0, `--port-forward-target "127.0.0.1:5432": want NAME=host:port`},
		{"too many shards", []string{"--shards=1001"}, nil, "h", 0, "--shards 1001: must be between 1 and 1000"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			o, fs := simulateFlags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.agent.Flags = fs
			o.getenv = func(k string) string { return tc.env[k] }
			o.hostname = func() (string, error) {
				if tc.host == "" {
					return "", errors.New("no host name")
				}
				return tc.host, nil
			}
			_, err := completeSimulate(o)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("completeSimulate(%q) = %v, want %q", tc.args, err, tc.wantErr)
			}
			if err == nil && o.shardIndex != tc.wantIndex {
				t.Errorf("shard index %d, want %d", o.shardIndex, tc.wantIndex)
			}
		})
	}
}

// TestCtlLayout: ctl reads --nodes, --shards, --node-name-prefix and --healthz-port from the
// StatefulSet's container (flags override them) and maps a Node name to its shard.
func TestCtlLayout(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "nodeagent-simulate", Namespace: "ns"}}
	sts.Spec.Template.Spec.Containers = []corev1.Container{{Name: "nodeagent", Command: []string{"/usr/local/bin/nodeagent"},
		Args: []string{"simulate", "--shards=3", "--nodes=300", "--node-name-prefix=sim-", "--healthz-port=10300"}}}
	l, err := layoutFromStatefulSet(sts, &ctlOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l != (simLayout{nodes: 300, shards: 3, prefix: "sim-", port: 10300}) {
		t.Errorf("layout %+v", l)
	}
	for _, tc := range []struct {
		node    string
		shard   int
		wantErr string
	}{
		{"sim-0000", 0, ""}, {"sim-0299", 0, ""}, {"sim-0300", 1, ""}, {"sim-0899", 2, ""},
		{"sim-0900", 0, "index 900 is beyond the simulation's 900 Nodes"},
		{"sim-00001", 0, "not a simulated Node name of this simulation (sim- followed by the index on at least 4 digits"},
		{"sim-001", 0, "not a simulated Node name"},
		{"worker-1", 0, "not a simulated Node name"},
	} {
		shard, err := l.owner(tc.node)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) || (err == nil && shard != tc.shard) {
			t.Errorf("owner(%q) = %d, %v; want %d, %q", tc.node, shard, err, tc.shard, tc.wantErr)
		}
	}
	l, err = layoutFromStatefulSet(sts, &ctlOptions{nodes: 5000, shards: 4, port: 1, prefix: "x-"})
	if err != nil || l != (simLayout{nodes: 5000, shards: 4, port: 1, prefix: "x-"}) {
		t.Errorf("overridden layout %+v, %v", l, err)
	}
	if shard, err := l.owner("x-15000"); err != nil || shard != 3 {
		t.Errorf("5-digit owner: %d, %v", shard, err)
	}
	// The control API's port without --healthz-port: the container port named http, else the first,
	// else the default 10248.
	for _, tc := range []struct {
		ports []corev1.ContainerPort
		want  int
	}{
		{nil, 10248},
		{[]corev1.ContainerPort{{Name: "metrics", ContainerPort: 9000}}, 9000},
		{[]corev1.ContainerPort{{Name: "metrics", ContainerPort: 9000}, {Name: "http", ContainerPort: 10400}}, 10400},
	} {
		sts.Spec.Template.Spec.Containers[0].Args = []string{"simulate", "--nodes=10"}
		sts.Spec.Template.Spec.Containers[0].Ports = tc.ports
		if l, err := layoutFromStatefulSet(sts, &ctlOptions{}); err != nil || l.port != tc.want {
			t.Errorf("ports %v: control port %d, %v; want %d", tc.ports, l.port, err, tc.want)
		}
	}
	sts.Spec.Template.Spec.Containers[0].Args = []string{"--companion"}
	if _, err := layoutFromStatefulSet(sts, &ctlOptions{}); err == nil || !strings.Contains(err.Error(), "no container runs `nodeagent simulate`") {
		t.Errorf("no simulate container: %v", err)
	}
}

// TestCtlBadInput: ctl's own bad input, before any request.
func TestCtlBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "ctl"}, "ctl: give a NODE, or --list"},
		{[]string{"simulate", "ctl", "--list", "sim-0001"}, `--list: takes no NODE (got "sim-0001")`},
		{[]string{"simulate", "ctl", "--list", "--stopped"}, "--list: takes no change flag"},
		{[]string{"simulate", "ctl", "sim-0001", "--runtime-ready=maybe"}, "--runtime-ready"},
		{[]string{"simulate", "ctl", "--pod", "default/web", "--crash=2"}, "--pod: give the --container to change"},
		{[]string{"simulate", "ctl", "--pod", "web", "--container=c", "--crash=2"}, `--pod "web": give NAMESPACE/NAME`},
		{[]string{"simulate", "ctl", "sim-0001", "--pod", "default/web", "--container=c"}, "--pod: takes no NODE"},
		{[]string{"simulate", "ctl", "sim-0001", "--crash=2"}, "need --pod NAMESPACE/NAME"},
		{[]string{"simulate", "ctl", "--pod", "default/web", "--cpu=1", "--crash=2"}, "--cpu and --memory: give them alone (with --container)"},
		{[]string{"simulate", "ctl", "--list", "--memory=1Gi"}, "--cpu and --memory: take no --list or Node condition flag"},
		{[]string{"simulate", "ctl", "sim-0001", "--cpu=1", "--stopped"}, "--cpu and --memory: take no --list or Node condition flag"},
		{[]string{"simulate", "ctl", "sim-0001", "--container=c", "--cpu=1"}, "need --pod NAMESPACE/NAME"},
		{[]string{"simulate", "ctl", "sim-0001", "--cpu=fast"}, `--cpu "fast": give a positive quantity such as 800m (cpu) or 300Mi (memory)`},
		{[]string{"simulate", "ctl", "--pod", "default/web", "--memory=-1Gi"}, `--memory "-1Gi": give a positive quantity`},
	} {
		code, out := runMain(t, tc.args)
		if line := nodeagentLine(out); code != 1 || !strings.Contains(line, tc.want) {
			t.Errorf("Main(%q) = %d, %q; want 1 and %q", tc.args, code, line, tc.want)
		}
	}
}

// TestKubeletAPIAuthConfig: the simulated Nodes' TokenReviews and SubjectAccessReviews are limited by
// --kube-api-qps and --kube-api-burst (simulate's defaults 200 and 400), not by client-go's default
// of 5 QPS, and the process's own config is left as it is.
func TestKubeletAPIAuthConfig(t *testing.T) {
	base := &rest.Config{Host: "https://192.0.2.1:6443"}
	o, _ := simulateFlags()
	cfg := kubeletAPIAuthConfig(base, *o.agent.Config.KubeAPIQPS, o.agent.Config.KubeAPIBurst)
	if cfg.QPS != 200 || cfg.Burst != 400 || cfg.Host != base.Host {
		t.Errorf("QPS %v, burst %d, host %q; want 200, 400, %q", cfg.QPS, cfg.Burst, cfg.Host, base.Host)
	}
	if base.QPS != 0 || base.Burst != 0 {
		t.Errorf("the process's config changed: QPS %v, burst %d", base.QPS, base.Burst)
	}
}
