package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/test/benchkit"
	"github.com/nodeagent/nodeagent/test/framework"
)

const (
	systemNodeagent = "nodeagent"
	systemKWOK      = "kwok"

	// benchNamespace holds each system's service account; each runs as its own, so that the audit log
	// (which logs service accounts) tells its requests apart.
	benchNamespace = "bench-scale"
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
	kubeconfig, err := benchkit.AdminServiceAccount(ctx, cp, benchNamespace, sys)
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
	nodes := benchkit.NewNodeTracker(n)
	leases := benchkit.NewLeaseTracker()
	nodeFactory := informers.NewSharedInformerFactory(client, 0)
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	if _, err := nodeFactory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { nodes.Observe(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { nodes.Observe(obj.(*corev1.Node)) },
	}); err != nil {
		return nil, err
	}
	if _, err := leaseFactory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { leases.Observe(obj.(*coordinationv1.Lease)) },
		UpdateFunc: func(_, obj any) { leases.Observe(obj.(*coordinationv1.Lease)) },
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
				"--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(framework.FreePort()), "-v=1", "--port=0"}
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
		if err := benchkit.CreateKWOKNodes(ctx, cp.AdminClient, n); err != nil {
			return nil, err
		}
		r.created = time.Since(c0)
		t0 = time.Now()
		var proc *framework.Process
		proc, err = framework.StartProcess("kwok", filepath.Join(dir, "kwok.log"), filepath.Join(binDir, "kwok"),
			"--kubeconfig="+kubeconfig, "--config="+filepath.Join(binDir, "kwok-node-stages.yaml"),
			"--manage-nodes-with-annotation-selector="+benchkit.KWOKAnnotation+"=fake",
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
		case <-nodes.AllReady():
			break wait
		case <-rctx.Done():
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %d of %d Nodes Ready %v after start", ctx.Err(), nodes.ReadyCount(), n, time.Since(t0).Round(time.Second))
			}
			// Not all Ready in time: measured all the same, from now, and reported as such.
			r.notAllReady = nodes.ReadyCount()
			nodes.TimedOut()
			fmt.Printf("    %v: only %d of %d Nodes Ready after %v; measuring from now all the same\n", errTimeout, r.notAllReady, n, o.readyTimeout)
			break wait
		case <-tick.C:
			if err := exited(); err != nil {
				return nil, err
			}
			if d := time.Since(t0); d.Round(time.Second)%(30*time.Second) == 0 {
				fmt.Printf("    %v after start: %d of %d Ready\n", d.Round(time.Second), nodes.ReadyCount(), n)
			}
		}
	}
	if r.notAllReady < 0 {
		r.readyAfter = nodes.ReadyAt().Sub(t0)
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
	cpu0, err := benchkit.ReadCPU(pids)
	if err != nil {
		return nil, err
	}
	audit0, err := framework.AuditLogSize(cp.AuditLogPath)
	if err != nil {
		return nil, err
	}
	w0 := time.Now()
	leases.Record(true)
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
				time.Since(w0).Round(time.Second), o.duration, nodes.ReadyCount(), nodes.BadWindowCount())
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
	leases.Record(false)
	r.readyAtEnd = nodes.ReadyCount()
	cpu1, err := benchkit.ReadCPU(pids)
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
	r.leaseIntervals = leases.Intervals()

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
	r.badStartup, r.badWindow = nodes.Bad()
	return r, nil
}
