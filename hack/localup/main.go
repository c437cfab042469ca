// Command localup runs a local cluster for trying nodeagent out by hand or in CI (test/framework), either
//
//   - etcd + kube-apiserver + kube-controller-manager and a private containerd with a bridge CNI config,
//     and nodeagent registered as one node (`make up`): it waits for the node to be Ready and shows it with
//     kubectl, or
//   - the same without nodeagent (--control-plane-only, `make cluster`): it writes a kubeconfig for each of
//     --nodes and prints the command line that runs _output/bin/nodeagent by hand as each of them, or
//   - a simulation (--simulate N, `make up SIMULATE=N`): etcd + kube-apiserver, kube-controller-manager with
//     the controllers pods need, kube-scheduler, and `nodeagent simulate --nodes N` under the RBAC identity
//     of docs/simulation.md (no containerd); it waits for the N Nodes to be Ready and prints the kubectl
//     commands that create a Deployment and show its pods Running on the simulated Nodes.
//
// Kubeconfigs are written to fixed paths under the directory: admin.kubeconfig and node-<name>.kubeconfig
// (the simulation's: sa-nodeagent-simulation-nodeagent-simulator.kubeconfig). It runs until SIGINT/SIGTERM,
// then stops everything.
//
//	go run ./hack/localup [--node-name NAME] [--dir DIR] [--exit-when-ready] [-- extra nodeagent flags]
//	go run ./hack/localup --control-plane-only [--nodes "a b c"] [--dir DIR] [--exit-when-ready]
//	go run ./hack/localup --simulate N [--dir DIR] [--exit-when-ready] [-- extra nodeagent simulate flags]
//
// It builds only what it runs (framework.UseBinarySet: hack/install-deps.sh --for up, or --for simulate).
//
// Exit status: 0 after a clean stop (or, with --exit-when-ready, once the node, with --simulate the
// simulated Nodes, or with --control-plane-only the control plane, is Ready); 1 on failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// options are localup's command line.
type options struct {
	nodeName         string   // the node nodeagent registers (agent mode)
	nodes            []string // the nodes to write kubeconfigs for (--control-plane-only)
	controlPlaneOnly bool
	simulate         int // simulated Nodes (--simulate); 0: the agent or --control-plane-only
	dir              string
	exitWhenReady    bool
	readyTimeout     time.Duration
	agentArgs        []string
	nodeIP           string // --simulate: the simulated Nodes' --node-ip (default: the simulator's choice)
}

func main() {
	hostname, _ := os.Hostname()
	var o options
	var nodes string
	flag.StringVar(&o.nodeName, "node-name", strings.ToLower(hostname), "name of the node nodeagent registers")
	flag.BoolVar(&o.controlPlaneOnly, "control-plane-only", false,
		"start no nodeagent: write a kubeconfig for each of --nodes and print how to run nodeagent by hand")
	flag.IntVar(&o.simulate, "simulate", 0, "run `nodeagent simulate` with this many Nodes (and kube-scheduler) instead of one nodeagent; "+
		"flags after -- go to nodeagent simulate")
	flag.StringVar(&nodes, "nodes", "", "with --control-plane-only: node names, separated by spaces or commas (default --node-name)")
	flag.StringVar(&o.dir, "dir", "", "directory for state, kubeconfigs and logs, emptied first "+
		"(default <repo>/_output/local-up, or <repo>/_output/cluster with --control-plane-only, <repo>/_output/simulate with --simulate)")
	flag.BoolVar(&o.exitWhenReady, "exit-when-ready", os.Getenv("LOCALUP_EXIT_WHEN_READY") != "",
		"stop everything and exit 0 once the node (with --control-plane-only: the control plane) is Ready "+
			"(also: env LOCALUP_EXIT_WHEN_READY=1)")
	flag.StringVar(&o.nodeIP, "node-ip", os.Getenv("LOCALUP_NODE_IP"), "with --simulate: the simulated Nodes' --node-ip, where the API server and metrics-server reach "+
		"their kubelet API (default: the simulator's choice, the address of the default route's interface; also: env LOCALUP_NODE_IP)")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 2*time.Minute, "how long to wait for the node to be Ready")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: localup [flags] [-- nodeagent flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	o.agentArgs = flag.Args()
	o.nodes = strings.FieldsFunc(nodes, func(r rune) bool { return r == ' ' || r == ',' })
	if len(o.nodes) == 0 {
		o.nodes = []string{o.nodeName}
	}
	if !o.controlPlaneOnly && nodes != "" {
		fmt.Fprintln(os.Stderr, "localup: --nodes goes with --control-plane-only (use --node-name for the agent's node)")
		os.Exit(2)
	}
	if o.simulate < 0 || o.simulate > 10000 {
		fmt.Fprintf(os.Stderr, "localup: --simulate %d: must be between 1 and 10000 (0: no simulation)\n", o.simulate)
		os.Exit(2)
	}
	if o.simulate > 0 && o.controlPlaneOnly {
		fmt.Fprintln(os.Stderr, "localup: --simulate and --control-plane-only go separately")
		os.Exit(2)
	}
	if o.controlPlaneOnly && len(o.agentArgs) > 0 {
		fmt.Fprintln(os.Stderr, "localup: nodeagent flags after -- go with the agent mode, not --control-plane-only")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "localup: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	dir := o.dir
	switch {
	case dir != "":
	case o.controlPlaneOnly:
		dir = filepath.Join(root, "_output", "cluster")
	case o.simulate > 0:
		dir = filepath.Join(root, "_output", "simulate")
	default:
		dir = filepath.Join(root, "_output", "local-up")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	if err := framework.UnmountAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	set := "up"
	if o.simulate > 0 {
		set = "simulate"
	}
	if err := framework.UseBinarySet(set); err != nil {
		return err
	}
	say("building binaries (hack/install-deps.sh --for %s, go build ./cmd/nodeagent)", set)
	binDir, err := framework.EnsureBinaries()
	if err != nil {
		return err
	}
	agentBin, err := framework.BuildAgent()
	if err != nil {
		return err
	}

	if o.simulate > 0 {
		return runSimulation(ctx, o, root, dir, binDir, agentBin)
	}

	names := []string{o.nodeName}
	if o.controlPlaneOnly {
		names = o.nodes
	}
	say("starting etcd, kube-apiserver, kube-controller-manager")
	var frontProxy []string
	if !o.controlPlaneOnly {
		// kubeadm's front-proxy PKI and flags, so that metrics-server serves metrics.k8s.io (kubectl top).
		if frontProxy, err = framework.FrontProxyArgs(filepath.Join(dir, "controlplane", "front-proxy")); err != nil {
			return err
		}
	}
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "controlplane"), KubeconfigDir: dir, NodeNames: names, ControllerManager: true,
		// As kubeadm sets a cluster up: a bootstrap token, and the KCM signing and approving node CSRs.
		Bootstrap: &framework.BootstrapOptions{}, ExtraAPIServerArgs: frontProxy,
	})
	if err != nil {
		return err
	}
	defer cp.Stop()
	say("starting containerd with a bridge CNI config")
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: filepath.Join(dir, "containerd"), CNI: true})
	if err != nil {
		return err
	}
	defer ctrd.Close()

	// The kubeconfigs are at fixed paths: <dir>/admin.kubeconfig, <dir>/node-<name>.kubeconfig.
	admin := cp.AdminKubeconfig
	kubectl := fmt.Sprintf("%s --kubeconfig=%s", filepath.Join(binDir, "kubectl"), admin)
	fmt.Printf(`
  API server         %s
  admin kubeconfig   %s
  node kubeconfigs   %s
  container runtime  %s  (this run's own containerd, not the system's
                     /run/containerd/containerd.sock that Debian's containerd package may also run)
  logs               %s
                     %s/{etcd,kube-apiserver,kube-controller-manager,audit}.log
`, cp.APIServerURL, admin, filepath.Join(dir, "node-<name>.kubeconfig")+" for "+strings.Join(names, ", "),
		ctrd.Endpoint, ctrd.LogPath, cp.Dir)

	if o.controlPlaneOnly {
		return runControlPlaneOnly(ctx, o, cp, dir, agentBin, kubectl, ctrd.Endpoint)
	}
	return runAgent(ctx, o, cp, ctrd, dir, kubectl)
}

// runControlPlaneOnly prints how to run nodeagent by hand as each node and waits for ctx to end.
func runControlPlaneOnly(ctx context.Context, o options, cp *framework.ControlPlane, dir, agentBin, kubectl, endpoint string) error {
	fmt.Printf("\nRun nodeagent by hand, each node in a terminal of its own (root dir and health port of its own):\n\n")
	for _, n := range o.nodes {
		rootDir := filepath.Join(dir, "nodes", n)
		if err := os.MkdirAll(rootDir, 0o755); err != nil {
			return err
		}
		fmt.Printf("  %s --kubeconfig=%s --hostname-override=%s \\\n      --container-runtime-endpoint=%s \\\n"+
			"      --root-dir=%s --healthz-port=%d\n\n", agentBin, cp.KubeconfigFor(n), n, endpoint, rootDir, framework.FreePort())
	}
	fmt.Printf("Then:\n\n  %s get nodes\n\n", kubectl)
	if o.exitWhenReady {
		say("control plane ready; exiting (--exit-when-ready)")
		return nil
	}
	say("control plane ready for nodes %s; press Ctrl-C to stop", strings.Join(o.nodes, ", "))
	<-ctx.Done()
	say("stopping")
	return nil
}

// runAgent starts nodeagent as o.nodeName, waits for its node to be Ready, shows it with kubectl and runs
// until ctx ends or the agent exits.
func runAgent(ctx context.Context, o options, cp *framework.ControlPlane, ctrd *framework.Containerd, dir, kubectl string) error {
	name := o.nodeName
	say("starting nodeagent as node %q", name)
	// The agent joins as a node does: only a bootstrap kubeconfig; it gets its own client certificate
	// through a CSR, writes --kubeconfig, and rotates the certificate.
	agentDir := filepath.Join(dir, "agent")
	agent, err := framework.StartAgent(ctx, framework.AgentOptions{
		Dir: agentDir, NodeName: name, Kubeconfig: filepath.Join(agentDir, "kubeconfig"),
		RuntimeEndpoint: ctrd.Endpoint,
		// The cluster CA of the API server's kubelet client certificate, as kubeadm gives a kubelet, so
		// that kubectl top, logs and the node proxy reach the agent's kubelet API.
		// Its kubelet API on the kubelet's port (the framework's agents have it off), or a free one.
		Args: append([]string{"--bootstrap-kubeconfig=" + cp.BootstrapKubeconfig(), "--rotate-certificates=true",
			"--client-ca-file=" + cp.KubeletClientCAFile, "--port=" + strconv.Itoa(freeOr(10250))}, o.agentArgs...),
	})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping")
		if err := agent.Stop(); err != nil {
			say("nodeagent exited with %v", err)
		}
	}()
	fmt.Printf("  nodeagent          %s  (healthz, metrics)\n  nodeagent log      %s\n\n", agent.HealthzURL, agent.LogPath)

	say("waiting up to %v for node %q to be Ready", o.readyTimeout, name)
	rctx, cancel := context.WithTimeout(ctx, o.readyTimeout)
	defer cancel()
	err = framework.WaitFor(rctx, 200*time.Millisecond, func() (bool, error) {
		if !agent.Running() {
			return false, fmt.Errorf("nodeagent exited: %w", framework.ErrStop)
		}
		node, err := cp.AdminClient.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
		return err == nil && framework.IsReady(node), err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "--- last lines of %s:\n%s\n", agent.LogPath, framework.TailLines(agent.Logs(), 30))
		return fmt.Errorf("node %q not Ready: %w", name, err)
	}
	if csrs, err := cp.NodeCSRs(ctx, name); err == nil {
		for _, c := range csrs {
			fmt.Printf("  joined with CSR     %s\n", framework.DescribeCSR(c))
		}
	}
	fmt.Printf("\n$ %s get nodes -o wide\n", kubectl)
	out, err := cp.Kubectl(ctx, "get", "nodes", "-o", "wide")
	if err != nil {
		return err
	}
	fmt.Println(out)
	say("starting metrics-server v0.8.0 (kubectl top), registered as v1beta1.metrics.k8s.io")
	if ms, err := framework.StartMetricsServer(ctx, cp, filepath.Join(dir, "metrics-server")); err != nil {
		say("metrics-server did not start, so kubectl top does not answer: %v", err)
	} else {
		defer ms.Stop()
		fmt.Printf("  metrics-server     %s  (log %s)\n\n", ms.URL, ms.LogPath)
	}
	fmt.Printf("The node's kubelet API, through the API server (kubectl top answers after metrics-server's first scrape, 15 s):\n\n")
	for _, c := range AgentCommands(kubectl, name) {
		fmt.Printf("  %s\n", c)
	}
	fmt.Println()
	if o.exitWhenReady {
		say("node %q is Ready; exiting (--exit-when-ready)", name)
		return nil
	}
	say("node %q is Ready; press Ctrl-C to stop", name)
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait(context.Background()) }()
	select {
	case <-ctx.Done():
	case err := <-exited:
		return fmt.Errorf("nodeagent exited (%v)", err)
	}
	return nil
}

// freeOr returns port when it is free on every address, else a free port (framework.FreePort).
func freeOr(port int) int {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return framework.FreePort()
	}
	_ = ln.Close()
	return port
}

// AgentCommands are the command lines (kubectl: the binary and its --kubeconfig) that localup prints once
// the agent's node is Ready: its usage through metrics-server, and its Summary through the node proxy.
func AgentCommands(kubectl, node string) []string {
	return []string{
		kubectl + " top node",
		kubectl + " get --raw /api/v1/nodes/" + node + "/proxy/stats/summary",
	}
}

func say(format string, args ...any) {
	fmt.Printf("localup: "+format+"\n", args...)
}
