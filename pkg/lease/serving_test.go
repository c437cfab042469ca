package lease

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	restfake "k8s.io/client-go/rest/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
)

// apiServer is a fake API server's reachability: while down, /readyz and Lease calls fail in
// transport (connection refused); it counts /readyz requests.
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

// restClient answers /readyz: refused while down, 200 ok after.
func (s *apiServer) restClient() *restfake.RESTClient {
	return &restfake.RESTClient{
		NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
		Client: restfake.CreateHTTPClient(func(req *http.Request) (*http.Response, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if req.URL.Path != "/readyz" {
				return nil, errors.New("unexpected path " + req.URL.Path)
			}
			s.probes++
			if s.down {
				return nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
			}
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok")), Header: http.Header{}}, nil
		}),
	}
}

// TestServingProbe: waiters share one probe that asks /readyz every period while anyone waits, are
// released at the first 200, and nothing is asked while nobody waits; a waiter whose context ends
// gets its error.
func TestServingProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		srv := &apiServer{down: true}
		p := NewServingProbe(srv.restClient(), clock.RealClock{}, 250*time.Millisecond)

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
			t.Errorf("%d /readyz requests in 1 s at a 250 ms period with two waiters, want 5 (one probe)", n)
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
			t.Errorf("%d /readyz requests while nobody waits", n)
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
			t.Errorf("%d /readyz requests after the only waiter left", n)
		}
	})
}

// TestRenewalResumesWhenServing: after an outage long enough for the lease controller's backoff to
// reach its 7 s cap, the Lease is renewed within one probe period of the API server serving again,
// and OnHeartbeatRecovered runs; without the probe the same outage leaves it up to the backoff.
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
				client := fake.NewClientset(node("uid-1"))
				refused := func(core.Action) (bool, runtime.Object, error) {
					srv.mu.Lock()
					defer srv.mu.Unlock()
					if srv.down {
						return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
					}
					return false, nil, nil
				}
				client.PrependReactor("*", "leases", refused)
				var mu sync.Mutex
				var recoveredAt time.Time
				cfg := Config{Client: client, Lister: listerWith(t, node("uid-1")), NodeName: nodeName, LeaseDurationSeconds: 40,
					Clock: clock.RealClock{}, OnHeartbeatRecovered: func() { mu.Lock(); recoveredAt = time.Now(); mu.Unlock() }}
				if tc.probe {
					cfg.Serving = NewServingProbe(srv.restClient(), clock.RealClock{}, 250*time.Millisecond)
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
				back := time.Now()
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
