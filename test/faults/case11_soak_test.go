//go:build soak

package faults

import (
	"context"
	"math"
	"net/http"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// Soak bounds: "flat" means the end is within these of the start.
const (
	soakGoroutineGrowth = 5             // goroutines
	soakRSSGrowth       = 0.15          // fraction of the start RSS ...
	soakRSSSlack        = 8 * (1 << 20) // ... plus this many bytes, for the GC's and allocator's noise
	soakSampleEvery     = time.Minute
	soakWarmUp          = 30 * time.Second
)

// TestSoak is case 11, run by `make soak` (build tag soak): nodeagent at a 1 s status frequency
// (other settings at their defaults) for SOAK_DURATION (default 30m) against the real control plane
// and containerd. Goroutines (go_goroutines) and RSS (process_resident_memory_bytes) are sampled
// from /metrics after a warm-up and then every minute; at the end both must be flat (at most
// soakGoroutineGrowth more goroutines, RSS within soakRSSGrowth + soakRSSSlack of the start), the
// node Ready with its Lease fresh at every sample, and the agent must have logged no error line.
func TestSoak(t *testing.T) {
	duration := 30 * time.Minute
	if s := os.Getenv("SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 2*soakWarmUp {
			t.Fatalf("SOAK_DURATION=%q: want a duration of at least %v", s, 2*soakWarmUp)
		}
		duration = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+10*time.Minute)
	defer cancel()
	name := nodeSoak
	a := startAgent(ctx, t, name, "--node-status-update-frequency=1s", "--node-lease-duration-seconds=40")
	node := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	readyAt := time.Now()
	t.Logf("soak: node %s Ready; running %v at a 1 s status frequency", name, duration)

	type sample struct {
		at                    time.Duration
		goroutines, rss, heap float64
	}
	take := func() sample {
		t.Helper()
		m := mustScrape(ctx, t, a)
		return sample{at: time.Since(readyAt), goroutines: m.Value("go_goroutines", nil), rss: m.Value("process_resident_memory_bytes", nil),
			heap: m.Value("go_memstats_heap_inuse_bytes", nil)}
	}
	check := func() {
		t.Helper()
		if !a.Running() {
			t.Fatalf("nodeagent exited during the soak: %v", a.Wait(ctx))
		}
		n, err := suite.cp.AdminClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !framework.IsReady(n) || n.UID != node.UID {
			t.Errorf("at %v: node %s (UID %s, was %s)", time.Since(readyAt).Round(time.Second), framework.DescribeReady(n), n.UID, node.UID)
		}
		l, err := framework.GetLease(ctx, suite.cp.AdminClient, name)
		if err != nil {
			t.Fatal(err)
		}
		if age := time.Since(l.Spec.RenewTime.Time); age > 40*time.Second {
			t.Errorf("at %v: Lease last renewed %v ago", time.Since(readyAt).Round(time.Second), age.Round(time.Second))
		}
		if code, body, err := a.Get(ctx, "/healthz"); err != nil || code != http.StatusOK {
			t.Errorf("at %v: /healthz answered %d %q (%v)", time.Since(readyAt).Round(time.Second), code, body, err)
		}
	}

	time.Sleep(soakWarmUp)
	start := take()
	t.Logf("soak start (+%v): goroutines %.0f, RSS %.1f MiB, heap in use %.1f MiB", start.at.Round(time.Second), start.goroutines,
		start.rss/(1<<20), start.heap/(1<<20))
	samples := []sample{start}
	end := readyAt.Add(duration)
	for time.Now().Before(end) {
		time.Sleep(min(soakSampleEvery, time.Until(end)))
		check()
		s := take()
		samples = append(samples, s)
		t.Logf("soak +%v: goroutines %.0f, RSS %.1f MiB, heap in use %.1f MiB", s.at.Round(time.Second), s.goroutines,
			s.rss/(1<<20), s.heap/(1<<20))
	}
	last := samples[len(samples)-1]
	maxG, maxRSS := 0.0, 0.0
	for _, s := range samples {
		maxG, maxRSS = math.Max(maxG, s.goroutines), math.Max(maxRSS, s.rss)
	}
	m := mustScrape(ctx, t, a)
	t.Logf("soak result over %v: goroutines start %.0f end %.0f (max %.0f); RSS start %.1f MiB end %.1f MiB (max %.1f MiB); "+
		"status syncs patched %.0f unchanged %.0f error %.0f; lease renew errors %.0f",
		last.at.Round(time.Second), start.goroutines, last.goroutines, maxG, start.rss/(1<<20), last.rss/(1<<20), maxRSS/(1<<20),
		m.Sum("nodeagent_node_status_syncs_total", map[string]string{"result": "patched"}),
		m.Sum("nodeagent_node_status_syncs_total", map[string]string{"result": "unchanged"}),
		m.Sum("nodeagent_node_status_syncs_total", map[string]string{"result": "error"}), m.Sum("nodeagent_lease_renew_errors_total", nil))

	if last.goroutines > start.goroutines+soakGoroutineGrowth {
		t.Errorf("goroutines grew from %.0f to %.0f, want at most +%d", start.goroutines, last.goroutines, soakGoroutineGrowth)
	}
	if limit := start.rss*(1+soakRSSGrowth) + soakRSSSlack; last.rss > limit {
		t.Errorf("RSS grew from %.1f MiB to %.1f MiB, want at most %.1f MiB", start.rss/(1<<20), last.rss/(1<<20), limit/(1<<20))
	}
	errs := errorLines(a.Logs(), time.Time{}, time.Time{})
	t.Logf("error log lines: %d", len(errs))
	if len(errs) > 0 {
		t.Errorf("nodeagent logged %d error lines during the soak, want none; first ones:\n%s", len(errs), joinLines(errs, 10))
	}
}
