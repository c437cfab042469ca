package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/test/framework"
)

const (
	systemNodeagent = "nodeagent"
	systemKWOK      = "kwok"

	// benchNamespace holds each system's service account; each runs as its own, so that the audit log
	// (which logs service accounts) tells its requests apart.
	benchNamespace = "bench-scale"
	// kwokAnnotation is the annotation KWOK's documentation gives the Nodes it is to manage
	// (--manage-nodes-with-annotation-selector), with its taint of the same key.
	kwokAnnotation = "kwok.x-k8s.io/node"
)

// result is what one system did with n Nodes.
type result struct {
	system string
	nodes  int

	created    time.Duration // KWOK: creating the Nodes beforehand (admin, not audited)
	readyAfter time.Duration // from the process's start until all n Ready
	// notAllReady is -1, or the number of Nodes Ready when --ready-timeout ran out (the window then
	// starts --settle after that, and readyAfter is the timeout).
	notAllReady int
	// readyAtEnd is the number of Nodes Ready at the end of the window.
	readyAtEnd int

	// Nodes seen with Ready False or Unknown, by the phase they were seen in, name → status.
	badStartup, badWindow map[string]string

	window                  time.Duration
	leaseIntervals          []time.Duration // sorted
	cores                   float64
	rssMean, rssMax         int64
	rssSamples              int
	componentCores          map[string]float64 // etcd, kube-apiserver, kube-controller-manager
	requests                map[string]int     // "verb resource" in the window
	writes, total, watchers int
	// shards is each shard process's CPU and RSS (nodeagent with --shards > 1); cores, rssMean and
	// rssMax are then their sums (rssMax: the largest sum of one sample).
	shards []shardResult
}

// shardResult is one shard process's CPU and RSS in the window.
type shardResult struct {
	cores           float64
	rssMean, rssMax int64
	rssSum          int64
}

// measure runs one system with n Nodes on a control plane of its own and returns what it measured.
func measure(ctx context.Context, o options, sys string, n int, agentBin, binDir string) (*result, error) {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.dir, fmt.Sprintf("%s-%d-", sys, n))
	if err != nil {
		return nil, err
	}
	dir, _ = filepath.Abs(dir)
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	// The audit log must not rotate during the run (kube-apiserver rotates it at 100 MB by default, which
	// 5000 Nodes write in about a minute): the window is read by byte offsets in one file.
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: dir, ControllerManager: true,
		ExtraAPIServerArgs: []string{"--audit-log-maxsize=1000000"}})
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	kubeconfig, err := serviceAccount(ctx, cp, sys)
	if err != nil {
		return nil, err
	}
	r := &result{system: sys, nodes: n, notAllReady: -1}

	// The watches (protobuf, admin: not in the audit log) start before anything exists.
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	nodes := &nodeTracker{want: n, ready: map[string]bool{}, allReady: make(chan struct{}),
		badStartup: map[string]string{}, badWindow: map[string]string{}}
	leases := &leaseTracker{last: map[string]time.Time{}}
	nodeFactory := informers.NewSharedInformerFactory(client, 0)
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	if _, err := nodeFactory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { nodes.observe(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { nodes.observe(obj.(*corev1.Node)) },
	}); err != nil {
		return nil, err
	}
	if _, err := leaseFactory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { leases.observe(obj.(*coordinationv1.Lease)) },
		UpdateFunc: func(_, obj any) { leases.observe(obj.(*coordinationv1.Lease)) },
	}); err != nil {
		return nil, err
	}
	nodeFactory.Start(wctx.Done())
	leaseFactory.Start(wctx.Done())
	nodeFactory.WaitForCacheSync(wctx.Done())
	leaseFactory.WaitForCacheSync(wctx.Done())

	var procs []*framework.Process
	var t0 time.Time
	switch sys {
	case systemNodeagent:
		t0 = time.Now()
		for i := range o.shards {
			log := filepath.Join(dir, "nodeagent-simulate.log")
			args := []string{"simulate", "--kubeconfig=" + kubeconfig, "--nodes=" + strconv.Itoa(n/o.shards), "--node-name-prefix=sim-node-",
				"--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(framework.FreePort()), "-v=1"}
			if o.shards > 1 {
				log = filepath.Join(dir, fmt.Sprintf("nodeagent-simulate-%d.log", i))
				args = append(args, "--shards="+strconv.Itoa(o.shards), "--shard-index="+strconv.Itoa(i))
			}
			var proc *framework.Process
			if proc, err = framework.StartProcess(fmt.Sprintf("nodeagent simulate shard %d", i), log, agentBin, args...); err != nil {
				break
			}
			procs = append(procs, proc)
		}
	case systemKWOK:
		c0 := time.Now()
		if err := createKWOKNodes(ctx, cp.AdminClient, n); err != nil {
			return nil, err
		}
		r.created = time.Since(c0)
		t0 = time.Now()
		var proc *framework.Process
		proc, err = framework.StartProcess("kwok", filepath.Join(dir, "kwok.log"), filepath.Join(binDir, "kwok"),
			"--kubeconfig="+kubeconfig, "--config="+filepath.Join(binDir, "kwok-node-stages.yaml"),
			"--manage-nodes-with-annotation-selector="+kwokAnnotation+"=fake",
			"--node-lease-duration-seconds=40", "--server-address=")
		if err == nil {
			procs = append(procs, proc)
		}
	}
	for _, proc := range procs {
		defer func() { _ = proc.Stop(20 * time.Second) }()
	}
	if err != nil {
		return nil, err
	}
	exited := func() error {
		for _, proc := range procs {
			if err := proc.ExitedErr(); err != nil {
				return err
			}
		}
		return nil
	}

	// All Ready, or the process exits, or the timeout.
	rctx, cancel := context.WithTimeout(ctx, o.readyTimeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-nodes.allReady:
			break wait
		case <-rctx.Done():
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %d of %d Nodes Ready %v after start", ctx.Err(), nodes.readyCount(), n, time.Since(t0).Round(time.Second))
			}
			// Not all Ready in time: measured all the same, from now, and reported as such.
			r.notAllReady = nodes.readyCount()
			nodes.timedOut()
			fmt.Printf("    %v: only %d of %d Nodes Ready after %v; measuring from now all the same\n", errTimeout, r.notAllReady, n, o.readyTimeout)
			break wait
		case <-tick.C:
			if err := exited(); err != nil {
				return nil, err
			}
			if d := time.Since(t0); d.Round(time.Second)%(30*time.Second) == 0 {
				fmt.Printf("    %v after start: %d of %d Ready\n", d.Round(time.Second), nodes.readyCount(), n)
			}
		}
	}
	if r.notAllReady < 0 {
		r.readyAfter = nodes.readyAt().Sub(t0)
	} else {
		r.readyAfter = time.Since(t0)
	}
	fmt.Printf("    all %d Ready %v after start; window of %v begins in %v\n", n, r.readyAfter.Round(100*time.Millisecond), o.duration, o.settle)
	settle := time.NewTimer(o.settle)
	defer settle.Stop()
settling:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-settle.C:
			break settling
		case <-tick.C:
			if err := exited(); err != nil {
				return nil, err
			}
		}
	}

	// The window.
	pids := cp.PIDs()
	procName := func(i int) string { return fmt.Sprintf("%s#%d", sys, i) }
	for i, proc := range procs {
		pids[procName(i)] = proc.PID()
	}
	r.shards = make([]shardResult, len(procs))
	cpu0, err := readCPU(pids)
	if err != nil {
		return nil, err
	}
	audit0, err := framework.AuditLogSize(cp.AuditLogPath)
	if err != nil {
		return nil, err
	}
	w0 := time.Now()
	leases.record(true)
	var rssSum int64
	sample := time.NewTicker(o.sample)
	defer sample.Stop()
	end := time.NewTimer(o.duration)
	defer end.Stop()
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
window:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-end.C:
			break window
		case <-progress.C:
			fmt.Printf("    %v of %v; %d Ready, %d seen NotReady/Unknown since all Ready\n",
				time.Since(w0).Round(time.Second), o.duration, nodes.readyCount(), nodes.badWindowCount())
		case <-sample.C:
			if err := exited(); err != nil {
				return nil, err
			}
			var total int64
			for i, proc := range procs {
				st, err := framework.ReadProcStats(proc.PID())
				if err != nil {
					return nil, err
				}
				total += st.RSS
				r.shards[i].rssSum += st.RSS
				r.shards[i].rssMax = max(r.shards[i].rssMax, st.RSS)
			}
			rssSum += total
			r.rssMax = max(r.rssMax, total)
			r.rssSamples++
		}
	}
	leases.record(false)
	r.readyAtEnd = nodes.readyCount()
	cpu1, err := readCPU(pids)
	if err != nil {
		return nil, err
	}
	audit1, err := framework.AuditLogSize(cp.AuditLogPath)
	if err != nil {
		return nil, err
	}
	r.window = time.Since(w0)
	if rotated, _ := filepath.Glob(filepath.Join(dir, "audit-*.log")); audit1 < audit0 || len(rotated) > 0 {
		return nil, fmt.Errorf("the audit log was rotated during the run (%v): its window cannot be read", rotated)
	}
	if r.rssSamples > 0 {
		r.rssMean = rssSum / int64(r.rssSamples)
		for i := range r.shards {
			r.shards[i].rssMean = r.shards[i].rssSum / int64(r.rssSamples)
		}
	}
	r.componentCores = map[string]float64{}
	for name := range pids {
		c := (cpu1[name] - cpu0[name]).Seconds() / r.window.Seconds()
		r.componentCores[name] = c
	}
	for i := range procs {
		r.shards[i].cores = r.componentCores[procName(i)]
		r.cores += r.shards[i].cores
		delete(r.componentCores, procName(i))
	}
	r.leaseIntervals = leases.intervals()

	events, err := framework.ReadAuditEventsRange(cp.AuditLogPath, audit0, audit1)
	if err != nil {
		return nil, err
	}
	r.requests = framework.RequestCounts(events, "system:serviceaccount:"+benchNamespace+":"+sys)
	for k, c := range r.requests {
		verb, _, _ := strings.Cut(k, " ")
		r.total += c
		if framework.IsWriteVerb(verb) {
			r.writes += c
		}
		if verb == "watch" {
			r.watchers += c
		}
	}
	r.badStartup, r.badWindow = nodes.bad()
	return r, nil
}

// serviceAccount creates service account sys in benchNamespace, bound to cluster-admin (both systems get
// the same rights), and returns the path of a kubeconfig with a token for it.
func serviceAccount(ctx context.Context, cp *framework.ControlPlane, sys string) (string, error) {
	path, err := cp.ServiceAccountKubeconfig(ctx, benchNamespace, sys)
	if err != nil {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-scale-" + sys},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: benchNamespace, Name: sys}},
	}
	if _, err := cp.AdminClient.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("bind cluster-admin to %s: %w", sys, err)
	}
	return path, nil
}

// createKWOKNodes creates n Nodes kwok-node-0000... as KWOK's documentation shows them: annotation and
// taint kwok.x-k8s.io/node=fake, label type=kwok, no status (KWOK's node-initialize stage fills it in).
// Eight creates at a time.
func createKWOKNodes(ctx context.Context, client kubernetes.Interface, n int) error {
	names := make(chan string)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{
						Name:        name,
						Annotations: map[string]string{kwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
						Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": name,
							"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent"},
					},
					Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: kwokAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
				}
				if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create node %s: %w", name, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case names <- fmt.Sprintf("kwok-node-%04d", i):
		case err = <-errs:
			break feed
		}
	}
	close(names)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errs:
	default:
	}
	return err
}

// readCPU reads the CPU time of every process in pids.
func readCPU(pids map[string]int) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for name, pid := range pids {
		d, err := framework.ReadProcCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// nodeTracker follows every Node's Ready condition from a watch.
type nodeTracker struct {
	want int

	mu sync.Mutex
	// Nodes seen with Ready False or Unknown before all were Ready and after, name → status.
	badStartup, badWindow map[string]string
	ready                 map[string]bool
	nReady                int
	allReady              chan struct{} // closed when all want Nodes are Ready the first time
	allReadyAt            time.Time
	after                 bool // all were Ready once, or waiting for that timed out: count in badWindow
}

// timedOut makes Nodes seen not Ready from now on count in badWindow, as if all had been Ready.
func (t *nodeTracker) timedOut() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.after = true
}

// observe takes one Node from the watch. A Node without a Ready condition (KWOK's before it initializes
// them) counts as neither.
func (t *nodeTracker) observe(n *corev1.Node) {
	c := framework.NodeCondition(n, corev1.NodeReady)
	if c == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ready := c.Status == corev1.ConditionTrue
	if ready != t.ready[n.Name] {
		if ready {
			t.nReady++
		} else {
			t.nReady--
		}
	}
	t.ready[n.Name] = ready
	if !ready {
		if !t.after {
			t.badStartup[n.Name] = string(c.Status)
		} else {
			t.badWindow[n.Name] = string(c.Status)
		}
	}
	if t.nReady == t.want && t.allReadyAt.IsZero() {
		t.allReadyAt, t.after = now, true
		close(t.allReady)
	}
}

func (t *nodeTracker) readyCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nReady
}

func (t *nodeTracker) readyAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.allReadyAt
}

func (t *nodeTracker) badWindowCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.badWindow)
}

// bad returns copies of the Nodes seen not Ready before and after all were Ready.
func (t *nodeTracker) bad() (startup, window map[string]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.badStartup), maps.Clone(t.badWindow)
}

// leaseTracker collects, while recording, the intervals between consecutive renewTimes of each Lease.
type leaseTracker struct {
	mu        sync.Mutex
	last      map[string]time.Time
	recording bool
	got       []time.Duration
}

func (t *leaseTracker) observe(l *coordinationv1.Lease) {
	if l.Spec.RenewTime == nil {
		return
	}
	rt := l.Spec.RenewTime.Time
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, ok := t.last[l.Name]
	if ok && !rt.After(prev) {
		return
	}
	t.last[l.Name] = rt
	if ok && t.recording {
		t.got = append(t.got, rt.Sub(prev))
	}
}

func (t *leaseTracker) record(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recording = on
}

// intervals returns the intervals recorded, sorted.
func (t *leaseTracker) intervals() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.got)
	slices.Sort(out)
	return out
}
