package lease

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

// TestEnsureLeaseBackoff checks the waits between failed attempts to get the Lease: 100 ms doubling
// (from 200 ms), capped at 7 s as upstream, and at the renew interval when that is shorter, so that
// renewals resume within one renew interval of the API server coming back.
func TestEnsureLeaseBackoff(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		desc                 string
		leaseDurationSeconds int32
		failures             int
		want                 []time.Duration
	}{
		{desc: "default 40 s lease: capped at 7 s", leaseDurationSeconds: 40, failures: 9,
			want: []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 7 * time.Second, 7 * time.Second, 7 * time.Second}},
		{desc: "8 s lease: capped at the 2 s renew interval", leaseDurationSeconds: 8, failures: 7,
			want: []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2 * time.Second, 2 * time.Second, 2 * time.Second}},
		{desc: "1 s lease: capped at 250 ms", leaseDurationSeconds: 1, failures: 3,
			want: []time.Duration{200 * ms, 250 * ms, 250 * ms}},
		{desc: "no failure, no wait", leaseDurationSeconds: 8},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(node("uid-1"))
			failures := tc.failures
			client.PrependReactor("get", "leases", func(core.Action) (bool, runtime.Object, error) {
				if failures == 0 {
					return false, nil, nil
				}
				failures--
				return true, nil, errors.New("connection refused")
			})
			r, err := New(Config{Client: client, Lister: listerWith(t, node("uid-1")), NodeName: nodeName,
				LeaseDurationSeconds: tc.leaseDurationSeconds, Clock: testingclock.NewFakeClock(time.Now())})
			if err != nil {
				t.Fatal(err)
			}
			var waits []time.Duration
			r.controller.after = func(d time.Duration) <-chan time.Time {
				waits = append(waits, d)
				ch := make(chan time.Time, 1)
				ch <- time.Now()
				return ch
			}
			r.controller.sync(ctx)
			if len(waits) != len(tc.want) {
				t.Fatalf("waits %v, want %v", waits, tc.want)
			}
			for i := range waits {
				if waits[i] != tc.want[i] {
					t.Errorf("wait %d = %v, want %v (all: %v)", i, waits[i], tc.want[i], waits)
				}
			}
			if r.controller.latestLease == nil {
				t.Error("no Lease after the API server came back")
			}
		})
	}
}
