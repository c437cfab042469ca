package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/statussync"
)

func TestMain(m *testing.M) {
	// Main applies the logging configuration on each call; in one test process the same (default)
	// configuration is applied many times, which component-base only allows with this setting.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	os.Exit(m.Run())
}

// runMain runs Main with args and returns its exit code and what it wrote to stderr (stdout is
// discarded).
func runMain(t *testing.T, args []string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	savedErr, savedOut := os.Stderr, os.Stdout
	os.Stderr, os.Stdout = f, devNull
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	code := Main(ctx, args)
	os.Stderr, os.Stdout = savedErr, savedOut
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// nodeagentLine returns the "nodeagent: ..." error line of the output.
func nodeagentLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "nodeagent: ") {
			return l
		}
	}
	return ""
}

// TestMainBadInput: each bad input exits 1 with one "nodeagent: ..." line naming the problem, before
// any cluster or runtime is contacted (the kubeconfig points nowhere reachable, and none is needed).
func TestMainBadInput(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\nmaxPods: -1\nnoSuchField: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	invalidConfig := filepath.Join(dir, "invalid.yaml")
	if err := os.WriteFile(invalidConfig, []byte("apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\nmaxPods: -1\nhealthzPort: -2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootDir := filepath.Join(dir, "root")
	cases := []struct {
		desc string
		args []string
		want []string // substrings of the one error line
	}{
		{desc: "unknown flag", args: []string{"--no-such-flag"}, want: []string{"unknown flag: --no-such-flag"}},
		{desc: "bad flag value", args: []string{"--node-status-update-frequency=often"}, want: []string{`"often"`, "--node-status-update-frequency"}},
		{desc: "unknown subcommand", args: []string{"run"}, want: []string{`unknown command "run"`}},
		{desc: "space-separated flag values", args: []string{"--max-pods", "3", "--kubeconfig", filepath.Join(dir, "kc")},
			want: []string{"--kubeconfig", "kc", "no such file"}},
		{desc: "missing config file", args: []string{"--config", filepath.Join(dir, "none.yaml")}, want: []string{"--config", "none.yaml", "no such file"}},
		{desc: "config file with an unknown field", args: []string{"--config", badConfig}, want: []string{`unknown field "noSuchField"`}},
		{desc: "config file with bad values: all on one line", args: []string{"--config", invalidConfig},
			want: []string{`invalid healthzPort "-2"`, `invalid maxPods "-1"`, "; "}},
		{desc: "non-unix runtime endpoint", args: []string{"--container-runtime-endpoint=tcp://127.0.0.1:1"},
			want: []string{`invalid containerRuntimeEndpoint "tcp://127.0.0.1:1"`, "unix"}},
		{desc: "missing kubeconfig", args: []string{"--kubeconfig", filepath.Join(dir, "kubeconfig"), "--root-dir", rootDir},
			want: []string{"--kubeconfig", "kubeconfig", "no such file"}},
		{desc: "no kubeconfig and not in a cluster", args: []string{"--root-dir", rootDir},
			want: []string{"--kubeconfig not set and no in-cluster config"}},
		{desc: "bad logging format", args: []string{"--logging-format=xml"}, want: []string{"xml"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			code, out := runMain(t, tc.args)
			if code != 1 {
				t.Errorf("Main(%q) = %d, want 1; stderr:\n%s", tc.args, code, out)
			}
			line := nodeagentLine(out)
			if line == "" {
				t.Fatalf("no \"nodeagent: \" line on stderr:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("error line lacks %q: %s", w, line)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		cmd := NewCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "nodeagent v") || !strings.Contains(out.String(), "commit") {
			t.Errorf("%v printed %q", args, out.String())
		}
	}
	cmd := NewCommand()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"version", "extra"})
	if err := cmd.Execute(); err == nil {
		t.Error("version with an argument: no error")
	}
}

func TestHelp(t *testing.T) {
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Usage:", "--kubeconfig", "--register-with-taints", "--eviction-hard", "--node-status-update-frequency"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q", w)
		}
	}
	if code, out := runMain(t, []string{"-h"}); code != 0 {
		t.Errorf("Main(-h) = %d: %s", code, out)
	}
}

func TestOneLine(t *testing.T) {
	cases := map[string]error{
		"a":                errors.New("a"),
		"a; b; c":          errors.Join(errors.New("a"), errors.New("b"), errors.New("c")),
		"x: invalid a; b":  errors.New("x: invalid a\nb"),
		"trailing; ":       errors.New("trailing\n"),
		"ünïcode; ☃ stays": errors.New("ünïcode\n☃ stays"),
	}
	for want, err := range cases {
		if got := oneLine(err); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", err.Error(), got, want)
		}
	}
}

func rl(pairs ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[v1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

// TestAllocatableReservation checks the reservation against the kubelet's
// GetNodeAllocatableReservation: system-reserved + kube-reserved + the hard eviction thresholds for
// memory (memory.available) and ephemeral-storage (nodefs.available), against capacity.
func TestAllocatableReservation(t *testing.T) {
	thresholds := func(m map[string]string) []eviction.Threshold {
		th, err := eviction.ParseThresholds(m)
		if err != nil {
			t.Fatal(err)
		}
		return th
	}
	capacity := rl("cpu", "4", "memory", "8Gi", "ephemeral-storage", "100Gi", "pods", "110")
	// The kubelet's GetThresholdQuantity for 10% of 100Gi: int64(capacity × float32(0.1)).
	tenPercentOf100Gi := int64(float64(100<<30) * float64(float32(10)/100))
	cases := []struct {
		desc           string
		capacity       v1.ResourceList
		systemReserved v1.ResourceList
		kubeReserved   v1.ResourceList
		evictionHard   map[string]string
		want           v1.ResourceList
	}{
		{desc: "nothing reserved", capacity: capacity, want: v1.ResourceList{}},
		{
			desc: "kubelet defaults: 100Mi memory and 10% of nodefs", capacity: capacity, evictionHard: config.DefaultEvictionHard,
			want: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi"), v1.ResourceEphemeralStorage: *resource.NewQuantity(tenPercentOf100Gi, resource.BinarySI)},
		},
		{
			desc: "system + kube reserved + eviction add up", capacity: capacity,
			systemReserved: rl("cpu", "100m", "memory", "100Mi", "ephemeral-storage", "1Gi"),
			kubeReserved:   rl("cpu", "200m", "memory", "200Mi"),
			evictionHard:   map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
			want: v1.ResourceList{
				v1.ResourceCPU:              resource.MustParse("300m"),
				v1.ResourceMemory:           resource.MustParse("400Mi"),
				v1.ResourceEphemeralStorage: *resource.NewQuantity(1<<30+tenPercentOf100Gi, resource.BinarySI),
			},
		},
		{
			desc: "memory threshold as a percentage of memory capacity", capacity: capacity,
			evictionHard: map[string]string{"memory.available": "5%"},
			want:         v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(int64(float64(8<<30)*float64(float32(5)/100)), resource.BinarySI)},
		},
		{
			desc: "no ephemeral-storage capacity: no nodefs reservation", capacity: rl("cpu", "4", "memory", "8Gi"),
			evictionHard: map[string]string{"nodefs.available": "10%"},
			want:         v1.ResourceList{},
		},
		{
			desc: "imagefs, inodes and pid thresholds reserve nothing", capacity: capacity,
			evictionHard: map[string]string{"imagefs.available": "15%", "nodefs.inodesFree": "5%", "pid.available": "1000"},
			want:         v1.ResourceList{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got := allocatableReservation(tc.capacity, tc.systemReserved, tc.kubeReserved, thresholds(tc.evictionHard))
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || g.Cmp(w) != 0 {
					t.Errorf("%s = %v, want %v", k, got[k], w)
				}
			}
			for k, g := range got {
				if _, ok := tc.want[k]; !ok && !g.IsZero() {
					t.Errorf("unexpected reservation %s = %v", k, g)
				}
			}
		})
	}
}

func TestRuntimeTypeFromEndpoint(t *testing.T) {
	for ep, want := range map[string]string{
		"unix:///run/containerd/containerd.sock": "containerd",
		"unix:///var/run/crio/crio.sock":         "cri-o",
		"unix:///tmp/x/containerd.sock":          "containerd",
	} {
		if got := runtimeTypeFromEndpoint(ep); got != want {
			t.Errorf("runtimeTypeFromEndpoint(%q) = %q, want %q", ep, got, want)
		}
	}
}

// testAgent builds an Agent with only what the health checks use: a status syncer and a lease renewer
// on a fake clientset, the given fake clock and start time.
func testAgent(t *testing.T, clk *testingclock.FakeClock, register func(context.Context) error) *Agent {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	client := fake.NewClientset(node)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(node); err != nil {
		t.Fatal(err)
	}
	c := config.NewDefault() // status every 10s, lease 40s (renewed every 10s)
	syncer, err := statussync.New(statussync.Config{
		Client: client, Lister: corelisters.NewNodeLister(indexer), NodeName: "n", Register: register,
		UpdateFrequency: c.NodeStatusUpdateFrequency.Duration, ReportFrequency: c.NodeStatusReportFrequency.Duration,
		Clock: clk, Rand: func() float64 { return 0.5 },
	})
	if err != nil {
		t.Fatal(err)
	}
	renewer, err := lease.New(lease.Config{Client: client, NodeName: "n", LeaseDurationSeconds: c.NodeLeaseDurationSeconds, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{opts: &config.Options{Config: c}, nodeName: "n", clock: clk, startTime: clk.Now(),
		syncer: syncer, renewer: renewer, metrics: metrics.New()}
}

// TestSyncLoopHealthy: /healthz's syncloop check fails once the last status sync or Lease renewal
// (or the start, before the first) is older than three periods: 30 s each with the defaults.
func TestSyncLoopHealthy(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		desc      string
		syncAt    time.Duration // status synced this long after start (<0: never)
		leaseAt   time.Duration // lease renewed this long after start (<0: never)
		checkAt   time.Duration
		want      []string // substrings of the error; none means healthy
		notWanted []string
	}{
		{desc: "at start", syncAt: -1, leaseAt: -1, checkAt: 0},
		{desc: "30s after start, nothing yet: still within the bound", syncAt: -1, leaseAt: -1, checkAt: 30 * time.Second},
		{desc: "31s after start, nothing yet", syncAt: -1, leaseAt: -1, checkAt: 31 * time.Second,
			want: []string{"last node status sync 31s ago, bound 30s", "last lease renewal 31s ago, bound 30s"}},
		{desc: "both recent", syncAt: 25 * time.Second, leaseAt: 25 * time.Second, checkAt: 50 * time.Second},
		{desc: "lease stale", syncAt: 40 * time.Second, leaseAt: 5 * time.Second, checkAt: 50 * time.Second,
			want: []string{"last lease renewal 45s ago, bound 30s"}, notWanted: []string{"status"}},
		{desc: "status stale", syncAt: 5 * time.Second, leaseAt: 40 * time.Second, checkAt: 50 * time.Second,
			want: []string{"last node status sync 45s ago, bound 30s"}, notWanted: []string{"lease"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			clk := testingclock.NewFakeClock(start)
			a := testAgent(t, clk, nil)
			steps := []struct {
				at time.Duration
				do func()
			}{
				{tc.syncAt, func() { a.syncer.SyncNodeStatus(ctx) }},
				{tc.leaseAt, func() { a.lastLeaseRenew.Store(clk.Now().UnixNano()) }},
			}
			if tc.leaseAt < tc.syncAt {
				steps[0], steps[1] = steps[1], steps[0]
			}
			for _, s := range steps {
				if s.at >= 0 {
					clk.SetTime(start.Add(s.at))
					s.do()
				}
			}
			clk.SetTime(start.Add(tc.checkAt))
			err := a.syncLoopHealthy()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("syncLoopHealthy: %v, want healthy", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("syncLoopHealthy: healthy, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, w := range tc.notWanted {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error %q has %q", err, w)
				}
			}
		})
	}
}

// TestRegisteredHealthy: /readyz's check passes once the Node is registered and a status posted.
func TestRegisteredHealthy(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := testingclock.NewFakeClock(time.Now())
	registerErr := errors.New("forbidden")
	a := testAgent(t, clk, func(context.Context) error { return registerErr })
	if err := a.registeredHealthy(); err == nil || !strings.Contains(err.Error(), `node "n" not registered yet`) {
		t.Errorf("before registration: %v", err)
	}
	a.syncer.SyncNodeStatus(ctx) // registration fails
	if err := a.registeredHealthy(); err == nil || !strings.Contains(err.Error(), "not registered yet") {
		t.Errorf("after a failed registration: %v", err)
	}
	registerErr = nil
	a.syncer.SyncNodeStatus(ctx) // registers and posts
	if err := a.registeredHealthy(); err != nil {
		t.Errorf("after registration and a posted status: %v", err)
	}

	b := testAgent(t, clk, nil) // --register-node=false
	if err := b.registeredHealthy(); err == nil || !strings.Contains(err.Error(), "status not posted yet") {
		t.Errorf("before the first status: %v", err)
	}
	b.firstPosted.Store(true)
	if err := b.registeredHealthy(); err != nil {
		t.Errorf("after the first posted status: %v", err)
	}
}

// roundTripFunc answers requests for observeLeaseRequests tests.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// TestObserveLeaseRequests: Lease writes through the heartbeat transport are timed, failures counted
// by reason, and a successful write marks the renewal time for the syncloop check; reads and other
// requests pass through untouched.
func TestObserveLeaseRequests(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	a := testAgent(t, clk, nil)
	leaseURL := "https://127.0.0.1:6443/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n"
	var status int
	var transportErr error
	rt := a.observeLeaseRequests(roundTripFunc(func(*http.Request) (*http.Response, error) {
		if transportErr != nil {
			return nil, transportErr
		}
		return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(""))}, nil
	}))
	do := func(method, url string) {
		t.Helper()
		req := httptest.NewRequest(method, url, nil)
		if resp, err := rt.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}
	status = 200
	do(http.MethodGet, leaseURL) // a read: not a renewal
	do(http.MethodPatch, "https://127.0.0.1:6443/api/v1/nodes/n/status")
	if a.lastLeaseRenew.Load() != 0 {
		t.Fatalf("a GET or a node patch counted as a lease renewal")
	}
	do(http.MethodPut, leaseURL)
	if got := time.Unix(0, a.lastLeaseRenew.Load()); !got.Equal(clk.Now()) {
		t.Errorf("last renewal %v, want %v", got, clk.Now())
	}
	status = http.StatusConflict
	do(http.MethodPut, leaseURL)
	status = http.StatusNotFound
	do(http.MethodGet, leaseURL) // ensure-lease looking before a create: 404 is expected, not an error
	status = http.StatusServiceUnavailable
	do(http.MethodGet, leaseURL) // ensure-lease failing: an error
	transportErr = errors.New("connection reset")
	do(http.MethodPost, "https://127.0.0.1:6443/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
	do(http.MethodGet, leaseURL)
	out := scrape(t, a.metrics)
	for _, w := range []string{
		`nodeagent_lease_renew_duration_seconds_count 1`,
		`nodeagent_lease_renew_errors_total{reason="Conflict"} 1`,
		`nodeagent_lease_renew_errors_total{reason="Service Unavailable"} 1`,
		`nodeagent_lease_renew_errors_total{reason="Transport"} 2`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("metrics lack %q", w)
		}
	}
	if strings.Contains(out, `reason="Not Found"`) {
		t.Errorf("a 404 on the ensure-lease GET was counted as an error")
	}
}

// TestOnPatched: the Ready metrics follow the Node the API server returned; the start-up duration is
// set once, at the first Ready.
func TestOnPatched(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	a := testAgent(t, clk, nil)
	withReady := func(s v1.ConditionStatus) *v1.Node {
		return &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse}, {Type: v1.NodeReady, Status: s},
		}}}
	}
	clk.Step(3 * time.Second)
	a.onPatched(withReady(v1.ConditionFalse))
	out := scrape(t, a.metrics)
	for _, w := range []string{"nodeagent_node_ready 0", `nodeagent_node_condition{condition="Ready",status="False"} 1`,
		`nodeagent_node_condition{condition="MemoryPressure",status="False"} 1`, "nodeagent_startup_to_ready_duration_seconds 0"} {
		if !strings.Contains(out, w) {
			t.Errorf("after NotReady: metrics lack %q", w)
		}
	}
	if !a.firstPosted.Load() {
		t.Error("firstPosted not set")
	}
	clk.Step(2 * time.Second)
	a.onPatched(withReady(v1.ConditionTrue))
	clk.Step(time.Minute)
	a.onPatched(withReady(v1.ConditionTrue))
	out = scrape(t, a.metrics)
	for _, w := range []string{"nodeagent_node_ready 1", `nodeagent_node_condition{condition="Ready",status="True"} 1`,
		`nodeagent_node_condition{condition="Ready",status="False"} 0`, "nodeagent_startup_to_ready_duration_seconds 5"} {
		if !strings.Contains(out, w) {
			t.Errorf("after Ready: metrics lack %q", w)
		}
	}
}
