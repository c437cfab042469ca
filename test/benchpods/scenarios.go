package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/benchkit"
	"github.com/nodeagent/nodeagent/test/framework"
)

const (
	scenarioOneNode = "one-node"
	scenarioSpread  = "spread"
)

// phase is one measured phase of a scenario.
type phase struct {
	// reached is false when the phase's goal was not reached within --timeout; took is then the timeout.
	reached bool
	took    time.Duration
	// allReady is from the phase's start until the last pod bound in it turned Ready (0: none did).
	allReady time.Duration
	cost     cost
	starts   startStats
	deletes  deleteStats
}

// systemRun is what one system did in every scenario.
type systemRun struct {
	system string

	// Scenario 1.
	oneReady             time.Duration // the Node Ready after the process's start
	oneCreate, oneDelete phase
	oneIdleRSS           int64
	oneDup               []string

	// Scenarios 2 to 4.
	nodesReady            time.Duration
	idleRSS               int64 // the system's RSS with every Node Ready and no pod
	create, steady, churn phase
	del                   phase
	churnRan              bool
	nodesLost             map[string]string // Nodes seen not Ready after all were, name → status
	leaseP50, leaseP99    time.Duration
	steadyEvents          string // the Events stored in scenario 3's window (eventsWritten)
	dup                   []string
}

// env of one system on one control plane: the processes it runs, its watches.
type sysEnv struct {
	o       options
	sys     string
	dir     string
	cp      *framework.ControlPlane
	client  kubernetes.Interface // admin, protobuf, no rate limit: the benchmark's own writes and watches
	kubecfg string               // the system's service account
	procs   []*framework.Process
	hollow  []*framework.HollowNode // kubemark's, one a Node
	pods    *podTracker
	nodes   *benchkit.NodeTracker
	leases  *benchkit.LeaseTracker
	cancel  context.CancelFunc
	// pprof is nodeagent simulate's /debug/pprof with --profile-dir, else empty.
	pprof string
	// scenario names the profiles.
	scenario string
}

// newSysEnv starts a control plane of its own for sys (kube-controller-manager with the controllers the
// scenarios need and nodeipam giving each Node a pod CIDR of maskSize bits out of 172.16.0.0/12; with
// scheduler, kube-scheduler too), the system's service account, and the watches of pods, Nodes and
// Leases.
func newSysEnv(ctx context.Context, o options, sys, name string, maskSize int, scheduler bool, wantNodes int, nodeNames ...string) (*sysEnv, error) {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.dir, fmt.Sprintf("%s-%s-", sys, name))
	if err != nil {
		return nil, err
	}
	dir, _ = filepath.Abs(dir)
	qps, burst := strconv.Itoa(o.schedulerQPS), strconv.Itoa(2*o.schedulerQPS)
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: dir, ControllerManager: true, NodeNames: nodeNames,
		ExtraAPIServerArgs: []string{"--audit-log-maxsize=1000000", "--max-requests-inflight=800", "--max-mutating-requests-inflight=400"},
		ExtraControllerManagerArgs: []string{"--kube-api-qps=" + qps, "--kube-api-burst=" + burst,
			"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
			"--controllers=deployment,replicaset,nodelifecycle,nodeipam,podgc,garbagecollector,ttl",
			"--allocate-node-cidrs=true", "--cluster-cidr=172.16.0.0/12", "--node-cidr-mask-size=" + strconv.Itoa(maskSize)},
	})
	if err != nil {
		return nil, err
	}
	e := &sysEnv{o: o, sys: sys, dir: dir, cp: cp, pods: newPodTracker(), nodes: benchkit.NewNodeTracker(wantNodes), leases: benchkit.NewLeaseTracker()}
	if scheduler {
		if err := cp.StartScheduler(ctx, "--kube-api-qps="+qps, "--kube-api-burst="+burst); err != nil {
			e.stop()
			return nil, err
		}
	}
	if e.kubecfg, err = benchkit.AdminServiceAccount(ctx, cp, benchNamespace, sys); err != nil {
		e.stop()
		return nil, err
	}
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS = -1
	if e.client, err = kubernetes.NewForConfig(cfg); err != nil {
		e.stop()
		return nil, err
	}
	// No serviceaccount controller runs: the pods' namespace gets its default ServiceAccount here.
	if _, err := e.client.CoreV1().ServiceAccounts(benchNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		e.stop()
		return nil, fmt.Errorf("default ServiceAccount: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	all := informers.NewSharedInformerFactory(e.client, 0)
	leases := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	pods := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(benchNamespace))
	for _, reg := range []func() error{
		func() error {
			_, err := all.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { e.nodes.Observe(obj.(*corev1.Node)) },
				UpdateFunc: func(_, obj any) { e.nodes.Observe(obj.(*corev1.Node)) },
			})
			return err
		},
		func() error {
			_, err := leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { e.leases.Observe(obj.(*coordinationv1.Lease)) },
				UpdateFunc: func(_, obj any) { e.leases.Observe(obj.(*coordinationv1.Lease)) },
			})
			return err
		},
		func() error {
			_, err := pods.Core().V1().Pods().Informer().AddEventHandler(e.pods.handler())
			return err
		},
	} {
		if err := reg(); err != nil {
			e.stop()
			return nil, err
		}
	}
	for _, f := range []informers.SharedInformerFactory{all, leases, pods} {
		f.Start(wctx.Done())
		f.WaitForCacheSync(wctx.Done())
	}
	return e, nil
}

// stop stops the system's processes, the watches and the control plane, and removes the directory
// unless --keep.
func (e *sysEnv) stop() {
	for _, p := range e.procs {
		_ = p.Stop(20 * time.Second)
	}
	for _, h := range e.hollow {
		_ = h.Stop()
	}
	if e.cancel != nil {
		e.cancel()
	}
	e.cp.Stop()
	if !e.o.keep {
		_ = os.RemoveAll(e.dir)
	}
}

// users are the system's names in the audit log: its service account, or each hollow node's identity.
func (e *sysEnv) users() []string {
	if len(e.hollow) > 0 {
		var out []string
		for _, h := range e.hollow {
			out = append(out, "system:node:"+h.NodeName)
		}
		return out
	}
	return []string{"system:serviceaccount:" + benchNamespace + ":" + e.sys}
}

func (e *sysEnv) pids() map[string]int {
	m := map[string]int{}
	for i, p := range e.procs {
		m[fmt.Sprintf("%s#%d", e.sys, i)] = p.PID()
	}
	for _, h := range e.hollow {
		m[h.NodeName] = h.PID()
	}
	return m
}

func (e *sysEnv) rss() int64 {
	var total int64
	for _, pid := range e.pids() {
		if st, err := framework.ReadProcStats(pid); err == nil {
			total += st.RSS
		}
	}
	return total
}

// startSystem starts the system with n Nodes: nodeagent simulate (with template, if not empty), or KWOK
// over n Nodes created beforehand as KWOK's documentation shows them (with capacity pods, if maxPods > 0).
// It returns once every Node is Ready, with the time from the process's start.
func (e *sysEnv) startSystem(ctx context.Context, n int, prefix, template string) (time.Duration, error) {
	var t0 time.Time
	switch e.sys {
	case systemNodeagent:
		port := framework.FreePort()
		args := []string{"simulate", "--kubeconfig=" + e.kubecfg, "--nodes=" + strconv.Itoa(n), "--node-name-prefix=" + prefix,
			"--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(port), "-v=1", "--port=0"}
		args = append(args, e.o.simulateArgs...)
		if e.o.profileDir != "" {
			args = append(args, "--enable-profiling-handler")
			e.pprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", port)
		}
		if template != "" {
			path := filepath.Join(e.dir, "node-template.yaml")
			if err := os.WriteFile(path, []byte(template), 0o644); err != nil {
				return 0, err
			}
			args = append(args, "--node-template="+path)
		}
		t0 = time.Now()
		p, err := framework.StartProcessEnv("nodeagent simulate", filepath.Join(e.dir, "nodeagent-simulate-"+prefix+"log"), e.o.simulateEnv, e.o.agentBin, args...)
		if err != nil {
			return 0, err
		}
		e.procs = append(e.procs, p)
	case systemKWOK:
		if err := benchkit.CreateKWOKNodes(ctx, e.client, n); err != nil {
			return 0, err
		}
		t0 = time.Now()
		p, err := framework.StartProcess("kwok", filepath.Join(e.dir, "kwok.log"), filepath.Join(e.o.binDir, "kwok"),
			"--kubeconfig="+e.kubecfg, "--config="+filepath.Join(e.o.binDir, "kwok-node-stages.yaml"),
			"--config="+filepath.Join(e.o.binDir, "kwok-pod-stages.yaml"),
			"--manage-nodes-with-annotation-selector="+benchkit.KWOKAnnotation+"=fake",
			"--node-lease-duration-seconds=40", "--server-address=")
		if err != nil {
			return 0, err
		}
		e.procs = append(e.procs, p)
	}
	err := e.wait(ctx, 10*time.Minute, func() (bool, string) {
		select {
		case <-e.nodes.AllReady():
			return true, ""
		default:
			return false, fmt.Sprintf("%d of %d Nodes Ready", e.nodes.ReadyCount(), n)
		}
	})
	if err != nil {
		return 0, err
	}
	return e.nodes.ReadyAt().Sub(t0), nil
}

// profile, with --profile-dir and nodeagent, takes a CPU profile of up to --profile-seconds from now
// into <dir>/<scenario>-<phase>.cpu.pprof, and returns the func that, at the phase's end, waits for it and
// takes a heap profile into <dir>/<scenario>-<phase>.heap.pprof.
func (e *sysEnv) profile(ctx context.Context, phase string) func() {
	if e.pprof == "" {
		return func() {}
	}
	base := filepath.Join(e.o.profileDir, e.scenario+"-"+phase)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fetch(ctx, fmt.Sprintf("%s/profile?seconds=%d", e.pprof, e.o.profileSeconds), base+".cpu.pprof"); err != nil {
			fmt.Printf("    CPU profile: %v\n", err)
		}
	}()
	return func() {
		<-done
		if err := fetch(ctx, e.pprof+"/heap?gc=1", base+".heap.pprof"); err != nil {
			fmt.Printf("    heap profile: %v\n", err)
		}
	}
}

// fetch writes the body of GET url into path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// errNotReached is returned by wait when the timeout ran out.
var errNotReached = errors.New("not reached")

// wait polls done every 500 ms until it returns true, the system's process exits (an error), or
// timeout (errNotReached, with done's last progress). It prints the progress every 30 s.
func (e *sysEnv) wait(ctx context.Context, timeout time.Duration, done func() (bool, string)) error {
	t0 := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := t0
	for {
		ok, progress := done()
		if ok {
			return nil
		}
		for _, p := range e.procs {
			if err := p.ExitedErr(); err != nil {
				return err
			}
		}
		for _, h := range e.hollow {
			if !h.Running() {
				return fmt.Errorf("hollow node %s exited; its log: %s", h.NodeName, h.LogPath)
			}
		}
		if time.Since(t0) > timeout {
			return fmt.Errorf("%w after %v: %s", errNotReached, timeout, progress)
		}
		if time.Since(last) >= 30*time.Second {
			fmt.Printf("    %v: %s\n", time.Since(t0).Round(time.Second), progress)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// measurePhase runs act, then waits until done, measuring the system and the control plane from
// before act: the phase's cost, its wall time until done, and whether done was reached.
func (e *sysEnv) measurePhase(ctx context.Context, name string, act func() error, done func() (bool, string)) (phase, error) {
	var ph phase
	m, err := startMeter(e.cp, e.pids(), e.users())
	if err != nil {
		return ph, err
	}
	stopProfile := e.profile(ctx, name)
	defer stopProfile()
	t0 := time.Now()
	if err := act(); err != nil {
		_, _ = m.stop()
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	err = e.wait(ctx, e.o.timeout, done)
	ph.took, ph.reached = time.Since(t0), err == nil
	if err != nil && !errors.Is(err, errNotReached) {
		_, _ = m.stop()
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	if err != nil {
		fmt.Printf("    %s: %v; measured all the same\n", name, err)
	}
	if ph.cost, err = m.stop(); err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	// Give the pods of the phase stuckAfter's chance before they are judged.
	ph.starts = e.pods.starts(t0, time.Now(), e.o.stuckAfter)
	if !ph.starts.lastReady.IsZero() {
		ph.allReady = ph.starts.lastReady.Sub(t0)
	}
	ph.deletes = e.pods.deletes(t0, time.Now(), e.o.stuckAfter)
	fmt.Printf("    %s: %v (%s); %d bound, %d Ready (p50 %v, p99 %v), %d deleted, %d gone (p50 %v, p99 %v); %.2f cores, %d pod writes\n",
		name, ph.took.Round(100*time.Millisecond), map[bool]string{true: "reached", false: "NOT reached"}[ph.reached],
		ph.starts.bound, ph.starts.ready, pct(ph.starts.latencies, 0.5).Round(time.Millisecond), pct(ph.starts.latencies, 0.99).Round(time.Millisecond),
		ph.deletes.deleted, ph.deletes.gone, pct(ph.deletes.latencies, 0.5).Round(time.Millisecond), pct(ph.deletes.latencies, 0.99).Round(time.Millisecond),
		ph.cost.cores, ph.cost.writes("pods"))
	return ph, nil
}

// benchPod is the pod of every scenario: one container, no requests, tolerating KWOK's taint (KWOK's
// documentation gives its Nodes one), no service account token.
func benchPod() corev1.PodSpec {
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		Containers:                   []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		Tolerations:                  []corev1.Toleration{{Key: benchkit.KWOKAnnotation, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
}

// oneNodeTemplate is the simulated Node of scenario 1: room for pods pods.
func oneNodeTemplate(pods int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Node\nstatus:\n  capacity:\n    cpu: \"64\"\n    memory: 1Ti\n    pods: %q\n", strconv.Itoa(pods))
}

// runOneNode is scenario 1: KWOK's own benchmark, pods bound directly to one Node.
func runOneNode(ctx context.Context, o options, r *systemRun) error {
	e, err := newSysEnv(ctx, o, r.system, "one-node", 16, false, 1)
	if err != nil {
		return err
	}
	e.scenario = "one-node"
	defer e.stop()
	nodeName := "kwok-node-0000"
	if r.system == systemNodeagent {
		nodeName = "one-0000"
	}
	if r.oneReady, err = e.startSystem(ctx, 1, "one-", oneNodeTemplate(o.onePods+1000)); err != nil {
		return err
	}
	fmt.Printf("    the Node Ready %v after start\n", r.oneReady.Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)
	r.oneIdleRSS = e.rss()
	labels := map[string]string{"app": "one-node"}
	// Created bound to the Node, as KWOK's benchmark binds them (kwokctl scale pod --param .nodeName=).
	r.oneCreate, err = e.measurePhase(ctx, "create", func() error {
		return createPods(ctx, e.client, o.onePods, o.creatorsPool, func(i int) *corev1.Pod {
			spec := benchPod()
			spec.NodeName = nodeName
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("one-%05d", i), Namespace: benchNamespace, Labels: labels}, Spec: spec}
		})
	}, func() (bool, string) {
		ready, live := e.pods.counts()
		return ready == o.onePods, fmt.Sprintf("%d of %d pods Ready (%d exist)", ready, o.onePods, live)
	})
	if err != nil {
		return err
	}
	// Each pod deleted on its own (as kwokctl scale pod --replicas 0 does), creators at a time: one
	// DELETE of the collection would be served by one worker of the API server's
	// (--delete-collection-workers 1), which would then be the measure.
	r.oneDelete, err = e.measurePhase(ctx, "delete", func() error {
		return parallel(o.creatorsPool, o.onePods, func(i int) error {
			return e.client.CoreV1().Pods(benchNamespace).Delete(ctx, fmt.Sprintf("one-%05d", i), metav1.DeleteOptions{})
		})
	}, func() (bool, string) {
		_, live := e.pods.counts()
		return live == 0, fmt.Sprintf("%d pods left", live)
	})
	if err != nil {
		return err
	}
	r.oneDup = e.pods.duplicates()
	return nil
}

// createPods creates n pods made by mk, workers at a time.
func createPods(ctx context.Context, client kubernetes.Interface, n, workers int, mk func(i int) *corev1.Pod) error {
	return parallel(workers, n, func(i int) error {
		p := mk(i)
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		return nil
	})
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// deployment is a Deployment of replicas bench pods, rolled with maxSurge 25 %.
func deployment(name string, replicas int) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	surge := intstr.FromString("25%")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &surge}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: benchPod()},
		},
	}
}

// deploymentsDone reports whether every Deployment of names is rolled out: observed, every replica
// updated and available, no old one left.
func deploymentsDone(ctx context.Context, client kubernetes.Interface, want map[string]int) (bool, string) {
	l, err := client.AppsV1().Deployments(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return false, err.Error()
	}
	done, avail, total := 0, 0, 0
	for _, d := range l.Items {
		n, ok := want[d.Name]
		if !ok {
			continue
		}
		total += n
		avail += int(d.Status.AvailableReplicas)
		s := d.Status
		if s.ObservedGeneration >= d.Generation && int(s.UpdatedReplicas) == n && int(s.Replicas) == n && int(s.AvailableReplicas) == n {
			done++
		}
	}
	return done == len(want), fmt.Sprintf("%d of %d Deployments done, %d of %d replicas available", done, len(want), avail, total)
}

// runSpread is scenarios 2 (create), 3 (steady), 4 (churn) and 2's scale to 0, on one control plane.
func runSpread(ctx context.Context, o options, r *systemRun) error {
	e, err := newSysEnv(ctx, o, r.system, "spread", 24, true, o.nodes)
	if err != nil {
		return err
	}
	e.scenario = "spread"
	defer e.stop()
	if r.nodesReady, err = e.startSystem(ctx, o.nodes, "sim-", ""); err != nil {
		return err
	}
	fmt.Printf("    all %d Nodes Ready %v after start\n", o.nodes, r.nodesReady.Round(100*time.Millisecond))
	time.Sleep(30 * time.Second)
	r.idleRSS = e.rss()

	want := map[string]int{}
	for i := range o.deployments {
		want[fmt.Sprintf("app-%03d", i)] = o.replicas
	}
	r.create, err = e.measurePhase(ctx, "create", func() error {
		return parallel(16, len(want), func(i int) error {
			_, err := e.client.AppsV1().Deployments(benchNamespace).Create(ctx, deployment(fmt.Sprintf("app-%03d", i), o.replicas), metav1.CreateOptions{})
			return err
		})
	}, func() (bool, string) { return deploymentsDone(ctx, e.client, want) })
	if err != nil {
		return err
	}

	e.leases.Record(true)
	steadyFrom := time.Now()
	r.steady, err = e.measurePhase(ctx, "steady", func() error { return nil }, func() (bool, string) {
		return time.Since(steadyFrom) >= o.steady, "steady state"
	})
	e.leases.Record(false)
	if err != nil {
		return err
	}
	if r.steadyEvents, err = eventsWritten(ctx, e.client, steadyFrom, steadyFrom.Add(r.steady.cost.wall)); err != nil {
		return err
	}
	iv := e.leases.Intervals()
	r.leaseP50, r.leaseP99 = pct(iv, 0.5), pct(iv, 0.99)
	_, r.nodesLost = e.nodes.Bad()

	if o.churn > 0 {
		churn := map[string]int{"churn": o.churn}
		if _, err := e.client.AppsV1().Deployments(benchNamespace).Create(ctx, deployment("churn", o.churn), metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := e.wait(ctx, o.timeout, func() (bool, string) { return deploymentsDone(ctx, e.client, churn) }); err != nil {
			return fmt.Errorf("churn Deployment: %w", err)
		}
		r.churnRan = true
		r.churn, err = e.measurePhase(ctx, "churn", func() error {
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench/rollout":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
			_, err := e.client.AppsV1().Deployments(benchNamespace).Patch(ctx, "churn", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		}, func() (bool, string) { return deploymentsDone(ctx, e.client, churn) })
		if err != nil {
			return err
		}
		want["churn"] = o.churn
	}

	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	r.del, err = e.measurePhase(ctx, "delete", func() error {
		return parallel(16, len(names), func(i int) error {
			_, err := e.client.AppsV1().Deployments(benchNamespace).Patch(ctx, names[i], types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
			return err
		})
	}, func() (bool, string) {
		_, live := e.pods.counts()
		return live == 0, fmt.Sprintf("%d pods left", live)
	})
	if err != nil {
		return err
	}
	r.dup = e.pods.duplicates()
	return nil
}

// parallel runs f(0..n-1), workers at a time, and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	idx := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := f(i); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		idx <- i
	}
	close(idx)
	wg.Wait()
	return first
}
