package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const nodeName = "node-1"

func node(uid string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: types.UID(uid)}}
}

func ownerRef(uid string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: types.UID(uid)}}
}

func listerWith(t *testing.T, nodes ...*v1.Node) corelisters.NodeLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := indexer.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNodeLister(indexer)
}

// TestSetNodeOwner mirrors the kubelet's SetNodeOwnerFunc (owner reference to the Node, set once the
// Node exists) and its extension: re-pointed when the Node was recreated with a new UID.
func TestSetNodeOwner(t *testing.T) {
	cases := []struct {
		desc       string
		inLister   *v1.Node
		noLister   bool
		inAPI      *v1.Node
		getErr     error
		owners     []metav1.OwnerReference
		wantOwners []metav1.OwnerReference
		wantGets   int
		notYet     bool // Step is told the Node is not registered yet
	}{
		{desc: "owner from the lister's Node", inLister: node("uid-1"), wantOwners: ownerRef("uid-1")},
		{desc: "already pointing at the Node", inLister: node("uid-1"), owners: ownerRef("uid-1"), wantOwners: ownerRef("uid-1")},
		{desc: "re-pointed when the Node's UID changed", inLister: node("uid-2"), owners: ownerRef("uid-1"), wantOwners: ownerRef("uid-2")},
		{desc: "not in the cache: one GET", inAPI: node("uid-3"), wantOwners: ownerRef("uid-3"), wantGets: 1},
		{desc: "no lister: one GET", noLister: true, inAPI: node("uid-3"), wantOwners: ownerRef("uid-3"), wantGets: 1},
		{desc: "no Node anywhere: no owner, no error", wantOwners: nil, wantGets: 1},
		{desc: "GET fails: no owner, no error", getErr: errors.New("connection refused"), wantOwners: nil, wantGets: 1},
		{desc: "not in the cache but already owned: no GET, owner kept", owners: ownerRef("uid-1"), wantOwners: ownerRef("uid-1")},
		{desc: "before registration: no GET for a Node that does not exist yet", notYet: true, inAPI: node("uid-3"), wantOwners: nil},
		{desc: "before registration, in the cache (a restart): owner", notYet: true, inLister: node("uid-1"), wantOwners: ownerRef("uid-1")},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			var objs []runtime.Object
			if tc.inAPI != nil {
				objs = append(objs, tc.inAPI)
			}
			client := fake.NewClientset(objs...)
			if tc.getErr != nil {
				client.PrependReactor("get", "nodes", func(core.Action) (bool, runtime.Object, error) { return true, nil, tc.getErr })
			}
			cfg := Config{Client: client, NodeName: nodeName, LeaseDurationSeconds: 40}
			if !tc.noLister {
				if tc.inLister != nil {
					cfg.Lister = listerWith(t, tc.inLister)
				} else {
					cfg.Lister = listerWith(t)
				}
			}
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r.registered = !tc.notYet
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: Namespace, OwnerReferences: tc.owners}}
			if err := r.setNodeOwner(t.Context(), lease); err != nil {
				t.Fatalf("setNodeOwner: %v (an error would block the Lease write)", err)
			}
			if !apiequality.Semantic.DeepEqual(tc.wantOwners, lease.OwnerReferences) {
				t.Errorf("owners: %s", diff.Diff(tc.wantOwners, lease.OwnerReferences))
			}
			gets := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "get" {
					gets++
				}
			}
			if gets != tc.wantGets {
				t.Errorf("%d GETs, want %d", gets, tc.wantGets)
			}
		})
	}
}

// TestRenewInterval: a quarter of the lease duration (the kubelet's renewIntervalFraction 0.25).
func TestRenewInterval(t *testing.T) {
	for seconds, want := range map[int32]time.Duration{40: 10 * time.Second, 10: 2500 * time.Millisecond, 1: 250 * time.Millisecond, 3600: 15 * time.Minute} {
		r, err := New(Config{Client: fake.NewClientset(), NodeName: nodeName, LeaseDurationSeconds: seconds})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.RenewInterval(); got != want {
			t.Errorf("RenewInterval for %ds = %v, want %v", seconds, got, want)
		}
	}
}

func TestNew(t *testing.T) {
	for _, cfg := range []Config{
		{NodeName: nodeName, LeaseDurationSeconds: 40},
		{Client: fake.NewClientset(), LeaseDurationSeconds: 40},
		{Client: fake.NewClientset(), NodeName: nodeName},
		{Client: fake.NewClientset(), NodeName: nodeName, LeaseDurationSeconds: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

// recorder is an Observer plus the OnRepeatedHeartbeatFailure hook, recording every call in order.
type recorder struct {
	mu        sync.Mutex
	events    []string        // "renewal", "error:<reason>", "repeated"
	durations []time.Duration // of each renewal
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) ObserveLeaseRenewal(d time.Duration) {
	r.mu.Lock()
	r.durations = append(r.durations, d)
	r.mu.Unlock()
	r.add("renewal")
}

func (r *recorder) ObserveLeaseError(reason string) { r.add("error:" + reason) }

// take returns the events since the last call.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

// hook wires the recorder into cfg.
func (r *recorder) hook(cfg *Config) {
	cfg.Observer = r
	cfg.OnRepeatedHeartbeatFailure = func() { r.add("repeated") }
}

// TestObservedLeases drives the decorated LeaseInterface the lease controller is given, call by call:
// Create and Update are renewals (duration and time recorded, holder kept); a failed write or read
// is an error with its API reason, or Transport when the error is not from the API server; a Get
// answered NotFound (the controller looking for a Lease that does not exist yet) is not an error.
func TestObservedLeases(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	lease := func() *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: Namespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(nodeName)},
		}
	}
	type call struct {
		verb string // create, update, get
		err  error  // the API server's answer (nil: success)
	}
	cases := []struct {
		desc       string
		existing   bool // the Lease exists before the calls
		calls      []call
		wantEvents []string
		wantStatus Status // RenewInterval is not compared
	}{
		{desc: "create: a renewal", calls: []call{{verb: "create"}},
			wantEvents: []string{"renewal"}, wantStatus: Status{LastRenew: start.Add(20 * time.Millisecond), Holder: nodeName}},
		{desc: "update: a renewal", existing: true, calls: []call{{verb: "update"}},
			wantEvents: []string{"renewal"}, wantStatus: Status{LastRenew: start.Add(20 * time.Millisecond), Holder: nodeName}},
		{desc: "get NotFound: not an error", calls: []call{{verb: "get"}}},
		{desc: "get found: nothing recorded", existing: true, calls: []call{{verb: "get"}}},
		{desc: "update Forbidden", existing: true, calls: []call{{verb: "update", err: apierrors.NewForbidden(gr, nodeName, errors.New("no RBAC"))}},
			wantEvents: []string{"error:Forbidden"},
			wantStatus: Status{Errors: 1, LastError: `leases.coordination.k8s.io "node-1" is forbidden: no RBAC`, ErrorTime: start}},
		{desc: "create with a transport error", calls: []call{{verb: "create", err: errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")}},
			wantEvents: []string{"error:Transport"},
			wantStatus: Status{Errors: 1, LastError: "dial tcp 10.0.0.1:6443: connect: connection refused", ErrorTime: start}},
		{desc: "get Timeout: an error", calls: []call{{verb: "get", err: apierrors.NewTimeoutError("slow", 1)}},
			wantEvents: []string{"error:Timeout"},
			wantStatus: Status{Errors: 1, LastError: "Timeout: slow", ErrorTime: start}},
		{desc: "an API error without a reason: Unknown", existing: true,
			calls:      []call{{verb: "update", err: &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Message: "odd"}}}},
			wantEvents: []string{"error:Unknown"}, wantStatus: Status{Errors: 1, LastError: "odd", ErrorTime: start}},
		{desc: "failures then a renewal: errors counted, last error kept", existing: true,
			calls:      []call{{verb: "update", err: apierrors.NewServiceUnavailable("down")}, {verb: "update", err: apierrors.NewConflict(gr, nodeName, errors.New("changed"))}, {verb: "update"}},
			wantEvents: []string{"error:ServiceUnavailable", "error:Conflict", "renewal"},
			wantStatus: Status{LastRenew: start.Add(20 * time.Millisecond), Holder: nodeName, Errors: 2,
				LastError: `Operation cannot be fulfilled on leases.coordination.k8s.io "node-1": changed`, ErrorTime: start}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []runtime.Object
			if tc.existing {
				objs = append(objs, lease())
			}
			client := fake.NewClientset(objs...)
			clk := testingclock.NewFakeClock(start)
			var errs []error
			client.PrependReactor("*", "leases", func(a core.Action) (bool, runtime.Object, error) {
				err := errs[0]
				errs = errs[1:]
				if err != nil {
					return true, nil, err
				}
				clk.Step(20 * time.Millisecond) // a successful call takes 20 ms
				return false, nil, nil
			})
			rec := &recorder{}
			cfg := Config{Client: client, NodeName: nodeName, LeaseDurationSeconds: 40, Clock: clk}
			rec.hook(&cfg)
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			leases := r.leases
			for _, c := range tc.calls {
				errs = append(errs, c.err)
				clk.SetTime(start)
				var err error
				switch c.verb {
				case "create":
					_, err = leases.Create(ctx, lease(), metav1.CreateOptions{})
				case "update":
					_, err = leases.Update(ctx, lease(), metav1.UpdateOptions{})
				case "get":
					_, err = leases.Get(ctx, nodeName, metav1.GetOptions{})
				}
				if c.err != nil && err != c.err {
					t.Errorf("%s returned %v, want the API server's %v unchanged", c.verb, err, c.err)
				}
			}
			got := rec.take()
			if strings.Join(got, ",") != strings.Join(tc.wantEvents, ",") {
				t.Errorf("events %v, want %v", got, tc.wantEvents)
			}
			// The step's Result: Renewed when the last call was a successful write, the last failure.
			wantRenewed := len(got) > 0 && got[len(got)-1] == "renewal"
			wantFailure := tc.wantStatus.Errors > 0
			if r.result.Renewed != wantRenewed || (r.result.Failure != nil) != wantFailure {
				t.Errorf("Result %+v, want Renewed %v and a Failure %v", r.result, wantRenewed, wantFailure)
			}
			for i, d := range rec.durations {
				if d != 20*time.Millisecond {
					t.Errorf("renewal %d observed as taking %v, want 20ms", i, d)
				}
			}
			st := r.Status()
			if st.RenewInterval != 10*time.Second {
				t.Errorf("Status().RenewInterval = %v, want 10s", st.RenewInterval)
			}
			w := tc.wantStatus
			if !st.LastRenew.Equal(w.LastRenew) || st.Holder != w.Holder || st.Errors != w.Errors || st.LastError != w.LastError || !st.ErrorTime.Equal(w.ErrorTime) {
				t.Errorf("Status() = %+v, want %+v", st, w)
			}
			if !r.LastRenew().Equal(tc.wantStatus.LastRenew) {
				t.Errorf("LastRenew() = %v, want %v", r.LastRenew(), tc.wantStatus.LastRenew)
			}
		})
	}
}

// TestStepResultFailures: each failed Lease write is the Result's Failure, "lease <reason>: <error>"
// with the call's start, and a successful write after it is Renewed with the failure still reported
// (the process's heartbeat tracker counts both, in that order).
func TestStepResultFailures(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: Namespace}})
	var fail error
	client.PrependReactor("update", "leases", func(core.Action) (bool, runtime.Object, error) {
		if fail != nil {
			return true, nil, fail
		}
		return false, nil, nil
	})
	start := time.Unix(1000, 0)
	r, err := New(Config{Client: client, NodeName: nodeName, LeaseDurationSeconds: 40, Clock: testingclock.NewFakeClock(start)})
	if err != nil {
		t.Fatal(err)
	}
	timeout := apierrors.NewTimeoutError("request timed out", 1)
	steps := []struct {
		errs        []error // the answers to the step's updates, in order
		wantRenewed bool
		wantFailure string
	}{
		{errs: []error{nil}, wantRenewed: true},
		{errs: []error{timeout}, wantFailure: "lease Timeout: Timeout: request timed out"},
		{errs: []error{errors.New("EOF")}, wantFailure: "lease Transport: EOF"},
		{errs: []error{timeout, nil}, wantRenewed: true, wantFailure: "lease Timeout: Timeout: request timed out"},
	}
	for i, s := range steps {
		r.result = Result{}
		for _, err := range s.errs {
			fail = err
			_, _ = r.leases.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: Namespace}}, metav1.UpdateOptions{})
			if err != nil {
				r.result.Renewed = false // as the step goes on after a failure
			}
		}
		got := r.result
		failure := ""
		if got.Failure != nil {
			failure = got.Failure.Reason
			if !got.Failure.Start.Equal(start) {
				t.Errorf("step %d: failure started %v, want %v", i, got.Failure.Start, start)
			}
		}
		if got.Renewed != s.wantRenewed || failure != s.wantFailure || got.Attempted() != true {
			t.Errorf("step %d: Result Renewed %v Failure %q Attempted %v, want %v %q true", i, got.Renewed, failure, got.Attempted(), s.wantRenewed, s.wantFailure)
		}
	}
	if st := r.Status(); st.Errors != 3 {
		t.Errorf("Status().Errors = %d, want 3", st.Errors)
	}
}

// getLease returns the node's Lease from the fake API server, or nil.
func getLease(ctx context.Context, t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return l
}

// startRun starts r.Run in a goroutine; stop cancels its context and waits for Run to return.
func startRun(ctx context.Context, r *Renewer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	wake := make(chan struct{}, 1)
	r.cfg.Wake = func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(done)
		for { // as the queue runs the step
			d := r.Step(ctx, true).Next
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-r.cfg.Clock.After(d):
			case <-wake:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// TestRenewal: Run creates the Lease in kube-node-lease at once (name and holder = node name, the
// configured duration, renewTime from the clock, owner = the Node) and renews it every quarter of
// the duration with up to 4 % jitter, as the kubelet's lease controller; Run returns when ctx ends.
func TestRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		client := fake.NewClientset(node("uid-1"))
		rec := &recorder{}
		cfg := Config{Client: client, Lister: listerWith(t, node("uid-1")), NodeName: nodeName, LeaseDurationSeconds: 40, Clock: clock.RealClock{}}
		rec.hook(&cfg)
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		stop := startRun(ctx, r)
		synctest.Wait()

		first := getLease(ctx, t, client)
		if first == nil {
			t.Fatal("no Lease right after Run started")
		}
		if first.Namespace != "kube-node-lease" || first.Spec.HolderIdentity == nil || *first.Spec.HolderIdentity != nodeName {
			t.Errorf("lease %s/%s holder %v, want kube-node-lease/%s held by %s", first.Namespace, first.Name, first.Spec.HolderIdentity, nodeName, nodeName)
		}
		if first.Spec.LeaseDurationSeconds == nil || *first.Spec.LeaseDurationSeconds != 40 {
			t.Errorf("leaseDurationSeconds = %v, want 40", first.Spec.LeaseDurationSeconds)
		}
		if first.Spec.RenewTime == nil || !first.Spec.RenewTime.Time.Equal(start) {
			t.Errorf("renewTime = %v, want %v", first.Spec.RenewTime, start)
		}
		if !apiequality.Semantic.DeepEqual(ownerRef("uid-1"), first.OwnerReferences) {
			t.Errorf("owners: %s", diff.Diff(ownerRef("uid-1"), first.OwnerReferences))
		}
		if got := rec.take(); strings.Join(got, ",") != "renewal" {
			t.Errorf("events after the first renewal %v, want one renewal", got)
		}
		if st := r.Status(); !st.LastRenew.Equal(start) || st.Holder != nodeName || st.Errors != 0 {
			t.Errorf("Status() %+v", st)
		}

		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := rec.take(); len(got) != 0 {
			t.Errorf("events before the renew interval: %v", got)
		}
		time.Sleep(400*time.Millisecond + time.Nanosecond)
		synctest.Wait()
		renewed := getLease(ctx, t, client)
		if got := rec.take(); strings.Join(got, ",") != "renewal" {
			t.Errorf("events after one renew interval %v, want one renewal", got)
		}
		if renewed.Spec.RenewTime == nil || !renewed.Spec.RenewTime.Time.Equal(r.LastRenew()) || r.LastRenew().Sub(start) < 10*time.Second {
			t.Errorf("renewTime %v, LastRenew %v: want equal, 10 s to 10.4 s after %v", renewed.Spec.RenewTime, r.LastRenew(), start)
		}
		if !apiequality.Semantic.DeepEqual(ownerRef("uid-1"), renewed.OwnerReferences) {
			t.Errorf("owners after renewal: %s", diff.Diff(ownerRef("uid-1"), renewed.OwnerReferences))
		}
		stop() // a Run that did not return would deadlock the bubble
	})
}

// TestRenewalFailuresAndRecovery runs the lease controller against an API server that refuses Lease
// updates for one renew interval: the Observer sees each failed write with its reason and the renewal
// after; OnRepeatedHeartbeatFailure runs after each failed update but the first of a round; Status
// counts the errors and keeps the last one.
func TestRenewalFailuresAndRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		client := fake.NewClientset(node("uid-1"))
		var mu sync.Mutex
		var refuse error
		client.PrependReactor("update", "leases", func(core.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			return refuse != nil, nil, refuse
		})
		rec := &recorder{}
		cfg := Config{Client: client, Lister: listerWith(t, node("uid-1")), NodeName: nodeName, LeaseDurationSeconds: 40, Clock: clock.RealClock{}}
		rec.hook(&cfg)
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := startRun(ctx, r)
		synctest.Wait()
		if got := rec.take(); strings.Join(got, ",") != "renewal" {
			t.Fatalf("first renewal: events %v", got)
		}

		gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
		mu.Lock()
		refuse = apierrors.NewForbidden(gr, nodeName, errors.New("no RBAC"))
		mu.Unlock()
		time.Sleep(10400 * time.Millisecond)
		synctest.Wait()
		// The controller's sync: 5 updates of its latest Lease, then a GET (found) and 5 more updates;
		// OnRepeatedHeartbeatFailure after each failed update but the first of each round.
		var want []string
		for range 2 {
			for i := range 5 {
				want = append(want, "error:Forbidden")
				if i > 0 {
					want = append(want, "repeated")
				}
			}
		}
		if got := rec.take(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("a renewal refused:\n events %v\n want   %v", got, want)
		}
		st := r.Status()
		if st.Errors != 10 || !strings.Contains(st.LastError, "forbidden: no RBAC") || st.ErrorTime.Before(st.LastRenew) {
			t.Errorf("Status() after the refusals: %+v", st)
		}

		mu.Lock()
		refuse = nil
		mu.Unlock()
		time.Sleep(10400 * time.Millisecond)
		synctest.Wait()
		if got := rec.take(); strings.Join(got, ",") != "renewal" {
			t.Errorf("the next renewal: events %v, want renewal", got)
		}
		time.Sleep(10400 * time.Millisecond)
		synctest.Wait()
		if got := rec.take(); strings.Join(got, ",") != "renewal" {
			t.Errorf("a renewal after a renewal: events %v, want renewal only", got)
		}
		if st := r.Status(); st.Errors != 10 || !st.LastRenew.After(st.ErrorTime) {
			t.Errorf("Status() after recovery: %+v", st)
		}
		stop()
	})
}

// TestRenewalWithoutNode: the Lease is written before the Node exists, with no owner (the kubelet
// would hold the Lease back until it could GET the Node); once the Node exists, the next renewal
// adds the owner.
func TestRenewalWithoutNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		client := fake.NewClientset()
		r, err := New(Config{Client: client, Lister: listerWith(t), NodeName: nodeName, LeaseDurationSeconds: 40, Clock: clock.RealClock{}})
		if err != nil {
			t.Fatal(err)
		}
		stop := startRun(ctx, r)
		synctest.Wait()
		l := getLease(ctx, t, client)
		if l == nil || len(l.OwnerReferences) != 0 {
			t.Fatalf("lease %+v, want one without owners", l)
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node("uid-9"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10400 * time.Millisecond)
		synctest.Wait()
		if l := getLease(ctx, t, client); !apiequality.Semantic.DeepEqual(ownerRef("uid-9"), l.OwnerReferences) {
			t.Errorf("owners after the Node appeared: %s", diff.Diff(ownerRef("uid-9"), l.OwnerReferences))
		}
		stop()
	})
}

// TestDuplicateInstance: the Lease found at start, or after a conflict, names another instance. It
// is a duplicate only when that instance renewed after this Renewer started and within the Lease's
// duration; the last renewal of an earlier run (a restart, a rollout) is not, however recent.
func TestDuplicateInstance(t *testing.T) {
	start := time.Unix(10_000, 0)
	tests := []struct {
		desc    string
		holder  string        // AnnotationInstance on the stored Lease
		renewed time.Duration // its renewTime, relative to the Renewer's start
		now     time.Duration // when the Lease is read, relative to the start
		want    string        // Status().Duplicate
	}{
		{desc: "predecessor renewed 1 s before the start", holder: "old", renewed: -time.Second, now: time.Second},
		{desc: "predecessor renewed 39 s before the start", holder: "old", renewed: -39 * time.Second, now: 0},
		{desc: "another instance renewed after the start", holder: "other", renewed: 5 * time.Second, now: 6 * time.Second, want: "other"},
		{desc: "another instance renewed after the start, longer ago than the duration", holder: "other", renewed: time.Second, now: 42 * time.Second},
		{desc: "this instance's own renewal", holder: "me", renewed: 5 * time.Second, now: 6 * time.Second},
		{desc: "no instance on the Lease", renewed: 5 * time.Second, now: 6 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			stored := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: Namespace},
				Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: start.Add(tc.renewed)}},
			}
			if tc.holder != "" {
				stored.Annotations = map[string]string{AnnotationInstance: tc.holder}
			}
			clk := testingclock.NewFakeClock(start)
			r, err := New(Config{Client: fake.NewClientset(stored), NodeName: nodeName, LeaseDurationSeconds: 40,
				Instance: "me", Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			clk.SetTime(start.Add(tc.now))
			res := r.Step(ctx, true) // finds the stored Lease (ensureLease), then updates it
			if got := r.Status().Duplicate; got != tc.want {
				t.Errorf("Status().Duplicate = %q, want %q", got, tc.want)
			}
			if res.Duplicate != tc.want {
				t.Errorf("Step's Result.Duplicate = %q, want %q", res.Duplicate, tc.want)
			}
			if l := getLease(ctx, t, r.cfg.Client.(*fake.Clientset)); l.Annotations[AnnotationInstance] != "me" {
				t.Errorf("Lease written with instance %q, want me", l.Annotations[AnnotationInstance])
			}
		})
	}
}

// TestCancelledStepLogsNoError: a Node stopped (its step's context cancelled) while a Lease write is
// in flight ends the step quietly: Next 0, no Failure, nothing at error level ("Failed to update
// lease … context canceled", "Will retry updating lease … failed 5 attempts" were both misleading:
// one attempt, no retry).
func TestCancelledStepLogsNoError(t *testing.T) {
	for _, tc := range []struct {
		desc string
		verb string // the call in flight when the context is cancelled
	}{
		{desc: "an update from the last Lease written", verb: "update"},
		{desc: "the first GET", verb: "get"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
			defer cancel()
			client := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: Namespace}})
			inFlight := false
			client.PrependReactor(tc.verb, "leases", func(core.Action) (bool, runtime.Object, error) {
				if !inFlight {
					return false, nil, nil
				}
				cancel() // the Node is stopped while the call is in flight
				return true, nil, context.Canceled
			})
			r, err := New(Config{Client: client, NodeName: nodeName, LeaseDurationSeconds: 40, Clock: testingclock.NewFakeClock(time.Unix(1000, 0))})
			if err != nil {
				t.Fatal(err)
			}
			if tc.verb == "update" {
				if res := r.Step(ctx, true); !res.Renewed { // a first renewal: the next updates from it
					t.Fatalf("first Step: %+v", res)
				}
			}
			inFlight = true
			res := r.Step(ctx, true)
			if res.Next != 0 || res.Failure != nil {
				t.Errorf("cancelled Step = %+v, want Next 0 and no Failure", res)
			}
			if errs := logger.GetSink().(ktesting.Underlier).GetBuffer().String(); strings.Contains(errs, "ERROR") {
				t.Errorf("a cancelled step logged at error level:\n%s", errs)
			}
		})
	}
}
