package config

import (
	"errors"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeagent/nodeagent/pkg/eviction"
)

// NodeAllocatableReservation returns what is held back from capacity for allocatable: for each
// resource in capacity, systemReserved + kubeReserved + the hard eviction threshold of its signal
// (memory.available for memory, nodefs.available for ephemeral-storage; a percentage is of that
// capacity), leaving out resources whose total is zero. Resources absent from capacity (pid) are not
// in the result. Quantities are in the resource's unit (cores, bytes). It mirrors the kubelet's
// containerManagerImpl.GetNodeAllocatableReservation with hardEvictionReservation
// (pkg/kubelet/cm/node_container_manager_linux.go, pkg/kubelet/cm/helpers.go).
//
// systemReserved and kubeReserved come from ParseReserved, thresholds from eviction.ParseThresholds;
// nil for any of them means none.
func NodeAllocatableReservation(capacity, systemReserved, kubeReserved v1.ResourceList, thresholds []eviction.Threshold) v1.ResourceList {
	evictionReservation := v1.ResourceList{}
	if mem, ok := capacity[v1.ResourceMemory]; ok {
		evictionReservation[v1.ResourceMemory] = *resource.NewQuantity(eviction.ReservedMemory(thresholds, mem.Value()), resource.BinarySI)
	}
	if eph, ok := capacity[v1.ResourceEphemeralStorage]; ok {
		evictionReservation[v1.ResourceEphemeralStorage] = *resource.NewQuantity(eviction.ReservedEphemeralStorage(thresholds, eph.Value()), resource.BinarySI)
	}
	result := v1.ResourceList{}
	for k := range capacity {
		value := resource.NewQuantity(0, resource.DecimalSI)
		for _, rl := range []v1.ResourceList{systemReserved, kubeReserved, evictionReservation} {
			if q, ok := rl[k]; ok {
				value.Add(q)
			}
		}
		if !value.IsZero() {
			result[k] = *value
		}
	}
	return result
}

// ValidateNodeAllocatable returns an error for each resource whose reservation exceeds its capacity
// (a resource missing from capacity has capacity 0), joined with errors.Join in resource order, each
// "invalid Node Allocatable configuration: resource "<name>" has a reservation of <q> but capacity of
// <q>; expected capacity >= reservation (...)". It returns nil when every reservation fits. reservation
// is NodeAllocatableReservation's result. It mirrors the kubelet's
// containerManagerImpl.validateNodeAllocatable (pkg/kubelet/cm/node_container_manager_linux.go), which
// refuses to start the kubelet; capacity is known only at run time, so the caller checks at start.
func ValidateNodeAllocatable(capacity, reservation v1.ResourceList) error {
	names := make([]string, 0, len(reservation))
	for k := range reservation {
		names = append(names, string(k))
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		k := v1.ResourceName(name)
		reserved, capq := reservation[k], capacity[k]
		value := capq.DeepCopy()
		value.Sub(reserved)
		if value.Sign() < 0 {
			errs = append(errs, fmt.Errorf("invalid Node Allocatable configuration: resource %q has a reservation of %s but capacity of %s; "+
				"expected capacity >= reservation (the reservation is systemReserved + kubeReserved + the evictionHard threshold: "+
				"--system-reserved, --kube-reserved, --eviction-hard)", k, reserved.String(), capq.String()))
		}
	}
	return errors.Join(errs...)
}
