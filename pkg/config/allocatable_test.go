package config

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeagent/nodeagent/pkg/eviction"
)

// rl builds a ResourceList from name, quantity pairs.
func rl(pairs ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[v1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

func mustThresholds(t *testing.T, m map[string]string) []eviction.Threshold {
	t.Helper()
	th, err := eviction.ParseThresholds(m)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// TestNodeAllocatableReservation mirrors the kubelet's TestNodeAllocatableReservationForScheduling
// (pkg/kubelet/cm/node_container_manager_linux_test.go): system + kube reserved + the hard eviction
// threshold, only for resources in capacity, zero totals left out.
func TestNodeAllocatableReservation(t *testing.T) {
	fivePercentOf10Gi := int64(float64(10<<30) * float64(float32(5)/100)) // the kubelet's GetThresholdQuantity
	cases := []struct {
		desc                         string
		capacity, system, kube, want v1.ResourceList
		evictionHard                 map[string]string
	}{
		{desc: "reserved only", capacity: rl("cpu", "10", "memory", "10Gi"),
			system: rl("cpu", "50m", "memory", "50Mi"), kube: rl("cpu", "100m", "memory", "100Mi"),
			want: rl("cpu", "150m", "memory", "150Mi")},
		{desc: "memory threshold quantity", capacity: rl("cpu", "10", "memory", "10Gi"),
			system: rl("cpu", "50m", "memory", "50Mi"), kube: rl("cpu", "100m", "memory", "100Mi"),
			evictionHard: map[string]string{"memory.available": "100Mi"},
			want:         rl("cpu", "150m", "memory", "250Mi")},
		{desc: "memory threshold percentage of capacity", capacity: rl("cpu", "10", "memory", "10Gi"),
			system: rl("cpu", "50m", "memory", "50Mi"), kube: rl("cpu", "100m", "memory", "100Mi"),
			evictionHard: map[string]string{"memory.available": "5%"},
			want:         v1.ResourceList{"cpu": resource.MustParse("150m"), "memory": *resource.NewQuantity(150<<20+fivePercentOf10Gi, resource.BinarySI)}},
		{desc: "nothing reserved", capacity: rl("cpu", "10", "memory", "10Gi"), want: v1.ResourceList{}},
		{desc: "nil capacity", system: rl("cpu", "1"), evictionHard: map[string]string{"memory.available": "100Mi"}, want: v1.ResourceList{}},
		{desc: "only kube-reserved memory", capacity: rl("cpu", "10", "memory", "10Gi"),
			kube: rl("memory", "100Mi"), system: rl("cpu", "50m", "memory", "50Mi"), want: rl("cpu", "50m", "memory", "150Mi")},
		{desc: "resource not in capacity left out", capacity: rl("cpu", "10"),
			system: rl("memory", "50Mi", "pid", "100"), kube: rl("memory", "100Mi"), evictionHard: map[string]string{"memory.available": "100Mi"},
			want: v1.ResourceList{}},
		{desc: "ephemeral-storage reserved and nodefs threshold", capacity: rl("ephemeral-storage", "10Gi"),
			kube: rl("ephemeral-storage", "100Mi"), evictionHard: map[string]string{"nodefs.available": "100Mi"},
			want: rl("ephemeral-storage", "200Mi")},
		{desc: "nodefs percentage", capacity: rl("ephemeral-storage", "10Gi"),
			kube: rl("ephemeral-storage", "150Mi"), evictionHard: map[string]string{"nodefs.available": "5%"},
			want: v1.ResourceList{"ephemeral-storage": *resource.NewQuantity(150<<20+fivePercentOf10Gi, resource.BinarySI)}},
		{desc: "no ephemeral-storage capacity: no nodefs reservation", capacity: rl("cpu", "4", "memory", "8Gi"),
			system: rl("ephemeral-storage", "1Gi"), evictionHard: map[string]string{"nodefs.available": "10%"}, want: v1.ResourceList{}},
		{desc: "system + kube reserved + eviction add up", capacity: rl("cpu", "4", "memory", "8Gi", "ephemeral-storage", "100Gi", "pods", "110"),
			system: rl("cpu", "100m", "memory", "100Mi", "ephemeral-storage", "1Gi"), kube: rl("cpu", "200m", "memory", "200Mi"),
			evictionHard: map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
			want: v1.ResourceList{"cpu": resource.MustParse("300m"), "memory": resource.MustParse("400Mi"),
				"ephemeral-storage": *resource.NewQuantity(1<<30+int64(float64(100<<30)*float64(float32(10)/100)), resource.BinarySI)}},
		{desc: "imagefs and inode thresholds reserve nothing", capacity: rl("ephemeral-storage", "10Gi", "memory", "1Gi"),
			evictionHard: map[string]string{"imagefs.available": "15%", "nodefs.inodesFree": "5%", "pid.available": "100"}, want: v1.ResourceList{}},
		{desc: "kubelet defaults on a real-looking node", capacity: rl("cpu", "4", "memory", "8Gi", "ephemeral-storage", "100Gi", "pods", "110", "hugepages-2Mi", "0"),
			evictionHard: DefaultEvictionHard,
			want: v1.ResourceList{"memory": resource.MustParse("100Mi"),
				"ephemeral-storage": *resource.NewQuantity(int64(float64(100<<30)*float64(float32(10)/100)), resource.BinarySI)}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got := NodeAllocatableReservation(tc.capacity, tc.system, tc.kube, mustThresholds(t, tc.evictionHard))
			if len(got) != len(tc.want) {
				t.Errorf("reservation = %v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || g.Cmp(w) != 0 {
					t.Errorf("%s = %v, want %v (reservation %v)", k, got[k], w, got)
				}
			}
		})
	}
}

// TestValidateNodeAllocatable mirrors the kubelet's TestNodeAllocatableInputValidation: a reservation
// larger than its capacity is an error naming the resource, the reservation and the capacity.
func TestValidateNodeAllocatable(t *testing.T) {
	cases := []struct {
		desc                  string
		capacity, system      v1.ResourceList
		kube                  v1.ResourceList
		evictionHard          map[string]string
		want                  []string // one per refused resource
		reservationOverrideRL v1.ResourceList
	}{
		{desc: "fits", capacity: rl("cpu", "10", "memory", "10Gi"), system: rl("cpu", "50m", "memory", "50Mi"),
			kube: rl("cpu", "100m", "memory", "100Mi"), evictionHard: map[string]string{"memory.available": "100Mi"}},
		{desc: "nothing reserved", capacity: rl("cpu", "10", "memory", "10Gi")},
		{desc: "exactly capacity", capacity: rl("cpu", "2", "memory", "1Gi"), system: rl("cpu", "1"), kube: rl("cpu", "1"),
			evictionHard: map[string]string{"memory.available": "1Gi"}},
		{desc: "cpu and memory over", capacity: rl("cpu", "10", "memory", "11Gi"), system: rl("cpu", "5", "memory", "10Gi"),
			kube: rl("cpu", "5500m", "memory", "10Gi"), evictionHard: map[string]string{"memory.available": "2Gi"},
			want: []string{
				`invalid Node Allocatable configuration: resource "cpu" has a reservation of 10500m but capacity of 10; expected capacity >= reservation`,
				`invalid Node Allocatable configuration: resource "memory" has a reservation of 22Gi but capacity of 11Gi; expected capacity >= reservation`,
			}},
		{desc: "ephemeral-storage over by the threshold", capacity: rl("ephemeral-storage", "20Gi"), kube: rl("ephemeral-storage", "20Gi"),
			evictionHard: map[string]string{"nodefs.available": "100Mi"},
			want:         []string{`resource "ephemeral-storage" has a reservation of 20580Mi but capacity of 20Gi`}},
		{desc: "memory reserved on a node without memory capacity is not checked", capacity: rl("cpu", "1"), system: rl("memory", "1Gi")},
		{desc: "reservation of a resource missing from capacity", capacity: rl("cpu", "1"), reservationOverrideRL: rl("memory", "1Gi"),
			want: []string{`resource "memory" has a reservation of 1Gi but capacity of 0`}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			reservation := NodeAllocatableReservation(tc.capacity, tc.system, tc.kube, mustThresholds(t, tc.evictionHard))
			if tc.reservationOverrideRL != nil {
				reservation = tc.reservationOverrideRL
			}
			err := ValidateNodeAllocatable(tc.capacity, reservation)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("ValidateNodeAllocatable(%v, %v): %v", tc.capacity, reservation, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateNodeAllocatable(%v, %v): no error, want %q", tc.capacity, reservation, tc.want)
			}
			if lines := strings.Split(err.Error(), "\n"); len(lines) != len(tc.want) {
				t.Errorf("%d errors, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if !strings.Contains(err.Error(), "--system-reserved, --kube-reserved, --eviction-hard") {
				t.Errorf("error does not name the flags:\n%v", err)
			}
		})
	}
}
