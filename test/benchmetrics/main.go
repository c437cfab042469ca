// Command benchmetrics measures resource metrics at scale (issue 37): --nodes Nodes with --pods-per-node
// running pods each, scraped by an unmodified metrics-server v0.8.0 (_output/bin/metrics-server, its
// release manifest's flags: --metric-resolution=15s) through the aggregation layer, for `nodeagent
// simulate` (its kubelet API on every Node: --port, /metrics/resource) and for KWOK v0.8.0 with its
// metrics configuration (kwokctl's metrics-usage, from KWOK's module: the Metric metrics-resource and
// the ClusterResourceUsage usage-from-annotation, given to kwok as --config files; its Nodes annotated
// metrics.k8s.io/resource-metrics-path, which metrics-server v0.7+ reads), one after the other in the
// same run, each on a fresh local control plane (test/framework: etcd, kube-apiserver with kubeadm's
// front-proxy flags, kube-controller-manager).
//
// For each system, once every Node is Ready and every pod Running, and --settle later, two windows of
// --duration each:
//
//   - "without": no metrics-server;
//   - "with": metrics-server started, after it served every Node in metrics.k8s.io (its first full
//     scrapes) and --settle more.
//
// In each: the system's process CPU (cores, utime+stime over the window) and RSS (mean and max, sampled
// every 5 s), the Lease renew interval p50/p99 (a watch on kube-node-lease), kube-apiserver's CPU; in
// "with" also metrics-server's CPU and RSS, and its scrape latency as it exports it:
// metrics_server_kubelet_request_duration_seconds (one request per Node per scrape, all Nodes' buckets
// summed over the window; p50 and p99 interpolated in the bucket as Prometheus' histogram_quantile) and
// metrics_server_manager_tick_duration_seconds (a whole scrape of every Node), with its request count by
// success. At the end it counts the Nodes and pods metrics.k8s.io serves.
//
//	go run ./test/benchmetrics [--nodes 1000] [--pods-per-node 10] [--duration 3m] [--systems nodeagent,kwok] [--out BENCHMARKS.md]
//
// `make bench-metrics` runs it; it writes its tables into the bench-metrics section of BENCHMARKS.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodeagent/nodeagent/test/benchkit"
)

const (
	systemNodeagent = "nodeagent"
	systemKWOK      = "kwok"
	benchNamespace  = "bench-metrics"
	beginMarker     = "<!-- bench-metrics:begin -->"
	endMarker       = "<!-- bench-metrics:end -->"
)

type options struct {
	nodes, podsPerNode int
	duration, settle   time.Duration
	systems            []string
	out, dir           string
	keep               bool
	binDir, agentBin   string
	root               string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchmetrics:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	var systems string
	flag.IntVar(&o.nodes, "nodes", 1000, "simulated Nodes of each system")
	flag.IntVar(&o.podsPerNode, "pods-per-node", 10, "running pods on each Node")
	flag.DurationVar(&o.duration, "duration", 3*time.Minute, "each window (without, then with metrics-server)")
	flag.DurationVar(&o.settle, "settle", 30*time.Second, "wait before each window")
	flag.StringVar(&systems, "systems", "nodeagent,kwok", "which systems to run, in order")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "file whose bench-metrics section gets the tables (empty: print only)")
	flag.StringVar(&o.dir, "dir", "_output/bench-metrics", "where each run's control plane and logs go")
	flag.BoolVar(&o.keep, "keep", false, "keep each run's directory")
	flag.Parse()
	if o.nodes <= 0 || o.podsPerNode < 0 {
		return fmt.Errorf("--nodes %d, --pods-per-node %d: must be positive", o.nodes, o.podsPerNode)
	}
	for _, s := range strings.Split(systems, ",") {
		s = strings.TrimSpace(s)
		if s != systemNodeagent && s != systemKWOK {
			return fmt.Errorf("--systems %q: %q is neither %s nor %s", systems, s, systemNodeagent, systemKWOK)
		}
		o.systems = append(o.systems, s)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, agentBin, err := benchkit.Prepare(ctx)
	if err != nil {
		return err
	}
	o.root, o.agentBin, o.binDir = root, agentBin, filepath.Join(root, "_output", "bin")
	env, err := benchkit.DescribeEnv(ctx, root, agentBin)
	if err != nil {
		return err
	}
	start := time.Now()
	env.LoadStart = benchkit.LoadAvg()
	var results []*result
	for _, sys := range o.systems {
		fmt.Printf("=== %s: %d Nodes × %d pods (windows of %v)\n", sys, o.nodes, o.podsPerNode, o.duration)
		r, err := measure(ctx, o, sys)
		if err != nil {
			return fmt.Errorf("%s: %w", sys, err)
		}
		results = append(results, r)
	}
	env.LoadEnd = benchkit.LoadAvg()
	env.Took = time.Since(start)
	report := render(o, env, results)
	fmt.Println(report)
	if o.out == "" {
		return nil
	}
	if err := benchkit.WriteSection(o.out, beginMarker, endMarker, report); err != nil {
		return err
	}
	fmt.Printf("wrote the bench-metrics section of %s\n", o.out)
	return nil
}
