package benchkit

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNearestRank(t *testing.T) {
	s := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Second
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 0.99, 0},
		{"one", s(7), 0.5, 7 * time.Second},
		{"p50 of 4 is the 2nd", s(1, 2, 3, 4), 0.5, 2 * time.Second},
		{"p50 of 5 is the 3rd", s(1, 2, 3, 4, 5), 0.5, 3 * time.Second},
		{"p99 of 10 is the largest", s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Second},
		{"p99 of 100 is the 99th", s(hundred...), 0.99, 99 * time.Second},
		{"p100 is the largest", s(1, 2, 3), 1, 3 * time.Second},
		{"tiny p is the smallest", s(1, 2, 3), 0.001, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NearestRank(tc.sorted, tc.p); got != tc.want {
				t.Errorf("NearestRank(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
}

// TestLeaseTracker: only intervals between renewTimes received while recording count, a renewTime
// not after the last one seen (a resync, an older event) is none, and Leases are apart.
func TestLeaseTracker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(name string, s int) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(t0.Add(time.Duration(s) * time.Second))
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
	}
	type step struct {
		lease  *coordinationv1.Lease
		record *bool
	}
	on, off := true, false
	for _, tc := range []struct {
		name  string
		steps []step
		want  []time.Duration
	}{
		{"not recording", []step{{lease: lease("a", 0)}, {lease: lease("a", 10)}}, nil},
		{"the first update in the window counts from the last before it",
			[]step{{lease: lease("a", 0)}, {record: &on}, {lease: lease("a", 10)}, {lease: lease("a", 21)}, {record: &off}, {lease: lease("a", 30)}},
			[]time.Duration{10 * time.Second, 11 * time.Second}},
		{"a repeated or older renewTime is no interval",
			[]step{{record: &on}, {lease: lease("a", 0)}, {lease: lease("a", 10)}, {lease: lease("a", 10)}, {lease: lease("a", 5)}, {lease: lease("a", 20)}},
			[]time.Duration{10 * time.Second, 10 * time.Second}},
		{"each Lease apart, sorted",
			[]step{{record: &on}, {lease: lease("a", 0)}, {lease: lease("b", 3)}, {lease: lease("a", 12)}, {lease: lease("b", 10)}},
			[]time.Duration{7 * time.Second, 12 * time.Second}},
		{"no renewTime", []step{{record: &on}, {lease: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}, {lease: lease("a", 10)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewLeaseTracker()
			for _, st := range tc.steps {
				if st.record != nil {
					tr.Record(*st.record)
				} else {
					tr.Observe(st.lease)
				}
			}
			got := tr.Intervals()
			if len(got) != len(tc.want) {
				t.Fatalf("Intervals() = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("Intervals() = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
