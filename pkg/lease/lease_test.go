package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
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
	}{
		{desc: "owner from the lister's Node", inLister: node("uid-1"), wantOwners: ownerRef("uid-1")},
		{desc: "already pointing at the Node", inLister: node("uid-1"), owners: ownerRef("uid-1"), wantOwners: ownerRef("uid-1")},
		{desc: "re-pointed when the Node's UID changed", inLister: node("uid-2"), owners: ownerRef("uid-1"), wantOwners: ownerRef("uid-2")},
		{desc: "not in the cache: one GET", inAPI: node("uid-3"), wantOwners: ownerRef("uid-3"), wantGets: 1},
		{desc: "no lister: one GET", noLister: true, inAPI: node("uid-3"), wantOwners: ownerRef("uid-3"), wantGets: 1},
		{desc: "no Node anywhere: no owner, no error", wantOwners: nil, wantGets: 1},
		{desc: "GET fails: no owner, no error", getErr: errors.New("connection refused"), wantOwners: nil, wantGets: 1},
		{desc: "not in the cache but already owned: no GET, owner kept", owners: ownerRef("uid-1"), wantOwners: ownerRef("uid-1")},
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
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: Namespace, OwnerReferences: tc.owners}}
			if err := r.setNodeOwner(lease); err != nil {
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

// waitForLease polls (generously, in real time) until the Lease in kube-node-lease satisfies ok.
func waitForLease(ctx context.Context, t *testing.T, client *fake.Clientset, ok func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil && ok(l) {
			return l
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("get lease: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease never satisfied the condition; last %+v, %v", l, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRenewal: Run creates the Lease in kube-node-lease (name and holder = node name, the configured
// duration, renewTime from the clock, owner = the Node) and renews it, as the kubelet's lease controller.
func TestRenewal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clk := testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	client := fake.NewClientset(node("uid-1"))
	// 1 s leases renew every 250 ms of real time (the lease controller's loop uses wait.JitterUntil).
	r, err := New(Config{Client: client, Lister: listerWith(t, node("uid-1")), NodeName: nodeName, LeaseDurationSeconds: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	first := waitForLease(ctx, t, client, func(*coordinationv1.Lease) bool { return true })
	if first.Namespace != "kube-node-lease" || first.Spec.HolderIdentity == nil || *first.Spec.HolderIdentity != nodeName {
		t.Errorf("lease %s/%s holder %v, want kube-node-lease/%s held by %s", first.Namespace, first.Name, first.Spec.HolderIdentity, nodeName, nodeName)
	}
	if first.Spec.LeaseDurationSeconds == nil || *first.Spec.LeaseDurationSeconds != 1 {
		t.Errorf("leaseDurationSeconds = %v, want 1", first.Spec.LeaseDurationSeconds)
	}
	if first.Spec.RenewTime == nil || !first.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Errorf("renewTime = %v, want the clock's %v", first.Spec.RenewTime, clk.Now())
	}
	if !apiequality.Semantic.DeepEqual(ownerRef("uid-1"), first.OwnerReferences) {
		t.Errorf("owners: %s", diff.Diff(ownerRef("uid-1"), first.OwnerReferences))
	}

	clk.Step(10 * time.Second)
	want := clk.Now()
	renewed := waitForLease(ctx, t, client, func(l *coordinationv1.Lease) bool {
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(want)
	})
	if !apiequality.Semantic.DeepEqual(ownerRef("uid-1"), renewed.OwnerReferences) {
		t.Errorf("owners after renewal: %s", diff.Diff(ownerRef("uid-1"), renewed.OwnerReferences))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestRenewalWithoutNode: the Lease is written before the Node exists, with no owner (the kubelet
// would hold the Lease back until it could GET the Node).
func TestRenewalWithoutNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	r, err := New(Config{Client: client, Lister: listerWith(t), NodeName: nodeName, LeaseDurationSeconds: 1,
		Clock: testingclock.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	l := waitForLease(ctx, t, client, func(*coordinationv1.Lease) bool { return true })
	if len(l.OwnerReferences) != 0 {
		t.Errorf("owners = %v, want none without a Node", l.OwnerReferences)
	}
	// Once the Node exists, a later renewal adds the owner.
	if _, err := client.CoreV1().Nodes().Create(ctx, node("uid-9"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForLease(ctx, t, client, func(l *coordinationv1.Lease) bool {
		return apiequality.Semantic.DeepEqual(ownerRef("uid-9"), l.OwnerReferences)
	})
	cancel()
	<-done
}
