package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"

	"github.com/nodeagent/nodeagent/pkg/simulation"
)

// TestSimulateBadInput: each bad command line exits 1 with one "nodeagent: ..." line naming the flag
// (or file) and the value, before any request reaches the API server.
func TestSimulateBadInput(t *testing.T) {
	var requests atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	for _, tc := range []struct {
		desc string
		args []string
		want []string
	}{
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
		{"bad frequency", []string{"--node-status-update-frequency=-1s"}, []string{`invalid nodeStatusUpdateFrequency "-1s"`}},
		{"bad taint", []string{"--register-with-taints=a:Never"}, []string{"--register-with-taints", "Never"}},
		{"missing kubeconfig", []string{"--kubeconfig=" + filepath.Join(dir, "nope")}, []string{`--kubeconfig "`, "no such file"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
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
		"kube-api-burst", "event-qps", "node-status-update-frequency", "node-lease-duration-seconds", "healthz-port", "v", "logging-format"} {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s missing", name)
		}
	}
	for _, name := range []string{"hostname-override", "node-ip", "root-dir", "container-runtime-endpoint", "max-pods", "eviction-hard",
		"system-reserved", "companion", "config", "provider-id", "register-node"} {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s offered: it does not apply to simulated nodes", name)
		}
	}
}

// accessClient is a fake clientset whose SelfSubjectReview says user (in groups) and whose
// SelfSubjectAccessReviews allow everything but the denied "verb resource" pairs.
func accessClient(user string, groups []string, denied ...string) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectreviews", func(core.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: user, Groups: groups}}}, nil
	})
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a core.Action) (bool, runtime.Object, error) {
		r := a.(core.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attrs := r.Spec.ResourceAttributes
		key := attrs.Verb + " " + attrs.Resource
		if attrs.Subresource != "" {
			key += "/" + attrs.Subresource
		}
		allowed := true
		for _, d := range denied {
			allowed = allowed && d != key
		}
		r.Status.Allowed = allowed
		return true, r, nil
	})
	return c
}

func TestCheckSimulationAccess(t *testing.T) {
	ctx := context.Background()
	if err := checkSimulationAccess(ctx, accessClient("admin", []string{"system:masters"}), "kc"); err != nil {
		t.Errorf("admin: %v", err)
	}
	// Events are not required: without them only events are lost.
	if err := checkSimulationAccess(ctx, accessClient("sa", nil, "create events", "patch events"), "kc"); err != nil {
		t.Errorf("without events: %v", err)
	}
	err := checkSimulationAccess(ctx, accessClient("system:serviceaccount:sim:sim", nil, "create nodes", "update leases", "patch nodes/status"), "kc")
	want := `--kubeconfig "kc": user "system:serviceaccount:sim:sim" may not create nodes, patch nodes/status, update leases.coordination.k8s.io in kube-node-lease; the simulation needs the RBAC in docs/simulation.md`
	if err == nil || err.Error() != want {
		t.Errorf("missing RBAC: %v\nwant %s", err, want)
	}
	err = checkSimulationAccess(ctx, accessClient("system:node:n1", []string{"system:nodes", "system:authenticated"}), "kc")
	if err == nil || !strings.Contains(err.Error(), `system:node:n1 is a node identity (group system:nodes)`) {
		t.Errorf("node identity: %v", err)
	}
}

func TestCheckNamesFree(t *testing.T) {
	ctx := context.Background()
	node := func(name string, simulated bool) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if simulated {
			n.Labels[simulation.LabelSimulated] = "true"
		}
		return n
	}
	c := fake.NewClientset(node("sim-0001", true), node("sim-0500", false), node("sim-01", false), node("sim-extra", false), node("worker-1", false))
	if err := checkNamesFree(ctx, c, "sim-", 500); err != nil {
		t.Errorf("names sim-0000..sim-0499 with a simulated sim-0001 and a real sim-0500: %v", err)
	}
	err := checkNamesFree(ctx, c, "sim-", 501)
	if err == nil || !strings.Contains(err.Error(), `--node-name-prefix "sim-": node sim-0500 exists and is not simulated`) {
		t.Errorf("a real node among the names: %v", err)
	}
}
