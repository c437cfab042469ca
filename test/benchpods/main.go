// Command benchpods runs pods on `nodeagent simulate`'s Nodes and on KWOK's (sigs.k8s.io/kwok/cmd/kwok
// v0.8.0 with the pod Stages kwokctl gives a cluster by default, kustomize/stage/pod/fast: pod-ready,
// pod-complete, pod-delete, and its default node Stages; built by hack/build-kwok.sh) side by side, each
// system on fresh control planes of its own (test/framework: etcd, kube-apiserver, the real
// kube-controller-manager with deployment, replicaset, nodelifecycle, nodeipam with pod CIDRs and podgc,
// and the real kube-scheduler), in the scenarios of issue 30:
//
//  1. one-node: --one-node-pods pods (10 000) bound directly to one Node, as KWOK's own benchmark
//     (test/e2e/benchmark.go) binds them: the time from the first create until all are Running and
//     Ready, then from a delete of them all until all are gone (KWOK's bar: 60 s and 90 s);
//  2. spread: --nodes Nodes (1000), --deployments Deployments (100) of --replicas (100) created at once:
//     the time until every Deployment is Available, each pod's bind → Ready latency (p50, p99; both
//     instants as this program's watch saw them), and, after the other scenarios, the time from the
//     scale of all to 0 until every pod is gone;
//  3. steady: those pods Running for --steady (5 min): no Node lost, the Lease renew interval's p99;
//  4. churn: a Deployment of --churn (1000) pods (maxSurge 25 %) rolled to a new template while the
//     others run: the time until the rollout is complete.
//
// For each phase it measures the system's process CPU (cores, and CPU-seconds per 1000 pod starts or
// deletes), its RSS (sampled), its API requests by verb and resource from the API server's audit log
// (each system runs as a service account of its own), the pod writes per pod start and per pod delete,
// kube-apiserver's, etcd's, kube-scheduler's and kube-controller-manager's CPU, the pods stuck (not Ready
// 60 s after their bind, or not gone 60 s after their deletion) and any pod IP held by two live pods at
// once. With --kubemark N it also runs N of kubemark's hollow nodes (the kubelet's own code over a fake
// runtime, one process a Node) with pods, for their cost per Node beside the others.
//
// It prints the tables (markdown) and writes them into the bench-pods section of BENCHMARKS.md.
//
//	go run ./test/benchpods [--systems nodeagent,kwok] [--nodes 1000] [--steady 5m] [--out BENCHMARKS.md]
//
// `make bench-pods` runs it; the defaults of its sizes come from $BENCH_PODS_* (see --help).
package main

import (
	"context"
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

const (
	systemNodeagent = "nodeagent"
	systemKWOK      = "kwok"
	systemKubemark  = "kubemark"

	// benchNamespace holds each system's service account (its requests are told apart in the audit
	// log by it) and every pod of the benchmark.
	benchNamespace = "bench-pods"
)

type options struct {
	systems                    []string
	scenarios                  map[string]bool
	onePods                    int
	nodes                      int
	deployments, replicas      int
	churn                      int
	steady                     time.Duration
	stuckAfter                 time.Duration
	timeout                    time.Duration
	kubemark, kubemarkPods     int
	kubemarkWindow             time.Duration
	out, dir                   string
	profileDir                 string
	simulateArgs               []string
	simulateEnv                []string
	profileSeconds             int
	keep                       bool
	binDir, agentBin           string
	schedulerQPS, creatorsPool int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchpods:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	var systems, scenarios string
	flag.StringVar(&systems, "systems", envOr("BENCH_PODS_SYSTEMS", "nodeagent,kwok"), "which systems to run, in order ($BENCH_PODS_SYSTEMS)")
	flag.StringVar(&scenarios, "scenarios", envOr("BENCH_PODS_SCENARIOS", "one-node,spread"), "one-node (scenario 1), spread (scenarios 2, 3 and 4) ($BENCH_PODS_SCENARIOS)")
	flag.IntVar(&o.onePods, "one-node-pods", envInt("BENCH_PODS_ONE_NODE", 10000), "pods bound to the one Node of scenario 1 ($BENCH_PODS_ONE_NODE)")
	flag.IntVar(&o.nodes, "nodes", envInt("BENCH_PODS_NODES", 1000), "Nodes of scenarios 2 to 4 ($BENCH_PODS_NODES)")
	flag.IntVar(&o.deployments, "deployments", envInt("BENCH_PODS_DEPLOYMENTS", 100), "Deployments of scenario 2 ($BENCH_PODS_DEPLOYMENTS)")
	flag.IntVar(&o.replicas, "replicas", envInt("BENCH_PODS_REPLICAS", 100), "replicas of each Deployment of scenario 2 ($BENCH_PODS_REPLICAS)")
	flag.IntVar(&o.churn, "churn", envInt("BENCH_PODS_CHURN", 1000), "replicas of the Deployment rolled in scenario 4; 0 skips it ($BENCH_PODS_CHURN)")
	flag.DurationVar(&o.steady, "steady", envDuration("BENCH_PODS_STEADY", 5*time.Minute), "window of scenario 3 ($BENCH_PODS_STEADY)")
	flag.DurationVar(&o.stuckAfter, "stuck-after", time.Minute, "a pod not Ready this long after its bind, or not gone this long after its deletion, is stuck")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up waiting for one phase after this long (the phase is reported as not reached)")
	flag.IntVar(&o.kubemark, "kubemark", envInt("BENCH_PODS_KUBEMARK", 20), "hollow nodes of kubemark to measure beside the others; 0 skips it ($BENCH_PODS_KUBEMARK)")
	flag.IntVar(&o.kubemarkPods, "kubemark-pods", 10, "pods bound to each hollow node")
	flag.DurationVar(&o.kubemarkWindow, "kubemark-window", time.Minute, "how long the hollow nodes are measured idle, and again with their pods")
	flag.IntVar(&o.schedulerQPS, "control-plane-qps", 2000, "--kube-api-qps of kube-scheduler and kube-controller-manager (burst twice that), so that they do not hold the pods back")
	flag.IntVar(&o.creatorsPool, "creators", 32, "concurrent creates of scenario 1's pods")
	flag.StringVar(&o.profileDir, "profile-dir", "", "if set, nodeagent simulate runs with --enable-profiling-handler and each phase gets a CPU profile (its first --profile-seconds) and a heap profile (at its end) here")
	var simulateArgs string
	flag.StringVar(&simulateArgs, "simulate-args", os.Getenv("BENCH_PODS_SIMULATE_ARGS"), "extra arguments of nodeagent simulate, space-separated, e.g. --pod-workers=64 ($BENCH_PODS_SIMULATE_ARGS)")
	var simulateEnv string
	flag.StringVar(&simulateEnv, "simulate-env", os.Getenv("BENCH_PODS_SIMULATE_ENV"), "environment variables of nodeagent simulate only, space-separated NAME=VALUE, e.g. GOGC=50 ($BENCH_PODS_SIMULATE_ENV)")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 30, "length of each phase's CPU profile")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "file whose bench-pods section gets the tables (empty: print only)")
	flag.StringVar(&o.dir, "dir", "_output/bench-pods", "where each run's control plane and logs go")
	flag.BoolVar(&o.keep, "keep", os.Getenv("BENCH_PODS_KEEP") != "", "keep each run's directory ($BENCH_PODS_KEEP)")
	flag.Parse()
	o.simulateArgs = strings.Fields(simulateArgs)
	o.simulateEnv = strings.Fields(simulateEnv)
	for _, s := range strings.Split(systems, ",") {
		s = strings.TrimSpace(s)
		if s != systemNodeagent && s != systemKWOK {
			return fmt.Errorf("--systems %q: %q is neither %s nor %s", systems, s, systemNodeagent, systemKWOK)
		}
		o.systems = append(o.systems, s)
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		if s != scenarioOneNode && s != scenarioSpread {
			return fmt.Errorf("--scenarios %q: %q is neither %s nor %s", scenarios, s, scenarioOneNode, scenarioSpread)
		}
		o.scenarios[s] = true
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"--one-node-pods", o.onePods}, {"--nodes", o.nodes}, {"--deployments", o.deployments}, {"--replicas", o.replicas}} {
		if v.n < 1 {
			return fmt.Errorf("%s %d: must be at least 1", v.name, v.n)
		}
	}
	if o.nodes > 4000 {
		return fmt.Errorf("--nodes %d: at most 4000 (the pod CIDRs: 172.16.0.0/12 in /24s)", o.nodes)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, agentBin, err := benchkit.Prepare(ctx)
	if err != nil {
		return err
	}
	o.agentBin = agentBin
	o.binDir = filepath.Join(root, "_output", "bin")
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	env, err := benchkit.DescribeEnv(ctx, root, o.agentBin)
	if err != nil {
		return err
	}
	start := time.Now()
	env.LoadStart = benchkit.LoadAvg()
	var runs []*systemRun
	for _, sys := range o.systems {
		r := &systemRun{system: sys}
		if o.scenarios[scenarioOneNode] {
			fmt.Printf("=== %s: scenario 1, %d pods on one Node\n", sys, o.onePods)
			if err := runOneNode(ctx, o, r); err != nil {
				return fmt.Errorf("%s, one node: %w", sys, err)
			}
		}
		if o.scenarios[scenarioSpread] {
			fmt.Printf("=== %s: scenarios 2-4, %d Nodes, %d×%d pods\n", sys, o.nodes, o.deployments, o.replicas)
			if err := runSpread(ctx, o, r); err != nil {
				return fmt.Errorf("%s, spread: %w", sys, err)
			}
		}
		runs = append(runs, r)
	}
	var km *kubemarkRun
	if o.kubemark > 0 {
		fmt.Printf("=== kubemark: %d hollow nodes, %d pods each\n", o.kubemark, o.kubemarkPods)
		if km, err = runKubemark(ctx, o); err != nil {
			return fmt.Errorf("kubemark: %w", err)
		}
	}
	env.LoadEnd = benchkit.LoadAvg()
	env.Took = time.Since(start)
	report := render(o, env, runs, km)
	fmt.Println(report)
	if o.out == "" {
		return nil
	}
	if err := benchkit.WriteSection(o.out, sectionBegin, sectionEnd, report); err != nil {
		return err
	}
	fmt.Printf("wrote the bench-pods section of %s\n", o.out)
	return nil
}

// The section of BENCHMARKS.md the program writes.
const (
	sectionBegin = "<!-- BEGIN bench-pods (written by make bench-pods) -->"
	sectionEnd   = "<!-- END bench-pods -->"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchpods: %s %q: not a number\n", name, v)
		os.Exit(2)
	}
	return n
}

func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchpods: %s %q: %v\n", name, v, err)
		os.Exit(2)
	}
	return d
}
