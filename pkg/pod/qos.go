package pod

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// PodQOS returns the pod's QoS class as the kubelet's v1qos.GetPodQOS does
// (pkg/apis/core/v1/helper/qos): status.qosClass when the API server has set it (it does at creation
// and the field is immutable), else ComputePodQOS. Mirrored because no importable library has it
// (kubectl's copy predates pod-level resources).
func PodQOS(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return ComputePodQOS(pod)
}

// ComputePodQOS mirrors qos.ComputePodQOS with the 1.37 defaults (PodLevelResources and
// PodLevelResourcesFixKubeletQOSClass on): pod-level cpu or memory resources decide when set;
// otherwise BestEffort when no container (init ones included) has cpu or memory requests or limits,
// Guaranteed when every container has them equal and non-zero for both, else Burstable.
func ComputePodQOS(pod *v1.Pod) v1.PodQOSClass {
	if pod.Spec.Resources != nil && resourcehelper.IsPodLevelResourcesSet(pod) {
		return requirementsQOS(pod.Spec.Resources)
	}
	var podQOS v1.PodQOSClass
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			q := requirementsQOS(&list[i].Resources)
			switch {
			case q == v1.PodQOSBurstable:
				return q
			case podQOS == "":
				podQOS = q
			case podQOS != q:
				return v1.PodQOSBurstable
			}
		}
	}
	if podQOS == "" {
		return v1.PodQOSBestEffort
	}
	return podQOS
}

func requirementsQOS(r *v1.ResourceRequirements) v1.PodQOSClass {
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return v1.PodQOSBestEffort
	}
	var qos v1.PodQOSClass
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		req, lim := r.Requests[name], r.Limits[name]
		var q v1.PodQOSClass
		switch {
		case !req.Equal(lim):
			return v1.PodQOSBurstable
		case req.IsZero():
			q = v1.PodQOSBestEffort
		default:
			q = v1.PodQOSGuaranteed
		}
		if qos == "" {
			qos = q
		} else if qos != q {
			return v1.PodQOSBurstable
		}
	}
	return qos
}
