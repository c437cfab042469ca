package statussync

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

const nodeName = "node-1"

var (
	nodesGVR      = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	nodesResource = schema.GroupResource{Resource: "nodes"}
)

// world is the fake environment of one Syncer: API server (fake clientset), informer cache (an
// indexer behind a lister), fake clock, and the inputs of the setters.
type world struct {
	t       *testing.T
	client  *fake.Clientset
	indexer cache.Indexer
	lister  *countingLister
	clock   *testingclock.FakeClock
	syncer  *Syncer

	mu             sync.Mutex
	kernel         string // NodeInfo.KernelVersion the setters report
	runtimeErr     error  // the Ready setter's runtime error
	registerCalls  int
	registerErr    error
	heartbeatFails int
	syncResults    []string
	patchReasons   []string
	patched        []*v1.Node
	runtimeUps     int
}

type worldOpts struct {
	inAPI, inLister *v1.Node
	rand            float64
	register        bool
}

// countingLister counts Get calls: each fast-path tick and each first try reads the cache once.
type countingLister struct {
	corelisters.NodeLister
	gets atomic.Int32
}

func (l *countingLister) Get(name string) (*v1.Node, error) {
	l.gets.Add(1)
	return l.NodeLister.Get(name)
}

func baseNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{
			v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH, "custom": "x",
		}},
	}
}

func newWorld(t *testing.T, o worldOpts) *world {
	t.Helper()
	w := &world{t: t, kernel: "6.1.0", clock: testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))}
	var objs []runtime.Object
	if o.inAPI != nil {
		objs = append(objs, o.inAPI.DeepCopy())
	}
	w.client = fake.NewClientset(objs...)
	w.indexer = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if o.inLister != nil {
		if err := w.indexer.Add(o.inLister.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	capacity := func(_ context.Context, n *v1.Node) error {
		n.Status.Capacity = v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
			v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		}
		return nil
	}
	kernel := func(_ context.Context, n *v1.Node) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		n.Status.NodeInfo.KernelVersion = w.kernel
		return nil
	}
	ready := nodestatus.ReadyCondition(w.clock.Now, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.runtimeErr
	}, func() error { return nil }, func() error { return nil }, func(string, string) {})
	w.lister = &countingLister{NodeLister: corelisters.NewNodeLister(w.indexer)}
	cfg := Config{
		Client: w.client, Lister: w.lister, NodeName: nodeName,
		Setters:         []nodestatus.Setter{capacity, kernel, ready},
		UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
		UpdateRuntimeUp: func(context.Context) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.runtimeUps++
		},
		OnRepeatedHeartbeatFailure: func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.heartbeatFails++
		},
		OnPatched: func(n *v1.Node) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.patched = append(w.patched, n)
		},
		OnSync: func(r string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.syncResults = append(w.syncResults, r)
		},
		ObservePatch: func(d time.Duration, reason string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if d < 0 {
				t.Errorf("ObservePatch duration %v < 0", d)
			}
			w.patchReasons = append(w.patchReasons, reason)
		},
		Clock: w.clock,
		Rand:  func() float64 { return o.rand },
	}
	if o.register {
		cfg.Register = func(ctx context.Context) error {
			w.mu.Lock()
			w.registerCalls++
			err := w.registerErr
			w.mu.Unlock()
			if err != nil {
				return err
			}
			_, err = w.client.CoreV1().Nodes().Create(ctx, baseNode(), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.syncer = s
	return w
}

func (w *world) set(f func(w *world)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

// actions returns the API calls as "verb" or "verb/subresource", and resets them.
func (w *world) actions() []string {
	var out []string
	for _, a := range w.client.Actions() {
		s := a.GetVerb()
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		out = append(out, s)
	}
	w.client.ClearActions()
	return out
}

// apiNode returns the Node as the API server has it.
func (w *world) apiNode() *v1.Node {
	w.t.Helper()
	o, err := w.client.Tracker().Get(nodesGVR, "", nodeName)
	if err != nil {
		w.t.Fatalf("node in the API server: %v", err)
	}
	return o.(*v1.Node)
}

// syncInformer copies the API server's Node into the informer cache, as a watch event would.
func (w *world) syncInformer() {
	w.t.Helper()
	if err := w.indexer.Update(w.apiNode().DeepCopy()); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) results() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.syncResults
	w.syncResults = nil
	return r
}

func join(s []string) string { return strings.Join(s, ",") }

// TestSyncNodeStatusPatchesOnlyWhenNeeded follows the kubelet's tryUpdateNodeStatus over several
// syncs: a change is patched at once; an unchanged status (heartbeat times only) is not, until the
// report frequency plus the random delay has passed.
func TestSyncNodeStatusPatchesOnlyWhenNeeded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// Rand 0.9: the delay after a change is (0.9 − 0.5) × 5m = +2m.
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.9})
	steps := []struct {
		desc        string
		advance     time.Duration
		change      func(w *world)
		wantActions []string
		wantResult  string
	}{
		{desc: "first sync: status changed (and never reported)", wantActions: []string{"patch/status"}, wantResult: "patched"},
		{desc: "10s later, heartbeat only", advance: 10 * time.Second, wantResult: "unchanged"},
		{desc: "kernel changed: patch at once", advance: 10 * time.Second, change: func(w *world) { w.kernel = "6.2.0" },
			wantActions: []string{"patch/status"}, wantResult: "patched"},
		{desc: "5m after the last report: within 5m + 2m delay", advance: 5 * time.Minute, wantResult: "unchanged"},
		{desc: "7m after the last report: report", advance: 2 * time.Minute, wantActions: []string{"patch/status"}, wantResult: "patched"},
		{desc: "delay reset to 0 after a periodic report: 4m59s later nothing", advance: 5*time.Minute - time.Second, wantResult: "unchanged"},
		{desc: "5m later: report", advance: time.Second, wantActions: []string{"patch/status"}, wantResult: "patched"},
		{desc: "ready flips: patch", advance: 10 * time.Second, change: func(w *world) { w.runtimeErr = errors.New("container runtime is down") },
			wantActions: []string{"patch/status"}, wantResult: "patched"},
	}
	for i, s := range steps {
		w.clock.Step(s.advance)
		if s.change != nil {
			w.set(s.change)
		}
		w.syncer.SyncNodeStatus(ctx)
		if got := w.actions(); join(got) != join(s.wantActions) {
			t.Errorf("step %d (%s): actions %v, want %v", i, s.desc, got, s.wantActions)
		}
		if got := w.results(); join(got) != s.wantResult {
			t.Errorf("step %d (%s): OnSync %v, want [%s]", i, s.desc, got, s.wantResult)
		}
		if !w.syncer.LastSync().Equal(w.clock.Now()) {
			t.Errorf("step %d: LastSync %v, want %v", i, w.syncer.LastSync(), w.clock.Now())
		}
		w.syncInformer()
	}
	n := w.apiNode()
	if n.Status.NodeInfo.KernelVersion != "6.2.0" {
		t.Errorf("kernel in the API server = %q", n.Status.NodeInfo.KernelVersion)
	}
	_, ready := getReady(n)
	if ready == nil || ready.Status != v1.ConditionFalse || ready.Message != "container runtime is down" {
		t.Errorf("Ready in the API server = %+v", ready)
	}
	if !ready.LastHeartbeatTime.Time.Equal(w.clock.Now()) {
		t.Errorf("heartbeat %v, want %v", ready.LastHeartbeatTime, w.clock.Now())
	}
}

func getReady(n *v1.Node) (int, *v1.NodeCondition) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return i, &n.Status.Conditions[i]
		}
	}
	return -1, nil
}

// TestRandomDelay: a negative random delay reports earlier than the report frequency (kubernetes#130919).
func TestRandomDelay(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.1}) // −2m
	w.syncer.SyncNodeStatus(ctx)
	w.syncInformer()
	w.actions()
	w.clock.Step(3*time.Minute - time.Second)
	w.syncer.SyncNodeStatus(ctx)
	if got := w.actions(); len(got) != 0 {
		t.Errorf("2m59s after a change with a −2m delay: actions %v, want none", got)
	}
	w.clock.Step(time.Second)
	w.syncer.SyncNodeStatus(ctx)
	if got := w.actions(); join(got) != "patch/status" {
		t.Errorf("3m after a change with a −2m delay: actions %v, want a patch", got)
	}
}

// TestIsUpdateStatusPeriodExpired mirrors the kubelet's test of the same name.
func TestIsUpdateStatusPeriodExpired(t *testing.T) {
	w := newWorld(t, worldOpts{})
	now := w.clock.Now()
	cases := []struct {
		name       string
		lastReport time.Time
		delay      time.Duration
		want       bool
	}{
		{"no status update before and no delay", time.Time{}, 0, true},
		{"no status update before and existing delay", time.Time{}, 30 * time.Second, true},
		{"not expired and no delay", now.Add(-4 * time.Minute), 0, false},
		{"not expired", now.Add(-5 * time.Minute), time.Minute, false},
		{"expired", now.Add(-4 * time.Minute), -2 * time.Minute, true},
		{"delay exactly at threshold", now.Add(-5 * time.Minute), 0, true},
	}
	for _, tc := range cases {
		w.syncer.lastStatusReportTime, w.syncer.delayAfterNodeStatusChange = tc.lastReport, tc.delay
		if got := w.syncer.isUpdateStatusPeriodExpired(); got != tc.want {
			t.Errorf("%s: expired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCalculateDelay mirrors the kubelet's: the delay is within ±50% of the report frequency.
func TestCalculateDelay(t *testing.T) {
	for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
		w := newWorld(t, worldOpts{rand: r})
		d := w.syncer.calculateDelay()
		want := time.Duration(float64(5*time.Minute) * (r - 0.5))
		if d != want || d.Abs() > 5*time.Minute/2 {
			t.Errorf("rand %v: delay %v, want %v within ±2m30s", r, d, want)
		}
	}
}

// TestUpdateNodeStatusTries mirrors the kubelet's retry loop: up to 5 tries, the first from the
// informer cache and the others from a GET; OnRepeatedHeartbeatFailure after each failed try but the first.
func TestUpdateNodeStatusTries(t *testing.T) {
	conflict := apierrors.NewConflict(nodesResource, nodeName, errors.New("the object has been modified"))
	cases := []struct {
		desc              string
		inLister          bool
		patchFailures     int // the first n patches fail with a conflict
		getErr            error
		wantActions       []string
		wantErr           string
		wantHeartbeatFail int
		wantResults       []string
		wantReasons       []string
	}{
		{
			desc: "first try from the lister", inLister: true,
			wantActions: []string{"patch/status"}, wantResults: []string{"patched"}, wantReasons: []string{""},
		},
		{
			desc: "conflict on the first patch, then a GET and success", inLister: true, patchFailures: 1,
			wantActions: []string{"patch/status", "get", "patch/status"}, wantResults: []string{"patched"}, wantReasons: []string{"Conflict", ""},
		},
		{
			desc: "conflict twice: one repeated-failure callback", inLister: true, patchFailures: 2,
			wantActions:       []string{"patch/status", "get", "patch/status", "get", "patch/status"},
			wantHeartbeatFail: 1, wantResults: []string{"patched"}, wantReasons: []string{"Conflict", "Conflict", ""},
		},
		{
			desc: "every try fails", inLister: true, patchFailures: 100,
			wantActions: []string{"patch/status", "get", "patch/status", "get", "patch/status", "get", "patch/status", "get", "patch/status"},
			wantErr:     "update node status exceeds retry count", wantHeartbeatFail: 4, wantResults: []string{"error"},
			wantReasons: []string{"Conflict", "Conflict", "Conflict", "Conflict", "Conflict"},
		},
		{
			desc: "not in the informer cache yet: the second try GETs it", inLister: false,
			wantActions: []string{"get", "patch/status"}, wantResults: []string{"patched"}, wantReasons: []string{""},
		},
		{
			desc: "GET fails on every later try", inLister: true, patchFailures: 100,
			getErr:      apierrors.NewTimeoutError("request timed out", 1),
			wantActions: []string{"patch/status", "get", "get", "get", "get"},
			wantErr:     "request timed out", wantHeartbeatFail: 4, wantResults: []string{"error"}, wantReasons: []string{"Conflict"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			o := worldOpts{inAPI: baseNode(), rand: 0.5}
			if tc.inLister {
				o.inLister = baseNode()
			}
			w := newWorld(t, o)
			patches := 0
			w.client.PrependReactor("patch", "nodes", func(core.Action) (bool, runtime.Object, error) {
				patches++
				if patches <= tc.patchFailures {
					return true, nil, conflict
				}
				return false, nil, nil
			})
			if tc.getErr != nil {
				w.client.PrependReactor("get", "nodes", func(core.Action) (bool, runtime.Object, error) { return true, nil, tc.getErr })
			}
			w.syncer.mu.Lock()
			err := w.syncer.updateNodeStatus(ctx)
			w.syncer.mu.Unlock()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("updateNodeStatus error = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Errorf("updateNodeStatus: %v", err)
			}
			if got := w.actions(); join(got) != join(tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			if w.heartbeatFails != tc.wantHeartbeatFail {
				t.Errorf("OnRepeatedHeartbeatFailure called %d times, want %d", w.heartbeatFails, tc.wantHeartbeatFail)
			}
			if join(w.patchReasons) != join(tc.wantReasons) {
				t.Errorf("ObservePatch reasons %q, want %q", w.patchReasons, tc.wantReasons)
			}
			// The full sync reports one result per sync.
			w.syncResults = nil
			w.syncer.SyncNodeStatus(ctx)
			if got := w.results(); len(got) != 1 {
				t.Errorf("OnSync results for one sync: %v", got)
			} else if tc.wantErr != "" && got[0] != "error" {
				t.Errorf("OnSync after failing tries = %v, want error", got)
			}
		})
	}
}

// TestRegistrationAndDeletedNode: the first sync registers; a Node deleted while the agent runs is
// registered again (where the kubelet leaves it gone) and its status posted in the same sync.
func TestRegistrationAndDeletedNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{register: true, rand: 0.5})
	if w.syncer.Registered() {
		t.Fatal("Registered() before the first sync")
	}
	w.syncer.SyncNodeStatus(ctx)
	if !w.syncer.Registered() || w.registerCalls != 1 {
		t.Fatalf("after the first sync: registered %v, Register called %d times", w.syncer.Registered(), w.registerCalls)
	}
	if got := w.actions(); join(got) != "create,get,patch/status" {
		t.Errorf("first sync actions %v, want create (register), get (not in the cache yet), patch", got)
	}
	w.syncInformer()

	// An admin deletes the Node; the informer cache still has it.
	if err := w.client.Tracker().Delete(nodesGVR, "", nodeName); err != nil {
		t.Fatal(err)
	}
	w.set(func(w *world) { w.kernel = "6.9" })
	w.clock.Step(10 * time.Second)
	w.syncer.SyncNodeStatus(ctx)
	if w.registerCalls != 2 {
		t.Errorf("Register called %d times, want 2 (once more after the deletion)", w.registerCalls)
	}
	if got := w.actions(); join(got) != "patch/status,create,get,patch/status" {
		t.Errorf("actions %v, want patch (NotFound), create, get, patch", got)
	}
	if n := w.apiNode(); n.Status.NodeInfo.KernelVersion != "6.9" {
		t.Errorf("status not posted after re-registration: %+v", n.Status.NodeInfo)
	}
	if got := w.results(); join(got) != "patched,patched" {
		t.Errorf("OnSync %v", got)
	}

	// A failed re-registration ends the sync with an error.
	if err := w.client.Tracker().Delete(nodesGVR, "", nodeName); err != nil {
		t.Fatal(err)
	}
	w.set(func(w *world) { w.registerErr = errors.New("forbidden") })
	w.clock.Step(10 * time.Second)
	w.syncer.SyncNodeStatus(ctx)
	if got := w.results(); join(got) != "error" {
		t.Errorf("OnSync %v, want error", got)
	}
	// The next sync registers first.
	w.set(func(w *world) { w.registerErr = nil })
	w.clock.Step(10 * time.Second)
	calls := w.registerCalls
	w.syncer.SyncNodeStatus(ctx)
	if w.registerCalls != calls+1 || !w.syncer.Registered() {
		t.Errorf("Register not retried by the next sync")
	}
}

// TestRegisterErrorSkipsStatus: with registration failing, no status is read or posted.
func TestRegisterErrorSkipsStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{register: true})
	w.set(func(w *world) { w.registerErr = errors.New("connection refused") })
	w.syncer.SyncNodeStatus(ctx)
	if got := w.actions(); len(got) != 0 {
		t.Errorf("actions %v, want none", got)
	}
	if got := w.results(); join(got) != "error" || w.syncer.Registered() {
		t.Errorf("OnSync %v registered %v", got, w.syncer.Registered())
	}
	if !w.syncer.LastSync().IsZero() {
		t.Errorf("LastSync = %v, want zero", w.syncer.LastSync())
	}
}

// TestOSArchLabels: the kubernetes.io/os and arch labels are restored (the kubelet's updateNode) and
// count as a change even when the status is the same.
func TestOSArchLabels(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5})
	w.syncer.SyncNodeStatus(ctx)
	w.syncInformer()
	w.actions()
	// Someone removes the os label and sets a wrong arch.
	n := w.apiNode().DeepCopy()
	delete(n.Labels, v1.LabelOSStable)
	n.Labels[v1.LabelArchStable] = "s390x-wrong"
	if err := w.client.Tracker().Update(nodesGVR, n, ""); err != nil {
		t.Fatal(err)
	}
	w.syncInformer()
	w.clock.Step(10 * time.Second)
	w.syncer.SyncNodeStatus(ctx)
	if got := w.actions(); join(got) != "patch/status" {
		t.Errorf("actions %v, want a patch for the labels", got)
	}
	got := w.apiNode().Labels
	want := map[string]string{v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH, "custom": "x"}
	if !apiequality.Semantic.DeepEqual(want, got) {
		t.Errorf("labels: %s", diff.Diff(want, got))
	}
	// Labels right, status unchanged: nothing to do.
	w.syncInformer()
	w.clock.Step(10 * time.Second)
	w.syncer.SyncNodeStatus(ctx)
	if got := w.actions(); len(got) != 0 {
		t.Errorf("actions %v, want none", got)
	}
}

// TestOnPatched: OnPatched receives the Node the API server returned.
func TestOnPatched(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5})
	w.syncer.SyncNodeStatus(ctx)
	if len(w.patched) != 1 || w.patched[0].Status.NodeInfo.KernelVersion != "6.1.0" {
		t.Fatalf("OnPatched: %v", w.patched)
	}
	if _, ready := getReady(w.patched[0]); ready == nil || ready.Status != v1.ConditionTrue {
		t.Errorf("patched node Ready = %+v", ready)
	}
}

// TestNodeStatusHasChanged mirrors the kubelet's TestNodeStatusHasChanged.
func TestNodeStatusHasChanged(t *testing.T) {
	fakeNow := metav1.Date(2015, 1, 1, 12, 0, 0, 0, time.UTC)
	fakeFuture := metav1.Time{Time: fakeNow.Time.Add(time.Minute)}
	readyCondition := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: fakeNow, LastTransitionTime: fakeNow}
	readyConditionAtDiffHeartbeatTime := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: fakeFuture, LastTransitionTime: fakeNow}
	readyConditionAtDiffTransitionTime := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: fakeFuture, LastTransitionTime: fakeFuture}
	notReadyCondition := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, LastHeartbeatTime: fakeNow, LastTransitionTime: fakeNow}
	memoryPressureCondition := v1.NodeCondition{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, LastHeartbeatTime: fakeNow, LastTransitionTime: fakeNow}
	readyWithMessage := readyConditionAtDiffHeartbeatTime
	readyWithMessage.Message = "new message"
	cases := []struct {
		name           string
		originalStatus *v1.NodeStatus
		status         *v1.NodeStatus
		expectChange   bool
	}{
		{"Node status does not change with nil status.", nil, nil, false},
		{"Node status does not change with default status.", &v1.NodeStatus{}, &v1.NodeStatus{}, false},
		{"Node status changes with nil and default status.", nil, &v1.NodeStatus{}, true},
		{"Node status changes with nil and status.", nil, &v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}}, true},
		{"Node status does not change with empty conditions.", &v1.NodeStatus{Conditions: []v1.NodeCondition{}}, &v1.NodeStatus{Conditions: []v1.NodeCondition{}}, false},
		{"Node status does not change",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}}, false},
		{"Node status does not change even if heartbeat time changes.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyConditionAtDiffHeartbeatTime, memoryPressureCondition}}, false},
		{"Node status does not change even if the orders of conditions are different.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{memoryPressureCondition, readyConditionAtDiffHeartbeatTime}}, false},
		{"Node status changes if condition status differs.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{notReadyCondition, memoryPressureCondition}}, true},
		{"Node status changes if transition time changes.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyConditionAtDiffTransitionTime, memoryPressureCondition}}, true},
		{"Node status changes if the message changes.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyWithMessage}}, true},
		{"Node status changes with different number of conditions.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}}, true},
		{"Node status changes with different phase.",
			&v1.NodeStatus{Phase: v1.NodePending, Conditions: []v1.NodeCondition{readyCondition}},
			&v1.NodeStatus{Phase: v1.NodeRunning, Conditions: []v1.NodeCondition{readyCondition}}, true},
		{"Node status changes with different capacity.",
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourcePods: resource.MustParse("110")}},
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourcePods: resource.MustParse("111")}}, true},
		{"Node status does not change with semantically equal quantities.",
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}},
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(1<<30, resource.DecimalSI)}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			originalCopy, statusCopy := tc.originalStatus.DeepCopy(), tc.status.DeepCopy()
			if got := NodeStatusHasChanged(tc.originalStatus, tc.status); got != tc.expectChange {
				t.Errorf("changed = %v, want %v", got, tc.expectChange)
			}
			if !apiequality.Semantic.DeepEqual(originalCopy, tc.originalStatus) || !apiequality.Semantic.DeepEqual(statusCopy, tc.status) {
				t.Errorf("NodeStatusHasChanged modified its arguments")
			}
		})
	}
}

// runFast runs FastStatusUpdateOnce until it returns, stepping the fake clock one 100 ms tick at a
// time once each tick's work is done. onTick runs before each step with the number of ticks done. It
// returns the number of ticks.
func runFast(ctx context.Context, t *testing.T, w *world, onTick func(tick int)) int {
	t.Helper()
	done := make(chan struct{})
	go func() { w.syncer.FastStatusUpdateOnce(ctx); close(done) }()
	deadline := time.Now().Add(60 * time.Second)
	for tick := 0; ; tick++ {
		// Each tick but the timed-out one reads the cache first, holding s.mu for its whole work:
		// once the read is seen, taking s.mu waits for the tick to finish.
		for int(w.lister.gets.Load()) <= tick {
			select {
			case <-done:
				return tick
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("FastStatusUpdateOnce did not run tick %d", tick+1)
			}
			time.Sleep(time.Millisecond)
		}
		w.syncer.mu.Lock()
		w.syncer.mu.Unlock() //nolint:staticcheck // empty critical section: wait for the tick's work
		select {
		case <-done:
			return tick + 1
		default:
		}
		if onTick != nil {
			onTick(tick + 1)
		}
		w.clock.Step(100 * time.Millisecond)
	}
}

// TestFastStatusUpdateOnce mirrors the kubelet's TestFastStatusUpdateOnce: while the Node is not
// Ready, each 100 ms tick refreshes the runtime state and runs the setters from the cached Node; it
// patches once when Ready stops being False (falling back to a full sync if that patch fails), stops
// when the cached Node is already Ready, and gives up after 120 s.
func TestFastStatusUpdateOnce(t *testing.T) {
	notReady := func() *v1.Node {
		n := baseNode()
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "NotReady", Message: "Node not ready"}}
		return n
	}
	cases := []struct {
		desc          string
		readyAfter    int  // the runtime turns ready after this many ticks
		cacheReadyAt  int  // the informer cache sees Ready True at this tick (0: never)
		timeoutAt     int  // the clock jumps past 120 s at this tick (0: never)
		noCondition   bool // the cached Node has no Ready condition
		patchFailures int
		wantPatches   int
		wantSync      bool // a full sync ran after the fast patch failed
		wantTicks     int  // ticks that read the cache
	}{
		{desc: "turns ready on the third tick: one patch", readyAfter: 2, wantPatches: 1, wantTicks: 3},
		{desc: "already ready in the cache: no patch", readyAfter: 100, cacheReadyAt: 2, wantPatches: 0, wantTicks: 3},
		{desc: "timeout: no patch", readyAfter: 100, timeoutAt: 3, wantPatches: 0, wantTicks: 3},
		{desc: "no Ready condition yet: waits, then times out", noCondition: true, readyAfter: 0, timeoutAt: 3, wantPatches: 0, wantTicks: 3},
		{desc: "ready, first patch fails: a full sync patches", readyAfter: 1, patchFailures: 1, wantPatches: 2, wantSync: true, wantTicks: 2},
		{desc: "ready, every patch fails: the full sync's 5 tries, then done", readyAfter: 1, patchFailures: 100,
			wantPatches: 1 + NodeStatusUpdateRetry, wantSync: true, wantTicks: 2},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			cached := notReady()
			if tc.noCondition {
				cached.Status.Conditions = nil
			}
			w := newWorld(t, worldOpts{inAPI: cached, inLister: cached, rand: 0.5})
			w.set(func(w *world) { w.runtimeErr = errors.New("container runtime network not ready") })
			patches := 0
			w.client.PrependReactor("patch", "nodes", func(a core.Action) (bool, runtime.Object, error) {
				patches++
				if !strings.Contains(string(a.(core.PatchAction).GetPatch()), `"type":"Ready"`) {
					t.Errorf("patch %d without the Ready condition: %s", patches, a.(core.PatchAction).GetPatch())
				}
				if patches <= tc.patchFailures {
					return true, nil, errors.New("try again")
				}
				return false, nil, nil
			})
			if tc.noCondition {
				// Without a Ready condition in the cache the fast path never runs the setters.
				w.set(func(w *world) { w.runtimeErr = nil })
			}
			ticks := runFast(ctx, t, w, func(tick int) {
				if tick == tc.readyAfter && !tc.noCondition {
					w.set(func(w *world) { w.runtimeErr = nil })
				}
				if tc.cacheReadyAt != 0 && tick == tc.cacheReadyAt {
					n := cached.DeepCopy()
					n.Status.Conditions[0].Status = v1.ConditionTrue
					if err := w.indexer.Update(n); err != nil {
						t.Fatal(err)
					}
				}
				if tc.timeoutAt != 0 && tick == tc.timeoutAt {
					w.clock.Step(120 * time.Second)
				}
			})
			if ticks != tc.wantTicks {
				t.Errorf("%d ticks, want %d", ticks, tc.wantTicks)
			}
			if patches != tc.wantPatches {
				t.Errorf("%d patches, want %d (after %d ticks)", patches, tc.wantPatches, ticks)
			}
			if tc.wantPatches > 0 && tc.patchFailures < tc.wantPatches {
				_, ready := getReady(w.apiNode())
				if ready == nil || ready.Status != v1.ConditionTrue {
					t.Errorf("Ready in the API server = %+v, want True", ready)
				}
			}
			if tc.wantPatches == 0 {
				for _, a := range w.actions() {
					if a != "get" {
						t.Errorf("unexpected API call %s", a)
					}
				}
			}
			gotSync := false
			for _, r := range w.syncResults {
				if r == "error" || (r == "patched" && tc.patchFailures > 0) {
					gotSync = true
				}
			}
			if gotSync != tc.wantSync {
				t.Errorf("full sync after a failed fast patch: %v, want %v (results %v)", gotSync, tc.wantSync, w.syncResults)
			}
			if tc.noCondition && w.runtimeUps != 0 {
				t.Errorf("UpdateRuntimeUp called %d times without a Ready condition", w.runtimeUps)
			}
		})
	}
}

// TestFastStatusUpdateOnceCancel: it returns when the context ends.
func TestFastStatusUpdateOnceCancel(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	w := newWorld(t, worldOpts{})
	done := make(chan struct{})
	go func() { w.syncer.FastStatusUpdateOnce(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("FastStatusUpdateOnce did not return after cancel")
	}
}

// TestRunAndTrigger: Run syncs at once, a Trigger syncs again without waiting for the period, and
// Run returns when the context ends.
func TestRunAndTrigger(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5})
	done := make(chan struct{})
	go func() { w.syncer.Run(ctx); close(done) }()
	waitFor := func(n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			w.mu.Lock()
			got := len(w.syncResults)
			w.mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d syncs, want %d", got, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(1)
	w.syncer.Trigger()
	w.syncer.Trigger() // coalesces
	waitFor(2)
	// The period (10 s ± 4 %) on the fake clock starts the next one.
	deadline := time.Now().Add(30 * time.Second)
	for !w.clock.HasWaiters() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	w.clock.Step(11 * time.Second)
	waitFor(3)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestNew(t *testing.T) {
	lister := corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	client := fake.NewClientset()
	for i, cfg := range []Config{
		{Lister: lister, NodeName: nodeName, UpdateFrequency: time.Second, ReportFrequency: time.Minute},
		{Client: client, NodeName: nodeName, UpdateFrequency: time.Second, ReportFrequency: time.Minute},
		{Client: client, Lister: lister, UpdateFrequency: time.Second, ReportFrequency: time.Minute},
		{Client: client, Lister: lister, NodeName: nodeName, ReportFrequency: time.Minute},
		{Client: client, Lister: lister, NodeName: nodeName, UpdateFrequency: time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("config %d: no error", i)
		}
	}
	s, err := New(Config{Client: client, Lister: lister, NodeName: nodeName, UpdateFrequency: time.Second, ReportFrequency: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Registered() {
		t.Error("without Register the node counts as registered")
	}
	if d := s.calculateDelay(); d.Abs() > 30*time.Second {
		t.Errorf("default Rand delay %v", d)
	}
	_ = fmt.Sprint(s)
}
