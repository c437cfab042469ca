package faults

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// runtimeAbsentFor is how long case 12 keeps the runtime absent (issue 16: at least 2 minutes).
const runtimeAbsentFor = 2 * time.Minute

// TestCase12RuntimeAbsent: nodeagent started with --container-runtime-endpoint at a socket that does
// not exist stays up for two minutes without growing (RSS, goroutines, open files and sockets flat:
// one CRI connection, reconnected by gRPC, not one per call), registers its Node NotReady with a
// message naming the socket and the error, renews its Lease and stays healthy; when a runtime then
// appears at that path, the Node turns Ready with no more connections than the one it always had.
func TestCase12RuntimeAbsent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), runtimeAbsentFor+4*time.Minute)
	defer cancel()
	// A short directory: unix socket paths are limited to 108 bytes. The socket is a symlink, made
	// once containerd runs, to its real socket.
	sockDir, err := os.MkdirTemp("", "na-absent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "containerd.sock")

	a := startAgentWith(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, nodeRuntimeAbsent), NodeName: nodeRuntimeAbsent, Kubeconfig: suite.cp.KubeconfigFor(nodeRuntimeAbsent),
		RuntimeEndpoint: "unix://" + sock, Args: agentArgs(),
	})
	wantMsg := "container runtime is down: dial unix " + sock + ": connect: no such file or directory"
	n, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, nodeRuntimeAbsent, 30*time.Second, "registered NotReady naming the absent socket", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeReady)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, wantMsg)
	})
	t.Logf("registered: %s", framework.DescribeReady(n))
	framework.WaitLease(ctx, t, suite.cp.AdminClient, nodeRuntimeAbsent, renewInterval+slack, "Lease created", func(*coordinationv1.Lease) bool { return true })

	// Let the process settle (first GC cycles, informer caches), then sample it.
	time.Sleep(20 * time.Second)
	first := mustProcStats(t, a.PID)
	firstGoroutines := mustScrape(ctx, t, a).Value("go_goroutines", nil)
	t.Logf("runtime absent, t=20s: %s, %v goroutines", first, firstGoroutines)
	deadline := time.Now().Add(runtimeAbsentFor - 20*time.Second)
	var last framework.ProcStats
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Second)
		last = mustProcStats(t, a.PID)
		waitHealthz(ctx, t, a, "/healthz", 200, 5*time.Second)
	}
	lastGoroutines := mustScrape(ctx, t, a).Value("go_goroutines", nil)
	t.Logf("runtime absent, t=%v: %s, %v goroutines", runtimeAbsentFor, last, lastGoroutines)
	if lastGoroutines > firstGoroutines+10 {
		t.Errorf("goroutines grew %v → %v with the runtime absent", firstGoroutines, lastGoroutines)
	}
	if last.FDs > first.FDs+3 || last.Sockets > first.Sockets+2 {
		t.Errorf("open files grew %d → %d (sockets %d → %d) with the runtime absent", first.FDs, last.FDs, first.Sockets, last.Sockets)
	}
	if last.RSS > first.RSS+8<<20 {
		t.Errorf("RSS grew %d → %d MiB with the runtime absent", first.RSS>>20, last.RSS>>20)
	}
	n, _ = framework.WaitNode(ctx, t, suite.cp.AdminClient, nodeRuntimeAbsent, 5*time.Second, "still NotReady naming the socket", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeReady)
		return c != nil && strings.Contains(c.Message, wantMsg)
	})
	lease, err := framework.GetLease(ctx, suite.cp.AdminClient, nodeRuntimeAbsent)
	if err != nil {
		t.Fatal(err)
	}
	if !framework.LeaseRenewedAfter(time.Now().Add(-renewInterval - slack))(lease) {
		t.Errorf("Lease not renewed within the last %v: %s", renewInterval+slack, framework.DescribeLease(lease))
	}

	// The runtime appears at that path.
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: agentDir(t, "containerd"), CNI: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrd.Close)
	if err := ctrd.WaitNetwork(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ctrd.Socket, sock); err != nil {
		t.Fatal(err)
	}
	appeared := time.Now()
	ready, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, nodeRuntimeAbsent, 30*time.Second, "Ready once the runtime appears", framework.IsReady)
	t.Logf("Ready %v after the runtime appeared: %s", time.Since(appeared).Round(time.Millisecond), framework.DescribeReady(ready))
	time.Sleep(10 * time.Second) // a few polls and syncs over the one connection
	after := mustProcStats(t, a.PID)
	t.Logf("runtime present: %s", after)
	if after.Sockets > last.Sockets+1 {
		t.Errorf("sockets %d → %d once the runtime appeared: want at most the one CRI connection more", last.Sockets, after.Sockets)
	}
}

func mustProcStats(t *testing.T, pid int) framework.ProcStats {
	t.Helper()
	st, err := framework.ReadProcStats(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
