package pod

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Condition reasons, the kubelet's (pkg/kubelet/status/generate.go, pkg/kubelet/types).
const (
	ReasonUnknownContainerStatuses = "UnknownContainerStatuses"
	ReasonPodCompleted             = "PodCompleted"
	ReasonPodFailed                = "PodFailed"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
	ReasonPodSandboxNotReady       = "PodSandboxNotReady" // kubetypes.PodSandboxNotReadyReason
)

// isKubeletCondition is kubetypes.PodConditionByKubelet with the 1.37 gates (PodReadyToStartContainers
// GA; AllContainersRestarting only for pods with a RestartAllContainers rule, which nodeagent does not
// generate, so it is left to the pod's other writers).
func isKubeletCondition(t v1.PodConditionType) bool {
	switch t {
	case v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady,
		v1.PodResizeInProgress, v1.PodResizePending, v1.PodReadyToStartContainers:
		return true
	}
	return false
}

func findCondition(conds []v1.PodCondition, t v1.PodConditionType) (int, *v1.PodCondition) {
	for i := range conds {
		if conds[i].Type == t {
			return i, &conds[i]
		}
	}
	return -1, nil
}

func findStatus(statuses []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	for _, s := range statuses {
		if s.Name == name {
			return s, true
		}
	}
	return v1.ContainerStatus{}, false
}

// ContainersReadyCondition mirrors status.GenerateContainersReadyCondition: True when every sidecar
// and regular container is ready; False ContainersNotReady "containers with unready status: [a b]"
// (and/or "containers with unknown status: [...]") otherwise; False PodCompleted / PodFailed once the
// phase is terminal. statuses holds init and regular container statuses together.
func ContainersReadyCondition(pod *v1.Pod, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.ContainersReady, ObservedGeneration: pod.Generation, Status: v1.ConditionFalse}
	if statuses == nil {
		c.Reason = ReasonUnknownContainerStatuses
		return c
	}
	var unknown, unready []string
	check := func(ct *v1.Container) {
		if s, ok := findStatus(statuses, ct.Name); !ok {
			unknown = append(unknown, ct.Name)
		} else if !s.Ready {
			unready = append(unready, ct.Name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			check(&pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		check(&pod.Spec.Containers[i])
	}
	if (phase == v1.PodSucceeded && len(unknown) == 0) || phase == v1.PodFailed {
		c.Reason = terminalReason(phase)
		return c
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(unready) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unready status: %s", unready))
	}
	if len(msgs) > 0 {
		c.Reason, c.Message = ReasonContainersNotReady, strings.Join(msgs, ", ")
		return c
	}
	c.Status = v1.ConditionTrue
	return c
}

func terminalReason(phase v1.PodPhase) string {
	switch phase {
	case v1.PodFailed:
		return ReasonPodFailed
	case v1.PodSucceeded:
		return ReasonPodCompleted
	}
	return ""
}

// ReadyCondition mirrors status.GeneratePodReadyCondition: ContainersReady's status, reason and message
// when it is not True; else False ReadinessGatesNotReady when a readiness gate's condition (looked up in
// conds, the conditions other writers set) is missing or not True, with the kubelet's messages; else True.
func ReadyCondition(pod *v1.Pod, conds []v1.PodCondition, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	cr := ContainersReadyCondition(pod, statuses, phase)
	c := v1.PodCondition{Type: v1.PodReady, ObservedGeneration: pod.Generation}
	if cr.Status != v1.ConditionTrue {
		c.Status, c.Reason, c.Message = cr.Status, cr.Reason, cr.Message
		return c
	}
	var msgs []string
	for _, rg := range pod.Spec.ReadinessGates {
		_, gc := findCondition(conds, rg.ConditionType)
		if gc == nil {
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(rg.ConditionType)))
		} else if gc.Status != v1.ConditionTrue {
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(rg.ConditionType), gc.Status))
		}
	}
	if len(msgs) > 0 {
		c.Status, c.Reason, c.Message = v1.ConditionFalse, ReasonReadinessGatesNotReady, strings.Join(msgs, ", ")
		return c
	}
	c.Status = v1.ConditionTrue
	return c
}

// InitializedCondition mirrors status.GeneratePodInitializedCondition: True when every init container
// is done (a regular one ready, i.e. exited 0; a sidecar started), or once any regular container has
// run, or (reason PodCompleted) when the pod Succeeded; False ContainersNotInitialized
// "containers with incomplete status: [a b]" otherwise.
func InitializedCondition(pod *v1.Pod, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.PodInitialized, ObservedGeneration: pod.Generation, Status: v1.ConditionFalse}
	if statuses == nil && len(pod.Spec.InitContainers) > 0 {
		c.Reason = ReasonUnknownContainerStatuses
		return c
	}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		ct := &pod.Spec.InitContainers[i]
		s, ok := findStatus(statuses, ct.Name)
		if !ok {
			unknown = append(unknown, ct.Name)
			continue
		}
		done := s.Ready
		if IsRestartableInitContainer(ct) {
			done = s.Started != nil && *s.Started
		}
		if !done {
			incomplete = append(incomplete, ct.Name)
		}
	}
	if phase == v1.PodSucceeded && len(unknown) == 0 {
		c.Status, c.Reason = v1.ConditionTrue, ReasonPodCompleted
		return c
	}
	if anyRegularContainerStarted(pod, statuses) {
		c.Status = v1.ConditionTrue
		return c
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(incomplete) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with incomplete status: %s", incomplete))
	}
	if len(msgs) > 0 {
		// RestartAllContainersOnContainerExits (beta, on) keeps an Initialized True once set; only
		// pods with a RestartAllContainers rule lose their init containers' status, so this matters
		// only for them, and is mirrored all the same.
		if _, old := findCondition(pod.Status.Conditions, v1.PodInitialized); old != nil && old.Status == v1.ConditionTrue && hasRestartAllRule(pod) {
			c.Status = v1.ConditionTrue
			return c
		}
		c.Reason, c.Message = ReasonContainersNotInitialized, strings.Join(msgs, ", ")
		return c
	}
	c.Status = v1.ConditionTrue
	return c
}

// ReadyToStartContainersCondition mirrors status.GeneratePodReadyToStartContainersCondition: True when
// the pod's sandbox is ready with its network, else False PodSandboxNotReady with the message the
// kubelet's PodSandboxChanged gives ("no pod sandbox exists", "pod sandbox is not ready").
func ReadyToStartContainersCondition(pod *v1.Pod, sandbox SandboxState) v1.PodCondition {
	c := v1.PodCondition{Type: v1.PodReadyToStartContainers, ObservedGeneration: pod.Generation, Status: v1.ConditionTrue}
	switch sandbox {
	case SandboxReady:
	case SandboxNotReady:
		c.Status, c.Reason, c.Message = v1.ConditionFalse, ReasonPodSandboxNotReady, "pod sandbox is not ready"
	default:
		c.Status, c.Reason, c.Message = v1.ConditionFalse, ReasonPodSandboxNotReady, "no pod sandbox exists"
	}
	return c
}

// anyRegularContainerStarted is kubecontainer.HasAnyRegularContainerStarted.
func anyRegularContainerStarted(pod *v1.Pod, statuses []v1.ContainerStatus) bool {
	for i := range pod.Spec.Containers {
		if s, ok := findStatus(statuses, pod.Spec.Containers[i].Name); ok && (s.State.Running != nil || s.State.Terminated != nil) {
			return true
		}
	}
	return false
}

func hasRestartAllRule(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, r := range c.RestartPolicyRules {
				if r.Action == v1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
}
