package kubeletserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/nodeagent/nodeagent/pkg/resourcemetrics"
)

type fakePods map[string]*v1.Pod

func (f fakePods) Get(ns, name string) (*v1.Pod, error) {
	if p, ok := f[ns+"/"+name]; ok {
		return p, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
}

func (f fakePods) OnNode(node string) ([]*v1.Pod, error) {
	var out []*v1.Pod
	for _, p := range f {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, nil
}

func runningPod(ns, name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "uid-" + "name"},
		Spec:       v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c"}}},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}},
	}
}

// tokenAuth authenticates "Bearer admin" as admin and "Bearer viewer" as viewer.
var tokenAuth = authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
	switch r.Header.Get("Authorization") {
	case "Bearer admin":
		return &authenticator.Response{User: &user.DefaultInfo{Name: "admin"}}, true, nil
	case "Bearer viewer":
		return &authenticator.Response{User: &user.DefaultInfo{Name: "viewer"}}, true, nil
	}
	return nil, false, nil
})

// allowAdminAndViewerHealthz allows admin everything, viewer nodes/healthz only.
type allowAdminAndViewerHealthz struct{ authorizer.Authorizer }

func (allowAdminAndViewerHealthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetUser().GetName() == "admin" || (a.GetUser().GetName() == "viewer" && a.GetSubresource() == "healthz") {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

type logsOnly struct{ got ContainerLogOpts }

func (l *logsOnly) GetContainerLogs(_ context.Context, ns, pod, c string, opts ContainerLogOpts) (io.ReadCloser, error) {
	l.got = opts
	return io.NopCloser(strings.NewReader(ns + "/" + pod + "/" + c + "\n")), nil
}

type execProvider struct{ logsOnly }

func (execProvider) RunInContainer(_ context.Context, _, _, _ string, cmd []string, a AttachIO) error {
	_, _ = io.WriteString(a.Stdout(), "out:"+strings.Join(cmd, " ")+"\n")
	_, _ = io.WriteString(a.Stderr(), "err\n")
	return utilexec.CodeExitError{Err: io.EOF, Code: 3}
}

// withProvider sets cfg's capabilities to those of the interfaces provider implements.
func withProvider(cfg Config, provider any) Config {
	cfg.ContainerLogs, _ = provider.(ContainerLogsGetter)
	cfg.Runner, _ = provider.(ContainerRunner)
	cfg.Attacher, _ = provider.(ContainerAttacher)
	cfg.PortForwarder, _ = provider.(PortForwarder)
	cfg.StatsSummary, _ = provider.(resourcemetrics.StatsSummaryGetter)
	cfg.MetricsResource, _ = provider.(resourcemetrics.MetricsResourceGetter)
	return cfg
}

func newTestServer(t *testing.T, provider any) *httptest.Server {
	t.Helper()
	pods := fakePods{"ns/p": runningPod("ns", "p", "n1"), "ns/other": runningPod("ns", "other", "n2")}
	srv, err := New(withProvider(Config{NodeName: "n1", Pods: pods,
		Auth: &Auth{Authenticator: tokenAuth, Authorizer: allowAdminAndViewerHealthz{authorizerfactory.NewAlwaysAllowAuthorizer()}}}, provider))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

func do(t *testing.T, ts *httptest.Server, method, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestServerPathsAndAuth(t *testing.T) {
	logs := &logsOnly{}
	ts := newTestServer(t, logs)
	for _, tc := range []struct {
		name, method, path, token string
		code                      int
		body                      string
	}{
		{"no credentials", "GET", "/pods", "", 401, "Unauthorized"},
		{"bad token", "GET", "/healthz", "nope", 401, "Unauthorized"},
		{"viewer on pods", "GET", "/pods", "viewer", 403, "Forbidden (user=viewer, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"},
		{"viewer on logs", "GET", "/containerLogs/ns/p/c", "viewer", 403, "Forbidden (user=viewer, verb=get, resource=nodes, subresource(s)=[proxy])\n"},
		{"viewer on exec", "POST", "/exec/ns/p/c?command=ls&output=1", "viewer", 403, "Forbidden (user=viewer, verb=create, resource=nodes, subresource(s)=[proxy])\n"},
		{"viewer on healthz", "GET", "/healthz", "viewer", 200, "ok"},
		{"admin healthz", "GET", "/healthz", "admin", 200, "ok"},
		{"logs", "GET", "/containerLogs/ns/p/c?tailLines=3&timestamps=true", "admin", 200, "ns/p/c\n"},
		{"logs unknown pod", "GET", "/containerLogs/ns/nope/c", "admin", 404, `pod "nope" does not exist`},
		{"logs other node's pod", "GET", "/containerLogs/ns/other/c", "admin", 404, `pod "other" does not exist`},
		{"logs unknown container", "GET", "/containerLogs/ns/p/x", "admin", 404, `container "x" not found in pod "p"`},
		{"logs container with slash", "GET", "/containerLogs/ns/p/c/d", "admin", 404, "404 page not found\n"},
		{"logs container ..", "GET", "/containerLogs/ns/p/..", "admin", 404, `container ".." not found in pod "p"`},
		{"logs negative tail", "GET", "/containerLogs/ns/p/c?tailLines=-1", "admin", 422, `{"message": "Invalid request."}`},
		{"logs bad since", "GET", "/containerLogs/ns/p/c?sinceSeconds=x", "admin", 400, `{"message": "Unable to decode query."}`},
		{"logs POST", "POST", "/containerLogs/ns/p/c", "admin", 405, "Method Not Allowed"},
		{"exec not implemented", "POST", "/exec/ns/p/c?command=ls&output=1", "admin", 501, `node "n1" does not implement RunInContainer`},
		{"exec unknown pod", "POST", "/exec/ns/nope/c?command=ls&output=1", "admin", 404, "pod does not exist"},
		{"exec no streams", "POST", "/exec/ns/p/c?command=ls", "admin", 400, "you must specify at least 1 of stdin, stdout, stderr"},
		{"portForward not implemented", "POST", "/portForward/ns/p", "admin", 501, `node "n1" does not implement PortForward`},
		{"portForward uid mismatch", "POST", "/portForward/ns/p/bad", "admin", 404, "pod not found"},
		{"attach not implemented", "POST", "/attach/ns/p/c?output=1", "admin", 501, `node "n1" does not implement AttachToContainer`},
		{"unknown path", "GET", "/stats/container", "admin", 404, "404 page not found\n"},
		{"run not implemented", "POST", "/run/ns/p/c?cmd=ls", "admin", 501, `node "n1" does not implement RunInContainer`},
		{"run GET", "GET", "/run/ns/p/c?cmd=ls", "admin", 405, "Method Not Allowed"},
		{"exec PUT", "PUT", "/exec/ns/p/c?command=ls&output=1", "admin", 405, "Method Not Allowed"},
		{"healthz POST", "POST", "/healthz", "admin", 405, "Method Not Allowed"},
		{"not served: configz", "GET", "/configz", "admin", 404, "404 page not found\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, ts, tc.method, tc.path, tc.token)
			if code != tc.code || body != tc.body {
				t.Errorf("%s %s: got %d %q, want %d %q", tc.method, tc.path, code, body, tc.code, tc.body)
			}
		})
	}
	if !logs.got.TailSet || logs.got.Tail != 3 || !logs.got.Timestamps {
		t.Errorf("log options: got %+v, want tailLines 3 and timestamps", logs.got)
	}
}

func TestServerPodsListsOnlyItsNode(t *testing.T) {
	ts := newTestServer(t, nil)
	code, body := do(t, ts, "GET", "/pods", "admin")
	if code != 200 {
		t.Fatalf("GET /pods: %d %s", code, body)
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != 1 || list.Items[0].Name != "p" {
		t.Errorf("GET /pods: got kind %q apiVersion %q and %d pods, want the one PodList v1 of pod p", list.Kind, list.APIVersion, len(list.Items))
	}
}

// TestServerExecExitCode: exec's stdout, stderr and exit code, over SPDY and over kubectl's
// WebSocket (v5.channel.k8s.io, translated to SPDY in-process as the kubelet's getExec does).
func TestServerExecExitCode(t *testing.T) {
	ts := newTestServer(t, &execProvider{})
	cfg := &restclient.Config{Host: ts.URL, BearerToken: "admin", TLSClientConfig: restclient.TLSClientConfig{Insecure: true}}
	u, _ := url.Parse(ts.URL + "/exec/ns/p/c?command=echo&command=hi&output=1&error=1")
	for _, tc := range []struct {
		name string
		new  func() (remotecommand.Executor, error)
	}{
		{"SPDY", func() (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(cfg, "POST", u) }},
		{"WebSocket", func() (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec, err := tc.new()
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			err = exec.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
			var exitErr utilexec.ExitError
			if !asExit(err, &exitErr) || exitErr.ExitStatus() != 3 {
				t.Errorf("exec: err %v, want exit code 3", err)
			}
			if stdout.String() != "out:echo hi\n" || stderr.String() != "err\n" {
				t.Errorf("exec: stdout %q stderr %q", stdout.String(), stderr.String())
			}
		})
	}
}

func asExit(err error, out *utilexec.ExitError) bool {
	e, ok := err.(utilexec.ExitError)
	if ok {
		*out = e
	}
	return ok
}

// TestServerRun: /run answers the command's output (the kubelet's getRun: cmd split at spaces), or
// 500 with the error when it fails.
func TestServerRun(t *testing.T) {
	ts := newTestServer(t, &execProvider{})
	code, body := do(t, ts, "POST", "/run/ns/p/c?cmd=echo%20hi", "admin")
	if code != 500 || !strings.Contains(body, "EOF") {
		t.Errorf("POST /run (exit 3): %d %q, want 500 with the error", code, body)
	}
	ts = newTestServer(t, &okRunner{})
	if code, body := do(t, ts, "POST", "/run/ns/p/c?cmd=echo%20hi", "admin"); code != 200 || body != "out:echo hi\n" {
		t.Errorf("POST /run: %d %q, want 200 and the output", code, body)
	}
}

type okRunner struct{}

func (okRunner) RunInContainer(_ context.Context, _, _, _ string, cmd []string, a AttachIO) error {
	_, err := io.WriteString(a.Stdout(), "out:"+strings.Join(cmd, " ")+"\n")
	return err
}
