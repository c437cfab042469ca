//go:build benchkubeletapi

package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestBenchKubeletAPI measures what the simulated Nodes' kubelet API costs `nodeagent simulate`
// (BENCHMARKS.md, "bench-kubelet-api"): BENCH_KUBELET_API_NODES Nodes (default 1000) with --port=0
// and then with one listener per Node (--port=BENCH_KUBELET_API_PORT, default 15000), each on a
// control plane of its own; RSS, descriptors, threads and CPU over a BENCH_KUBELET_API_WINDOW
// (default 60 s) idle, and, with the listeners, while BENCH_KUBELET_API_STREAMS (default 100)
// `kubectl logs -f` streams (through the API server) are open on pods of as many Nodes.
//
//	go test -tags benchkubeletapi -run TestBenchKubeletAPI -v -timeout 30m ./test/integration/
func TestBenchKubeletAPI(t *testing.T) {
	nodes := envInt(t, "BENCH_KUBELET_API_NODES", 1000)
	firstPort := envInt(t, "BENCH_KUBELET_API_PORT", 15000)
	streams := envInt(t, "BENCH_KUBELET_API_STREAMS", 100)
	window := envDuration(t, "BENCH_KUBELET_API_WINDOW", time.Minute)
	profileDir := os.Getenv("BENCH_KUBELET_API_PROFILE") // a CPU, heap and goroutine profile of each window here
	runs := os.Getenv("BENCH_KUBELET_API_RUNS")
	if runs == "" {
		runs = "without,with"
	}
	ip := hostAddress(t)
	for _, withAPI := range []bool{false, true} {
		name := map[bool]string{false: "without", true: "with"}[withAPI]
		if !slices.Contains(strings.Split(runs, ","), name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(t.TempDir(), "cp")})
			args := []string{"--kubeconfig=" + cp.AdminKubeconfig, "--nodes=" + strconv.Itoa(nodes), "--node-name-prefix=bench-"}
			if withAPI {
				if profileDir != "" {
					args = append(args, "--enable-profiling-handler")
				}
				args = append(args, "--address="+ip, "--node-ip="+ip, "--port="+strconv.Itoa(firstPort), "--client-ca-file="+cp.KubeletClientCAFile)
			}
			start := time.Now()
			sim := startSimulator(t, args...)
			err := framework.WaitFor(ctx, time.Duration(max(1, nodes/2000))*time.Second, func() (bool, error) {
				list, err := cp.AdminClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
				if err != nil {
					return false, err
				}
				ready := 0
				for i := range list.Items {
					if framework.IsReady(&list.Items[i]) {
						ready++
					}
				}
				if time.Since(start) > 10*time.Minute {
					return false, fmt.Errorf("%d of %d Ready: %w", ready, nodes, framework.ErrStop)
				}
				return ready == nodes, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s the kubelet API: %d Nodes Ready after %v", name, nodes, time.Since(start).Round(time.Second))
			time.Sleep(30 * time.Second) // start-up traffic ends
			measure := func(what string) {
				before, err := framework.ReadProcCPU(sim.pid)
				if err != nil {
					t.Fatal(err)
				}
				m0, _ := framework.ScrapeMetrics(ctx, nil, sim.base+"/metrics")
				// The heartbeats over the window, from what they record (heartbeatGaps): every Lease's
				// renewTime from a watch and every Node's last status sync from the simulator.
				wctx, stop := context.WithCancel(ctx)
				statusFrom := sim.base
				if nodes > 2000 {
					statusFrom = "" // GET /simulation/nodes every 2 s would cost the simulator more than what is measured
				}
				gaps := watchHeartbeats(wctx, t, cp.AdminClient, "bench-", statusFrom)
				if profileDir != "" {
					profile(t, sim.base, profileDir, strings.ReplaceAll(what, " ", "_"), window/2)
				}
				// Every 5 s over the window: the oldest Lease renewTime of the simulated Nodes, read
				// through a List (renewed every 10 s: a Lease older than 11 s is late by a second or
				// more, or the List was slow).
				var oldest time.Duration
				late := 0
				for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(5 * time.Second) {
					leases, err := cp.AdminClient.CoordinationV1().Leases("kube-node-lease").List(ctx, metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					now := time.Now()
					for _, l := range leases.Items {
						if !strings.HasPrefix(l.Name, "bench-") || l.Spec.RenewTime == nil {
							continue
						}
						age := now.Sub(l.Spec.RenewTime.Time)
						oldest = max(oldest, age)
						if age > 11*time.Second {
							late++
						}
					}
				}
				stop()
				after, _ := framework.ReadProcCPU(sim.pid)
				t.Logf("RESULT %s, %s: oldest Lease renewTime seen %v ago; %d samples of a Lease older than 11 s", name, what, oldest.Round(100*time.Millisecond), late)
				for _, l := range []time.Duration{600 * time.Millisecond, time.Second} {
					leaseSt, leaseOwn, statusSt := gaps.stats(l)
					t.Logf("RESULT %s, %s: Lease renewTime intervals: %v", name, what, leaseSt)
					t.Logf("RESULT %s, %s: Lease renewTime intervals less the previous write's latency: %v", name, what, leaseOwn)
					t.Logf("RESULT %s, %s: status sync intervals: %v", name, what, statusSt)
				}
				if m1, err := framework.ScrapeMetrics(ctx, nil, sim.base+"/metrics"); err == nil && m0 != nil {
					n := m1.Value("nodeagent_lease_renew_duration_seconds_count", nil) - m0.Value("nodeagent_lease_renew_duration_seconds_count", nil)
					sum := m1.Value("nodeagent_lease_renew_duration_seconds_sum", nil) - m0.Value("nodeagent_lease_renew_duration_seconds_sum", nil)
					slow := n - (m1.Value("nodeagent_lease_renew_duration_seconds_bucket", map[string]string{"le": "0.512"}) - m0.Value("nodeagent_lease_renew_duration_seconds_bucket", map[string]string{"le": "0.512"}))
					if n > 0 {
						t.Logf("RESULT %s, %s: %d Lease writes, mean %v, %d over 512 ms; goroutines %v", name, what, int(n),
							time.Duration(sum/n*float64(time.Second)).Round(time.Millisecond), int(slow), m1.Value("go_goroutines", nil))
					}
				}
				st, _ := framework.ReadProcStats(sim.pid)
				t.Logf("RESULT %s, %s: RSS %.1f MiB, fds %d (sockets %d), threads %d, CPU %.1f%% of a core over %v",
					name, what, float64(st.RSS)/(1<<20), st.FDs, st.Sockets, st.Threads, 100*(after-before).Seconds()/window.Seconds(), window)
			}
			measure("idle")
			if !withAPI {
				return
			}
			const ns = "bench-logs"
			if err := cp.CreateNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			for i := range streams {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("logs-%d", i), Namespace: ns,
					Annotations: map[string]string{"nodeagent.io/log-period": "1s"}},
					Spec: corev1.PodSpec{NodeName: fmt.Sprintf("bench-%04d", i), Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
				if _, err := cp.AdminClient.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if err = waitPodsRunning(ctx, cp.AdminClient, ns, streams); err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			lines := make(chan int, streams)
			for i := range streams {
				rc, err := cp.AdminClient.CoreV1().Pods(ns).GetLogs(fmt.Sprintf("logs-%d", i), &corev1.PodLogOptions{Follow: true}).Stream(sctx)
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				go func() {
					n, _ := io.Copy(io.Discard, rc)
					_ = rc.Close()
					lines <- int(n)
				}()
			}
			measure(fmt.Sprintf("%d kubectl logs -f streams open", streams))
			cancel()
			total := 0
			for range streams {
				total += <-lines
			}
			t.Logf("RESULT %d bytes of logs received over the streams", total)
		})
	}
}

// profile starts, in the background, a CPU profile of seconds of the simulator at base and, after it,
// saves a heap and a goroutine profile, into dir/<what>.{cpu,heap,goroutine}.pprof.
func profile(t *testing.T, base, dir, what string, seconds time.Duration) {
	get := func(path, file string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Logf("profile %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, what+"."+file+".pprof"))
		if err != nil {
			t.Logf("profile %s: %v", path, err)
			return
		}
		defer f.Close()
		_, _ = io.Copy(f, resp.Body)
	}
	go func() {
		get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(seconds.Seconds())), "cpu")
		get("/debug/pprof/heap", "heap")
		get("/debug/pprof/goroutine", "goroutine")
	}()
}
