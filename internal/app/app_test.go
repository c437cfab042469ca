package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/statussync"
)

func TestMain(m *testing.M) {
	// Main applies the logging configuration on each call; in one test process the same (default)
	// configuration is applied many times, which component-base only allows with this setting.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	os.Exit(m.Run())
}

// runMain runs Main with args and returns its exit code and what it wrote to stderr (stdout is
// discarded).
func runMain(t *testing.T, args []string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	// klog writes to os.Stderr directly: capture it too.
	savedErr := os.Stderr
	os.Stderr = f
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	code := Main(ctx, args, devNull, f)
	os.Stderr = savedErr
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// nodeagentLine returns the "nodeagent: ..." error line of the output.
func nodeagentLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "nodeagent: ") {
			return l
		}
	}
	return ""
}

// TestMainBadInput: each bad input exits 1 with one "nodeagent: ..." line naming the problem, before
// any cluster or runtime is contacted (the kubeconfig points nowhere reachable, and none is needed).
func TestMainBadInput(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\nmaxPods: -1\nnoSuchField: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	invalidConfig := filepath.Join(dir, "invalid.yaml")
	if err := os.WriteFile(invalidConfig, []byte("apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\nmaxPods: -1\nhealthzPort: -2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootDir := filepath.Join(dir, "root")
	kubeconfig := filepath.Join(dir, "nowhere.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		desc string
		args []string
		want []string // substrings of the one error line
	}{
		{desc: "unknown flag", args: []string{"--no-such-flag"}, want: []string{"unknown flag: --no-such-flag"}},
		{desc: "bad flag value", args: []string{"--node-status-update-frequency=often"}, want: []string{`"often"`, "--node-status-update-frequency"}},
		{desc: "unknown subcommand", args: []string{"run"}, want: []string{`unknown command "run"`}},
		{desc: "space-separated flag values", args: []string{"--max-pods", "3", "--kubeconfig", filepath.Join(dir, "kc")},
			want: []string{"--kubeconfig", "kc", "no such file"}},
		{desc: "missing config file", args: []string{"--config", filepath.Join(dir, "none.yaml")}, want: []string{"--config", "none.yaml", "no such file"}},
		{desc: "config file with an unknown field", args: []string{"--config", badConfig}, want: []string{`unknown field "noSuchField"`}},
		{desc: "config file with bad values: all on one line", args: []string{"--config", invalidConfig},
			want: []string{`invalid healthzPort "-2"`, `invalid maxPods "-1"`, "; "}},
		{desc: "non-unix runtime endpoint", args: []string{"--container-runtime-endpoint=tcp://127.0.0.1:1"},
			want: []string{`invalid containerRuntimeEndpoint "tcp://127.0.0.1:1"`, "unix"}},
		{desc: "missing kubeconfig", args: []string{"--kubeconfig", filepath.Join(dir, "kubeconfig"), "--root-dir", rootDir},
			want: []string{"--kubeconfig", "kubeconfig", "no such file"}},
		{desc: "no kubeconfig and not in a cluster", args: []string{"--root-dir", rootDir},
			want: []string{"--kubeconfig not set and no in-cluster config"}},
		{desc: "bad logging format", args: []string{"--logging-format=xml"}, want: []string{"xml"}},
		{desc: "a boolean flag without a value, then another flag", args: []string{"--companion", "--kubeconfig", filepath.Join(dir, "none")},
			want: []string{"--kubeconfig", "none", "no such file"}},
		{desc: "reservation larger than the machine", args: []string{"--kubeconfig", kubeconfig, "--root-dir", rootDir,
			"--system-reserved=memory=1000Ti"}, want: []string{`resource "memory"`, "expected capacity >= reservation", "--system-reserved"}},
		{desc: "a label the kubelet may not set", args: []string{"--node-labels=node-role.kubernetes.io/master="},
			want: []string{"node-role.kubernetes.io/master"}},
		{desc: "duplicate taints", args: []string{"--register-with-taints=a=b:NoSchedule,a=c:NoSchedule"},
			want: []string{"duplicated taints with the same key and effect"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			code, out := runMain(t, tc.args)
			if code != 1 {
				t.Errorf("Main(%q) = %d, want 1; stderr:\n%s", tc.args, code, out)
			}
			line := nodeagentLine(out)
			if line == "" {
				t.Fatalf("no \"nodeagent: \" line on stderr:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("error line lacks %q: %s", w, line)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		cmd := NewCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "nodeagent v") || !strings.Contains(out.String(), "commit") {
			t.Errorf("%v printed %q", args, out.String())
		}
	}
	cmd := NewCommand()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"version", "extra"})
	if err := cmd.Execute(); err == nil {
		t.Error("version with an argument: no error")
	}
}

func TestHelp(t *testing.T) {
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Usage:", "--kubeconfig", "--register-with-taints", "--eviction-hard", "--node-status-update-frequency"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q", w)
		}
	}
	if code, out := runMain(t, []string{"-h"}); code != 0 {
		t.Errorf("Main(-h) = %d: %s", code, out)
	}
}

func TestOneLine(t *testing.T) {
	cases := map[string]error{
		"a":                errors.New("a"),
		"a; b; c":          errors.Join(errors.New("a"), errors.New("b"), errors.New("c")),
		"x: invalid a; b":  errors.New("x: invalid a\nb"),
		"trailing; ":       errors.New("trailing\n"),
		"ünïcode; ☃ stays": errors.New("ünïcode\n☃ stays"),
	}
	for want, err := range cases {
		if got := oneLine(err); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", err.Error(), got, want)
		}
	}
}

// statusFixture serves /debug/nodestatus and /healthz?verbose as an agent would.
func statusFixture(t *testing.T, ready v1.ConditionStatus, message string, problems []string, healthCode int) *httptest.Server {
	t.Helper()
	now := time.Now()
	report := node.Report{Version: "v1.36.3+nodeagent.test", StartedAt: now.Add(-time.Minute), Nodes: []node.Status{{
		Node:     "n1",
		Ready:    &v1.NodeCondition{Type: v1.NodeReady, Status: ready, Reason: "KubeletNotReady", Message: message, LastTransitionTime: metav1.NewTime(now.Add(-30 * time.Second))},
		Problems: problems,
		LastSync: &statussync.SyncResult{Time: now.Add(-2 * time.Second), Result: statussync.ResultUnchanged, Try: 1},
		Lease:    lease.Status{LastRenew: now.Add(-3 * time.Second), Holder: "n1", RenewInterval: 10 * time.Second},
	}}}
	mux := http.NewServeMux()
	mux.Handle(node.DebugPath, node.DebugHandler(func() node.Report { return report }))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(healthCode)
		mark := "[+]syncloop ok"
		if healthCode != http.StatusOK {
			mark = "[-]syncloop failed: reason withheld"
		}
		fmt.Fprintf(w, "[+]ping ok\n[+]log ok\n%s\nhealthz check passed\n", mark)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestStatusCommand: nodeagent status prints Ready or why not, and exits 0 healthy, 1 unhealthy, 2
// when the agent does not answer; -o json prints the raw report.
func TestStatusCommand(t *testing.T) {
	down := "container runtime is down: dial unix /run/containerd/containerd.sock: connect: no such file or directory"
	cases := []struct {
		desc       string
		ready      v1.ConditionStatus
		message    string
		problems   []string
		healthCode int
		args       []string
		noAgent    bool
		wantCode   int
		want       []string
	}{
		{desc: "ready and healthy", ready: v1.ConditionTrue, message: "kubelet is posting ready status", healthCode: 200,
			wantCode: 0, want: []string{"Node n1: Ready", "Health: ping ok, log ok, syncloop ok", "Lease: renewed 3s ago"}},
		{desc: "runtime down", ready: v1.ConditionFalse, message: down, problems: []string{"runtime: " + down}, healthCode: 200,
			wantCode: 1, want: []string{"Node n1: NotReady", "Why:", "- runtime: " + down}},
		{desc: "ready but the sync loop is unhealthy", ready: v1.ConditionTrue, healthCode: 500,
			wantCode: 1, want: []string{"Node n1: Ready", "syncloop FAILED"}},
		{desc: "json", ready: v1.ConditionFalse, message: down, healthCode: 200, args: []string{"-o", "json"},
			wantCode: 1, want: []string{`"node": "n1"`, `"healthy": false`, `"message": "` + down + `"`}},
		{desc: "agent unreachable", noAgent: true, wantCode: 2, want: []string{"did not answer"}},
		{desc: "bad output format", args: []string{"-o", "yaml"}, noAgent: true, wantCode: 1, want: []string{`-o "yaml"`}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			port := "1" // nothing listens on port 1
			if !tc.noAgent {
				srv := statusFixture(t, tc.ready, tc.message, tc.problems, tc.healthCode)
				port = srv.URL[strings.LastIndex(srv.URL, ":")+1:]
			}
			var stdout, stderr bytes.Buffer
			args := append([]string{"status", "--healthz-port", port}, tc.args...)
			code := Main(t.Context(), args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			out := stdout.String() + stderr.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
