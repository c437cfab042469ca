package statussync

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

const nodeName = "node-1"

var (
	nodesGVR      = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	nodesResource = schema.GroupResource{Resource: "nodes"}
)

// world is the fake environment of one Syncer: API server (fake clientset), informer cache (an
// indexer behind a lister, and a nodecache.Tracker saying whether it is current), a clock, and the
// inputs of the setters. With worldOpts.bubble the clock is the synctest bubble's (clock.RealClock
// inside synctest.Test), else a fake clock.
type world struct {
	t       *testing.T
	client  *fake.Clientset
	indexer cache.Indexer
	lister  corelisters.NodeLister
	clock   clock.WithTicker
	fake    *testingclock.FakeClock // nil in a bubble
	cache   *nodecache.Node
	syncer  *Syncer

	mu             sync.Mutex
	kernel         string        // NodeInfo.KernelVersion the setters report
	runtimeErr     error         // the Ready setter's runtime error
	block          chan struct{} // when set, the next setter run waits for it to be closed (a slow sync)
	heartbeatFails int
	syncs          []SyncResult
	runtimeUps     int
	// updateRuntimeUp is what the fast start-up update calls before FastNodeStatusUpdate (the
	// controller's runtime poll); by default it counts the calls in runtimeUps.
	updateRuntimeUp func(context.Context)
}

// record keeps a finished sync's result (one with an end time: a sync cut short by ctx's end
// reports nothing), as the controller reports each to its observer.
func (w *world) record(r SyncResult) SyncResult {
	if r.Time.IsZero() {
		return r
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.Duration < 0 || r.PatchDuration < 0 {
		w.t.Errorf("negative duration in %+v", r)
	}
	w.syncs = append(w.syncs, r)
	return r
}

// sync runs one SyncNodeStatus and records its result.
func (w *world) sync(ctx context.Context) SyncResult { return w.record(w.syncer.SyncNodeStatus(ctx)) }

type worldOpts struct {
	inAPI, inLister *v1.Node
	rand            float64
	bubble          bool                  // running inside synctest.Test: use the bubble's clock
	updateRuntimeUp func(context.Context) // replaces the counting UpdateRuntimeUp
	extra           []nodestatus.Func     // setters run after the world's own
}

func baseNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{
			v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH, "custom": "x",
		}},
	}
}

// capacitySetter sets the four capacities the Ready setter requires.
func capacitySetter(_ context.Context, n *v1.Node) error {
	n.Status.Capacity = v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
	}
	return nil
}

func newWorld(t *testing.T, o worldOpts) *world {
	t.Helper()
	w := &world{t: t, kernel: "6.1.0"}
	if o.bubble {
		w.clock = clock.RealClock{}
	} else {
		w.fake = testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
		w.clock = w.fake
	}
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
	w.lister = corelisters.NewNodeLister(w.indexer)
	w.cache = nodecache.New(w.clock).Node(nodeName)
	kernel := func(_ context.Context, n *v1.Node) error {
		w.mu.Lock()
		block := w.block
		w.mu.Unlock()
		if block != nil {
			<-block
		}
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
	w.updateRuntimeUp = o.updateRuntimeUp
	if w.updateRuntimeUp == nil {
		w.updateRuntimeUp = func(context.Context) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.runtimeUps++
		}
	}
	cfg := Config{
		Client: w.client, Lister: w.lister, Cache: w.cache, NodeName: nodeName,
		Funcs: nodestatus.NewFuncs(w.clock, append([]nodestatus.Func{
			{Name: "Capacity", Setter: capacitySetter},
			{Name: "Kernel", Setter: kernel},
			{Name: "ReadyCondition", Setter: ready}}, o.extra...)...),
		UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
		OnRepeatedHeartbeatFailure: func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.heartbeatFails++
		},
		Clock: w.clock,
		Rand:  func() float64 { return o.rand },
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

// step advances the clock: the fake clock, or the bubble's by sleeping.
func (w *world) step(d time.Duration) {
	if w.fake != nil {
		w.fake.Step(d)
		return
	}
	time.Sleep(d)
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

// takeSyncs returns the results OnSync received since the last call.
func (w *world) takeSyncs() []SyncResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.syncs
	w.syncs = nil
	return r
}

// results returns the Result of each sync since the last call.
func (w *world) results() []string {
	var out []string
	for _, r := range w.takeSyncs() {
		out = append(out, string(r.Result))
	}
	return out
}

func join(s []string) string { return strings.Join(s, ",") }

func getReady(n *v1.Node) (int, *v1.NodeCondition) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return i, &n.Status.Conditions[i]
		}
	}
	return -1, nil
}

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
		w.step(s.advance)
		if s.change != nil {
			w.set(s.change)
		}
		w.sync(ctx)
		if got := w.actions(); join(got) != join(s.wantActions) {
			t.Errorf("step %d (%s): actions %v, want %v", i, s.desc, got, s.wantActions)
		}
		if got := w.results(); join(got) != s.wantResult {
			t.Errorf("step %d (%s): OnSync %v, want [%s]", i, s.desc, got, s.wantResult)
		}
		if !w.syncer.LastSync().Equal(w.clock.Now()) {
			t.Errorf("step %d: LastSync %v, want %v", i, w.syncer.LastSync(), w.clock.Now())
		}
		if r := w.syncer.LastResult(); r == nil || string(r.Result) != s.wantResult {
			t.Errorf("step %d: LastResult %+v, want %s", i, r, s.wantResult)
		}
		w.syncInformer()
	}
	n := w.apiNode()
	if n.Status.NodeInfo.KernelVersion != "6.2.0" {
		t.Errorf("kernel in the API server = %q", n.Status.NodeInfo.KernelVersion)
	}
	_, ready := getReady(n)
	if ready == nil || ready.Status != v1.ConditionFalse || ready.Message != "container runtime is down" {
		t.Fatalf("Ready in the API server = %+v", ready)
	}
	if !ready.LastHeartbeatTime.Time.Equal(w.clock.Now()) {
		t.Errorf("heartbeat %v, want %v", ready.LastHeartbeatTime, w.clock.Now())
	}
}

// TestRandomDelay: a negative random delay reports earlier than the report frequency (kubernetes#130919).
func TestRandomDelay(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.1}) // −2m
	w.sync(ctx)
	w.syncInformer()
	w.actions()
	w.step(3*time.Minute - time.Second)
	w.sync(ctx)
	if got := w.actions(); len(got) != 0 {
		t.Errorf("2m59s after a change with a −2m delay: actions %v, want none", got)
	}
	w.step(time.Second)
	w.sync(ctx)
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
// informer cache and the others from a GET; OnRepeatedHeartbeatFailure after each failed try but the
// first; a failed try (but a first-try NotFound from the cache) marks the cache stale. One sync
// reports one SyncResult: the try that ended it and the last PATCH's reason.
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
		wantResult        Result
		wantTry           int
		wantPatched       bool
		wantReason        string // of the last try's PATCH
		wantStale         bool
	}{
		{
			desc: "first try from the lister", inLister: true,
			wantActions: []string{"patch/status"}, wantResult: ResultPatched, wantTry: 1, wantPatched: true,
		},
		{
			desc: "conflict on the first patch, then a GET and success", inLister: true, patchFailures: 1,
			wantActions: []string{"patch/status", "get", "patch/status"}, wantResult: ResultPatched, wantTry: 2, wantPatched: true,
			wantStale: true,
		},
		{
			desc: "conflict twice: one repeated-failure callback", inLister: true, patchFailures: 2,
			wantActions:       []string{"patch/status", "get", "patch/status", "get", "patch/status"},
			wantHeartbeatFail: 1, wantResult: ResultPatched, wantTry: 3, wantPatched: true, wantStale: true,
		},
		{
			desc: "every try fails", inLister: true, patchFailures: 100,
			wantActions: []string{"patch/status", "get", "patch/status", "get", "patch/status", "get", "patch/status", "get", "patch/status"},
			wantErr:     "update node status exceeds retry count", wantHeartbeatFail: 4, wantResult: ResultError, wantTry: 5,
			wantPatched: true, wantReason: "Conflict", wantStale: true,
		},
		{
			desc: "not in the informer cache yet: the second try GETs it; the cache is not marked stale", inLister: false,
			wantActions: []string{"get", "patch/status"}, wantResult: ResultPatched, wantTry: 2, wantPatched: true,
		},
		{
			desc: "GET fails on every later try", inLister: true, patchFailures: 100,
			getErr:      apierrors.NewTimeoutError("request timed out", 1),
			wantActions: []string{"patch/status", "get", "get", "get", "get"},
			wantErr:     "request timed out", wantHeartbeatFail: 4, wantResult: ResultError, wantTry: 5, wantStale: true,
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
			w.sync(ctx)
			if got := w.actions(); join(got) != join(tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			if w.heartbeatFails != tc.wantHeartbeatFail {
				t.Errorf("OnRepeatedHeartbeatFailure called %d times, want %d", w.heartbeatFails, tc.wantHeartbeatFail)
			}
			syncs := w.takeSyncs()
			if len(syncs) != 1 {
				t.Fatalf("OnSync called %d times for one sync: %+v", len(syncs), syncs)
			}
			r := syncs[0]
			if r.Result != tc.wantResult || r.Try != tc.wantTry || r.Patched != tc.wantPatched || r.PatchReason != tc.wantReason {
				t.Errorf("result %s try %d patched %v reason %q, want %s try %d patched %v reason %q",
					r.Result, r.Try, r.Patched, r.PatchReason, tc.wantResult, tc.wantTry, tc.wantPatched, tc.wantReason)
			}
			if tc.wantErr != "" {
				if r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr) || r.Error != r.Err.Error() || r.Node != nil {
					t.Errorf("Err %v (Error %q, Node %v), want one containing %q and no Node", r.Err, r.Error, r.Node, tc.wantErr)
				}
				if !w.syncer.LastSync().IsZero() {
					t.Errorf("LastSync %v after a failed sync, want zero", w.syncer.LastSync())
				}
			} else {
				if r.Err != nil || r.Node == nil {
					t.Errorf("Err %v Node %v, want no error and the patched Node", r.Err, r.Node)
				}
			}
			if got := w.cache.Stale() != nil; got != tc.wantStale {
				t.Errorf("cache stale = %v (%+v), want %v", got, w.cache.Stale(), tc.wantStale)
			}
			if s := w.cache.Stale(); s != nil && !strings.HasPrefix(s.Reason, "node status update failed: ") {
				t.Errorf("stale reason %q", s.Reason)
			}
		})
	}
}

// TestDeletedNode: a Node deleted while the agent runs (the informer's copy still there) ends the
// sync at its first try with ErrNodeGone, nothing posted, and the cache marked stale: the caller, which
// owns registration, registers it again; the next sync then reads the new Node from the API server
// and posts its status.
func TestDeletedNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5})
	w.sync(ctx)
	w.syncInformer()
	w.actions()
	w.takeSyncs()

	if err := w.client.Tracker().Delete(nodesGVR, "", nodeName); err != nil {
		t.Fatal(err)
	}
	w.set(func(w *world) { w.kernel = "6.9" })
	w.step(10 * time.Second)
	r := w.sync(ctx)
	if !errors.Is(r.Err, ErrNodeGone) || r.Try != 1 {
		t.Errorf("sync of a deleted Node: try %d, Err %v; want try 1 and ErrNodeGone", r.Try, r.Err)
	}
	if got := w.actions(); join(got) != "patch/status" {
		t.Errorf("actions %v, want one patch (NotFound) and no more tries", got)
	}
	if w.cache.Stale() == nil {
		t.Error("cache not marked stale after the Node was found deleted")
	}

	// Registered again by the caller: the next sync GETs it (the cache is stale) and posts.
	if _, err := w.client.CoreV1().Nodes().Create(ctx, baseNode(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.actions()
	w.step(10 * time.Second)
	if r := w.sync(ctx); r.Result != ResultPatched {
		t.Errorf("sync after re-registration: %s %v, want patched", r.Result, r.Err)
	}
	if got := w.actions(); join(got) != "get,patch/status" {
		t.Errorf("actions %v, want get, patch", got)
	}
	if n := w.apiNode(); n.Status.NodeInfo.KernelVersion != "6.9" {
		t.Errorf("status not posted after re-registration: %+v", n.Status.NodeInfo)
	}
}

// TestOSArchLabels: the kubernetes.io/os and arch labels are restored (the kubelet's updateNode) and
// count as a change even when the status is the same.
func TestOSArchLabels(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5})
	w.sync(ctx)
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
	w.step(10 * time.Second)
	w.sync(ctx)
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
	w.step(10 * time.Second)
	w.sync(ctx)
	if got := w.actions(); len(got) != 0 {
		t.Errorf("actions %v, want none", got)
	}
}

// TestOnSyncResult: OnSync receives, for a sync that patched, the Node the API server returned, the
// patch, its timing and the try; for a sync that patched nothing, the Node as read (the status the
// API server has), so that callers tracking the posted status (the Ready gauge, /debug/nodestatus)
// stay current without a patch.
func TestOnSyncResult(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5})
	// The PATCH takes 30 ms on the fake clock.
	w.client.PrependReactor("patch", "nodes", func(core.Action) (bool, runtime.Object, error) {
		w.fake.Step(30 * time.Millisecond)
		return false, nil, nil
	})
	start := w.clock.Now()
	w.sync(ctx)
	syncs := w.takeSyncs()
	if len(syncs) != 1 {
		t.Fatalf("OnSync called %d times", len(syncs))
	}
	p := syncs[0]
	if p.Result != ResultPatched || !p.Patched || p.Try != 1 || p.Fast || p.Err != nil || p.PatchReason != "" {
		t.Errorf("patched sync result %+v", p)
	}
	if p.PatchDuration != 30*time.Millisecond || p.Duration != 30*time.Millisecond || !p.Time.Equal(start.Add(30*time.Millisecond)) {
		t.Errorf("timing: patch %v, sync %v, time %v; want 30ms, 30ms, %v", p.PatchDuration, p.Duration, p.Time, start.Add(30*time.Millisecond))
	}
	if !strings.Contains(p.Patch, `"kernelVersion":"6.1.0"`) {
		t.Errorf("patch body %s, want the kernel version", p.Patch)
	}
	if p.Node == nil || p.Node.Status.NodeInfo.KernelVersion != "6.1.0" {
		t.Fatalf("patched sync Node %+v", p.Node)
	}
	if _, ready := getReady(p.Node); ready == nil || ready.Status != v1.ConditionTrue {
		t.Errorf("patched Node Ready = %+v", ready)
	}
	if last := w.syncer.LastResult(); last == nil || last.Time != p.Time {
		t.Errorf("LastResult %+v, want the sync reported to OnSync", last)
	}

	for i := range 2 {
		w.syncInformer()
		w.step(10 * time.Second)
		w.sync(ctx)
		syncs := w.takeSyncs()
		if len(syncs) != 1 {
			t.Fatalf("unchanged sync %d: OnSync called %d times", i, len(syncs))
		}
		u := syncs[0]
		if u.Result != ResultUnchanged || u.Patched || u.Patch != "" || u.Try != 1 || u.Err != nil {
			t.Errorf("unchanged sync %d result %+v", i, u)
		}
		if u.Node == nil || u.Node.Status.NodeInfo.KernelVersion != "6.1.0" {
			t.Fatalf("unchanged sync %d Node %+v, want the posted one", i, u.Node)
		}
		if _, ready := getReady(u.Node); ready == nil || ready.Status != v1.ConditionTrue {
			t.Errorf("unchanged sync %d Node Ready = %+v, want True", i, ready)
		}
	}
}

// notReadyNode is the Node as registered before the runtime was ready.
func notReadyNode() *v1.Node {
	n := baseNode()
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "NotReady", Message: "Node not ready"}}
	return n
}

// runFast runs FastStatusUpdateOnce inside the synctest bubble until it returns. After each attempt,
// once the fast path waits for its next 100 ms tick, it calls onTick with the number of attempts made
// so far, then lets the tick pass. It returns the number of attempts and the bubble time they took.
func runFast(ctx context.Context, w *world, onTick func(attempt int)) (attempts int, took time.Duration) {
	start := time.Now()
	done := make(chan struct{})
	go func() { fastStatusUpdateOnce(ctx, w); close(done) }()
	for attempts = 1; ; attempts++ {
		synctest.Wait()
		select {
		case <-done:
			return attempts, time.Since(start)
		default:
		}
		if onTick != nil {
			onTick(attempts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFastStatusUpdateOnce mirrors the kubelet's TestFastStatusUpdateOnce: while the Node is not
// Ready, each 100 ms tick refreshes the runtime state and runs the setters from the cached Node; it
// patches once when Ready stops being False (falling back to a full sync if that patch fails), stops
// when the cached Node is already Ready, and gives up after 120 s.
func TestFastStatusUpdateOnce(t *testing.T) {
	cases := []struct {
		desc           string
		readyAfter     int  // the runtime turns ready after this many attempts (0: never)
		cacheReadyAt   int  // the informer cache sees Ready True after this many attempts (0: never)
		noCondition    bool // the cached Node has no Ready condition
		patchFailures  int
		wantAttempts   int
		wantTook       time.Duration
		wantPatches    int
		wantRuntimeUps int
		wantResults    []string // the Result of each OnSync, "fast:" for the fast path's own patch
	}{
		{desc: "turns ready after two attempts: the third patches once", readyAfter: 2,
			wantAttempts: 3, wantTook: 200 * time.Millisecond, wantPatches: 1, wantRuntimeUps: 3, wantResults: []string{"fast:patched"}},
		{desc: "already ready in the cache: no patch", cacheReadyAt: 2,
			wantAttempts: 3, wantTook: 200 * time.Millisecond, wantRuntimeUps: 2},
		{desc: "never ready: gives up after 120 s without a patch",
			wantAttempts: 1201, wantTook: 120 * time.Second, wantRuntimeUps: 1200},
		{desc: "no Ready condition yet: waits without refreshing the runtime, then gives up", noCondition: true,
			wantAttempts: 1201, wantTook: 120 * time.Second},
		{desc: "ready, the fast patch fails: a full sync patches", readyAfter: 1, patchFailures: 1,
			wantAttempts: 2, wantTook: 100 * time.Millisecond, wantPatches: 2, wantRuntimeUps: 2, wantResults: []string{"patched"}},
		{desc: "ready, every patch fails: the full sync's 5 tries, then done", readyAfter: 1, patchFailures: 100,
			wantAttempts: 2, wantTook: 100 * time.Millisecond, wantPatches: 1 + NodeStatusUpdateRetry, wantRuntimeUps: 2, wantResults: []string{"error"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				cached := notReadyNode()
				if tc.noCondition {
					cached.Status.Conditions = nil
				}
				w := newWorld(t, worldOpts{inAPI: cached, inLister: cached, rand: 0.5, bubble: true})
				w.set(func(w *world) { w.runtimeErr = errors.New("container runtime network not ready") })
				if tc.noCondition {
					// The setters would say Ready: the fast path must still not run them.
					w.set(func(w *world) { w.runtimeErr = nil })
				}
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
				attempts, took := runFast(ctx, w, func(attempt int) {
					if attempt == tc.readyAfter {
						w.set(func(w *world) { w.runtimeErr = nil })
					}
					if attempt == tc.cacheReadyAt {
						n := cached.DeepCopy()
						n.Status.Conditions[0].Status = v1.ConditionTrue
						if err := w.indexer.Update(n); err != nil {
							t.Fatal(err)
						}
					}
				})
				if attempts != tc.wantAttempts || took != tc.wantTook {
					t.Errorf("%d attempts in %v, want %d in %v", attempts, took, tc.wantAttempts, tc.wantTook)
				}
				if patches != tc.wantPatches {
					t.Errorf("%d patches, want %d", patches, tc.wantPatches)
				}
				if w.runtimeUps != tc.wantRuntimeUps {
					t.Errorf("UpdateRuntimeUp called %d times, want %d", w.runtimeUps, tc.wantRuntimeUps)
				}
				var results []string
				for _, r := range w.takeSyncs() {
					s := string(r.Result)
					if r.Fast {
						s = "fast:" + s
						if r.Try != 1 || !r.Patched || r.Node == nil {
							t.Errorf("fast result %+v", r)
						}
					}
					results = append(results, s)
				}
				if join(results) != join(tc.wantResults) {
					t.Errorf("OnSync %v, want %v", results, tc.wantResults)
				}
				if tc.wantPatches > tc.patchFailures {
					_, ready := getReady(w.apiNode())
					if ready == nil || ready.Status != v1.ConditionTrue {
						t.Errorf("Ready in the API server = %+v, want True", ready)
					}
				}
				if tc.wantPatches == 0 {
					if got := w.actions(); len(got) != 0 {
						t.Errorf("API calls %v, want none", got)
					}
				}
			})
		})
	}
}

// TestFastStatusUpdateOnceCancel: it returns at once when the context ends.
func TestFastStatusUpdateOnceCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		w := newWorld(t, worldOpts{inAPI: notReadyNode(), inLister: notReadyNode(), bubble: true})
		w.set(func(w *world) { w.runtimeErr = errors.New("container runtime not ready") })
		start := time.Now()
		done := make(chan struct{})
		go func() { fastStatusUpdateOnce(ctx, w); close(done) }()
		synctest.Wait()
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("FastStatusUpdateOnce did not return after cancel")
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("returned after %v, want at once", took)
		}
	})
}

// TestHungRuntimeDoesNotBlockSync: the fast start-up update calls UpdateRuntimeUp holding no lock, so
// a runtime that does not answer delays the fast path only, and SyncNodeStatus still runs (the
// kubelet's fastNodeStatusUpdate holds syncNodeStatusMux across updateRuntimeUp). Not in a synctest
// bubble: a goroutine waiting for a sync.Mutex is not durably blocked, so there the regression would
// hang the bubble instead of failing; channels with a generous real-time bound (no polling) instead.
func TestHungRuntimeDoesNotBlockSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w := newWorld(t, worldOpts{inAPI: notReadyNode(), inLister: notReadyNode(), rand: 0.5,
		updateRuntimeUp: func(ctx context.Context) {
			once.Do(func() { close(entered) })
			select {
			case <-release:
			case <-ctx.Done():
			}
		}})
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	fastDone := make(chan struct{})
	go func() { fastStatusUpdateOnce(ctx, w); close(fastDone) }()
	wait(entered, "the fast path to call UpdateRuntimeUp")

	syncDone := make(chan struct{})
	go func() { w.sync(ctx); close(syncDone) }()
	wait(syncDone, "SyncNodeStatus while the fast path's UpdateRuntimeUp hangs")
	if got := w.results(); join(got) != "patched" {
		t.Errorf("sync during the hung runtime call: OnSync %v, want patched", got)
	}

	// The runtime answers: the fast path goes on from the cached (NotReady) Node and patches once.
	close(release)
	wait(fastDone, "the fast path to finish after the runtime answered")
	syncs := w.takeSyncs()
	if len(syncs) != 1 || !syncs[0].Fast || syncs[0].Result != ResultPatched {
		t.Errorf("fast path OnSync %+v, want one fast patch", syncs)
	}
}

func TestNew(t *testing.T) {
	lister := corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	client := fake.NewClientset()
	nc := nodecache.New(nil).Node(nodeName)
	funcs := nodestatus.NewFuncs(nil)
	valid := Config{Client: client, Lister: lister, Cache: nc, Funcs: funcs, NodeName: nodeName, UpdateFrequency: time.Second, ReportFrequency: time.Minute}
	for name, mutate := range map[string]func(*Config){
		"no Client":            func(c *Config) { c.Client = nil },
		"no Lister":            func(c *Config) { c.Lister = nil },
		"no Cache":             func(c *Config) { c.Cache = nil },
		"no Funcs":             func(c *Config) { c.Funcs = nil },
		"no NodeName":          func(c *Config) { c.NodeName = "" },
		"no UpdateFrequency":   func(c *Config) { c.UpdateFrequency = 0 },
		"no ReportFrequency":   func(c *Config) { c.ReportFrequency = 0 },
		"negative frequencies": func(c *Config) { c.UpdateFrequency, c.ReportFrequency = -time.Second, -time.Second },
	} {
		cfg := valid
		mutate(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	s, err := New(valid)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.calculateDelay(); d.Abs() > 30*time.Second {
		t.Errorf("default Rand delay %v", d)
	}
	if s.LastResult() != nil || !s.LastSync().IsZero() {
		t.Errorf("before any sync: LastResult %v, LastSync %v", s.LastResult(), s.LastSync())
	}
	_ = fmt.Sprint(s)
}

// TestUnkeptFieldNotPatchedAgain: an API server that drops a status field it does not know (here
// nodeInfo.runningInUserNamespace, as kube-apiserver before 1.37) gets it once; later syncs that compute
// the same status do not patch it again until something else changes or the report frequency is due.
func TestUnkeptFieldNotPatchedAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	userNS := func(_ context.Context, n *v1.Node) error {
		n.Status.NodeInfo.RunningInUserNamespace = ptr.To(false)
		return nil
	}
	w := newWorld(t, worldOpts{inAPI: baseNode(), inLister: baseNode(), rand: 0.5,
		extra: []nodestatus.Func{{Name: "UserNS", Setter: userNS}}})
	patch := core.ObjectReaction(w.client.Tracker())
	w.client.PrependReactor("patch", "nodes", func(a core.Action) (bool, runtime.Object, error) {
		_, obj, err := patch(a)
		if err != nil {
			return true, nil, err
		}
		n := obj.(*v1.Node)
		n.Status.NodeInfo.RunningInUserNamespace = nil // an older API server decodes without it
		if err := w.client.Tracker().Update(nodesGVR, n, ""); err != nil {
			return true, nil, err
		}
		return true, n, nil
	})
	steps := []struct {
		desc        string
		advance     time.Duration
		change      func(w *world)
		wantActions []string
	}{
		{desc: "first sync: patched (the field is dropped)", wantActions: []string{"patch/status"}},
		{desc: "same status again: nothing new to say", advance: 10 * time.Second},
		{desc: "and again", advance: 10 * time.Second},
		{desc: "a real change is patched", advance: 10 * time.Second, change: func(w *world) { w.kernel = "6.2.0" }, wantActions: []string{"patch/status"}},
		{desc: "then quiet again", advance: 10 * time.Second},
		{desc: "the report frequency still reports", advance: 5 * time.Minute, wantActions: []string{"patch/status"}},
	}
	for i, s := range steps {
		w.step(s.advance)
		if s.change != nil {
			w.set(s.change)
		}
		w.sync(ctx)
		if got := w.actions(); join(got) != join(s.wantActions) {
			t.Errorf("step %d (%s): actions %v, want %v", i, s.desc, got, s.wantActions)
		}
		w.takeSyncs()
		w.syncInformer()
	}
	if n := w.apiNode(); n.Status.NodeInfo.KernelVersion != "6.2.0" || n.Status.NodeInfo.RunningInUserNamespace != nil {
		t.Errorf("nodeInfo in the API server: %+v", n.Status.NodeInfo)
	}
}

// fastStatusUpdateOnce is the kubelet's fastStatusUpdateOnce loop, as the controller's fast-update
// step runs it: every FastStatusUpdateTick until finished or ctx ends, each tick giving up after
// FastStatusUpdateGrace, asking CachedReady, refreshing the runtime (w.updateRuntimeUp), then
// FastNodeStatusUpdate, whose result it records.
func fastStatusUpdateOnce(ctx context.Context, w *world) {
	s := w.syncer
	deadline := s.cfg.Clock.Now().Add(FastStatusUpdateGrace)
	for {
		if !s.cfg.Clock.Now().Before(deadline) {
			return
		}
		if ready, ok := s.CachedReady(); ok {
			if ready {
				return
			}
			w.updateRuntimeUp(ctx)
			if ctx.Err() != nil {
				return
			}
			done, r := s.FastNodeStatusUpdate(ctx)
			if r != nil {
				w.record(*r)
			}
			if done {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Clock.After(FastStatusUpdateTick):
		}
	}
}
