package pod

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// The eviction manager's reason and messages (pkg/kubelet/eviction/helpers.go).
const (
	ReasonEvicted = "Evicted"
	// NodeLowMessageFmt is the start of an eviction's message, with the resource reclaimed.
	NodeLowMessageFmt = "The node was low on resource: %v. "
	// NodeConditionMessageFmt is an admission's rejection under pressure, with the conditions.
	NodeConditionMessageFmt = "The node had condition: %v. "
	// ReasonTerminationByKubelet is the DisruptionTarget condition's reason of an evicted pod.
	ReasonTerminationByKubelet = v1.PodReasonTerminationByKubelet
	// systemCriticalPriority is scheduling.SystemCriticalPriority.
	systemCriticalPriority = 2 * 1000000000
)

// IsCriticalPod mirrors kubelettypes.IsCriticalPod: a static or mirror pod, or one whose priority is
// at least system-cluster-critical's.
func IsCriticalPod(p *v1.Pod) bool {
	if isStaticPod(p) {
		return true
	}
	if _, ok := p.Annotations[v1.MirrorPodAnnotationKey]; ok {
		return true
	}
	return p.Spec.Priority != nil && *p.Spec.Priority >= systemCriticalPriority
}

// EvictionAdmit mirrors the eviction manager's Admit (pkg/kubelet/eviction/eviction_manager.go): with
// no pressure condition every pod is admitted, as is a critical one; under memory pressure alone a pod
// that is not BestEffort, or BestEffort tolerating the node.kubernetes.io/memory-pressure NoSchedule
// taint; any other is rejected, reason Evicted, "The node had condition: [<conditions>]. ".
func EvictionAdmit(p *v1.Pod, conditions []v1.NodeConditionType) AdmitResult {
	if len(conditions) == 0 || IsCriticalPod(p) {
		return AdmitResult{Admit: true}
	}
	if len(conditions) == 1 && conditions[0] == v1.NodeMemoryPressure {
		if PodQOS(p) != v1.PodQOSBestEffort {
			return AdmitResult{Admit: true}
		}
		if corev1helpers.TolerationsTolerateTaint(klog.Background(), p.Spec.Tolerations,
			&v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}, false) {
			return AdmitResult{Admit: true}
		}
	}
	return AdmitResult{Admit: false, Reason: ReasonEvicted, Message: fmt.Sprintf(NodeConditionMessageFmt, conditions)}
}

// PressureResource is the resource the eviction manager reclaims under a pressure condition: memory,
// ephemeral-storage (DiskPressure: the nodefs), pids; "" for another condition.
func PressureResource(c v1.NodeConditionType) v1.ResourceName {
	switch c {
	case v1.NodeMemoryPressure:
		return v1.ResourceMemory
	case v1.NodeDiskPressure:
		return v1.ResourceEphemeralStorage
	case v1.NodePIDPressure:
		return "pids"
	}
	return ""
}

// RankForEviction orders pods (the Node's active pods) as the eviction manager ranks them to reclaim
// resource, first to be evicted first, leaving out the critical pods it never evicts: for memory and
// ephemeral-storage, the pods whose usage exceeds their requests first (rankMemoryPressure,
// rankDiskPressureFunc), then by priority, lowest first; for pids by priority (rankPIDPressure). Usage
// is not measured here: every pod is taken to use some of the resource and no more than it requests,
// so the pods that exceed their requests are those that request none of it (BestEffort pods, and
// Burstable ones without that request). Ties keep the order of namespace/name.
func RankForEviction(pods []*v1.Pod, resource v1.ResourceName) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if !IsCriticalPod(p) {
			out = append(out, p)
		}
	}
	exceeds := func(p *v1.Pod) bool {
		if resource != v1.ResourceMemory && resource != v1.ResourceEphemeralStorage {
			return false
		}
		for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range l {
				if q, ok := c.Resources.Requests[resource]; ok && !q.IsZero() {
					return false
				}
			}
		}
		return true
	}
	priority := func(p *v1.Pod) int32 {
		if p.Spec.Priority != nil {
			return *p.Spec.Priority
		}
		return 0
	}
	slices.SortStableFunc(out, func(a, b *v1.Pod) int {
		if ea, eb := exceeds(a), exceeds(b); ea != eb {
			if ea {
				return -1
			}
			return 1
		}
		if pa, pb := priority(a), priority(b); pa != pb {
			if pa < pb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}
