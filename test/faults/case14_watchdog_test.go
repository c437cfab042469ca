package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/test/framework"
)

// maxGap returns the longest time without WATCHDOG=1 on s between from and until (counting from
// from), and how many came in that time.
func maxGap(s *framework.NotifySocket, from, until time.Time) (time.Duration, int) {
	last, longest, n := from, time.Duration(0), 0
	for _, m := range s.Messages() {
		if m.State != "WATCHDOG=1" || m.At.Before(from) || m.At.After(until) {
			continue
		}
		longest, last, n = max(longest, m.At.Sub(last)), m.At, n+1
	}
	return max(longest, until.Sub(last)), n
}

// TestCase14WatchdogWhileWaiting (issue 22): the systemd watchdog means "this process's loops are
// alive", never "the API server answers". Two agents wait for 3 minutes, each beside a notify socket
// as systemd speaks it with WatchdogSec=4s: one joining with a bootstrap token whose CSR is never
// approved (kubeadm's auto-approval binding removed), one whose API server is gone (its address
// refuses connections). Both keep sending WATCHDOG=1 at least every 4 s throughout; under the unit's
// WatchdogSec=60s neither would have been killed. (A genuinely stuck loop withholds it:
// pkg/node's TestHealthyFailsOnAStuckLoop and pkg/systemd's watchdog tests.)
func TestCase14WatchdogWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: filepath.Join(suite.dir, "watchdog-controlplane"),
		Bootstrap: &framework.BootstrapOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	if err := cp.DeleteBootstrapBinding(ctx, framework.NodeAutoapproveBinding); err != nil {
		t.Fatal(err)
	}
	// An API server that is gone: a kubeconfig naming a loopback port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "na-watchdog-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	deadKubeconfig := filepath.Join(dir, "dead.kubeconfig")
	if err := os.WriteFile(deadKubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: nobody}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, deadAddr)), 0o600); err != nil {
		t.Fatal(err)
	}

	const watchdogSec = 4 * time.Second
	env := func(s *framework.NotifySocket) []string {
		return []string{s.Env(), fmt.Sprintf("WATCHDOG_USEC=%d", watchdogSec.Microseconds())}
	}
	csrDir, apiDir := filepath.Join(dir, "csr"), filepath.Join(dir, "api")
	for _, d := range []string{csrDir, apiDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	csrSock := framework.ListenTestNotify(t, filepath.Join(csrDir, "notify.sock"))
	apiSock := framework.ListenTestNotify(t, filepath.Join(apiDir, "notify.sock"))
	start := time.Now()
	framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, "watchdog-csr"), NodeName: "watchdog-csr", Kubeconfig: filepath.Join(csrDir, "node.kubeconfig"),
		RuntimeEndpoint: suite.ctrd.Endpoint, Env: env(csrSock),
		Args: append(agentArgs(), "--bootstrap-kubeconfig="+cp.BootstrapKubeconfig(), "--rotate-certificates=true"),
	})
	framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, "watchdog-api"), NodeName: "watchdog-api", Kubeconfig: deadKubeconfig,
		RuntimeEndpoint: suite.ctrd.Endpoint, Env: env(apiSock), Args: agentArgs(),
	})
	time.Sleep(3*time.Minute - time.Since(start))
	until := time.Now()

	csrs, err := cp.NodeCSRs(ctx, "watchdog-csr")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csrs {
		t.Logf("CSR %s", framework.DescribeCSR(c))
		if len(c.Status.Certificate) > 0 {
			t.Errorf("CSR %s was issued: the test needs one never approved", c.Name)
		}
	}
	if len(csrs) == 0 {
		t.Error("no CSR filed: the agent did not get as far as waiting for its approval")
	}
	for name, s := range map[string]*framework.NotifySocket{"CSR never approved": csrSock, "API server gone": apiSock} {
		// The first ping comes once the agent runs (well within the first watchdog period).
		gap, n := maxGap(s, start.Add(watchdogSec), until)
		t.Logf("%s: %d WATCHDOG=1 in %v, longest gap %v", name, n, until.Sub(start).Round(time.Second), gap.Round(time.Millisecond))
		if gap > watchdogSec {
			t.Errorf("%s: %v without WATCHDOG=1 (WatchdogSec %v): systemd would have killed an agent that only waits", name, gap.Round(time.Millisecond), watchdogSec)
		}
	}
}
