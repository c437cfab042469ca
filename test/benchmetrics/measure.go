package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/benchkit"
	"github.com/nodeagent/nodeagent/test/framework"
)

// window is what one window measured.
type window struct {
	took               time.Duration
	cores              float64 // the system's process
	rssMean, rssMax    int64
	leaseP50, leaseP99 time.Duration
	leases             int
	apiserverCores     float64
	msCores            float64 // metrics-server ("with" only)
	msRSSMean          int64
	notReady           int // Nodes seen NotReady or Unknown in the window
}

// result is one system's run.
type result struct {
	system                    string
	readyAfter, podsAfter     time.Duration
	without, with             window
	firstScrape               time.Duration // metrics-server's start until metrics.k8s.io served every Node
	scrapeP50, scrapeP99      float64       // seconds, kubelet requests in the window
	scrapes, scrapeErrors     float64
	tickP50, tickP99          float64
	metricsNodes, metricsPods int
}

// measure runs sys on a control plane of its own and returns what it measured.
func measure(ctx context.Context, o options, sys string) (*result, error) {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.dir, sys+"-")
	if err != nil {
		return nil, err
	}
	dir, _ = filepath.Abs(dir)
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	frontProxy, err := framework.FrontProxyArgs(filepath.Join(dir, "front-proxy"))
	if err != nil {
		return nil, err
	}
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: filepath.Join(dir, "cp"), ControllerManager: true,
		ExtraAPIServerArgs: append(frontProxy, "--audit-log-maxsize=1000000", "--max-requests-inflight=1000", "--max-mutating-requests-inflight=500")})
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	kubeconfig, err := benchkit.AdminServiceAccount(ctx, cp, benchNamespace, sys)
	if err != nil {
		return nil, err
	}
	r := &result{system: sys}
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	nodes := benchkit.NewNodeTracker(o.nodes)
	leases := benchkit.NewLeaseTracker()
	pods := &podCounter{running: map[types.UID]bool{}}
	f := informers.NewSharedInformerFactory(client, 0)
	lf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	if _, err := f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { nodes.Observe(obj.(*corev1.Node)) }, UpdateFunc: func(_, obj any) { nodes.Observe(obj.(*corev1.Node)) },
	}); err != nil {
		return nil, err
	}
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { pods.observe(obj.(*corev1.Pod)) }, UpdateFunc: func(_, obj any) { pods.observe(obj.(*corev1.Pod)) },
	}); err != nil {
		return nil, err
	}
	if _, err := lf.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { leases.Observe(obj.(*coordinationv1.Lease)) }, UpdateFunc: func(_, obj any) { leases.Observe(obj.(*coordinationv1.Lease)) },
	}); err != nil {
		return nil, err
	}
	f.Start(wctx.Done())
	lf.Start(wctx.Done())
	f.WaitForCacheSync(wctx.Done())
	lf.WaitForCacheSync(wctx.Done())

	hostIP, err := framework.HostIP()
	if err != nil {
		return nil, err
	}
	var proc *framework.Process
	var t0 time.Time
	names := make([]string, o.nodes)
	switch sys {
	case systemNodeagent:
		first, err := freePortRange(hostIP.String(), o.nodes)
		if err != nil {
			return nil, err
		}
		for i := range names {
			names[i] = fmt.Sprintf("sim-node-%04d", i)
		}
		t0 = time.Now()
		proc, err = framework.StartProcess("nodeagent simulate", filepath.Join(dir, "nodeagent-simulate.log"), o.agentBin,
			"simulate", "--kubeconfig="+kubeconfig, "--nodes="+strconv.Itoa(o.nodes), "--node-name-prefix=sim-node-",
			"--healthz-bind-address=127.0.0.1", "--healthz-port="+strconv.Itoa(framework.FreePort()), "-v=1",
			"--address="+hostIP.String(), "--node-ip="+hostIP.String(), "--port="+strconv.Itoa(first),
			"--client-ca-file="+cp.KubeletClientCAFile)
		if err != nil {
			return nil, err
		}
	case systemKWOK:
		conf, err := kwokMetricsConfig(ctx, o.root, dir)
		if err != nil {
			return nil, err
		}
		cert, key, err := writeServingCert(dir, hostIP)
		if err != nil {
			return nil, err
		}
		for i := range names {
			names[i] = fmt.Sprintf("kwok-node-%04d", i)
		}
		if err := benchkit.CreateKWOKNodesAnnotated(ctx, cp.AdminClient, o.nodes, func(name string) map[string]string {
			return map[string]string{"metrics.k8s.io/resource-metrics-path": "/metrics/nodes/" + name + "/metrics/resource"}
		}); err != nil {
			return nil, err
		}
		port := framework.FreePort()
		t0 = time.Now()
		proc, err = framework.StartProcess("kwok", filepath.Join(dir, "kwok.log"), filepath.Join(o.binDir, "kwok"),
			"--kubeconfig="+kubeconfig, "--config="+filepath.Join(o.binDir, "kwok-node-stages.yaml"),
			"--config="+filepath.Join(o.binDir, "kwok-pod-stages.yaml"), "--config="+conf,
			"--manage-nodes-with-annotation-selector="+benchkit.KWOKAnnotation+"=fake",
			"--node-lease-duration-seconds=40", "--server-address="+net.JoinHostPort(hostIP.String(), strconv.Itoa(port)),
			"--node-ip="+hostIP.String(), "--node-port="+strconv.Itoa(port), "--tls-cert-file="+cert, "--tls-private-key-file="+key)
		if err != nil {
			return nil, err
		}
	}
	defer func() { _ = proc.Stop(20 * time.Second) }()
	wait := func(what string, timeout time.Duration, done func() (bool, string)) error {
		deadline := time.Now().Add(timeout)
		for last := time.Now(); ; {
			ok, state := done()
			if ok {
				return nil
			}
			if err := proc.ExitedErr(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within %v: %s", what, timeout, state)
			}
			if time.Since(last) > 30*time.Second {
				fmt.Printf("    %s: %s\n", what, state)
				last = time.Now()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	if err := wait("Nodes Ready", 10*time.Minute, func() (bool, string) {
		select {
		case <-nodes.AllReady():
			return true, ""
		default:
			return false, fmt.Sprintf("%d of %d Ready", nodes.ReadyCount(), o.nodes)
		}
	}); err != nil {
		return nil, err
	}
	r.readyAfter = nodes.ReadyAt().Sub(t0)
	fmt.Printf("    %d Nodes Ready %v after start\n", o.nodes, r.readyAfter.Round(100*time.Millisecond))

	p0 := time.Now()
	want := o.nodes * o.podsPerNode
	if err := cp.CreateNamespace(ctx, benchNamespace); err != nil { // its default service account
		return nil, err
	}
	if err := createPods(ctx, client, names, o.podsPerNode); err != nil {
		return nil, err
	}
	if err := wait("pods Running", 15*time.Minute, func() (bool, string) {
		n := pods.count()
		return n >= want, fmt.Sprintf("%d of %d Running", n, want)
	}); err != nil {
		return nil, err
	}
	r.podsAfter = time.Since(p0)
	fmt.Printf("    %d pods Running %v after the first create\n", want, r.podsAfter.Round(100*time.Millisecond))

	pids := cp.PIDs()
	pids[sys] = proc.PID()
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return proc.ExitedErr()
		}
	}
	if err := sleep(o.settle); err != nil {
		return nil, err
	}
	if r.without, err = measureWindow(ctx, o, sys, pids, proc, 0, nodes, leases); err != nil {
		return nil, err
	}
	fmt.Printf("    without metrics-server: %.3f cores, RSS %.0f MiB, Lease p99 %v\n", r.without.cores, mib(r.without.rssMean), r.without.leaseP99)

	m0 := time.Now()
	ms, err := framework.StartMetricsServer(ctx, cp, filepath.Join(dir, "metrics-server"))
	if err != nil {
		return nil, err
	}
	defer ms.Stop()
	if err := wait("metrics.k8s.io serving every Node", 5*time.Minute, func() (bool, string) {
		n, err := countMetrics(ctx, client, "nodes")
		return err == nil && n >= o.nodes, fmt.Sprintf("%d Nodes (%v)", n, err)
	}); err != nil {
		return nil, fmt.Errorf("%w (metrics-server log: %s)", err, ms.LogPath)
	}
	r.firstScrape = time.Since(m0)
	fmt.Printf("    metrics.k8s.io serves every Node %v after metrics-server's start\n", r.firstScrape.Round(100*time.Millisecond))
	if err := sleep(o.settle); err != nil {
		return nil, err
	}
	pids["metrics-server"] = ms.PID()
	h0, err := scrapeMetricsServer(ctx, ms.URL, cp.AdminConfig.BearerToken)
	if err != nil {
		return nil, err
	}
	if r.with, err = measureWindow(ctx, o, sys, pids, proc, ms.PID(), nodes, leases); err != nil {
		return nil, err
	}
	h1, err := scrapeMetricsServer(ctx, ms.URL, cp.AdminConfig.BearerToken)
	if err != nil {
		return nil, err
	}
	req := h1.request.sub(h0.request)
	tick := h1.tick.sub(h0.tick)
	r.scrapeP50, r.scrapeP99 = req.quantile(0.5), req.quantile(0.99)
	r.tickP50, r.tickP99 = tick.quantile(0.5), tick.quantile(0.99)
	r.scrapes = h1.success - h0.success
	r.scrapeErrors = h1.failure - h0.failure
	if r.metricsNodes, err = countMetrics(ctx, client, "nodes"); err != nil {
		return nil, err
	}
	if r.metricsPods, err = countMetrics(ctx, client, "pods"); err != nil {
		return nil, err
	}
	fmt.Printf("    with metrics-server: %.3f cores, RSS %.0f MiB, Lease p99 %v; scrape p50 %.3fs p99 %.3fs; metrics.k8s.io: %d Nodes, %d pods\n",
		r.with.cores, mib(r.with.rssMean), r.with.leaseP99, r.scrapeP50, r.scrapeP99, r.metricsNodes, r.metricsPods)
	return r, nil
}

// measureWindow measures one window of o.duration: the system's and the components' CPU, RSS samples
// every 5 s, the Lease intervals; metrics-server's too when msPID is not 0.
func measureWindow(ctx context.Context, o options, sys string, pids map[string]int, proc *framework.Process, msPID int,
	nodes *benchkit.NodeTracker, leases *benchkit.LeaseTracker) (window, error) {
	var w window
	bad0 := nodes.BadWindowCount()
	cpu0, err := benchkit.ReadCPU(pids)
	if err != nil {
		return w, err
	}
	start := time.Now()
	leases.Reset()
	leases.Record(true)
	var rssSum, msSum int64
	var samples int64
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	end := time.NewTimer(o.duration)
	defer end.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-end.C:
			break loop
		case <-tick.C:
			if err := proc.ExitedErr(); err != nil {
				return w, err
			}
			st, err := framework.ReadProcStats(proc.PID())
			if err != nil {
				return w, err
			}
			rssSum += st.RSS
			w.rssMax = max(w.rssMax, st.RSS)
			if msPID != 0 {
				if ms, err := framework.ReadProcStats(msPID); err == nil {
					msSum += ms.RSS
				}
			}
			samples++
		}
	}
	leases.Record(false)
	cpu1, err := benchkit.ReadCPU(pids)
	if err != nil {
		return w, err
	}
	w.took = time.Since(start)
	if samples > 0 {
		w.rssMean, w.msRSSMean = rssSum/samples, msSum/samples
	}
	cores := func(name string) float64 { return (cpu1[name] - cpu0[name]).Seconds() / w.took.Seconds() }
	w.cores, w.apiserverCores = cores(sys), cores("kube-apiserver")
	if msPID != 0 {
		w.msCores = cores("metrics-server")
	}
	iv := leases.Intervals()
	w.leases = len(iv)
	w.leaseP50, w.leaseP99 = benchkit.NearestRank(iv, 0.5), benchkit.NearestRank(iv, 0.99)
	w.notReady = nodes.BadWindowCount() - bad0
	return w, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// podCounter counts the pods whose phase is Running.
type podCounter struct {
	mu      sync.Mutex
	running map[types.UID]bool
}

func (c *podCounter) observe(p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[p.UID] = p.Status.Phase == corev1.PodRunning
}

func (c *podCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.running {
		if r {
			n++
		}
	}
	return n
}

// createPods creates perNode pods bound to each of nodes (spec.nodeName: no scheduler), 16 at a time:
// one container requesting 100m and 64Mi, using 10m and 16Mi by both systems' annotations
// (nodeagent.io/cpu-usage, memory-usage; kwok.x-k8s.io/usage-cpu, usage-memory, which kwokctl's
// usage-from-annotation reads), tolerating everything, no service account token.
func createPods(ctx context.Context, client kubernetes.Interface, nodes []string, perNode int) error {
	type job struct{ node, name string }
	jobs := make(chan job)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: benchNamespace, Labels: map[string]string{"app": "bench-metrics"},
					Annotations: map[string]string{"nodeagent.io/cpu-usage": "10m", "nodeagent.io/memory-usage": "16Mi",
						"kwok.x-k8s.io/usage-cpu": "10m", "kwok.x-k8s.io/usage-memory": "16Mi"}},
					Spec: corev1.PodSpec{NodeName: j.node, AutomountServiceAccountToken: ptr.To(false),
						Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}}
				if _, err := client.CoreV1().Pods(benchNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					err = fmt.Errorf("create pod %s: %w", j.name, err)
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for i := range perNode {
		for _, n := range nodes {
			if failed.Load() != nil {
				break
			}
			jobs <- job{n, fmt.Sprintf("%s-%d", n, i)}
		}
	}
	close(jobs)
	wg.Wait()
	if e := failed.Load(); e != nil {
		return *e
	}
	return nil
}

// countMetrics counts the items metrics.k8s.io serves for resource (nodes, or pods in every namespace).
func countMetrics(ctx context.Context, client kubernetes.Interface, resource string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := client.Discovery().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/"+resource).
		SetHeader("Accept", "application/json").DoRaw(cctx)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), `"metadata":{"name":`), nil
}

// freePortRange returns the first of n consecutive ports free on ip, from 20000 up.
func freePortRange(ip string, n int) (int, error) {
	for first := 20000; first+n <= 60000; first += n {
		ok := true
		var open []net.Listener
		for p := first; p < first+n; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			open = append(open, ln)
		}
		for _, ln := range open {
			_ = ln.Close()
		}
		if ok {
			return first, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports on %s", n, ip)
}

// kwokMetricsConfig writes kwokctl's metrics-usage configuration, from KWOK's module (hack/kwok's
// sigs.k8s.io/kwok: kustomize/metrics/resource/metrics-resource.yaml, the Metric, and
// kustomize/metrics/usage/usage-from-annotation.yaml, the ClusterResourceUsage), into one kwok --config
// file, and returns its path.
func kwokMetricsConfig(ctx context.Context, root, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok")
	cmd.Dir = filepath.Join(root, "hack", "kwok")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m sigs.k8s.io/kwok in hack/kwok: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	var docs []string
	for _, f := range []string{"kustomize/metrics/resource/metrics-resource.yaml", "kustomize/metrics/usage/usage-from-annotation.yaml"} {
		b, err := os.ReadFile(filepath.Join(mod, f))
		if err != nil {
			return "", err
		}
		docs = append(docs, string(b))
	}
	path := filepath.Join(dir, "kwok-metrics-usage.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644)
}

// writeServingCert writes a self-signed serving certificate for ip (client-go's
// GenerateSelfSignedCertKey, as a kubelet makes its own) for KWOK's server, which metrics-server reaches
// over HTTPS.
func writeServingCert(dir string, ip net.IP) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(ip.String(), []net.IP{ip}, nil)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "kwok.crt"), filepath.Join(dir, "kwok.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}

// histogram is a Prometheus histogram's cumulative buckets (upper bound → count), summed over series.
type histogram map[float64]float64

func (h histogram) sub(o histogram) histogram {
	out := histogram{}
	for b, c := range h {
		out[b] = c - o[b]
	}
	return out
}

// quantile interpolates the q-th quantile within its bucket, as Prometheus' histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || h[bounds[len(bounds)-1]] == 0 {
		return math.NaN()
	}
	total := h[bounds[len(bounds)-1]]
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		if h[b] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			return lower + (b-lower)*(rank-below)/math.Max(h[b]-below, 1e-9)
		}
		lower, below = b, h[b]
	}
	return lower
}

// msMetrics is what metrics-server exports of its scrapes.
type msMetrics struct {
	request, tick    histogram
	success, failure float64
}

// scrapeMetricsServer reads metrics-server's /metrics.
func scrapeMetricsServer(ctx context.Context, url, token string) (*msMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics-server /metrics: %d %.200s", resp.StatusCode, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		return nil, err
	}
	m := &msMetrics{request: histogram{}, tick: histogram{}}
	for name, h := range map[string]histogram{"metrics_server_kubelet_request_duration_seconds": m.request, "metrics_server_manager_tick_duration_seconds": m.tick} {
		f, ok := fams[name]
		if !ok {
			return nil, errors.New("metrics-server /metrics: no " + name)
		}
		for _, s := range f.Metric {
			inf := false
			for _, bk := range s.GetHistogram().GetBucket() {
				h[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
				inf = inf || math.IsInf(bk.GetUpperBound(), 1)
			}
			if !inf { // the text format's le="+Inf" bucket is the sample count
				h[math.Inf(1)] += float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	if f, ok := fams["metrics_server_kubelet_request_total"]; ok {
		for _, s := range f.Metric {
			for _, l := range s.Label {
				if l.GetName() == "success" && l.GetValue() == "true" {
					m.success += s.GetCounter().GetValue()
				} else if l.GetName() == "success" {
					m.failure += s.GetCounter().GetValue()
				}
			}
		}
	}
	return m, nil
}
