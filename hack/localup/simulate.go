package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// simulationControllerArgs run, besides the framework's nodelifecycle, nodeipam and ttl, the
// kube-controller-manager controllers that pods on simulated Nodes need: nodeipam gives each Node a pod
// CIDR (172.16.0.0/12 in /24s: 4096 Nodes; the simulator gives a Node without one a /24 of 10.128.0.0/9),
// serviceaccount the namespaces' "default" ServiceAccount (without it the ServiceAccount admission refuses
// their pods), deployment, replicaset, daemonset and job make pods, podgc and garbagecollector remove them,
// horizontalpodautoscaling scales a Deployment on metrics-server's figures.
var simulationControllerArgs = []string{
	"--controllers=nodelifecycle,nodeipam,ttl,serviceaccount,deployment,replicaset,daemonset,job,podgc,garbagecollector,horizontalpodautoscaling",
	"--allocate-node-cidrs=true", "--cluster-cidr=172.16.0.0/12", "--node-cidr-mask-size=24",
	"--kube-api-qps=200", "--kube-api-burst=400",
}

const (
	// simulationPrefix is --node-name-prefix: the Nodes are sim-0000, sim-0001, ...
	simulationPrefix = "sim-"
	// The identity of docs/simulation.md's RBAC block.
	simulationNamespace      = "nodeagent-simulation"
	simulationServiceAccount = "nodeagent-simulator"
)

// runSimulation starts the control plane with the controllers pods need and kube-scheduler, applies
// docs/simulation.md's RBAC, runs `nodeagent simulate --nodes o.simulate` as its ServiceAccount, waits for
// every Node to be Ready, prints the kubectl commands that run a Deployment on them, and runs until ctx
// ends or the simulator exits (with --exit-when-ready: returns once the Nodes are Ready).
func runSimulation(ctx context.Context, o options, root, dir, binDir, agentBin string) error {
	say("starting etcd, kube-apiserver (with the aggregation layer), kube-controller-manager (%s), kube-scheduler",
		strings.TrimPrefix(simulationControllerArgs[0], "--controllers="))
	// kubeadm's front-proxy PKI and flags, so that metrics-server serves metrics.k8s.io through the API server.
	frontProxy, err := framework.FrontProxyArgs(filepath.Join(dir, "controlplane", "front-proxy"))
	if err != nil {
		return err
	}
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "controlplane"), KubeconfigDir: dir, ControllerManager: true,
		ExtraControllerManagerArgs: simulationControllerArgs, ExtraAPIServerArgs: frontProxy,
		// The cluster CA in extension-apiserver-authentication, where the simulator finds it (as kubeadm's).
		PublishKubeletClientCA: true,
	})
	if err != nil {
		return err
	}
	defer cp.Stop()
	if err := cp.StartScheduler(ctx); err != nil {
		return err
	}

	rbac := filepath.Join(dir, "simulation-rbac.yaml")
	if err := writeSimulationRBAC(root, rbac); err != nil {
		return err
	}
	say("applying the simulation's RBAC (docs/simulation.md, written to %s)", rel(rbac))
	if out, err := cp.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		return fmt.Errorf("kubectl apply -f %s: %w\n%s", rbac, err, out)
	}
	kubeconfig, err := cp.ServiceAccountKubeconfig(ctx, simulationNamespace, simulationServiceAccount)
	if err != nil {
		return err
	}

	// The control API on the kubelet's healthz port when it is free, so that the printed commands are
	// README's.
	port := controlPort()
	args := []string{"simulate", "--kubeconfig=" + kubeconfig, "--nodes=" + strconv.Itoa(o.simulate),
		"--node-name-prefix=" + simulationPrefix, "--healthz-port=" + strconv.Itoa(port)}
	if o.nodeIP != "" {
		args = append(args, "--node-ip="+o.nodeIP)
	}
	args = append(args, o.agentArgs...)
	say("starting nodeagent simulate --nodes %d as system:serviceaccount:%s:%s", o.simulate, simulationNamespace, simulationServiceAccount)
	sim, err := framework.StartProcess("nodeagent simulate", filepath.Join(dir, "nodeagent-simulate.log"), agentBin, args...)
	if err != nil {
		return err
	}
	defer func() {
		say("stopping")
		if err := sim.Stop(10 * time.Second); err != nil {
			say("nodeagent simulate exited with %v", err)
		}
	}()
	admin := cp.AdminKubeconfig
	fmt.Printf(`
  API server         %s
  admin kubeconfig   %s
  simulator          %s simulate %s
                     http://127.0.0.1:%d  (healthz, readyz, metrics, the control API)
  simulator identity %s  (docs/simulation.md's RBAC: %s)
  logs               %s
                     %s/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,audit}.log

`, cp.APIServerURL, rel(admin), rel(agentBin), strings.Join(args[1:], " "), port, rel(kubeconfig), rel(rbac),
		rel(sim.LogPath()), rel(cp.Dir))

	say("waiting up to %v for the %d simulated Nodes to be Ready", o.readyTimeout, o.simulate)
	rctx, cancel := context.WithTimeout(ctx, o.readyTimeout)
	defer cancel()
	ready := 0
	err = framework.WaitFor(rctx, 200*time.Millisecond, func() (bool, error) {
		if err := sim.ExitedErr(); err != nil {
			return false, err
		}
		nodes, err := cp.AdminClient.CoreV1().Nodes().List(rctx, metav1.ListOptions{LabelSelector: "nodeagent.io/simulated=true"})
		if err != nil {
			return false, err
		}
		ready = 0
		for i := range nodes.Items {
			if framework.IsReady(&nodes.Items[i]) {
				ready++
			}
		}
		if ready < o.simulate {
			return false, fmt.Errorf("%d of %d Nodes Ready", ready, o.simulate)
		}
		return simulatorReady(rctx, port)
	})
	if err != nil {
		return fmt.Errorf("simulated Nodes not Ready (log %s): %w", sim.LogPath(), err)
	}

	kubectl := rel(filepath.Join(binDir, "kubectl")) + " --kubeconfig=" + rel(admin)
	commands := SimulationCommands(kubectl, port)
	// The kubelet API (logs, exec, port-forward, the metrics metrics-server scrapes): on unless the
	// simulator said why not in its log.
	node, err := cp.AdminClient.CoreV1().Nodes().Get(ctx, simulationPrefix+"0000", metav1.GetOptions{})
	if err != nil {
		return err
	}
	kubeletPort := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	switch {
	case kubeletPort == 0:
		say("the simulated Nodes serve no kubelet API (the reason is in %s): no logs, exec, port-forward or metrics", rel(sim.LogPath()))
		commands = commands[:3]
	default:
		say("starting metrics-server v0.8.0 (kubectl top, the HorizontalPodAutoscaler), registered as v1beta1.metrics.k8s.io")
		ms, err := framework.StartMetricsServer(ctx, cp, filepath.Join(dir, "metrics-server"))
		if err != nil {
			say("metrics-server did not start, so kubectl top and the HPA do not answer: %v", err)
			commands = commands[:simulationMetricsCommands]
			break
		}
		defer ms.Stop()
		fmt.Printf("  metrics-server     %s  (log %s)\n", ms.URL, rel(ms.LogPath))
	}
	fmt.Printf("\nThe %d Nodes %s... are Ready. Paste these, one at a time (Ctrl-C ends the ones that keep running):\n\n", o.simulate, simulationPrefix)
	for _, c := range commands {
		fmt.Printf("  %s\n", c)
	}
	fmt.Printf("\nPod behaviour (start and readiness delays, exits, crash loops, image pull errors, logs, exec answers) is set\n" +
		"by annotations: docs/simulation.md#pods; the pods' usage at run time: docs/simulation.md#metrics-resource-usage-for-kubectl-top-metrics-server-and-the-horizontalpodautoscaler.\n\n")
	if o.exitWhenReady {
		say("%d simulated Nodes are Ready; exiting (--exit-when-ready)", o.simulate)
		return nil
	}
	say("%d simulated Nodes are Ready; press Ctrl-C to stop", o.simulate)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := sim.ExitedErr(); err != nil {
				return err
			}
		}
	}
}

// SimulationCommands are the command lines (kubectl: the binary and its --kubeconfig; controlPort: the
// simulator's control API on 127.0.0.1) that localup prints once the simulated Nodes are Ready, README's:
// the Deployment of docs/examples/web.yaml (40 pods), waited for, and its pods; one pod's log followed
// (kubectl logs -f, until Ctrl-C), `env` run in one (kubectl exec), a port forwarded to one and asked
// over HTTP, the pods' usage (kubectl top, from metrics-server), an HPA at 50 % of the CPU requests, every
// pod's simulated CPU raised to 80 % through the control API, and the HPA watched as it scales out (to 64).
// The first three need only the Nodes; the next three the kubelet API; the last four metrics-server too.
func SimulationCommands(kubectl string, controlPort int) []string {
	return []string{
		kubectl + " apply -f docs/examples/web.yaml",
		kubectl + " rollout status deployment/web",
		kubectl + " get pods -o wide",
		kubectl + " logs -f deployment/web",
		kubectl + " exec deployment/web -- env",
		kubectl + " port-forward deployment/web 8080:80 & sleep 2; curl -s localhost:8080/; kill $!",
		kubectl + " top pods",
		kubectl + " autoscale deployment web --cpu=50% --min=40 --max=80",
		fmt.Sprintf(`for p in $(%s get pods -l app=web -o name); do curl -sf -o /dev/null -H 'Content-Type: application/json' -d '{"cpu":"80m"}' localhost:%d/simulation/usage/pods/default/${p#pod/}; done`, kubectl, controlPort),
		kubectl + " get hpa web --watch",
	}
}

// simulationMetricsCommands is how many of SimulationCommands work without metrics-server.
const simulationMetricsCommands = 6

// controlPort is the simulator's --healthz-port (its control API): the kubelet's 10248 when it is free on
// 127.0.0.1, else a free port.
func controlPort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:10248")
	if err != nil {
		return framework.FreePort()
	}
	_ = ln.Close()
	return 10248
}

// simulatorReady reports whether the simulator's GET /readyz answers 200: every Node registered and its
// status posted.
func simulatorReady(ctx context.Context, port int) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("nodeagent simulate /readyz answered %d", resp.StatusCode)
	}
	return true, nil
}

// writeSimulationRBAC writes the YAML of the simulation-rbac block of docs/simulation.md (the identity
// `nodeagent simulate` needs, which TestSimulateRBAC applies too) to path.
func writeSimulationRBAC(root, path string) error {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "simulation.md"))
	if err != nil {
		return fmt.Errorf("simulation RBAC: %w", err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- BEGIN simulation-rbac -->")
	block, _, ok2 := strings.Cut(block, "<!-- END simulation-rbac -->")
	if !ok || !ok2 {
		return fmt.Errorf("simulation RBAC: docs/simulation.md has no simulation-rbac block")
	}
	block = strings.TrimSpace(block)
	block = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(block, "```yaml"), "```"))
	return os.WriteFile(path, []byte(block+"\n"), 0o644)
}

// rel returns path relative to the working directory when it is under it (as `make up` runs from the
// repository's root: _output/...), else path.
func rel(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	r, err := filepath.Rel(wd, path)
	if err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return path
	}
	return r
}
