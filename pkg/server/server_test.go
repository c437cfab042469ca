package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/nodeagent/nodeagent/pkg/metrics"
)

// checks holds the results the health checks return; nil means healthy.
type checks struct {
	syncLoop, registered atomic.Pointer[error]
}

func (c *checks) set(syncLoop, registered error) {
	c.syncLoop.Store(&syncLoop)
	c.registered.Store(&registered)
}

func newServer(t *testing.T, c *checks, profiling, withMetrics bool) *Server {
	t.Helper()
	cfg := Config{
		BindAddress: "127.0.0.1", Port: 0, EnableProfiling: profiling,
		SyncLoop:   func() error { return *c.syncLoop.Load() },
		Registered: func() error { return *c.registered.Load() },
	}
	if withMetrics {
		cfg.Metrics = metrics.New(time.Now()).Handler()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	return s
}

// loopbackPeer is a request's RemoteAddr from the node itself (httptest's default, 192.0.2.1, is remote).
const loopbackPeer = "127.0.0.1:40000"

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	return getFrom(t, h, loopbackPeer, path)
}

// getFrom sends GET path to h from the peer remoteAddr ("host:port").
func getFrom(t *testing.T, h http.Handler, remoteAddr, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remoteAddr
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// TestHealthEndpoints checks /healthz, /readyz and /livez as the kubelet's healthz server answers them
// (k8s.io/apiserver healthz handlers): 200 "ok", or 500 listing each check with the failing one "[-]".
func TestHealthEndpoints(t *testing.T) {
	syncErr := errors.New("last node status sync 45s ago, bound 30s")
	regErr := errors.New(`node "n" not registered yet`)
	cases := []struct {
		desc                 string
		syncLoop, registered error
		path                 string
		wantCode             int
		wantBody             []string
		notInBody            []string
	}{
		{desc: "healthz ok", path: "/healthz", wantCode: 200, wantBody: []string{"ok"}},
		{desc: "healthz verbose lists checks", path: "/healthz?verbose", wantCode: 200,
			wantBody: []string{"[+]ping ok", "[+]log ok", "[+]syncloop ok", "healthz check passed"}},
		{desc: "healthz fails naming the check", syncLoop: syncErr, path: "/healthz", wantCode: 500,
			wantBody: []string{"[+]ping ok", "[-]syncloop failed", "healthz check failed"}, notInBody: []string{"45s ago"}},
		{desc: "one check", path: "/healthz/syncloop", wantCode: 200, wantBody: []string{"ok"}},
		{desc: "one failing check", syncLoop: syncErr, path: "/healthz/syncloop", wantCode: 500, wantBody: []string{"internal server error"}},
		{desc: "healthz ping passes when syncloop fails", syncLoop: syncErr, path: "/healthz/ping", wantCode: 200},
		{desc: "healthz excluding the failing check", syncLoop: syncErr, path: "/healthz?exclude=syncloop", wantCode: 200},
		{desc: "readyz ok", path: "/readyz?verbose", wantCode: 200, wantBody: []string{"[+]ping ok", "[+]registered ok", "readyz check passed"}},
		{desc: "readyz not registered", registered: regErr, path: "/readyz", wantCode: 500, wantBody: []string{"[-]registered failed", "readyz check failed"}},
		{desc: "readyz does not run syncloop", syncLoop: syncErr, path: "/readyz", wantCode: 200},
		{desc: "livez ok while syncloop fails and not registered", syncLoop: syncErr, registered: regErr, path: "/livez?verbose", wantCode: 200,
			wantBody: []string{"[+]ping ok", "[+]log ok", "livez check passed"}, notInBody: []string{"syncloop", "registered"}},
		{desc: "unknown path", path: "/nothing", wantCode: 404},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c := &checks{}
			c.set(tc.syncLoop, tc.registered)
			s := newServer(t, c, false, true)
			code, body := get(t, s.Handler(), tc.path)
			if code != tc.wantCode {
				t.Errorf("GET %s = %d, want %d; body:\n%s", tc.path, code, tc.wantCode, body)
			}
			for _, w := range tc.wantBody {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s body lacks %q:\n%s", tc.path, w, body)
				}
			}
			for _, w := range tc.notInBody {
				if strings.Contains(body, w) {
					t.Errorf("GET %s body has %q:\n%s", tc.path, w, body)
				}
			}
		})
	}
}

// TestHealthzFollowsTheCheck: the result follows the check from one request to the next.
func TestHealthzFollowsTheCheck(t *testing.T) {
	c := &checks{}
	c.set(nil, nil)
	s := newServer(t, c, false, false)
	for i, syncErr := range []error{nil, errors.New("stale"), nil} {
		c.set(syncErr, nil)
		want := 200
		if syncErr != nil {
			want = 500
		}
		if code, body := get(t, s.Handler(), "/healthz"); code != want {
			t.Errorf("request %d: %d, want %d: %s", i, code, want, body)
		}
	}
}

// TestMetricsAndProfiling: /metrics for anyone; /debug/pprof only when enabled, and then only to
// loopback peers whatever the bind address: a remote peer gets 403 with a body saying why.
func TestMetricsAndProfiling(t *testing.T) {
	const remote = "10.1.2.3:5555"
	cases := []struct {
		desc                   string
		profiling, withMetrics bool
		peer                   string // RemoteAddr; loopbackPeer when empty
		path                   string
		wantCode               int
		wantBody               string
	}{
		{desc: "metrics served", withMetrics: true, path: "/metrics", wantCode: 200, wantBody: "nodeagent_build_info"},
		{desc: "go collector", withMetrics: true, path: "/metrics", wantCode: 200, wantBody: "go_goroutines"},
		{desc: "no metrics handler", path: "/metrics", wantCode: 404},
		{desc: "pprof off by default", path: "/debug/pprof/", wantCode: 404},
		{desc: "pprof cmdline off by default", path: "/debug/pprof/cmdline", wantCode: 404},
		{desc: "pprof index when enabled", profiling: true, path: "/debug/pprof/", wantCode: 200, wantBody: "goroutine"},
		{desc: "pprof goroutine profile when enabled", profiling: true, path: "/debug/pprof/goroutine?debug=1", wantCode: 200, wantBody: "goroutine profile"},
		{desc: "pprof cmdline when enabled", profiling: true, path: "/debug/pprof/cmdline", wantCode: 200},
		{desc: "pprof symbol when enabled", profiling: true, path: "/debug/pprof/symbol", wantCode: 200},
		{desc: "pprof from IPv6 loopback", profiling: true, peer: "[::1]:5555", path: "/debug/pprof/", wantCode: 200, wantBody: "goroutine"},
		{desc: "pprof from another 127/8 address", profiling: true, peer: "127.3.4.5:5555", path: "/debug/pprof/", wantCode: 200},
		{desc: "pprof index refused to a remote peer", profiling: true, peer: remote, path: "/debug/pprof/", wantCode: 403,
			wantBody: "forbidden: /debug/pprof/ is served to loopback clients only, not to 10.1.2.3:5555"},
		{desc: "pprof profile refused to a remote peer", profiling: true, peer: remote, path: "/debug/pprof/profile?seconds=1", wantCode: 403, wantBody: "loopback clients only"},
		{desc: "pprof named profile refused to a remote peer", profiling: true, peer: remote, path: "/debug/pprof/heap", wantCode: 403, wantBody: "loopback clients only"},
		{desc: "pprof cmdline refused to a remote peer", profiling: true, peer: remote, path: "/debug/pprof/cmdline", wantCode: 403},
		{desc: "pprof trace refused to a remote peer", profiling: true, peer: remote, path: "/debug/pprof/trace?seconds=1", wantCode: 403},
		{desc: "pprof symbol refused to a remote peer", profiling: true, peer: remote, path: "/debug/pprof/symbol", wantCode: 403},
		{desc: "pprof refused to a remote IPv6 peer", profiling: true, peer: "[2001:db8::1]:5555", path: "/debug/pprof/", wantCode: 403},
		{desc: "pprof refused to the unspecified address", profiling: true, peer: "0.0.0.0:5555", path: "/debug/pprof/", wantCode: 403},
		{desc: "pprof refused to a peer that does not parse", profiling: true, peer: "somewhere", path: "/debug/pprof/", wantCode: 403},
		{desc: "pprof off: 404 for a remote peer too", peer: remote, path: "/debug/pprof/", wantCode: 404},
		{desc: "metrics still served to a remote peer", profiling: true, withMetrics: true, peer: remote, path: "/metrics", wantCode: 200, wantBody: "go_goroutines"},
		{desc: "healthz still served to a remote peer", profiling: true, peer: remote, path: "/healthz", wantCode: 200, wantBody: "ok"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c := &checks{}
			c.set(nil, nil)
			s := newServer(t, c, tc.profiling, tc.withMetrics)
			peer := tc.peer
			if peer == "" {
				peer = loopbackPeer
			}
			code, body := getFrom(t, s.Handler(), peer, tc.path)
			if code != tc.wantCode {
				t.Errorf("GET %s from %s = %d, want %d", tc.path, peer, code, tc.wantCode)
			}
			if tc.wantBody != "" && !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s body lacks %q", tc.path, tc.wantBody)
			}
		})
	}
}

func TestNew(t *testing.T) {
	ok := func() error { return nil }
	if _, err := New(Config{BindAddress: "127.0.0.1", Registered: ok}); err == nil {
		t.Error("New without SyncLoop: no error")
	}
	if _, err := New(Config{BindAddress: "127.0.0.1", SyncLoop: ok}); err == nil {
		t.Error("New without Registered: no error")
	}
	// A port in use fails at New, naming the address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = New(Config{BindAddress: "127.0.0.1", Port: port, SyncLoop: ok, Registered: ok})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("New on a used port: %v, want an error naming 127.0.0.1:%d", err, port)
	}
}

// TestRun serves on the listening address until the context ends.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	c := &checks{}
	c.set(nil, errors.New("not yet"))
	s, err := New(Config{BindAddress: "127.0.0.1", SyncLoop: func() error { return *c.syncLoop.Load() },
		Registered: func() error { return *c.registered.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr() = %q", s.Addr())
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	client := &http.Client{Timeout: 10 * time.Second}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 500, "/livez": 200} {
		resp, err := client.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := client.Get("http://" + s.Addr() + "/healthz"); err == nil {
		t.Error("server still answering after Run returned")
	}
}

// TestNamedChecks: Config.Checks are /healthz checks after syncloop, each named in ?verbose and
// served at /healthz/<name>; bad names are refused by New.
func TestNamedChecks(t *testing.T) {
	var failing atomic.Bool
	cfg := Config{BindAddress: "127.0.0.1", SyncLoop: ok, Registered: ok, Checks: []Check{
		{Name: "problem-monitor-kernel-monitor", Check: func() error {
			if failing.Load() {
				return errors.New("log file /var/log/kern.log: no such file")
			}
			return nil
		}},
		{Name: "problem-monitor-health-checker", Check: ok},
	}}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	for _, tc := range []struct {
		failing  bool
		path     string
		wantCode int
		wantBody string
	}{
		{false, "/healthz?verbose", 200, "[+]ping ok\n[+]log ok\n[+]syncloop ok\n[+]problem-monitor-kernel-monitor ok\n[+]problem-monitor-health-checker ok\nhealthz check passed\n"},
		{true, "/healthz?verbose", 500, "[+]ping ok\n[+]log ok\n[+]syncloop ok\n[-]problem-monitor-kernel-monitor failed: reason withheld\n[+]problem-monitor-health-checker ok\nhealthz check failed\n"},
		{true, "/healthz/problem-monitor-kernel-monitor", 500, "internal server error: log file /var/log/kern.log: no such file\n"},
		{true, "/healthz/problem-monitor-health-checker", 200, "ok"},
		{true, "/readyz", 200, "ok"},
	} {
		failing.Store(tc.failing)
		if code, body := get(t, s.Handler(), tc.path); code != tc.wantCode || body != tc.wantBody {
			t.Errorf("failing=%v GET %s = %d %q, want %d %q", tc.failing, tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}
	for _, name := range []string{"", "syncloop", "a/b", "dup"} {
		cfg := Config{BindAddress: "127.0.0.1", SyncLoop: ok, Registered: ok, Checks: []Check{{Name: "dup", Check: ok}, {Name: name, Check: ok}}}
		if s, err := New(cfg); err == nil || !strings.Contains(err.Error(), "Checks[1]") {
			t.Errorf("New with check name %q = %v, want an error naming Checks[1]", name, err)
			if s != nil {
				s.listener.Close()
			}
		}
	}
}
