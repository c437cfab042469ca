package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestSIGHUPIsLoggedAndIgnored (issue 22, item 7): a real nodeagent process given SIGHUP logs it and
// keeps running (still serving /healthz, no STOPPING=1 to systemd); a later SIGTERM still shuts it
// down cleanly (shutdown log, STOPPING=1, exit 0). Before the fix Go's default action ended it at
// once with status 129, silently. No control plane is needed: the agent runs (waiting for a client
// certificate) against an address that does not answer.
func TestSIGHUPIsLoggedAndIgnored(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "na-hup-") // short: a unix socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	notify := framework.ListenTestNotify(t, filepath.Join(dir, "notify.sock"))
	bootstrap := filepath.Join(dir, "bootstrap.kubeconfig")
	if err := os.WriteFile(bootstrap, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abcdef.0123456789abcdef}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := framework.StartAgent(ctx, framework.AgentOptions{
		Dir: dir, NodeName: "hup", Kubeconfig: filepath.Join(dir, "kubeconfig"),
		RuntimeEndpoint: "unix://" + filepath.Join(dir, "none.sock"),
		Args:            []string{"--bootstrap-kubeconfig=" + bootstrap},
		Env:             []string{notify.Env()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	if _, err := notify.Wait(ctx, "READY=1"); err != nil {
		t.Fatalf("no READY=1: %v\n%s", err, a.Logs())
	}

	if err := syscall.Kill(a.PID, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	hupCtx, hupCancel := context.WithTimeout(ctx, 10*time.Second)
	defer hupCancel()
	if err := framework.WaitFor(hupCtx, 50*time.Millisecond, func() (bool, error) {
		if !a.Running() {
			return false, fmt.Errorf("exited: %v", a.Wait(ctx))
		}
		return strings.Contains(a.Logs(), "Received SIGHUP, ignoring it"), nil
	}); err != nil || !a.Running() {
		t.Fatalf("after SIGHUP: running %v, log line: %v; agent log:\n%s", a.Running(), err, a.Logs())
	}
	time.Sleep(time.Second) // the process is given time to die, were it to
	if !a.Running() {
		t.Fatalf("agent exited after SIGHUP: %v\n%s", a.Wait(ctx), a.Logs())
	}
	if _, _, err := a.Get(ctx, "/healthz"); err != nil {
		t.Errorf("/healthz after SIGHUP: %v", err)
	}
	if _, ok := notify.Received("STOPPING=1"); ok || strings.Contains(a.Logs(), "Shutting down nodeagent") {
		t.Errorf("SIGHUP started a shutdown:\n%s", a.Logs())
	}

	if err := a.Stop(); err != nil {
		t.Errorf("SIGTERM after SIGHUP: exit %v, want 0\n%s", err, a.Logs())
	}
	if !strings.Contains(a.Logs(), "Shutting down nodeagent") {
		t.Errorf("SIGTERM: no shutdown log:\n%s", a.Logs())
	}
	// STOPPING=1 was queued on the socket before the agent exited; the receiver may not have read it yet.
	stopCtx, stopCancel := context.WithTimeout(ctx, 5*time.Second)
	defer stopCancel()
	if _, err := notify.Wait(stopCtx, "STOPPING=1"); err != nil {
		t.Errorf("SIGTERM: no STOPPING=1: %v", err)
	}
}
