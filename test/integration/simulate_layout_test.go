package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// simNodesWithPrefix returns the names of the simulated Nodes whose name starts with prefix, sorted,
// and their UIDs.
func simNodesWithPrefix(ctx context.Context, t *testing.T, c kubernetes.Interface, prefix string) ([]string, map[string]string) {
	t.Helper()
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeagent.io/simulated=true"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	uids := map[string]string{}
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, prefix) {
			names = append(names, n.Name)
			uids[n.Name] = string(n.UID)
		}
	}
	slices.Sort(names)
	return names, uids
}

// waitSimNodesReady waits until the simulated Nodes named prefix+0000... (want of them) are Ready.
func waitSimNodesReady(ctx context.Context, t *testing.T, c kubernetes.Interface, prefix string, want int, s *simulator) {
	t.Helper()
	var last string
	err := framework.WaitFor(ctx, time.Second, func() (bool, error) {
		if s != nil {
			select {
			case <-s.done:
				return false, fmt.Errorf("nodeagent simulate exited: %v: %w", s.err, framework.ErrStop)
			default:
			}
		}
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeagent.io/simulated=true"})
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if strings.HasPrefix(list.Items[i].Name, prefix) && framework.IsReady(&list.Items[i]) {
				ready++
			}
		}
		last = fmt.Sprintf("%d of %d Ready", ready, want)
		return ready == want, nil
	})
	if err != nil {
		t.Fatalf("%s*: %v (%s)", prefix, err, last)
	}
}

// waitSimReadyz waits until the simulator's /readyz answers 200: every Node of this process registered.
func waitSimReadyz(ctx context.Context, t *testing.T, s *simulator) {
	t.Helper()
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		select {
		case <-s.done:
			return false, fmt.Errorf("nodeagent simulate exited: %v: %w", s.err, framework.ErrStop)
		default:
		}
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		b, _ := os.ReadFile(s.logPath)
		t.Fatalf("/readyz: %v; log:\n%s", err, framework.TailLines(string(b), 10))
	}
}

// TestSimulateLayoutHardening is issue 27's items 3, 4 and 5 against a real API server and etcd:
//   - a template whose Node etcd would refuse (20000 labels, 1.7 MB) exits 1 before any write, naming
//     etcd's request limit, while one near the limit that the check accepts registers and is Ready (the
//     check's managedFields estimate is not below what etcd stores);
//   - a change of --shards keeps the names: --nodes=11 with --shards=909 then 910 runs the same Nodes
//     (same UIDs), and --delete-nodes-on-exit leaves none behind;
//   - two shards started together with different --nodes and one prefix: exactly one runs, the other
//     exits 1 naming --nodes and the layout Lease, and no Node of the loser's range is written by it.
func TestSimulateLayoutHardening(t *testing.T) {
	t.Parallel()
	env := shared(t)
	ctx := t.Context()
	admin := env.cp.AdminClient
	dir := t.TempDir()

	t.Run("template etcd refuses", func(t *testing.T) {
		labels := func(n int) string {
			var b strings.Builder
			b.WriteString("apiVersion: v1\nkind: Node\nmetadata:\n  labels:\n")
			for i := range n {
				fmt.Fprintf(&b, "    example.com/label-%05d: %s\n", i, strings.Repeat("v", 63))
			}
			return b.String()
		}
		big := filepath.Join(dir, "big.yaml")
		if err := os.WriteFile(big, []byte(labels(20000)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out := runSimulateToExit(t, "--kubeconfig="+env.cp.AdminKubeconfig, "--nodes=1", "--node-name-prefix=toobig-", "--node-template="+big)
		if want := "over etcd's default request limit of 1.50 MiB (--max-request-bytes=1572864)"; code != 1 || !strings.Contains(out, want) {
			t.Errorf("20000 labels: exit %d, output:\n%s\nwant exit 1 saying %q", code, framework.TailLines(out, 5), want)
		}
		if names, _ := simNodesWithPrefix(ctx, t, admin, "toobig-"); len(names) > 0 {
			t.Errorf("nodes %v created", names)
		}
		// Near the limit (11900 labels: 1.57 of the 1.5 MiB by the check's estimate): accepted, and etcd takes it.
		near := filepath.Join(dir, "near.yaml")
		if err := os.WriteFile(near, []byte(labels(11900)), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startSimulator(t, "--kubeconfig="+env.cp.AdminKubeconfig, "--nodes=1", "--node-name-prefix=nearbig-", "--node-template="+near, "--delete-nodes-on-exit")
		waitSimReadyz(ctx, t, s)
		waitSimNodesReady(ctx, t, admin, "nearbig-", 1, s)
		if err := s.stop(30 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	t.Run("names stable when --shards changes", func(t *testing.T) {
		const prefix = "kw-"
		s := startSimulator(t, "--kubeconfig="+env.cp.AdminKubeconfig, "--nodes=11", "--shards=909", "--shard-index=0", "--node-name-prefix="+prefix)
		waitSimReadyz(ctx, t, s)
		waitSimNodesReady(ctx, t, admin, prefix, 11, s)
		if err := s.stop(30 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
		before, uids := simNodesWithPrefix(ctx, t, admin, prefix)
		s = startSimulator(t, "--kubeconfig="+env.cp.AdminKubeconfig, "--nodes=11", "--shards=910", "--shard-index=0", "--node-name-prefix="+prefix, "--delete-nodes-on-exit")
		waitSimReadyz(ctx, t, s)
		waitSimNodesReady(ctx, t, admin, prefix, 11, s)
		after, uids2 := simNodesWithPrefix(ctx, t, admin, prefix)
		if fmt.Sprint(before) != fmt.Sprint(after) || before[0] != "kw-0000" || before[10] != "kw-0010" {
			t.Errorf("nodes with --shards=909 %v, with 910 %v: want kw-0000..kw-0010 both times", before, after)
		}
		for name, uid := range uids {
			if uids2[name] != uid {
				t.Errorf("%s: UID %s, was %s: want the same Node", name, uids2[name], uid)
			}
		}
		if err := s.stop(30 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
		if left, _ := simNodesWithPrefix(ctx, t, admin, prefix); len(left) > 0 {
			t.Errorf("after --delete-nodes-on-exit: %v left", left)
		}
	})

	t.Run("shards racing with different --nodes", func(t *testing.T) {
		const prefix = "race-"
		// Shard 0 of --nodes=30 runs race-0000..race-0029, shard 1 of --nodes=20 race-0020..race-0039:
		// they overlap on race-0020..race-0029.
		a := startSimulator(t, "--kubeconfig="+env.cp.AdminKubeconfig, "--nodes=30", "--shards=2", "--shard-index=0", "--node-name-prefix="+prefix, "--delete-nodes-on-exit")
		b := startSimulator(t, "--kubeconfig="+env.cp.AdminKubeconfig, "--nodes=20", "--shards=2", "--shard-index=1", "--node-name-prefix="+prefix, "--delete-nodes-on-exit")
		var winner, loser *simulator
		select {
		case <-a.done:
			winner, loser = b, a
		case <-b.done:
			winner, loser = a, b
		case <-time.After(90 * time.Second):
			t.Fatal("neither shard exited within 90 s: both run, overlapping on race-0020..race-0029")
		}
		loserErr := loser.err
		loser.err = nil // its exit 1 is what this test wants, not a failed stop
		log, _ := os.ReadFile(loser.logPath)
		if want := "every shard must run the same --nodes"; loserErr == nil || !strings.Contains(string(log), want) ||
			!strings.Contains(string(log), "Lease kube-node-lease/nodeagent-simulation-race-") {
			t.Errorf("the refused shard: %v, want exit 1 saying %q and naming the layout Lease; log:\n%s", loserErr, want, framework.TailLines(string(log), 5))
		}
		n := 20
		first := 20
		if winner == a {
			n, first = 30, 0
		}
		waitSimReadyz(ctx, t, winner)
		waitSimNodesReady(ctx, t, admin, prefix, n, winner)
		names, _ := simNodesWithPrefix(ctx, t, admin, prefix)
		if len(names) != n || names[0] != fmt.Sprintf("race-%04d", first) {
			t.Errorf("nodes %v: want the winner's %d from race-%04d only", names, n, first)
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, fmt.Sprintf("race-%04d", first), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(first / n); node.Labels["nodeagent.io/simulation-shard"] != want || !strings.HasPrefix(node.Labels["nodeagent.io/simulation"], "race-") {
			t.Errorf("labels %v: want shard %s and the simulation's identity", node.Labels, want)
		}
		lease, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "nodeagent-simulation-"+node.Labels["nodeagent.io/simulation"], metav1.GetOptions{})
		if err != nil || lease.Annotations["nodeagent.io/simulation-nodes-per-shard"] != fmt.Sprint(n) {
			t.Errorf("layout Lease %v, %v: want nodes per shard %d", lease, err, n)
		}
		if err := winner.stop(30 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}
