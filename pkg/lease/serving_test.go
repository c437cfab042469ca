package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
)

// apiServer is a fake API server's reachability: while down, Lease calls fail in transport (connection
// refused); it counts the Lease GETs.
type apiServer struct {
	mu     sync.Mutex
	down   bool
	probes int
}

func (s *apiServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *apiServer) probeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probes
}

// refuse is a reactor for leases: refused while down, else on to the fake's tracker (NotFound for a
// Lease that does not exist: an answer from storage all the same).
func (s *apiServer) refuse(a core.Action) (bool, runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.GetVerb() == "get" {
		s.probes++
	}
	if s.down {
		return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	}
	return false, nil, nil
}

// client returns a clientset whose Lease calls go through refuse.
func (s *apiServer) client(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.PrependReactor("*", "leases", s.refuse)
	return c
}

// TestServingProbe: waiters share one probe that GETs a Lease every period while anyone waits, are
// released at the first answer from storage (here NotFound), and nothing is asked while nobody waits; a
// waiter whose context ends gets its error.
func TestServingProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		srv := &apiServer{down: true}
		p := NewServingProbe(srv.client(), nodeName, clock.RealClock{}, 250*time.Millisecond)

		done := make(chan error, 2)
		for range 2 {
			go func() { done <- p.Wait(ctx) }()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := len(done); n != 0 {
			t.Fatalf("%d waiters released while the API server is down", n)
		}
		if n := srv.probeCount(); n != 5 {
			t.Errorf("%d Lease GETs in 1 s at a 250 ms period with two waiters, want 5 (one probe)", n)
		}
		srv.setDown(false)
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Wait = %v, want nil once the API server serves", err)
				}
			default:
				t.Fatal("a waiter not released one period after the API server serves again")
			}
		}
		before := srv.probeCount()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := srv.probeCount() - before; n != 0 {
			t.Errorf("%d Lease GETs while nobody waits", n)
		}

		srv.setDown(true)
		wctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
		defer cancel()
		if err := p.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait with a context that ends = %v, want its error", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		before = srv.probeCount()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := srv.probeCount() - before; n != 0 {
			t.Errorf("%d Lease GETs after the only waiter left", n)
		}
	})
}

// TestRenewalResumesWhenServing: after an outage long enough for the lease controller's backoff to
// reach its 7 s cap, the Lease is renewed within one probe period of the API server serving again,
// (the first renewal the Observer sees after it); without the probe the same outage leaves it up to
// the backoff.
func TestRenewalResumesWhenServing(t *testing.T) {
	for _, tc := range []struct {
		desc      string
		probe     bool
		maxResume time.Duration
	}{
		{desc: "with the serving probe", probe: true, maxResume: 250 * time.Millisecond},
		{desc: "without (the lease controller's backoff)", probe: false, maxResume: 7 * time.Second},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				srv := &apiServer{}
				client := srv.client(node("uid-1"))
				var mu sync.Mutex
				var recoveredAt, back time.Time
				renewals := renewalFunc(func() {
					mu.Lock()
					defer mu.Unlock()
					if !back.IsZero() && recoveredAt.IsZero() {
						recoveredAt = time.Now()
					}
				})
				cfg := Config{Client: client, Lister: listerWith(t, node("uid-1")), NodeName: nodeName, LeaseDurationSeconds: 40,
					Clock: clock.RealClock{}, Observer: renewals}
				if tc.probe {
					cfg.Serving = NewServingProbe(client, nodeName, clock.RealClock{}, 250*time.Millisecond)
				}
				r, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				stop := startRun(ctx, r)
				synctest.Wait()
				srv.setDown(true)
				time.Sleep(60 * time.Second) // the backoff is at its cap long before
				synctest.Wait()
				mu.Lock()
				back = time.Now()
				mu.Unlock()
				srv.setDown(false)
				time.Sleep(10 * time.Second)
				synctest.Wait()
				mu.Lock()
				resumed := recoveredAt.Sub(back)
				mu.Unlock()
				if recoveredAt.IsZero() || resumed > tc.maxResume {
					t.Errorf("renewal resumed %v after the API server served again (recovered at %v), want at most %v", resumed, recoveredAt, tc.maxResume)
				}
				if l := r.LastRenew(); !l.Equal(recoveredAt) {
					t.Errorf("LastRenew %v, want the recovery %v", l, recoveredAt)
				}
				t.Logf("resumed %v after the API server served again", resumed)
				stop()
			})
		})
	}
}

// TestAnswered: which GET outcomes mean the API server answered from storage.
func TestAnswered(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for _, tc := range []struct {
		desc string
		err  error
		want bool
	}{
		{"found", nil, true},
		{"NotFound", apierrors.NewNotFound(gr, nodeName), true},
		{"Forbidden", apierrors.NewForbidden(gr, nodeName, errors.New("no")), true},
		{"wrapped NotFound", fmt.Errorf("get: %w", apierrors.NewNotFound(gr, nodeName)), true},
		{"connection refused", errors.New("dial tcp: connect: connection refused"), false},
		{"server timeout (etcd paused)", apierrors.NewTimeoutError("etcd", 1), false},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), false},
		{"internal error", apierrors.NewInternalError(errors.New("etcdserver: leader changed")), false},
		{"service unavailable", apierrors.NewServiceUnavailable("not ready"), false},
	} {
		if got := answered(tc.err); got != tc.want {
			t.Errorf("%s: answered(%v) = %v, want %v", tc.desc, tc.err, got, tc.want)
		}
	}
}

// renewalFunc is an Observer that calls itself on each renewal.
type renewalFunc func()

func (f renewalFunc) ObserveLeaseRenewal(time.Duration) { f() }
func (f renewalFunc) ObserveLeaseError(string)          {}
