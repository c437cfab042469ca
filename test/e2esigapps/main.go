// Command e2esigapps runs Kubernetes' own conformance specs of sig-apps (k8s.io/kubernetes/test/e2e at
// v1.37.2, built by hack/e2e-sig-apps.sh with `go test -c` into _output/e2e/e2e.test, run with the ginkgo CLI
// of the same pinned module) against a local control plane whose only Nodes are simulated ones: test/framework's
// etcd and kube-apiserver (--allow-privileged), the real kube-scheduler, the real kube-controller-manager with
// all its default controllers (deployment, replicaset, statefulset, daemonset, job, cronjob, garbagecollector,
// podgc, namespace, serviceaccount, root-ca-cert-publisher...) and nodeipam, and `nodeagent simulate --nodes=N`
// (default 3). ginkgo runs with --procs (default 4) and --focus (default `\[sig-apps\].*\[Conformance\]`); its
// JSON report is read back: the command prints how many specs passed and failed, and each failure with the
// first line of its reason.
//
//	go run ./test/e2esigapps [--nodes 3] [--procs 4] [--focus REGEXP] [--dir _output/e2e-sig-apps] [--timeout 90m]
//
// `make e2e-sig-apps` builds the binaries and runs it (about 35 minutes on 2 cores). Not part of make test.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

func main() {
	var (
		nodes, procs     int
		focus, dir, bins string
		timeout          time.Duration
		simArgs          string
		summary          string
	)
	flag.IntVar(&nodes, "nodes", 3, "simulated Nodes")
	flag.IntVar(&procs, "procs", 4, "ginkgo processes")
	flag.StringVar(&focus, "focus", `\[sig-apps\].*\[Conformance\]`, "ginkgo --focus")
	flag.StringVar(&dir, "dir", "_output/e2e-sig-apps", "state, logs and the report (emptied first)")
	flag.StringVar(&bins, "bin-dir", "_output/e2e", "where e2e.test and ginkgo are (hack/e2e-sig-apps.sh builds them)")
	flag.DurationVar(&timeout, "timeout", 90*time.Minute, "ginkgo --timeout")
	flag.StringVar(&simArgs, "simulate-args", "", "extra flags of nodeagent simulate, separated by spaces")
	flag.StringVar(&summary, "summarize", "", "only print the summary of this ginkgo JSON report (of an earlier run)")
	flag.Parse()
	if summary != "" {
		if err := summarize(summary); err != nil {
			fmt.Fprintln(os.Stderr, "e2esigapps:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, nodes, procs, focus, dir, bins, timeout, strings.Fields(simArgs)); err != nil {
		fmt.Fprintln(os.Stderr, "e2esigapps:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, nodes, procs int, focus, dir, bins string, timeout time.Duration, simArgs []string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	e2e, ginkgo := filepath.Join(bins, "e2e.test"), filepath.Join(bins, "ginkgo")
	for _, b := range []string{e2e, ginkgo} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s: %w (hack/e2e-sig-apps.sh builds it)", b, err)
		}
	}
	cpDir := filepath.Join(dir, "controlplane")
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: cpDir, ControllerManager: true,
		ExtraControllerManagerArgs: []string{"--controllers=*", "--kube-api-qps=100", "--kube-api-burst=200",
			"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24",
			"--root-ca-file=" + filepath.Join(cpDir, "pki", "serving.crt"),
			"--service-account-private-key-file=" + filepath.Join(cpDir, "pki", "sa.key"),
			"--use-service-account-credentials=false"},
	})
	if err != nil {
		return err
	}
	defer cp.Stop()
	if err := cp.StartScheduler(ctx); err != nil {
		return err
	}
	fmt.Printf("control plane up: %s (logs in %s)\n", cp.APIServerURL, cpDir)

	agent, err := framework.BuildAgent()
	if err != nil {
		return err
	}
	simLog, err := os.Create(filepath.Join(dir, "simulate.log"))
	if err != nil {
		return err
	}
	defer simLog.Close()
	sim := exec.Command(agent, append([]string{"simulate", "--kubeconfig=" + cp.AdminKubeconfig, "--nodes=" + strconv.Itoa(nodes),
		"--node-name-prefix=e2e-", "--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(framework.FreePort()), "--delete-nodes-on-exit"}, simArgs...)...)
	sim.Stdout, sim.Stderr = simLog, simLog
	sim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sim.Start(); err != nil {
		return err
	}
	defer func() {
		_ = sim.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = sim.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-sim.Process.Pid, syscall.SIGKILL)
		}
	}()
	err = framework.WaitFor(ctx, time.Second, func() (bool, error) {
		l, err := cp.AdminClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, n := range l.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == nodes, nil
	})
	if err != nil {
		return fmt.Errorf("%d simulated Nodes Ready: %w", nodes, err)
	}
	fmt.Printf("%d simulated Nodes Ready\n", nodes)

	// ginkgo writes the report under --output-dir: the name must be relative.
	report := filepath.Join(dir, "report.json")
	g := exec.CommandContext(ctx, ginkgo, "--procs="+strconv.Itoa(procs), "--focus="+focus, "--timeout="+timeout.String(),
		"--json-report=report.json", "--output-dir="+dir, "--no-color", "--silence-skips",
		e2e, "--", "--kubeconfig="+cp.AdminKubeconfig, "--provider=skeleton", "--report-dir="+dir,
		"--e2e-output-dir="+dir, "--dump-logs-on-failure=false", "--minStartupPods=0", "--allowed-not-ready-nodes=0")
	logf, err := os.Create(filepath.Join(dir, "ginkgo.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	g.Stdout, g.Stderr = logf, logf
	start := time.Now()
	fmt.Printf("ginkgo: %s (log %s)\n", strings.Join(g.Args, " "), logf.Name())
	runErr := g.Run()
	fmt.Printf("ginkgo finished after %v: %v\n", time.Since(start).Round(time.Second), runErr)
	return summarize(report)
}

// ginkgoReport is what summarize reads of ginkgo's JSON report (types.Report).
type ginkgoReport []struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		Failure                 struct {
			Message string
		}
		RunTime time.Duration
	}
}

// summarize prints the passed and failed counts of the report and each failure with its reason.
func summarize(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("ginkgo's report: %w", err)
	}
	var r ginkgoReport
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("ginkgo's report %s: %w", path, err)
	}
	counts := map[string]int{}
	var failures []string
	for _, suite := range r {
		for _, s := range suite.SpecReports {
			if s.LeafNodeType != "It" {
				continue // the suite's set-up and report nodes
			}
			counts[s.State]++
			if s.State != "passed" && s.State != "skipped" && s.State != "pending" {
				msg, _, _ := strings.Cut(strings.TrimSpace(s.Failure.Message), "\n")
				failures = append(failures, fmt.Sprintf("- %s %s: %s (%s)", strings.Join(s.ContainerHierarchyTexts, " "), s.LeafNodeText, s.State, msg))
			}
		}
	}
	sort.Strings(failures)
	fmt.Printf("passed %d, failed %d (states: %v)\n", counts["passed"], len(failures), counts)
	for _, f := range failures {
		fmt.Println(f)
	}
	if counts["passed"] == 0 {
		return errors.New("no spec passed")
	}
	return nil
}
