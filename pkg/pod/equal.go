package pod

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/apiequal"
)

// StatusEqual reports whether a and b are the same status as apiequality.Semantic.DeepEqual says
// (quantities by value, times by instant, nil and empty slices and maps alike): the comparison the
// kubelet's status manager makes before it writes (isPodStatusByKubeletEqual, status_manager.go), here
// without reflection and without allocating, for the pass over a pod that changes nothing (most passes).
// The fields nodeagent never writes, and that are rarely set, are compared with Semantic.DeepEqual
// when both are set. TestStatusEqualCoversPodStatus fails when PodStatus or a type it compares field by
// field gains a field; TestStatusEqualAgreesWithSemantic checks it against Semantic.DeepEqual.
func StatusEqual(a, b *v1.PodStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration && a.Phase == b.Phase && a.Message == b.Message &&
		a.Reason == b.Reason && a.NominatedNodeName == b.NominatedNodeName && a.HostIP == b.HostIP &&
		a.PodIP == b.PodIP && a.QOSClass == b.QOSClass && a.Resize == b.Resize &&
		slices.EqualFunc(a.Conditions, b.Conditions, conditionEqual) &&
		slices.Equal(a.HostIPs, b.HostIPs) && slices.Equal(a.PodIPs, b.PodIPs) &&
		a.StartTime.Equal(b.StartTime) &&
		containerStatusesEqual(a.InitContainerStatuses, b.InitContainerStatuses) &&
		containerStatusesEqual(a.ContainerStatuses, b.ContainerStatuses) &&
		containerStatusesEqual(a.EphemeralContainerStatuses, b.EphemeralContainerStatuses) &&
		apiequal.ResourceList(a.AllocatedResources, b.AllocatedResources) &&
		resourcesEqual(a.Resources, b.Resources) &&
		slices.EqualFunc(a.ResourceClaimStatuses, b.ResourceClaimStatuses, func(x, y v1.PodResourceClaimStatus) bool {
			return x.Name == y.Name && ptr.Equal(x.ResourceClaimName, y.ResourceClaimName)
		}) &&
		apiequal.Ptr(a.ExtendedResourceClaimStatus, b.ExtendedResourceClaimStatus) &&
		apiequal.Slice(a.NodeAllocatableResourceClaimStatuses, b.NodeAllocatableResourceClaimStatuses) &&
		apiequal.Slice(a.VolumeHealth, b.VolumeHealth)
}

func conditionEqual(a, b v1.PodCondition) bool {
	return a.Type == b.Type && a.ObservedGeneration == b.ObservedGeneration && a.Status == b.Status &&
		a.LastProbeTime.Equal(&b.LastProbeTime) && a.LastTransitionTime.Equal(&b.LastTransitionTime) &&
		a.Reason == b.Reason && a.Message == b.Message
}

func containerStatusesEqual(a, b []v1.ContainerStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.Ready != y.Ready || x.RestartCount != y.RestartCount || x.Image != y.Image ||
			x.ImageID != y.ImageID || x.ContainerID != y.ContainerID || !ptr.Equal(x.Started, y.Started) ||
			!ptr.Equal(x.StopSignal, y.StopSignal) ||
			!containerStateEqual(&x.State, &y.State) || !containerStateEqual(&x.LastTerminationState, &y.LastTerminationState) ||
			!apiequal.ResourceList(x.AllocatedResources, y.AllocatedResources) || !resourcesEqual(x.Resources, y.Resources) ||
			!slices.EqualFunc(x.VolumeMounts, y.VolumeMounts, volumeMountEqual) ||
			!apiequal.Ptr(x.User, y.User) || !apiequal.Slice(x.AllocatedResourcesStatus, y.AllocatedResourcesStatus) {
			return false
		}
	}
	return true
}

func containerStateEqual(a, b *v1.ContainerState) bool {
	if !ptr.Equal(a.Waiting, b.Waiting) {
		return false
	}
	if a.Running == nil || b.Running == nil {
		if a.Running != b.Running {
			return false
		}
	} else if !a.Running.StartedAt.Equal(&b.Running.StartedAt) {
		return false
	}
	x, y := a.Terminated, b.Terminated
	if x == nil || y == nil {
		return x == y
	}
	return x.ExitCode == y.ExitCode && x.Signal == y.Signal && x.Reason == y.Reason && x.Message == y.Message &&
		x.StartedAt.Equal(&y.StartedAt) && x.FinishedAt.Equal(&y.FinishedAt) && x.ContainerID == y.ContainerID
}

func volumeMountEqual(a, b v1.VolumeMountStatus) bool {
	return a.Name == b.Name && a.MountPath == b.MountPath && a.ReadOnly == b.ReadOnly &&
		ptr.Equal(a.RecursiveReadOnly, b.RecursiveReadOnly) && apiequal.Ptr(a.VolumeStatus, b.VolumeStatus)
}

func resourcesEqual(a, b *v1.ResourceRequirements) bool {
	if a == nil || b == nil {
		return a == b
	}
	return apiequal.ResourceList(a.Limits, b.Limits) && apiequal.ResourceList(a.Requests, b.Requests) &&
		slices.Equal(a.Claims, b.Claims)
}
