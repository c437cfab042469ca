package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	flagzv1beta1 "k8s.io/apiserver/pkg/server/flagz/api/v1beta1"
	statuszv1beta1 "k8s.io/apiserver/pkg/server/statusz/api/v1beta1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

const (
	statuszJSON = "application/json;v=v1beta1;g=config.k8s.io;as=Statusz"
	flagzJSON   = "application/json;v=v1beta1;g=config.k8s.io;as=Flagz"
)

func ok() error { return nil }

// getAccept sends GET path with an Accept header (none when empty) from a loopback peer.
func getAccept(t *testing.T, h http.Handler, path, accept string) (int, http.Header, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = loopbackPeer
	req.Host = "127.0.0.1:10248"
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header(), rec.Body.String()
}

func mustNew(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.BindAddress == "" {
		cfg.BindAddress = "127.0.0.1"
	}
	cfg.SyncLoop, cfg.Registered = ok, ok
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	return s
}

func testFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Int32("max-pods", 0, "")
	fs.String("node-labels", "", "")
	fs.String("secret-token", "", "")
	_ = fs.SetAnnotation("secret-token", "classified", []string{"true"})
	_ = fs.Parse([]string{"--max-pods=7", "--node-labels=a=b", "--secret-token=hunter2"})
	return fs
}

// TestStatusz: /statusz answers as the kubelet's (k8s.io/apiserver statusz): plain text without an
// Accept header, a config.k8s.io/v1beta1 Statusz object for the structured media type, 406 otherwise.
func TestStatusz(t *testing.T) {
	s := mustNew(t, Config{BinaryVersion: "v1.2.3-dev", Flags: testFlags(), Metrics: http.NotFoundHandler(), EnableProfiling: true,
		Handlers: map[string]http.Handler{"/simulation/": http.NotFoundHandler(), "/debug/nodestatus": http.NotFoundHandler()}})
	wantPaths := []string{"/debug", "/flagz", "/healthz", "/livez", "/metrics", "/readyz", "/simulation"}

	code, hdr, body := getAccept(t, s.Handler(), "/statusz", "")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /statusz = %d %q:\n%s", code, hdr.Get("Content-Type"), body)
	}
	for _, w := range []string{"nodeagent statusz", "Warning: This endpoint is not meant to be machine parseable", "Started",
		"Up", "Go version", "Binary version", "1.2.3-dev", strings.Join(wantPaths, " ")} {
		if !strings.Contains(body, w) {
			t.Errorf("text /statusz lacks %q:\n%s", w, body)
		}
	}
	if strings.Contains(body, "Emulation version") {
		t.Errorf("text /statusz reports an emulation version:\n%s", body)
	}

	code, hdr, body = getAccept(t, s.Handler(), "/statusz", statuszJSON)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /statusz as JSON = %d %q:\n%s", code, hdr.Get("Content-Type"), body)
	}
	var st statuszv1beta1.Statusz
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	if st.Kind != "Statusz" || st.APIVersion != "config.k8s.io/v1beta1" || st.Name != "nodeagent" || st.BinaryVersion != "1.2.3-dev" ||
		st.EmulationVersion != "" || st.GoVersion == "" || st.StartTime.IsZero() || !reflect.DeepEqual(st.Paths, wantPaths) {
		t.Errorf("structured /statusz = %+v, want kind Statusz, name nodeagent, binaryVersion 1.2.3-dev, no emulation version, paths %v", st, wantPaths)
	}

	if code, _, body := getAccept(t, s.Handler(), "/statusz", "application/json"); code != http.StatusNotAcceptable {
		t.Errorf("GET /statusz as plain JSON = %d, want 406:\n%s", code, body)
	}
}

// TestFlagz: /flagz lists each flag and its value (classified ones hidden), in text and structured.
func TestFlagz(t *testing.T) {
	s := mustNew(t, Config{ComponentName: "agent-x", Flags: testFlags()})
	want := map[string]string{"max-pods": "7", "node-labels": "a=b", "secret-token": "CLASSIFIED"}

	code, hdr, body := getAccept(t, s.Handler(), "/flagz", "")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /flagz = %d %q:\n%s", code, hdr.Get("Content-Type"), body)
	}
	if !strings.Contains(body, "agent-x flagz") || strings.Contains(body, "hunter2") {
		t.Errorf("text /flagz:\n%s", body)
	}
	for name, value := range want {
		found := false
		for _, line := range strings.Split(body, "\n") {
			found = found || (strings.HasPrefix(line, name) && strings.HasSuffix(line, value))
		}
		if !found {
			t.Errorf("text /flagz lacks %s = %s:\n%s", name, value, body)
		}
	}

	code, _, body = getAccept(t, s.Handler(), "/flagz", flagzJSON)
	if code != 200 {
		t.Fatalf("GET /flagz as JSON = %d:\n%s", code, body)
	}
	var fz flagzv1beta1.Flagz
	if err := json.Unmarshal([]byte(body), &fz); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	if fz.Kind != "Flagz" || fz.Name != "agent-x" || !reflect.DeepEqual(fz.Flags, want) {
		t.Errorf("structured /flagz = %+v, want name agent-x, flags %v", fz, want)
	}
}

// TestNoFlagz: without Flags there is no /flagz, and /statusz does not list it.
func TestNoFlagz(t *testing.T) {
	s := mustNew(t, Config{})
	if code, _, _ := getAccept(t, s.Handler(), "/flagz", ""); code != 404 {
		t.Errorf("GET /flagz = %d, want 404", code)
	}
	_, _, body := getAccept(t, s.Handler(), "/statusz", statuszJSON)
	var st statuszv1beta1.Statusz
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if want := []string{"/healthz", "/livez", "/readyz"}; !reflect.DeepEqual(st.Paths, want) {
		t.Errorf("paths = %v, want %v", st.Paths, want)
	}
	if st.BinaryVersion == "" {
		t.Error("no binary version by default")
	}
}

// TestHandlers: extra handlers are served on the same mux, to any peer unless wrapped in LoopbackOnly;
// a path that is not a path or collides with a built-in one is refused by New.
func TestHandlers(t *testing.T) {
	text := func(s string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, s) })
	}
	s := mustNew(t, Config{Handlers: map[string]http.Handler{
		"/debug/nodestatus": text("status"),
		"/simulation/":      LoopbackOnly(text("sim")),
	}})
	cases := []struct {
		peer, path string
		wantCode   int
		wantBody   string
	}{
		{peer: loopbackPeer, path: "/debug/nodestatus", wantCode: 200, wantBody: "status"},
		{peer: "10.0.0.1:1", path: "/debug/nodestatus", wantCode: 200, wantBody: "status"},
		{peer: loopbackPeer, path: "/simulation/nodes/a", wantCode: 200, wantBody: "sim"},
		{peer: "10.0.0.1:1", path: "/simulation/nodes/a", wantCode: 403, wantBody: "loopback clients only"},
		{peer: loopbackPeer, path: "/debug/other", wantCode: 404},
	}
	for _, tc := range cases {
		code, body := getFrom(t, s.Handler(), tc.peer, tc.path)
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("GET %s from %s = %d %q, want %d %q", tc.path, tc.peer, code, body, tc.wantCode, tc.wantBody)
		}
	}

	for path, want := range map[string]string{
		"debug/x":        `must start with "/"`,
		"GET /x":         `must start with "/"`,
		"/healthz":       "/healthz is a built-in path",
		"/healthz/extra": "/healthz is a built-in path",
		"/readyz":        "/readyz is a built-in path",
		"/metrics":       "/metrics is a built-in path",
		"/statusz":       "/statusz is a built-in path",
		"/flagz":         "/flagz is a built-in path",
		"/debug/pprof/":  "/debug/pprof is a built-in path",
		"/debug/pprof/x": "/debug/pprof is a built-in path",
		"/x/{bad":        "bad wildcard",
		"/nil":           "nil handler",
	} {
		h := http.NotFoundHandler()
		if path == "/nil" {
			h = nil
		}
		_, err := New(Config{BindAddress: "127.0.0.1", SyncLoop: ok, Registered: ok, Handlers: map[string]http.Handler{path: h}})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("New with Handlers[%q]: %v, want an error naming the path and containing %q", path, err, want)
		}
	}
}

func TestNewBadBinaryVersion(t *testing.T) {
	_, err := New(Config{BindAddress: "127.0.0.1", SyncLoop: ok, Registered: ok, BinaryVersion: "latest"})
	if err == nil || !strings.Contains(err.Error(), `binary version "latest"`) {
		t.Errorf("New with BinaryVersion latest: %v", err)
	}
}

// TestRunWarnsWhenNotLoopback: Run logs a warning when the listener is on a non-loopback address,
// and not on 127.0.0.1. On 0.0.0.0, a request over the network from a non-loopback address of this
// host is refused /debug/pprof, a request to 127.0.0.1 is served it, and /healthz answers both.
func TestRunWarnsWhenNotLoopback(t *testing.T) {
	for _, tc := range []struct {
		bind     string
		wantWarn bool
	}{{"127.0.0.1", false}, {"0.0.0.0", true}} {
		t.Run(tc.bind, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
			s := mustNew(t, Config{BindAddress: tc.bind, EnableProfiling: true})
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			port := s.listener.Addr().(*net.TCPAddr).Port
			client := &http.Client{Timeout: 10 * time.Second}
			fetch := func(host, path string) int {
				resp, err := client.Get("http://" + net.JoinHostPort(host, strconv.Itoa(port)) + path)
				if err != nil {
					t.Fatalf("GET %s%s: %v", host, path, err)
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode
			}
			if code := fetch("127.0.0.1", "/debug/pprof/"); code != 200 {
				t.Errorf("pprof from 127.0.0.1 = %d, want 200", code)
			}
			if ip := hostIP(); tc.bind == "0.0.0.0" && ip != "" {
				if code := fetch(ip, "/debug/pprof/"); code != 403 {
					t.Errorf("pprof from %s = %d, want 403", ip, code)
				}
				if code := fetch(ip, "/healthz"); code != 200 {
					t.Errorf("healthz from %s = %d, want 200", ip, code)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if got := strings.Contains(logs, "Warning: the healthz server listens on a non-loopback address"); got != tc.wantWarn {
				t.Errorf("warning logged = %v, want %v; logs:\n%s", got, tc.wantWarn, logs)
			}
			if tc.wantWarn && !strings.Contains(logs, "/debug/pprof is refused to non-loopback clients") {
				t.Errorf("warning does not mention pprof:\n%s", logs)
			}
		})
	}
}

// hostIP returns a non-loopback IPv4 address of this host, or "".
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
