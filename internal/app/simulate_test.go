package app

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
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
