package integration_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/test/framework"
)

// TestKubeletAPIFlood (issue 45, item 5: "one Node's port takes down every Node's API"): a
// simulator of 2 Nodes with 2048 descriptors (prlimit), the kubelet API on; 50 connections to Node
// 0's port that send half a TLS ClientHello, then 2050 idle ones (loopback, more than the process
// has descriptors):
//   - the half-sent handshakes are closed by the server after kubeletserver.ReadHeaderTimeout (the
//     kubelet's http.Server holds them for its 4 h ReadTimeout);
//   - Node 0 holds no more than its cap (the default from RLIMIT_NOFILE: 127): a new client of Node 0
//     gets no handshake, as a kubelet under the same flood;
//   - while the flood lasts, `kubectl logs` of a pod on Node 1 answers, the simulator's healthz port
//     answers, and both Nodes' Leases renew.
func TestKubeletAPIFlood(t *testing.T) {
	t.Parallel()
	const (
		ns        = "kubelet-api-flood"
		nofile    = 2048
		halfHello = 50
		idle      = 2050
	)
	ctx := t.Context()
	dir := t.TempDir()
	cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(dir, "cp")})
	admin := cp.AdminClient
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ip := hostAddress(t)
	firstPort := freePortRange(t, ip, 2)
	// --address 0.0.0.0: the API server reaches the Nodes at --node-ip, the flood at 127.0.0.1.
	sim := startSimulatorUnder(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"},
		"--kubeconfig="+cp.AdminKubeconfig, "--nodes=2", "--node-name-prefix=flood-",
		"--address=0.0.0.0", "--node-ip="+ip, "--port="+strconv.Itoa(firstPort), "--client-ca-file="+cp.KubeletClientCAFile)
	nodes := []string{"flood-0000", "flood-0001"}
	for i, name := range []string{"a", "b"} {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"nodeagent.io/log-lines": "3", "nodeagent.io/log-text": "hello"}},
			Spec: corev1.PodSpec{NodeName: nodes[i], Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitPodsRunning(ctx, admin, ns, 2); err != nil {
		t.Fatal(err)
	}
	kubectlLogs := func(timeout time.Duration) (string, time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		out, err := cp.Kubectl(cctx, "-n", ns, "logs", "b", "--request-timeout="+timeout.String())
		return out, time.Since(start), err
	}
	if out, _, err := kubectlLogs(30 * time.Second); err != nil || out != "hello container=c restart=0 line=0\nhello container=c restart=0 line=1\nhello container=c restart=0 line=2\n" {
		t.Fatalf("kubectl logs b before the flood: %q, %v", out, err)
	}

	node0 := net.JoinHostPort("127.0.0.1", strconv.Itoa(firstPort))
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dial := func() (net.Conn, error) {
		c, err := net.DialTimeout("tcp", node0, 5*time.Second)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}

	// Half-sent ClientHellos: a handshake record header announcing 512 bytes, never sent.
	closedAfter := make(chan time.Duration, halfHello)
	for range halfHello {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			var b [1]byte
			_, err := c.Read(b[:])
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				closedAfter <- -1 // still open after 60 s
				return
			}
			closedAfter <- time.Since(sent)
		}()
	}
	// The idle flood.
	var dialErrs int
	floodStart := time.Now()
	for range idle {
		if _, err := dial(); err != nil {
			dialErrs++
		}
	}
	t.Logf("flood: %d idle connections to Node 0 (%s) opened in %v, %d failed", idle-dialErrs, node0, time.Since(floodStart), dialErrs)

	// Node 0 serves no more: a new client's handshake is not answered.
	t.Run("node 0 refused", func(t *testing.T) {
		c, err := dial()
		if err != nil {
			return // refused outright
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the Node's self-signed certificate
		if err := tc.Handshake(); err == nil {
			t.Errorf("a new TLS client of Node 0 got its handshake answered during a flood of %d connections", idle)
		}
	})
	leaseBefore := map[string]time.Time{}
	for _, n := range nodes {
		l, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leaseBefore[n] = l.Spec.RenewTime.Time
	}
	t.Run("kubectl logs of a pod on node 1", func(t *testing.T) {
		out, took, err := kubectlLogs(20 * time.Second)
		t.Logf("kubectl logs b (Node 1 at %s:%d) during the flood: %v, %d bytes, %v", ip, firstPort+1, took, len(out), err)
		if err != nil || out != "hello container=c restart=0 line=0\nhello container=c restart=0 line=1\nhello container=c restart=0 line=2\n" {
			t.Errorf("kubectl logs b during the flood: %q, %v", out, err)
		}
	})
	t.Run("healthz", func(t *testing.T) {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		req, _ := http.NewRequestWithContext(hctx, http.MethodGet, sim.base+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("healthz during the flood: %v (after %v)", err, time.Since(start))
		}
		_ = resp.Body.Close()
		t.Logf("healthz during the flood: %d in %v", resp.StatusCode, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("healthz during the flood: %d", resp.StatusCode)
		}
	})
	t.Run("half-sent handshakes closed", func(t *testing.T) {
		var closed, open int
		var longest time.Duration
		for range halfHello {
			d := <-closedAfter
			if d < 0 {
				open++
				continue
			}
			closed++
			longest = max(longest, d)
			if d < kubeletserver.ReadHeaderTimeout-time.Second {
				t.Errorf("a half-sent handshake was closed after %v, before the %v deadline", d, kubeletserver.ReadHeaderTimeout)
			}
		}
		t.Logf("half-sent handshakes: %d closed by the server (the last after %v), %d still open after 60 s", closed, longest, open)
		if open > 0 || longest > kubeletserver.ReadHeaderTimeout+10*time.Second {
			t.Errorf("%d of %d half-sent handshakes still open after 60 s; the last closed after %v, want within %v of %v",
				open, halfHello, longest, 10*time.Second, kubeletserver.ReadHeaderTimeout)
		}
	})
	t.Run("leases renew", func(t *testing.T) {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := framework.WaitFor(lctx, time.Second, func() (bool, error) {
			for _, n := range nodes {
				l, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
				if err != nil || !l.Spec.RenewTime.After(leaseBefore[n]) {
					return false, err
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("the Leases did not renew during the flood: %v", err)
		}
	})
}
