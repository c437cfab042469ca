// Command benchscale runs `nodeagent simulate` and KWOK (sigs.k8s.io/kwok/cmd/kwok v0.8.0, built by
// hack/build-kwok.sh into _output/bin/kwok) side by side at scale: for each node count N, each system in
// turn on a fresh local control plane (test/framework: etcd, kube-apiserver, and the real
// kube-controller-manager with its node lifecycle controller), keeping N Nodes for a window after all
// are Ready, and measures for each:
//
//   - the time from the process's start until all N Nodes are Ready (watched; KWOK's Nodes are created
//     beforehand, as KWOK needs, and that creation is timed on its own);
//   - the Nodes ever seen with Ready False or Unknown (a watch on every Node from before the start);
//   - the Lease renew interval, p50 and p99, from a watch on the Leases in kube-node-lease (the difference
//     of consecutive spec.renewTime of each Lease) during the window;
//   - the process's CPU (cores, utime+stime delta over the window) and RSS (sampled every 5 s);
//   - its API requests per minute per Node, by verb and resource, from the API server's audit log (each
//     system runs as a service account of its own, which the framework's audit policy logs);
//   - kube-apiserver's, etcd's and kube-controller-manager's CPU over the window.
//
// It prints the tables (markdown) and writes them into the bench-scale section of BENCHMARKS.md for its
// list of node counts (between that section's markers, appended if missing; the rest of the file,
// sections of other node lists included, is left as it is).
//
//	go run ./test/benchscale [--nodes 100,1000] [--duration 10m] [--out BENCHMARKS.md] [--dir _output/bench-scale]
//
// The window starts --settle (default 1m) after all are Ready, so that start-up traffic (Lease creation,
// the start-up Events) is not counted as steady state; Nodes lost are watched from the start. The defaults
// come from $BENCH_SCALE_NODES, $BENCH_SCALE_DURATION and $BENCH_SCALE_SETTLE. `make bench-scale` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeagent/nodeagent/test/benchkit"
)

type options struct {
	nodes        []int
	duration     time.Duration
	settle       time.Duration
	readyTimeout time.Duration
	sample       time.Duration
	out, dir     string
	keep         bool
	systems      []string
	// shards splits nodeagent simulate's Nodes over this many processes (--shards, --shard-index),
	// the same total per run; 1 is one process.
	shards int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchscale:", err)
		os.Exit(1)
	}
}

func run() error {
	nodesDefault := envOr("BENCH_SCALE_NODES", "100,1000")
	durDefault, err := time.ParseDuration(envOr("BENCH_SCALE_DURATION", "10m"))
	if err != nil {
		return fmt.Errorf("BENCH_SCALE_DURATION: %w", err)
	}
	settleDefault, err := time.ParseDuration(envOr("BENCH_SCALE_SETTLE", "1m"))
	if err != nil {
		return fmt.Errorf("BENCH_SCALE_SETTLE: %w", err)
	}
	var o options
	var nodes, systems string
	flag.StringVar(&nodes, "nodes", nodesDefault, "comma-separated node counts ($BENCH_SCALE_NODES)")
	flag.DurationVar(&o.duration, "duration", durDefault, "measurement window after all Nodes are Ready ($BENCH_SCALE_DURATION)")
	flag.DurationVar(&o.settle, "settle", settleDefault, "wait after all Nodes are Ready before the window starts, for start-up traffic (Lease creation, start-up Events) to end ($BENCH_SCALE_SETTLE)")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 15*time.Minute, "if not all Nodes are Ready within this, start the window all the same (reported as not reached)")
	flag.DurationVar(&o.sample, "sample", 5*time.Second, "RSS sampling period")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "file whose bench-scale section gets the tables (empty: print only)")
	flag.StringVar(&o.dir, "dir", "_output/bench-scale", "where each run's control plane and logs go")
	flag.BoolVar(&o.keep, "keep", os.Getenv("BENCH_SCALE_KEEP") != "", "keep each run's directory (etcd data, audit log, logs; $BENCH_SCALE_KEEP)")
	flag.StringVar(&systems, "systems", "nodeagent,kwok", "which systems to run, in order")
	shardsDefault, err := strconv.Atoi(envOr("BENCH_SCALE_SHARDS", "1"))
	if err != nil {
		return fmt.Errorf("BENCH_SCALE_SHARDS: %w", err)
	}
	flag.IntVar(&o.shards, "shards", shardsDefault, "run nodeagent simulate as this many shard processes (--shards K --shard-index I), each with nodes/K Nodes ($BENCH_SCALE_SHARDS)")
	flag.Parse()
	if o.shards < 1 {
		return fmt.Errorf("--shards %d: must be at least 1", o.shards)
	}
	for _, s := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("--nodes %q: %q is not a positive number", nodes, s)
		}
		if n%o.shards != 0 {
			return fmt.Errorf("--nodes %d: not a multiple of --shards %d (each shard runs nodes/shards)", n, o.shards)
		}
		o.nodes = append(o.nodes, n)
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
	env, err := benchkit.DescribeEnv(ctx, root, agentBin)
	if err != nil {
		return err
	}
	start := time.Now()
	env.LoadStart = benchkit.LoadAvg()
	var results []*result
	for _, n := range o.nodes {
		for _, sys := range o.systems {
			fmt.Printf("=== %s, %d nodes (window %v)\n", sys, n, o.duration)
			r, err := measure(ctx, o, sys, n, agentBin, filepath.Join(root, "_output", "bin"))
			if err != nil {
				return fmt.Errorf("%s, %d nodes: %w", sys, n, err)
			}
			fmt.Println(r.summary())
			results = append(results, r)
		}
	}
	env.LoadEnd = benchkit.LoadAvg()
	env.Took = time.Since(start)
	report := render(o, env, results)
	fmt.Println(report)
	if o.out == "" {
		return nil
	}
	begin, end := markers(o.nodes, o.shards)
	if err := benchkit.WriteSection(o.out, begin, end, report); err != nil {
		return err
	}
	fmt.Printf("wrote the bench-scale section of %s\n", o.out)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// errTimeout is wrapped when the Nodes are not all Ready in time.
var errTimeout = errors.New("timed out")
