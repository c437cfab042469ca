// Command localup runs nodeagent against a local control plane, for trying it out by hand or in CI:
// etcd + kube-apiserver + kube-controller-manager, a private containerd with a bridge CNI config, and
// nodeagent registered as one node. It prints where the kubeconfigs and logs are, prints the node the way
// `kubectl get nodes -o wide` would once it is Ready, and runs until SIGINT/SIGTERM, then stops everything.
//
//	go run ./hack/localup [--node-name NAME] [--dir DIR] [--exit-when-ready] [-- extra nodeagent flags]
//
// Exit status: 0 after a clean stop (or, with --exit-when-ready, once the node is Ready); 1 on failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/nodeagent/nodeagent/test/framework"
)

func main() {
	hostname, _ := os.Hostname()
	nodeName := flag.String("node-name", strings.ToLower(hostname), "name of the node nodeagent registers")
	dir := flag.String("dir", "", "directory for state, kubeconfigs and logs, emptied first (default <repo>/_output/local-up)")
	exitWhenReady := flag.Bool("exit-when-ready", os.Getenv("LOCALUP_EXIT_WHEN_READY") != "",
		"stop everything and exit 0 once the node is Ready (also: env LOCALUP_EXIT_WHEN_READY=1)")
	readyTimeout := flag.Duration("ready-timeout", 2*time.Minute, "how long to wait for the node to be Ready")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: localup [flags] [-- nodeagent flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *nodeName, *dir, *exitWhenReady, *readyTimeout, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "localup: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, nodeName, dir string, exitWhenReady bool, readyTimeout time.Duration, agentArgs []string) error {
	if dir == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, "_output", "local-up")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	if err := framework.UnmountAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	say("building binaries (hack/install-deps.sh, go build ./cmd/nodeagent)")
	if _, err := framework.EnsureBinaries(); err != nil {
		return err
	}
	if _, err := framework.BuildAgent(); err != nil {
		return err
	}

	say("starting etcd, kube-apiserver, kube-controller-manager")
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "controlplane"), NodeNames: []string{nodeName}, ControllerManager: true,
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
	say("starting nodeagent as node %q", nodeName)
	agent, err := framework.StartAgent(ctx, framework.AgentOptions{
		Dir: filepath.Join(dir, "agent"), NodeName: nodeName, Kubeconfig: cp.KubeconfigFor(nodeName),
		RuntimeEndpoint: ctrd.Endpoint, Args: agentArgs,
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

	fmt.Printf(`
  API server         %s
  admin kubeconfig   %s
  node kubeconfig    %s
  container runtime  %s
  nodeagent          %s  (healthz, metrics)
  logs               %s
                     %s
                     %s/{etcd,kube-apiserver,kube-controller-manager,audit}.log

`, cp.APIServerURL, cp.AdminKubeconfig, cp.KubeconfigFor(nodeName), ctrd.Endpoint, agent.HealthzURL,
		agent.LogPath, ctrd.LogPath, cp.Dir)

	say("waiting up to %v for node %q to be Ready", readyTimeout, nodeName)
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var node *corev1.Node
	err = framework.WaitFor(rctx, 200*time.Millisecond, func() (bool, error) {
		if !agent.Running() {
			return false, fmt.Errorf("nodeagent exited: %w", framework.ErrStop)
		}
		node, err = cp.AdminClient.CoreV1().Nodes().Get(rctx, nodeName, metav1.GetOptions{})
		return err == nil && framework.IsReady(node), err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "--- last lines of %s:\n%s\n", agent.LogPath, framework.TailLines(agent.Logs(), 30))
		return fmt.Errorf("node %q not Ready: %w", nodeName, err)
	}
	fmt.Printf("\n$ kubectl --kubeconfig %s get nodes -o wide\n", cp.AdminKubeconfig)
	printNodesWide(node)
	fmt.Println()
	if exitWhenReady {
		say("node %q is Ready; exiting (--exit-when-ready)", nodeName)
		return nil
	}
	say("node %q is Ready; press Ctrl-C to stop", nodeName)
	select {
	case <-ctx.Done():
	case <-agentExited(agent):
		return fmt.Errorf("nodeagent exited: %w", agent.Wait(context.Background()))
	}
	return nil
}

func agentExited(a *framework.Agent) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		_ = a.Wait(context.Background())
		close(ch)
	}()
	return ch
}

func say(format string, args ...any) {
	fmt.Printf("localup: "+format+"\n", args...)
}

// printNodesWide prints node in the columns of `kubectl get nodes -o wide`.
func printNodesWide(n *corev1.Node) {
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
	defer w.Flush()
	fmt.Fprintln(w, "NAME\tSTATUS\tROLES\tAGE\tVERSION\tINTERNAL-IP\tEXTERNAL-IP\tOS-IMAGE\tKERNEL-VERSION\tCONTAINER-RUNTIME")
	status := "NotReady"
	if framework.IsReady(n) {
		status = "Ready"
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	var roles []string
	for k := range n.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		}
	}
	sort.Strings(roles)
	addr := func(t corev1.NodeAddressType) string {
		for _, a := range n.Status.Addresses {
			if a.Type == t {
				return a.Address
			}
		}
		return "<none>"
	}
	info := n.Status.NodeInfo
	kernel := orNone(info.KernelVersion)
	if info.Architecture != "" {
		kernel += " (" + info.Architecture + ")"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, status, orNone(strings.Join(roles, ",")),
		duration.HumanDuration(time.Since(n.CreationTimestamp.Time)), info.KubeletVersion,
		addr(corev1.NodeInternalIP), addr(corev1.NodeExternalIP), orNone(info.OSImage), kernel,
		orNone(info.ContainerRuntimeVersion))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
