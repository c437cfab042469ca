package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	leasecontroller "k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
)

// setNodeOwnerFunc is the kubelet's (pkg/kubelet/nodelease/... setNodeOwnerFunc): until the Lease
// has an owner, GET the Node and point the owner reference at it. Both implementations get it as
// their post-process hook, so their Node GETs are compared too.
func setNodeOwnerFunc(c kubernetes.Interface, nodeName string) func(*coordinationv1.Lease) error {
	return func(lease *coordinationv1.Lease) error {
		if len(lease.OwnerReferences) == 0 {
			if node, err := c.CoreV1().Nodes().Get(context.TODO(), nodeName, metav1.GetOptions{}); err == nil {
				lease.OwnerReferences = []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: nodeName, UID: node.UID,
				}}
			}
		}
		return nil
	}
}

// parityWorld is one fake API server and the knobs a scenario turns while a Lease renewer runs.
type parityWorld struct {
	client *fake.Clientset

	mu          sync.Mutex
	log         []string
	failUpdates int   // the next n Lease updates fail with failWith
	failGets    int   // the next n Lease gets fail with failWith
	failCreates int   // the next n Lease creates fail with failWith
	conflicts   int   // the next n Lease updates fail with a Conflict
	failWith    error // the error of the failures above
}

func newParityWorld() *parityWorld {
	w := &parityWorld{client: fake.NewClientset(), failWith: apierrors.NewServiceUnavailable("etcd leader changed")}
	w.client.PrependReactor("*", "*", func(a core.Action) (bool, runtime.Object, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		entry := a.GetVerb() + " " + a.GetResource().Resource
		var err error
		if a.GetResource().Resource == "leases" {
			switch a.GetVerb() {
			case "update":
				switch {
				case w.conflicts > 0:
					w.conflicts--
					err = apierrors.NewConflict(coordinationv1.Resource("leases"), nodeName, fmt.Errorf("changed"))
				case w.failUpdates > 0:
					w.failUpdates--
					err = w.failWith
				}
			case "get":
				if w.failGets > 0 {
					w.failGets--
					err = w.failWith
				}
			case "create":
				if w.failCreates > 0 {
					w.failCreates--
					err = w.failWith
				}
			}
			if o, ok := a.(interface{ GetObject() runtime.Object }); ok {
				if l, ok := o.GetObject().(*coordinationv1.Lease); ok {
					owner := "none"
					if len(l.OwnerReferences) > 0 {
						owner = string(l.OwnerReferences[0].UID)
					}
					entry += fmt.Sprintf(" holder=%s duration=%d owner=%s", *l.Spec.HolderIdentity, *l.Spec.LeaseDurationSeconds, owner)
				}
			}
		}
		if err != nil {
			entry += " -> " + string(apierrors.ReasonForError(err))
		}
		w.log = append(w.log, entry)
		if err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	return w
}

func (w *parityWorld) record(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, s)
}

func (w *parityWorld) set(f func(w *parityWorld)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

// parityEvent is what a scenario does at a time after the renewer started.
type parityEvent struct {
	at time.Duration
	do func(ctx context.Context, w *parityWorld)
}

// renewerImpl runs one implementation over w until ctx ends.
type renewerImpl func(ctx context.Context, w *parityWorld, onRepeated func())

func upstreamImpl(ctx context.Context, w *parityWorld, onRepeated func()) {
	leasecontroller.NewController(clock.RealClock{}, w.client, nodeName, 40, onRepeated, 10*time.Second,
		nodeName, Namespace, setNodeOwnerFunc(w.client, nodeName)).Run(ctx)
}

func stepImpl(ctx context.Context, w *parityWorld, onRepeated func()) {
	r, err := New(Config{Client: w.client, NodeName: nodeName, LeaseDurationSeconds: 40, OnRepeatedHeartbeatFailure: onRepeated,
		NewLeasePostProcess: setNodeOwnerFunc(w.client, nodeName), Clock: clock.RealClock{}})
	if err != nil {
		panic(err)
	}
	for { // as node.Queue runs the step: again after the duration it returns
		d := r.Step(ctx, true).Next
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// runParity runs impl for 59 s of a synctest bubble's time with the scenario's events and returns
// every API call and onRepeatedHeartbeatFailure, in order. The window ends before the seventh
// renewal however the 0.04 jitter falls (six periods of at most 10.4 s), so both make the same number.
func runParity(t *testing.T, impl renewerImpl, setup func(*parityWorld), events []parityEvent) []string {
	var log []string
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		w := newParityWorld()
		if setup != nil {
			w.set(setup)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			impl(ctx, w, func() { w.record("onRepeatedHeartbeatFailure") })
		}()
		start := time.Now()
		for _, e := range events {
			time.Sleep(start.Add(e.at).Sub(time.Now()))
			synctest.Wait()
			e.do(ctx, w)
		}
		time.Sleep(start.Add(59 * time.Second).Sub(time.Now()))
		synctest.Wait()
		cancel()
		<-done
		w.mu.Lock()
		log = append([]string(nil), w.log...)
		w.mu.Unlock()
	})
	return log
}

// TestParityWithLeaseController drives the component-helpers lease controller (v0.37.2, the
// kubelet's) and the Renewer's Step through the same scenarios on fake clientsets and compares every
// API call they make, with the Lease each writes (holder, duration, owner), and every
// onRepeatedHeartbeatFailure, in order.
func TestParityWithLeaseController(t *testing.T) {
	registerNode := func(ctx context.Context, w *parityWorld) {
		if err := w.client.Tracker().Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: types.UID("uid-1")}}); err != nil {
			panic(err)
		}
	}
	for _, tc := range []struct {
		name   string
		setup  func(*parityWorld)
		events []parityEvent
	}{
		{name: "no Lease yet, Node registered from the start", events: []parityEvent{{0, registerNode}}},
		{name: "Node not registered yet, then registered", events: []parityEvent{{25 * time.Second, registerNode}}},
		{name: "update conflict", events: []parityEvent{{0, registerNode}, {15 * time.Second, func(_ context.Context, w *parityWorld) {
			w.set(func(w *parityWorld) { w.conflicts = 1 })
		}}}},
		{name: "update conflicts, then the Lease cannot be read for a while", events: []parityEvent{{0, registerNode}, {15 * time.Second, func(_ context.Context, w *parityWorld) {
			w.set(func(w *parityWorld) { w.conflicts, w.failGets = 2, 3 })
		}}}},
		{name: "API errors, then recovery", events: []parityEvent{{0, registerNode}, {15 * time.Second, func(_ context.Context, w *parityWorld) {
			w.set(func(w *parityWorld) { w.failUpdates, w.failGets = 7, 4 })
		}}}},
		{name: "API server down at start, then up", setup: func(w *parityWorld) { w.failGets, w.failCreates = 3, 2 },
			events: []parityEvent{{0, registerNode}}},
		{name: "Lease deleted by an admin", events: []parityEvent{{0, registerNode}, {25 * time.Second, func(ctx context.Context, w *parityWorld) {
			if err := w.client.Tracker().Delete(coordinationv1.SchemeGroupVersion.WithResource("leases"), Namespace, nodeName); err != nil {
				panic(err)
			}
		}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := runParity(t, upstreamImpl, tc.setup, tc.events)
			got := runParity(t, stepImpl, tc.setup, tc.events)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("calls differ from the component-helpers lease controller's\nlease controller (%d):\n  %s\nRenewer.Step (%d):\n  %s",
					len(want), strings.Join(want, "\n  "), len(got), strings.Join(got, "\n  "))
			}
			if len(want) < 6 {
				t.Errorf("only %d calls: the scenario did not renew", len(want))
			}
		})
	}
}
