package integration_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// The shared control plane: one etcd + kube-apiserver (Node,RBAC + NodeRestriction) +
// kube-controller-manager (node lifecycle controller, the framework's default grace) for the whole package,
// started on first use, and one containerd with a CNI config (NetworkReady=true) for the tests that do not
// disturb their runtime. Each test uses its own node name; a control plane only knows the node identities it
// was started with, so every name used against it is listed here.
const (
	nodeRegistration  = "reg-labels-taints" // TestRegistrationInitialNode
	nodeRestart       = "reg-restart"       // TestRegistrationRestartReusesNode
	nodeNoRegister    = "reg-disabled"      // TestRegisterNodeFalse
	nodeStatus        = "status-full"       // TestNodeStatusReportsHost
	nodeImages        = "status-images"     // TestNodeStatusImages
	nodeLease         = "lease-renew"       // TestLeaseRenewal
	nodeRuntimeDown   = "runtime-down"      // TestContainerdDownAndUp
	nodeCNI           = "cni-removed"       // TestCNIConfigRemoved
	nodeLifecycle     = "lifecycle-5m"      // TestStaysReadyUnderNodeLifecycleController
	nodeSigterm       = "sigterm"           // TestSIGTERMExitsCleanly
	nodeMetrics       = "metrics"           // TestMetrics
	nodeMetricsErrors = "metrics-errors"    // TestMetricsErrorsByReason (a ServiceAccount, not a node identity)
	nodeEvents        = "events"            // TestEvents
	nodeBadConfig     = "bad-config"        // TestInvalidConfigRefusesToStart
	nodeServiceAcct   = "deploy-sa"         // TestDeployManifestsRBAC (a ServiceAccount, not a node identity)
	nodeHealthz       = "healthz-apiserver" // TestHealthzAPIServerDown (dedicated control plane)
)

var sharedNodeNames = []string{
	nodeRegistration, nodeRestart, nodeNoRegister, nodeStatus, nodeImages, nodeLease, nodeRuntimeDown, nodeCNI,
	nodeLifecycle, nodeSigterm, nodeMetrics, nodeEvents, nodeBadConfig,
}

// sharedEnv is the package's shared control plane and containerd.
type sharedEnv struct {
	dir  string
	cp   *framework.ControlPlane
	ctrd *framework.Containerd
}

var (
	sharedMu      sync.Mutex
	sharedStarted *sharedEnv
	sharedOnce    = sync.OnceValues(startShared)
)

func startShared() (*sharedEnv, error) {
	if _, err := framework.EnsureBinaries(); err != nil {
		return nil, err
	}
	if _, err := framework.BuildAgent(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodeagent-integ-")
	if err != nil {
		return nil, fmt.Errorf("shared env dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := &sharedEnv{dir: dir}
	sharedMu.Lock()
	sharedStarted = e
	sharedMu.Unlock()
	e.cp, err = framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: dir + "/cp", NodeNames: sharedNodeNames, ControllerManager: true,
	})
	if err != nil {
		return nil, fmt.Errorf("shared control plane: %w", err)
	}
	e.ctrd, err = framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: dir + "/containerd", CNI: true})
	if err != nil {
		return nil, fmt.Errorf("shared containerd: %w", err)
	}
	if err := waitNetworkReady(ctx, e.ctrd); err != nil {
		return nil, fmt.Errorf("shared containerd: %w", err)
	}
	return e, nil
}

// stop tears the shared environment down (whatever part of it was started).
func (e *sharedEnv) stop() {
	if e.ctrd != nil {
		e.ctrd.Close()
	}
	if e.cp != nil {
		e.cp.Stop()
	}
	_ = framework.UnmountAll(e.dir)
	_ = os.RemoveAll(e.dir)
}

// shared returns the package's shared environment, starting it on first use.
func shared(t *testing.T) *sharedEnv {
	t.Helper()
	e, err := sharedOnce()
	if err != nil {
		t.Fatalf("shared environment: %v", err)
	}
	return e
}

// TestMain tears the shared environment down after the tests. Unless -test.parallel was given, it raises
// the number of parallel tests from GOMAXPROCS (2 on CI) to 16: these tests mostly wait on the product's
// timers (status periods, lease renewals, the 30 s runtime threshold, a 5-minute soak), not on CPU, and
// running them side by side keeps the package within its time budget.
func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "16")
	}
	code := m.Run()
	sharedMu.Lock()
	if sharedStarted != nil {
		sharedStarted.stop()
	}
	sharedMu.Unlock()
	os.Exit(code)
}

// waitNetworkReady waits until the CRI reports NetworkReady=true.
func waitNetworkReady(ctx context.Context, c *framework.Containerd) error {
	return framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		st, err := c.Status(ctx)
		ok, _, _ := framework.Condition(st, "NetworkReady")
		return err == nil && ok, err
	})
}

// startContainerd starts a containerd for one test (with a CNI config when cni is true, waiting for
// NetworkReady) and closes it when the test ends.
func startContainerd(t *testing.T, cni bool) *framework.Containerd {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: t.TempDir(), CNI: cni})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if cni {
		if err := waitNetworkReady(ctx, c); err != nil {
			t.Fatalf("containerd NetworkReady: %v", err)
		}
	}
	return c
}

// startAgent starts nodeagent as node name (its node identity's kubeconfig) on runtime c with the
// extra args, and stops it when the test ends, logging the tail of its log if the test failed.
func startAgent(t *testing.T, cp *framework.ControlPlane, name string, c *framework.Containerd, args ...string) *framework.Agent {
	t.Helper()
	return startAgentWith(t, framework.AgentOptions{
		Dir: t.TempDir(), NodeName: name, Kubeconfig: cp.KubeconfigFor(name), RuntimeEndpoint: c.Endpoint, Args: args,
	})
}

// startAgentWith is startAgent with explicit options.
func startAgentWith(t *testing.T, opts framework.AgentOptions) *framework.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, err := framework.StartAgent(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.Stop()
		if t.Failed() {
			t.Logf("nodeagent %s log (tail):\n%s", a.NodeName, tailLines(a.Logs(), 60))
		}
	})
	return a
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// nodeCondition returns the condition of type typ, or nil.
func nodeCondition(node *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	if node == nil {
		return nil
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// readyStatus summarises the Ready condition for messages.
func readyStatus(node *corev1.Node) string {
	c := nodeCondition(node, corev1.NodeReady)
	if c == nil {
		return "no Ready condition"
	}
	return fmt.Sprintf("Ready=%s reason=%q message=%q", c.Status, c.Reason, c.Message)
}

func isReady(node *corev1.Node) bool {
	c := nodeCondition(node, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// waitNode polls the Node every 250 ms until cond holds, or fails the test after timeout, naming what it
// waited for and the Node's last Ready condition. It returns the Node and how long it took.
func waitNode(t *testing.T, client kubernetes.Interface, name string, timeout time.Duration, what string,
	cond func(*corev1.Node) bool) (*corev1.Node, time.Duration) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last *corev1.Node
	err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("node %s: %s not seen within %v: %v (last: %s)", name, what, timeout, err, readyStatus(last))
	}
	return last, time.Since(start)
}

// waitReady waits (generously) for the Node to be Ready=True.
func waitReady(t *testing.T, client kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, d := waitNode(t, client, name, 2*time.Minute, "Ready=True", isReady)
	t.Logf("node %s Ready after %v", name, d.Round(time.Millisecond))
	return n
}

// getLease returns the node's Lease in kube-node-lease.
func getLease(ctx context.Context, client kubernetes.Interface, name string) (*coordinationv1.Lease, error) {
	return client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
}

// waitLeaseRenewals waits for n renewals of the node's Lease (renewTime advancing n times) and returns the
// renew times seen, the first being the one current when it started.
func waitLeaseRenewals(t *testing.T, client kubernetes.Interface, name string, n int, timeout time.Duration) []time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var times []time.Time
	err := framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		l, err := getLease(ctx, client, name)
		if err != nil {
			return false, err
		}
		if l.Spec.RenewTime == nil {
			return false, errors.New("lease has no renewTime")
		}
		rt := l.Spec.RenewTime.Time
		if len(times) == 0 || rt.After(times[len(times)-1]) {
			times = append(times, rt)
		}
		return len(times) > n, nil
	})
	if err != nil {
		t.Fatalf("lease %s: %d renewals not seen within %v (saw renew times %v): %v", name, n, timeout, times, err)
	}
	return times
}

// listNodeEvents lists the events on Node name (namespace default, involvedObject kind Node).
func listNodeEvents(ctx context.Context, client kubernetes.Interface, name string) ([]corev1.Event, error) {
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name}.AsSelector().String()
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// eventCount sums the counts of the events with reason.
func eventCount(events []corev1.Event, reason string) int32 {
	var n int32
	for _, e := range events {
		if e.Reason == reason {
			n += max(e.Count, 1)
		}
	}
	return n
}

// httpGet GETs url with a 5 s timeout and returns the status code and body.
func httpGet(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// sample is one line of the Prometheus text format.
type sample struct {
	labels map[string]string
	value  float64
}

// metricSet is a scrape: series by metric name (as written, e.g. foo_bucket), and the families
// announced by # TYPE lines.
type metricSet struct {
	series   map[string][]sample
	families map[string]string // name → type
}

// scrape GETs base+"/metrics" and parses the Prometheus text format.
func scrape(ctx context.Context, base string) (*metricSet, error) {
	code, body, err := httpGet(ctx, base+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s/metrics: %w", base, err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("scrape %s/metrics: HTTP %d", base, code)
	}
	return parseMetrics(body)
}

// parseMetrics parses the Prometheus text exposition format (enough of it for our metrics: names, quoted
// label values with \\, \" and \n escapes, float values, no timestamps needed).
func parseMetrics(text string) (*metricSet, error) {
	ms := &metricSet{series: map[string][]sample{}, families: map[string]string{}}
	s := bufio.NewScanner(strings.NewReader(text))
	s.Buffer(make([]byte, 0, 1<<16), 1<<22)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			if f := strings.Fields(line); len(f) >= 4 && f[1] == "TYPE" {
				ms.families[f[2]] = f[3]
			}
			continue
		}
		name, rest := line, ""
		labels := map[string]string{}
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			var err error
			if rest, err = parseLabels(rest[1:], labels); err != nil {
				return nil, fmt.Errorf("metrics line %q: %w", line, err)
			}
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		ms.series[name] = append(ms.series[name], sample{labels: labels, value: v})
	}
	return ms, s.Err()
}

// parseLabels parses `k="v",...}` into labels and returns what follows the closing brace.
func parseLabels(s string, labels map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.Index(s, "=")
		if eq < 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", errors.New("bad label")
		}
		key := s[:eq]
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return "", errors.New("unterminated label value")
		}
		labels[key] = val.String()
		s = s[i+1:]
	}
}

// get returns the value of the series name whose labels include want, and whether there is one.
func (ms *metricSet) get(name string, want map[string]string) (float64, bool) {
	for _, smp := range ms.series[name] {
		match := true
		for k, v := range want {
			if smp.labels[k] != v {
				match = false
				break
			}
		}
		if match {
			return smp.value, true
		}
	}
	return 0, false
}

// agentSeries lists the nodeagent_* series (histogram buckets left out), one a line, for failure messages.
func (ms *metricSet) agentSeries() string {
	if ms == nil {
		return "(none)"
	}
	var lines []string
	for name, samples := range ms.series {
		if !strings.HasPrefix(name, "nodeagent_") || strings.HasSuffix(name, "_bucket") {
			continue
		}
		for _, smp := range samples {
			lines = append(lines, fmt.Sprintf("%s%v %v", name, smp.labels, smp.value))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// sum adds up every series of name.
func (ms *metricSet) sum(name string) float64 {
	var total float64
	for _, smp := range ms.series[name] {
		total += smp.value
	}
	return total
}

// has reports whether the family (for histograms: name_count) has at least one series.
func (ms *metricSet) has(name string) bool {
	return len(ms.series[name]) > 0 || len(ms.series[name+"_count"]) > 0
}

// waitMetric scrapes every 250 ms until cond holds on a scrape, or fails the test after timeout.
func waitMetric(t *testing.T, base string, timeout time.Duration, what string, cond func(*metricSet) bool) (*metricSet, time.Duration) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last *metricSet
	err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		ms, err := scrape(ctx, base)
		if err != nil {
			return false, err
		}
		last = ms
		return cond(ms), nil
	})
	if err != nil {
		t.Fatalf("metrics: %s not seen within %v: %v; last successful scrape:\n%s", what, timeout, err, last.agentSeries())
	}
	return last, time.Since(start)
}

// context2m is t.Context() with a 2-minute deadline: a generous bound for a poll.
func context2m(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 2*time.Minute)
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
