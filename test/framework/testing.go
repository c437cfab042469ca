package framework

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// StartTestAgent starts nodeagent with StartAgent (start-up bounded by ctx and one minute) and fails the
// test if it does not start. When the test ends it stops the agent: an exit other than status 0 is a test
// error unless the test killed the agent itself (Kill), and if the test failed the last 60 lines of the
// agent's log are logged. Cleanups the caller registers before this call run after the agent has stopped.
func StartTestAgent(ctx context.Context, t testing.TB, opts AgentOptions) *Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := StartAgent(ctx, opts)
	if err != nil {
		t.Fatalf("start nodeagent %s: %v", opts.NodeName, err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil && !a.killed.Load() {
			t.Errorf("nodeagent %s: stop: %v", opts.NodeName, err)
		}
		if t.Failed() {
			t.Logf("nodeagent %s log (%s), last lines:\n%s", opts.NodeName, a.LogPath, TailLines(a.Logs(), 60))
		}
	})
	return a
}

// StartTestControlPlane starts a control plane with StartControlPlane (bounded by ctx) and fails the test
// if it does not start. When the test ends it stops it; if the test failed and the control plane ran
// kube-controller-manager, the last 30 lines of its log are logged first. It returns the running control
// plane.
func StartTestControlPlane(ctx context.Context, t testing.TB, opts ControlPlaneOptions) *ControlPlane {
	t.Helper()
	cp, err := StartControlPlane(ctx, opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(cp.Stop)
	if opts.ControllerManager || opts.Bootstrap != nil {
		t.Cleanup(func() { // runs before cp.Stop: cleanups run last added first
			if t.Failed() {
				path := filepath.Join(cp.Dir, "kube-controller-manager.log")
				b, _ := os.ReadFile(path)
				t.Logf("kube-controller-manager log (%s), last lines:\n%s", path, TailLines(string(b), 30))
			}
		})
	}
	return cp
}

// WaitMetrics scrapes the agent's /metrics every 250 ms until cond holds on a scrape, and returns that
// scrape and how long it took. It fails the test after timeout, listing the nodeagent_* series of the last
// successful scrape.
func WaitMetrics(ctx context.Context, t testing.TB, a *Agent, timeout time.Duration, what string,
	cond func(*Metrics) bool) (*Metrics, time.Duration) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *Metrics
	err := WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		m, err := a.Metrics(ctx)
		if err != nil {
			return false, err
		}
		last = m
		return cond(m), nil
	})
	if err != nil {
		t.Fatalf("nodeagent %s metrics: %s not seen within %v: %v; last successful scrape:\n%s", a.NodeName, what, timeout,
			err, last.Dump("nodeagent_"))
	}
	return last, time.Since(start)
}

// TailLines returns the last n lines of s.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
