package faults

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestCase07APIErrors is case 7: a reverse proxy between nodeagent and the real API server answers
// every other write nodeagent makes for its heartbeats (PATCH nodes/<name>/status, PUT
// leases/<name>) with 409 Conflict, 429 TooManyRequests or a 5xx, some with Retry-After, for longer
// than kube-controller-manager's grace period. nodeagent retries as the kubelet does (a failed
// status patch is followed by a GET of the Node and another patch in the same sync; a failed Lease
// update by another update, after a GET on a conflict), and the node stays Ready throughout.
func TestCase07APIErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := nodeAPIErrors
	proxy, err := NewProxy(suite.cp.APIServerURL, suite.cp.CAData)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	kubeconfig := filepath.Join(agentDir(t, "kubeconfig"), "proxied.kubeconfig")
	if err := framework.WriteKubeconfig(kubeconfig, proxy.URL, proxy.CAData, nodeUser(name), suite.cp.NodeConfig(name).BearerToken); err != nil {
		t.Fatal(err)
	}

	// --node-status-report-frequency=1s: every sync patches, so every status period has writes to fail.
	// A short Lease (renewed every 2 s) gives enough Lease writes in the window for every injected
	// code to hit one.
	const caseLeaseSeconds = 8
	a := startAgentWith(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, name), NodeName: name, Kubeconfig: kubeconfig, RuntimeEndpoint: suite.ctrd.Endpoint,
		Args: append(agentArgs(), "--node-status-report-frequency=1s", fmt.Sprintf("--node-lease-duration-seconds=%d", caseLeaseSeconds)),
	})
	node := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	framework.WaitLease(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "owner reference to the Node", framework.LeaseOwnedBy(node))
	pid := a.PID

	statusPath := "/api/v1/nodes/" + name + "/status"
	leasePath := "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + name
	faults := []Fault{
		{Code: http.StatusConflict},
		{Code: http.StatusTooManyRequests, RetryAfter: 1},
		{Code: http.StatusInternalServerError},
		{Code: http.StatusServiceUnavailable},
		{Code: http.StatusGatewayTimeout},
		{Code: http.StatusTooManyRequests},
		{Code: http.StatusServiceUnavailable, RetryAfter: 1},
	}
	// Every other write of each kind is answered with the next fault of that kind's cycle.
	var mu sync.Mutex
	writes, injected := map[string]int{}, map[string]int{}
	proxy.SetInject(func(r *http.Request) *Fault {
		if (r.Method != http.MethodPatch || r.URL.Path != statusPath) && (r.Method != http.MethodPut || r.URL.Path != leasePath) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		writes[r.URL.Path]++
		if writes[r.URL.Path]%2 == 0 {
			return nil
		}
		f := faults[injected[r.URL.Path]%len(faults)]
		injected[r.URL.Path]++
		return &f
	})
	injectStart := time.Now()

	// For longer than the node monitor grace period, the node must stay Ready and its Lease fresh.
	w, _ := watchNode(ctx, t, name)
	const window = nodeMonitorGracePeriod + 10*time.Second
	for time.Since(injectStart) < window {
		if !a.Running() {
			t.Fatalf("nodeagent exited: %v", a.Wait(ctx))
		}
		lease, err := framework.GetLease(ctx, suite.cp.AdminClient, name)
		if err != nil {
			t.Fatal(err)
		}
		if age := time.Since(lease.Spec.RenewTime.Time); age > caseLeaseSeconds*time.Second {
			t.Errorf("Lease not renewed for %v (lease duration %ds)", age.Round(time.Millisecond), caseLeaseSeconds)
		}
		time.Sleep(250 * time.Millisecond)
	}
	proxy.SetInject(nil)
	w.stop()
	seen := 0
	for ev := range w.events {
		seen++
		if !framework.IsReady(ev.Node) {
			t.Errorf("node not Ready at %s: %s", ev.Time.Format(time.RFC3339Nano), framework.DescribeReady(ev.Node))
		}
	}
	final := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	t.Logf("node Ready in all %d watch events over %v of injected errors; now %s", seen, window, framework.DescribeReady(final))

	// What the proxy saw: injected faults of each kind, each followed by the kubelet's retry.
	reqs := proxy.Requests()
	counts := map[string]int{}
	for i, r := range reqs {
		if !r.Injected {
			continue
		}
		kind := "status"
		if r.Path == leasePath {
			kind = "lease"
		}
		counts[fmt.Sprintf("%s %d", kind, r.Code)]++
		retryAfter := r.RetryAfter > 0
		next := nextOn(reqs[i+1:], r.Path, func(n Request) bool { return n.Method != http.MethodGet || !n.Watch })
		if next == nil {
			if r.Time.After(injectStart.Add(window - 5*time.Second)) {
				continue // injected near the end; its retry may have come after the window
			}
			t.Errorf("%s %s answered %d at %s: no retry followed", r.Method, r.Path, r.Code, r.Time.Format(time.RFC3339Nano))
			continue
		}
		want := wantRetry(kind, r.Code, retryAfter)
		if !want(*next) {
			t.Errorf("%s %s answered %d: next request %s %s, not the kubelet's retry", r.Method, r.Path, r.Code, next.Method, next.Path)
		}
		if d := next.Time.Sub(r.Time); d > statusFrequency {
			t.Errorf("%s %s answered %d: retried only %v later", r.Method, r.Path, r.Code, d.Round(time.Millisecond))
		}
	}
	t.Logf("injected faults: %v", counts)
	for _, kind := range []string{"status", "lease"} {
		for _, c := range []int{409, 429, 500, 503, 504} {
			if counts[fmt.Sprintf("%s %d", kind, c)] == 0 {
				t.Errorf("no %d injected on %s writes; the case did not exercise it", c, kind)
			}
		}
	}

	m := mustScrape(ctx, t, a)
	for _, reason := range []string{"Conflict", "TooManyRequests", "InternalError", "ServiceUnavailable", "Timeout"} {
		if m.Sum("nodeagent_node_status_patch_errors_total", map[string]string{"reason": reason}) == 0 {
			t.Errorf("nodeagent_node_status_patch_errors_total{reason=%q} = 0 after injected %s errors", reason, reason)
		}
	}
	if m.Sum("nodeagent_lease_renew_errors_total", nil) == 0 {
		t.Errorf("nodeagent_lease_renew_errors_total = 0 after injected Lease errors")
	}
	waitHealthz(ctx, t, a, "/healthz/syncloop", http.StatusOK, 30*time.Second)
	if !a.Running() || a.PID != pid {
		t.Errorf("nodeagent restarted or exited (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}
	if n := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute); n.UID != node.UID {
		t.Errorf("Node UID changed from %s to %s", node.UID, n.UID)
	}
}

// nextOn returns the first request in reqs on the object at path (the path itself, or the
// object's path without a /status suffix) that keep accepts, or nil.
func nextOn(reqs []Request, path string, keep func(Request) bool) *Request {
	object := strings.TrimSuffix(path, "/status")
	for i := range reqs {
		r := reqs[i]
		if (r.Path == path || r.Path == object) && keep(r) {
			return &reqs[i]
		}
	}
	return nil
}

// wantRetry returns what the kubelet's retry after an error code on a write of kind looks like.
// client-go itself repeats a request answered 429/5xx with Retry-After. Otherwise a status patch
// is retried by the next try of the sync, which GETs the Node from the API server first; a Lease
// update is repeated at once, or after a GET of the Lease on a conflict (backoffEnsureLease).
func wantRetry(kind string, code int, retryAfter bool) func(Request) bool {
	isGet := func(r Request) bool { return r.Method == http.MethodGet }
	same := func(method string) func(Request) bool {
		return func(r Request) bool { return r.Method == method }
	}
	switch {
	case kind == "status" && retryAfter:
		return func(r Request) bool { return same(http.MethodPatch)(r) || isGet(r) }
	case kind == "status":
		return isGet
	case code == http.StatusConflict:
		return isGet
	default:
		return same(http.MethodPut)
	}
}
