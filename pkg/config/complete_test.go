package config

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeagent/nodeagent/pkg/eviction"
)

func rl(pairs ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[v1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

// TestCompletedReservation checks the reservation against the kubelet's
// GetNodeAllocatableReservation: system-reserved + kube-reserved + the hard eviction thresholds for
// memory (memory.available) and ephemeral-storage (nodefs.available), against capacity.
func TestCompletedReservation(t *testing.T) {
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
			desc: "kubelet defaults: 100Mi memory and 10% of nodefs", capacity: capacity, evictionHard: DefaultEvictionHard,
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
			c := &Completed{SystemReserved: tc.systemReserved, KubeReserved: tc.kubeReserved, EvictionHard: thresholds(tc.evictionHard)}
			got := c.Reservation(tc.capacity)
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

