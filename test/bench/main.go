// Command bench runs the reference kubelet (k8s.io/kubernetes v1.37.x, built by hack/install-deps.sh)
// and nodeagent side by side on one local control plane (test/framework: etcd, kube-apiserver,
// kube-controller-manager) and one shared containerd, and measures for each:
//
//   - time to Ready: ≥ 10 cold starts each, from exec to Ready=True seen by a watch on the node that was
//     opened before the exec (Node, Lease and CSINode deleted and the process fully stopped in between);
//   - steady-state API load: requests per minute by verb and resource, from the API server's audit log,
//     for each node's own system:node:<name> user, both running at once after a warm-up;
//   - bytes: the Node object (JSON, `kubectl get -o json` rendering, protobuf) and every status patch
//     body (a Request-level audit rule for nodes/status patches logs the patch document);
//   - host cost over the same window: RSS and open fds (sampled from /proc), CPU cores (utime+stime
//     delta over wall time), goroutines (go_goroutines from each process's /metrics).
//
// It prints one table and writes BENCHMARKS.md (keeping any text below its "analysis" marker).
//
//	go run ./test/bench [--runs 10] [--warmup 30s] [--steady 3m] [--out BENCHMARKS.md] [--dir _output/bench]
//
// `make bench` runs it after `make tools`. It takes about 6 minutes on 2 cores.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeagent/nodeagent/test/framework"
)

const (
	kubeletNode = "bench-kubelet"
	agentNode   = "bench-nodeagent"
	leaseNS     = "kube-node-lease"
)

type options struct {
	runs           int
	warmup, steady time.Duration
	sample         time.Duration
	pageout        time.Duration
	flip           bool
	readyTimeout   time.Duration
	out, dir       string
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 10, "timed cold starts of each component (after one untimed warm-up start each)")
	flag.DurationVar(&o.warmup, "warmup", 30*time.Second, "time both run before the steady-state window opens")
	flag.DurationVar(&o.steady, "steady", 3*time.Minute, "length of the steady-state window")
	flag.DurationVar(&o.sample, "sample-interval", 2*time.Second, "RSS/fd sampling interval in the steady-state window")
	flag.DurationVar(&o.pageout, "pageout", 30*time.Second, "after the window, how long both run on after their file-backed pages are paged out, before RSS is read again (0 skips)")
	flag.BoolVar(&o.flip, "flip", true, "after the window, turn NetworkReady off and on (CNI config) to measure the status patches of a Ready change")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", time.Minute, "how long one cold start may take to turn Ready")
	flag.StringVar(&o.out, "out", "", "report file (default <repo>/BENCHMARKS.md; \"-\" for none)")
	flag.StringVar(&o.dir, "dir", "", "working directory, emptied first (default <repo>/_output/bench)")
	flag.Parse()
	if o.runs < 1 || o.steady <= 0 {
		fmt.Fprintln(os.Stderr, "bench: --runs must be ≥ 1 and --steady > 0")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// auditPolicy logs node and service-account requests at Metadata level as the framework's own policy
// does, plus the request body (Request level) of status patches and Lease writes by nodes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  userGroups: ["system:nodes"]
  verbs: ["patch"]
  resources: [{group: "", resources: ["nodes/status"]}]
- level: Request
  userGroups: ["system:nodes"]
  verbs: ["create", "update"]
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
- level: Metadata
  userGroups: ["system:nodes", "system:serviceaccounts"]
- level: None
`

func run(ctx context.Context, o options) (err error) {
	began := time.Now()
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if o.dir == "" {
		o.dir = filepath.Join(root, "_output", "bench")
	}
	if o.out == "" {
		o.out = filepath.Join(root, "BENCHMARKS.md")
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := framework.UnmountAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	env := collectEnv(root)

	say("building binaries (hack/install-deps.sh, go build ./cmd/nodeagent)")
	binDir, err := framework.EnsureBinaries()
	if err != nil {
		return err
	}
	kubeletBin, agentBin, err := privateBinaries(root, binDir, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	env.versions(binDir, agentBin)

	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	say("starting etcd, kube-apiserver, kube-controller-manager")
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "controlplane"), NodeNames: []string{kubeletNode, agentNode}, ControllerManager: true,
		ExtraAPIServerArgs: []string{"--audit-policy-file=" + policy},
	})
	if err != nil {
		return err
	}
	defer cp.Stop()
	say("starting containerd (one, shared by both) with a bridge CNI config")
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: filepath.Join(dir, "containerd"), CNI: true})
	if err != nil {
		return err
	}
	defer ctrd.Close()
	if err := framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		st, err := ctrd.Status(ctx)
		if err != nil {
			return false, err
		}
		ok, reason, _ := framework.Condition(st, "NetworkReady")
		if !ok {
			return false, errors.New("NetworkReady false: " + reason)
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("wait for containerd NetworkReady: %w", err)
	}

	fk, err := framework.NewKubelet(framework.KubeletOptions{Dir: filepath.Join(dir, "kubelet"), NodeName: kubeletNode,
		Kubeconfig: cp.KubeconfigFor(kubeletNode), RuntimeEndpoint: ctrd.Endpoint, Binary: kubeletBin})
	if err != nil {
		return err
	}
	kl := &kubelet{k: fk}
	// The agent serves its kubelet API (--port, its default 10250 on a node) as the kubelet serves
	// its own: what each costs idle includes what its API keeps running (cadvisor's, issue 50).
	na := &nodeAgent{dir: filepath.Join(dir, "nodeagent"), node: agentNode, kubeconfig: cp.KubeconfigFor(agentNode),
		endpoint: ctrd.Endpoint, bin: agentBin, args: []string{"--port=" + strconv.Itoa(framework.FreePort())}}
	comps := []component{kl, na}
	defer func() {
		for _, c := range comps {
			if serr := c.stop(); serr != nil {
				say("%s: %v", c.name(), serr)
			}
		}
	}()
	results := map[string]*result{}
	for _, c := range comps {
		results[c.name()] = &result{name: c.name(), node: c.nodeName()}
		if st, err := os.Stat(c.binary()); err == nil {
			results[c.name()].binarySize = st.Size()
		}
	}

	// 1. Time to Ready: one untimed warm-up start each (page cache, root dirs, the kubelet's
	// self-signed serving certificate), then o.runs timed cold starts each, alternating which goes first.
	cs := cp.AdminClient
	for i := 0; i <= o.runs; i++ {
		order := comps
		if i%2 == 1 {
			order = []component{comps[1], comps[0]}
		}
		for _, c := range order {
			rec, err := coldStart(ctx, cs, c, o.readyTimeout)
			if err != nil {
				return fmt.Errorf("%s cold start %d: %w", c.name(), i, err)
			}
			r := results[c.name()]
			if i == 0 {
				r.warmupReady = rec.ready
				say("%-9s warm-up start: Ready after %v (not counted)", c.name(), rec.ready.Round(time.Millisecond))
				continue
			}
			r.runs = append(r.runs, rec)
			say("%-9s cold start %2d/%d: Ready after %v", c.name(), i, o.runs, rec.ready.Round(time.Millisecond))
		}
	}

	// 2-4. Steady state: both running, a warm-up, then one window for API load and host cost.
	say("steady state: starting both, %v warm-up, then a %v window", o.warmup, o.steady)
	for _, c := range comps {
		if err := deleteNodeObjects(ctx, cs, c.nodeName()); err != nil {
			return err
		}
		ready, cancel, err := watchReady(ctx, cs, c.nodeName())
		if err != nil {
			return err
		}
		err = c.start(ctx)
		if err == nil {
			err = awaitReady(ctx, c, ready, o.readyTimeout)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s steady-state start: %w", c.name(), err)
		}
	}
	if err := sleep(ctx, o.warmup, comps); err != nil {
		return err
	}
	for _, c := range comps {
		n, err := c.goroutines(ctx)
		if err != nil {
			say("%s: goroutines: %v", c.name(), err)
			n = -1
		}
		results[c.name()].goroutinesStart = n
	}
	auditFrom, err := fileSize(cp.AuditLogPath)
	if err != nil {
		return err
	}
	cpu0 := map[string]float64{}
	for _, c := range comps {
		if cpu0[c.name()], err = cpuSeconds(c.pid()); err != nil {
			return err
		}
	}
	w0 := time.Now()
	smp := startSampler(ctx, o.sample, kl.pid(), na.pid())
	if err := sleep(ctx, o.steady, comps); err != nil {
		smp.stop()
		return err
	}
	wall := time.Since(w0)
	for _, c := range comps {
		cpu1, err := cpuSeconds(c.pid())
		if err != nil {
			return err
		}
		r := results[c.name()]
		r.cpuCores = (cpu1 - cpu0[c.name()]) / wall.Seconds()
		r.cpuSeconds = cpu1 - cpu0[c.name()]
	}
	samples, serrs := smp.stop()
	if len(serrs) > 0 {
		say("sampling errors: %v", errors.Join(serrs...))
	}
	auditTo, err := fileSize(cp.AuditLogPath)
	if err != nil {
		return err
	}
	w1 := time.Now()
	httpc, err := rest.HTTPClientFor(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("admin HTTP client: %w", err)
	}
	events, err := auditWindow(cp.AuditLogPath, auditFrom, auditTo, filepath.Join(dir, "audit-steady.log"))
	if err != nil {
		return err
	}
	for _, c := range comps {
		r := results[c.name()]
		r.window = wall
		r.counts = framework.RequestCounts(events, "system:node:"+c.nodeName())
		for _, s := range samples[c.pid()] {
			r.rss = append(r.rss, float64(s.rss))
			r.rssAnon = append(r.rssAnon, float64(s.rssAnon))
			r.rssFile = append(r.rssFile, float64(s.rssFile))
			r.fds = append(r.fds, float64(s.fds))
			r.threads = append(r.threads, float64(s.threads))
		}
		n, err := c.goroutines(ctx)
		if err != nil {
			say("%s: goroutines: %v", c.name(), err)
			n = -1
		}
		r.goroutinesEnd = n
		if r.sizes, err = getNodeSizes(ctx, httpc, cp.APIServerURL, c.nodeName()); err != nil {
			return err
		}
	}

	// Working set: page out each process's file-backed pages (as memory pressure would), let both run
	// on, and see how much comes back.
	if o.pageout > 0 {
		say("after the window: paging out file-backed pages (process_madvise MADV_PAGEOUT), then %v", o.pageout)
		for _, c := range comps {
			if _, err := pageOutFileMappings(c.pid()); err != nil {
				say("%s: %v", c.name(), err)
				results[c.name()].rssAfterPageout = -1
			}
		}
		if err := sleep(ctx, o.pageout, comps); err != nil {
			return err
		}
		for _, c := range comps {
			r := results[c.name()]
			if r.rssAfterPageout < 0 {
				continue
			}
			if r.rssAfterPageout, err = statusField(c.pid(), "VmRSS"); err != nil {
				return err
			}
			if r.rssFileAfterPageout, err = statusField(c.pid(), "RssFile"); err != nil {
				return err
			}
		}
	}
	// Status patches on a real change: NetworkReady off and on again through containerd's CNI config
	// turns both nodes NotReady and Ready again, one patch each way.
	var flipFrom, flipTo time.Time
	if o.flip {
		say("status change: removing the CNI config until both are NotReady, then restoring it until both are Ready")
		flipFrom = time.Now()
		nodes := []string{kubeletNode, agentNode}
		var down, up map[string]time.Duration
		err := ctrd.SetCNI(false)
		if err == nil {
			down, err = waitNodesReady(ctx, cs, nodes, false, 2*time.Minute)
		}
		if cerr := ctrd.SetCNI(true); err == nil {
			err = cerr
		}
		if err == nil {
			up, err = waitNodesReady(ctx, cs, nodes, true, 2*time.Minute)
		}
		if err != nil {
			return fmt.Errorf("status change: %w", err)
		}
		flipTo = time.Now()
		for _, c := range comps {
			r := results[c.name()]
			r.notReadyAfter, r.readyAgainAfter = down[c.nodeName()], up[c.nodeName()]
			say("%-9s NotReady %v after the CNI config was removed, Ready %v after it was restored",
				c.name(), r.notReadyAfter.Round(10*time.Millisecond), r.readyAgainAfter.Round(10*time.Millisecond))
		}
	}
	for _, c := range comps {
		if err := c.stop(); err != nil {
			say("%s: %v", c.name(), err)
		}
	}

	// Bodies and per-start request counts from the whole audit log.
	timed, err := readTimedEvents(cp.AuditLogPath)
	if err != nil {
		return err
	}
	for _, c := range comps {
		results[c.name()].fromAudit(timed, "system:node:"+c.nodeName(), w0, w1, flipFrom, flipTo)
	}

	env.finish(began)
	rep := report{env: env, opts: o, kubelet: results["kubelet"], agent: results["nodeagent"]}
	fmt.Println()
	fmt.Print(rep.table())
	if o.out != "-" {
		if err := rep.write(o.out); err != nil {
			return err
		}
		say("wrote %s", o.out)
	}
	say("done in %v; logs in %s", time.Since(began).Round(time.Second), dir)
	return nil
}

// privateBinaries puts the binaries this run executes in binDir of its own: the kubelet copied from
// sharedBin, nodeagent built there (or copied from $NODEAGENT_BINARY), which framework.StartAgent then
// runs. Nobody rebuilding _output/bin mid-run changes them, and their page-cache pages are touched by
// this run's processes only, so the smaps Referenced working set is theirs alone.
func privateBinaries(root, sharedBin, binDir string) (kubeletBin, agentBin string, err error) {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", "", err
	}
	kubeletBin = filepath.Join(binDir, "kubelet")
	if err := copyFile(filepath.Join(sharedBin, "kubelet"), kubeletBin); err != nil {
		return "", "", err
	}
	agentBin = filepath.Join(binDir, "nodeagent")
	if src := os.Getenv("NODEAGENT_BINARY"); src != "" {
		if err := copyFile(src, agentBin); err != nil {
			return "", "", err
		}
	} else {
		cmd := framework.AgentBuildCommand(root, agentBin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build ./cmd/nodeagent: %w\n%s", err, out)
		}
	}
	if err := os.Setenv("NODEAGENT_BINARY", agentBin); err != nil {
		return "", "", err
	}
	if got, err := framework.BuildAgent(); err != nil || got != agentBin {
		return "", "", fmt.Errorf("framework.BuildAgent: %q, %v (want %q)", got, err, agentBin)
	}
	return kubeletBin, agentBin, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// sleep waits d, failing early if ctx ends or a component exits.
func sleep(ctx context.Context, d time.Duration, comps []component) error {
	t := time.NewTimer(d)
	defer t.Stop()
	exits := make(chan string, len(comps))
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	for _, c := range comps {
		go func() {
			select {
			case <-c.exited():
				exits <- c.name()
			case <-stopWatch:
			}
		}()
	}
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case name := <-exits:
		return fmt.Errorf("%s exited during the steady-state run", name)
	}
}

// runRecord is one timed cold start.
type runRecord struct {
	start time.Time     // just before exec
	ready time.Duration // exec → Ready=True seen by the watch
}

// coldStart makes sure the component's Node, Lease and CSINode are gone, opens a watch on the Node,
// execs the component, waits for Ready=True on the watch, and stops the component again.
func coldStart(ctx context.Context, cs kubernetes.Interface, c component, timeout time.Duration) (runRecord, error) {
	if err := deleteNodeObjects(ctx, cs, c.nodeName()); err != nil {
		return runRecord{}, err
	}
	ready, cancel, err := watchReady(ctx, cs, c.nodeName())
	if err != nil {
		return runRecord{}, err
	}
	defer cancel()
	rec := runRecord{start: time.Now()}
	err = c.start(ctx)
	var at time.Time
	if err == nil {
		select {
		case ev := <-ready:
			at, err = ev.at, ev.err
		case <-c.exited():
			err = fmt.Errorf("%s exited before Ready", c.name())
		case <-time.After(timeout):
			err = fmt.Errorf("not Ready after %v", timeout)
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	rec.ready = at.Sub(rec.start)
	if serr := c.stop(); serr != nil && err == nil {
		err = serr
	}
	return rec, err
}

// awaitReady waits for the Ready event of a watch from watchReady.
func awaitReady(ctx context.Context, c component, ready <-chan readyEvent, timeout time.Duration) error {
	select {
	case ev := <-ready:
		return ev.err
	case <-c.exited():
		return fmt.Errorf("%s exited before Ready", c.name())
	case <-time.After(timeout):
		return fmt.Errorf("not Ready after %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readyEvent is when a watch saw Ready=True, or why it stopped first.
type readyEvent struct {
	at  time.Time
	err error
}

// watchReady lists node (to get a resourceVersion) and watches it from there; the returned channel
// gets the time of the first event showing Ready=True, taken as the event is received.
func watchReady(ctx context.Context, cs kubernetes.Interface, node string) (<-chan readyEvent, func(), error) {
	sel := fields.OneTermEqualSelector("metadata.name", node).String()
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, nil, fmt.Errorf("list node %s: %w", node, err)
	}
	timeout := int64(600)
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion, TimeoutSeconds: &timeout})
	if err != nil {
		return nil, nil, fmt.Errorf("watch node %s: %w", node, err)
	}
	ch := make(chan readyEvent, 1)
	go func() {
		for ev := range w.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Error {
				ch <- readyEvent{err: fmt.Errorf("watch node %s: %v", node, apierrors.FromObject(ev.Object))}
				return
			}
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type != watch.Deleted && framework.IsReady(n) {
				ch <- readyEvent{at: now}
				return
			}
		}
		ch <- readyEvent{err: fmt.Errorf("watch node %s closed before Ready", node)}
	}()
	return ch, w.Stop, nil
}

// waitNodesReady polls every 100 ms until every node's Ready condition is True (want) or not True
// (!want), and returns how long each node took, from the call.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, nodes []string, want bool, timeout time.Duration) (map[string]time.Duration, error) {
	start := time.Now()
	took := map[string]time.Duration{}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := framework.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		var waiting error
		for _, name := range nodes {
			if _, ok := took[name]; ok {
				continue
			}
			n, err := cs.CoreV1().Nodes().Get(wctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if framework.IsReady(n) == want {
				took[name] = time.Since(start)
			} else {
				waiting = fmt.Errorf("node %s Ready=%v, waiting for %v", name, framework.IsReady(n), want)
			}
		}
		return waiting == nil, waiting
	})
	return took, err
}

// deleteNodeObjects deletes node's Node, its Lease in kube-node-lease and its CSINode (the kubelet
// creates one; nothing garbage-collects it here), and waits until the Node and Lease are gone.
func deleteNodeObjects(ctx context.Context, cs kubernetes.Interface, node string) error {
	if err := framework.DeleteNode(ctx, cs, node); err != nil {
		return err
	}
	if err := cs.StorageV1().CSINodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete csinode %s: %w", node, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return framework.WaitFor(wctx, 50*time.Millisecond, func() (bool, error) {
		_, err := cs.CoreV1().Nodes().Get(wctx, node, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("node %s still there (%v)", node, err)
		}
		_, err = cs.CoordinationV1().Leases(leaseNS).Get(wctx, node, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("lease %s still there (%v)", node, err)
		}
		return true, nil
	})
}
