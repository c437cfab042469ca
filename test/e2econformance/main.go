// Command e2econformance runs Kubernetes' own conformance specs of one SIG (k8s.io/kubernetes/test/e2e at
// v1.37.2, built by hack/e2e-conformance.sh with `go test -c` into _output/e2e/e2e.test, run with the ginkgo
// CLI of the same pinned module) against local control planes whose only Nodes are simulated ones, once per
// system of --systems, one after the other, each on a fresh control plane: test/framework's etcd and
// kube-apiserver (--allow-privileged), the real kube-scheduler, the real kube-controller-manager with all its
// default controllers (deployment, replicaset, statefulset, daemonset, job, cronjob, garbagecollector, podgc,
// namespace, serviceaccount, root-ca-cert-publisher...) and nodeipam. The systems:
//
//   - nodeagent: `nodeagent simulate --nodes=N` (default 3) with its kubelet API on (each Node on a port of
//     its own at this machine's first IPv4 address, the control plane's kubelet client CA trusted), so that
//     `kubectl logs`, exec and the API server's node proxy reach it as they reach a kubelet;
//   - kwok: KWOK v0.8.0 (_output/bin/kwok, hack/build-kwok.sh) over N Nodes created as `kwokctl scale node`
//     creates them, with kwokctl's default node and pod Stages (startKWOK).
//
// --sig picks the specs: sig-apps (`\[sig-apps\].*\[Conformance\]`, [Serial] included, state under
// _output/e2e-sig-apps) or sig-node (`\[sig-node\].*\[Conformance\]`, --skip `\[Serial\]`, under
// _output/e2e-sig-node); --focus, --skip and --dir override them (sigPresets). ginkgo runs with --procs
// (default 4); its JSON report is read back. The command prints each system's passed and failed counts, each
// failure with the first line of its reason, a table of every spec with its state on each system, and the
// specs another system passes that the first one does not (it exits 1 when there is any, or when a system
// passed no spec); the same goes to <dir>/summary.md.
//
//	go run ./test/e2econformance [--sig sig-apps|sig-node] [--systems nodeagent,kwok] [--nodes 3] [--procs 4]
//	    [--focus REGEXP] [--skip REGEXP] [--dir DIR] [--timeout 90m] [--deadline 2026-11-27T14:18:00Z]
//	go run ./test/e2econformance --summarize nodeagent=DIR1/nodeagent/report.json,kwok=DIR2/kwok/report.json
//
// `make e2e-sig-apps`, `make e2e-sig-node` and `make e2e-conformance SIG=...` build the binaries and run it.
// Not part of make test.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// options are the command's flags.
type options struct {
	systems      []string
	nodes, procs int
	focus, skip  string
	dir, bins    string
	kwokBinDir   string
	timeout      time.Duration
	// deadline, when not zero, bounds the whole run: each system's ginkgo --timeout is cut to end
	// deadlineMargin before it (ginkgoTimeout).
	deadline time.Time
	simArgs  []string
}

// deadlineMargin is the time left after a system's ginkgo --timeout, before --deadline: ginkgo's interrupt of
// the running specs and their clean-up (its --grace-period is 30 s a node), then the system's and the control
// plane's stop (up to 30 s each).
const deadlineMargin = 3 * time.Minute

// ginkgoTimeout returns the --timeout of ginkgo for a system started at now: o.timeout, cut so that the
// system ends deadlineMargin before o.deadline when that is set. An error when less than a minute is left.
func ginkgoTimeout(o options, now time.Time) (time.Duration, error) {
	if o.deadline.IsZero() {
		return o.timeout, nil
	}
	left := o.deadline.Sub(now) - deadlineMargin
	if left < time.Minute {
		return 0, fmt.Errorf("--deadline %s: %v left at %s, less than a minute after the %v margin",
			o.deadline.Format(time.RFC3339), o.deadline.Sub(now).Round(time.Second), now.UTC().Format(time.RFC3339), deadlineMargin)
	}
	return min(o.timeout, left.Truncate(time.Second)), nil
}

// sigPreset is what --sig selects: ginkgo's --focus and --skip, and the directory of the run's state.
type sigPreset struct {
	focus, skip, dir string
}

// sigPresets are the values of --sig. sig-node skips [Serial]: those specs change the Nodes (taints, labels,
// their capacity) and run alone after the others, which a run bounded in time does not reach anyway.
var sigPresets = map[string]sigPreset{
	"sig-apps": {focus: `\[sig-apps\].*\[Conformance\]`, dir: "_output/e2e-sig-apps"},
	"sig-node": {focus: `\[sig-node\].*\[Conformance\]`, skip: `\[Serial\]`, dir: "_output/e2e-sig-node"},
}

// sigNames returns the names of sigPresets, sorted.
func sigNames() []string {
	names := make([]string, 0, len(sigPresets))
	for n := range sigPresets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// applySIG returns o with the focus, skip and dir of the preset sig, except those of the flags named in given
// (the flags set on the command line: "focus", "skip", "dir"). An error names an unknown sig.
func applySIG(o options, sig string, given map[string]bool) (options, error) {
	p, ok := sigPresets[sig]
	if !ok {
		return o, fmt.Errorf("--sig %q: not one of %s", sig, strings.Join(sigNames(), ", "))
	}
	if !given["focus"] {
		o.focus = p.focus
	}
	if !given["skip"] {
		o.skip = p.skip
	}
	if !given["dir"] {
		o.dir = p.dir
	}
	return o, nil
}

func main() {
	var (
		o                options
		systems, simArgs string
		summary          string
		deadline         string
		sig              string
	)
	flag.StringVar(&systems, "systems", systemNodeagent+","+systemKWOK, "the systems to run the suite against, in order, each on a fresh control plane: nodeagent, kwok")
	flag.IntVar(&o.nodes, "nodes", 3, "simulated Nodes of each system")
	flag.IntVar(&o.procs, "procs", 4, "ginkgo processes")
	flag.StringVar(&sig, "sig", "sig-apps", "the conformance specs to run: "+strings.Join(sigNames(), " or ")+" (its --focus, --skip and --dir unless they are given)")
	flag.StringVar(&o.focus, "focus", "", "ginkgo --focus (default: --sig's)")
	flag.StringVar(&o.skip, "skip", "", "ginkgo --skip (default: --sig's)")
	flag.StringVar(&o.dir, "dir", "", "state, logs and reports, in a directory per system (emptied first; default: --sig's)")
	flag.StringVar(&o.bins, "bin-dir", "_output/e2e", "where e2e.test and ginkgo are (hack/e2e-conformance.sh builds them)")
	flag.StringVar(&o.kwokBinDir, "kwok-bin-dir", "_output/bin", "where kwok, kwok-node-stages.yaml and kwok-pod-stages.yaml are (make kwok builds them)")
	flag.DurationVar(&o.timeout, "timeout", 90*time.Minute, "ginkgo --timeout, per system")
	flag.StringVar(&deadline, "deadline", "", "RFC 3339 time by which the whole run must end: each system's ginkgo --timeout is cut to end 3 minutes before it (specs not finished then count as not run)")
	flag.StringVar(&simArgs, "simulate-args", "", "extra flags of nodeagent simulate, separated by spaces")
	flag.StringVar(&summary, "summarize", "", "only print the summary of earlier runs' ginkgo JSON reports: SYSTEM=PATH,... (the first system is the one under test)")
	flag.Parse()
	o.simArgs = strings.Fields(simArgs)
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	if o, err = applySIG(o, sig, given); err != nil {
		fmt.Fprintln(os.Stderr, "e2econformance:", err)
		os.Exit(2)
	}
	if deadline != "" {
		if o.deadline, err = time.Parse(time.RFC3339, deadline); err != nil {
			fmt.Fprintf(os.Stderr, "e2econformance: --deadline %q: not an RFC 3339 time: %v\n", deadline, err)
			os.Exit(2)
		}
	}
	if summary != "" {
		err = summarizeReports(summary)
	} else if o.systems, err = parseSystems(systems); err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, o)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2econformance:", err)
		os.Exit(1)
	}
}

// parseSystems parses --systems: a comma-separated list of nodeagent and kwok, each at most once.
func parseSystems(s string) ([]string, error) {
	var out []string
	for _, sys := range strings.Split(s, ",") {
		sys = strings.TrimSpace(sys)
		if sys != systemNodeagent && sys != systemKWOK {
			return nil, fmt.Errorf("--systems %q: %q is neither %s nor %s", s, sys, systemNodeagent, systemKWOK)
		}
		for _, o := range out {
			if o == sys {
				return nil, fmt.Errorf("--systems %q: %q is given twice", s, sys)
			}
		}
		out = append(out, sys)
	}
	return out, nil
}

// summarizeReports prints the comparison of the reports given as SYSTEM=PATH,...
func summarizeReports(arg string) error {
	var results []systemResult
	for _, kv := range strings.Split(arg, ",") {
		sys, path, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--summarize %q: %q is not SYSTEM=PATH", arg, kv)
		}
		r, err := readReport(sys, path)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	return conclude(compare(results), "")
}

// conclude prints c (and writes it to path, if not empty), and returns an error when a system passed no
// spec or another system passed a spec the first did not.
func conclude(c comparison, path string) error {
	var b bytes.Buffer
	c.write(&b)
	fmt.Print(b.String())
	if path != "" {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	var errs []error
	for _, r := range c.Systems {
		if passed, _, _ := r.counts(); passed == 0 {
			errs = append(errs, fmt.Errorf("no spec passed on %s", r.System))
		}
	}
	if len(c.Regressions) > 0 {
		errs = append(errs, fmt.Errorf("%d specs passed on another system and not on %s", len(c.Regressions), c.Systems[0].System))
	}
	return errors.Join(errs...)
}

// run runs the suite against each system of o.systems in turn (runSystem), each in <o.dir>/<system>, then
// prints and writes the comparison (conclude). A system that cannot be started ends the run with its error.
func run(ctx context.Context, o options) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if o.kwokBinDir, err = filepath.Abs(o.kwokBinDir); err != nil {
		return err
	}
	need := []string{filepath.Join(o.bins, "e2e.test"), filepath.Join(o.bins, "ginkgo")}
	for _, sys := range o.systems {
		if sys == systemKWOK {
			for _, f := range []string{"kwok", "kwok-node-stages.yaml", "kwok-pod-stages.yaml"} {
				need = append(need, filepath.Join(o.kwokBinDir, f))
			}
		}
	}
	for _, f := range need {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s: %w (hack/e2e-conformance.sh builds e2e.test and ginkgo, make kwok KWOK)", f, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	var results []systemResult
	for _, sys := range o.systems {
		report, err := runSystem(ctx, o, sys, filepath.Join(dir, sys))
		if err != nil {
			return fmt.Errorf("%s: %w", sys, err)
		}
		r, err := readReport(sys, report)
		if err != nil {
			return err
		}
		fmt.Println(r.countsLine())
		results = append(results, r)
	}
	fmt.Println()
	return conclude(compare(results), filepath.Join(dir, "summary.md"))
}

// ginkgoArgs are the arguments of the ginkgo CLI for one system's run: o's processes, focus and skip (none
// when empty), the suite's timeout, the JSON report report.json in dir, and e2e.test's flags after "--".
func ginkgoArgs(o options, timeout time.Duration, kubeconfig, dir string) []string {
	args := []string{"--procs=" + strconv.Itoa(o.procs), "--focus=" + o.focus}
	if o.skip != "" {
		args = append(args, "--skip="+o.skip)
	}
	// ginkgo writes the report under --output-dir: the name must be relative.
	return append(args, "--timeout="+timeout.String(), "--json-report=report.json", "--output-dir="+dir, "--no-color", "--silence-skips",
		filepath.Join(o.bins, "e2e.test"), "--", "--kubeconfig="+kubeconfig, "--provider=skeleton", "--report-dir="+dir,
		"--e2e-output-dir="+dir, "--dump-logs-on-failure=false", "--minStartupPods=0", "--allowed-not-ready-nodes=0")
}

// runSystem runs the suite against system sys on a fresh control plane, its state and logs in dir, and
// returns the path of ginkgo's JSON report.
func runSystem(ctx context.Context, o options, sys, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
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
		return "", err
	}
	defer cp.Stop()
	if err := cp.StartScheduler(ctx); err != nil {
		return "", err
	}
	fmt.Printf("%s: control plane up: %s (logs in %s)\n", sys, cp.APIServerURL, cpDir)

	var p *framework.Process
	switch sys {
	case systemNodeagent:
		p, err = startNodeagent(o, cp.AdminKubeconfig, cp.KubeletClientCAFile, dir)
	case systemKWOK:
		p, err = startKWOK(ctx, o, cp.AdminClient, cp.AdminKubeconfig, dir)
	}
	if err != nil {
		return "", err
	}
	defer func() {
		if err := p.Stop(30 * time.Second); err != nil {
			fmt.Printf("%s: stopping: %v\n", sys, err)
		}
	}()
	var nodes []string
	err = framework.WaitFor(ctx, time.Second, func() (bool, error) {
		if err := p.ExitedErr(); err != nil {
			return false, err
		}
		l, err := cp.AdminClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		nodes = nodes[:0]
		for _, n := range l.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					nodes = append(nodes, fmt.Sprintf("%s %v", n.Name, n.Status.Addresses))
				}
			}
		}
		return len(nodes) == o.nodes, nil
	})
	if err != nil {
		return "", fmt.Errorf("%d Nodes Ready: %w", o.nodes, err)
	}
	fmt.Printf("%s: %d Nodes Ready: %s\n", sys, o.nodes, strings.Join(nodes, ", "))

	timeout, err := ginkgoTimeout(o, time.Now())
	if err != nil {
		return "", err
	}
	g := exec.CommandContext(ctx, filepath.Join(o.bins, "ginkgo"), ginkgoArgs(o, timeout, cp.AdminKubeconfig, dir)...)
	logf, err := os.Create(filepath.Join(dir, "ginkgo.log"))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	g.Stdout, g.Stderr = logf, logf
	start := time.Now()
	fmt.Printf("%s: ginkgo: %s (log %s)\n", sys, strings.Join(g.Args, " "), logf.Name())
	runErr := g.Run()
	fmt.Printf("%s: ginkgo finished after %v: %v\n", sys, time.Since(start).Round(time.Second), runErr)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return filepath.Join(dir, "report.json"), nil
}
