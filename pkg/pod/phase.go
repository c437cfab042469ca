package pod

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Phase mirrors the kubelet's getPhase (pkg/kubelet/kubelet_pods.go) with the 1.37 gates
// (ContainerRestartRules and RestartAllContainersOnContainerExits on): Pending while a regular init
// container has not succeeded, a sidecar has not started (before the pod initialized) or a container
// waits for its first start; Failed when an init container failed and will not be restarted; Running
// while a container runs or one that exited will be restarted; Succeeded when every regular container
// exited 0 and none will be restarted, Failed when one exited non-zero. podIsTerminal (the pod's
// containers stopped for good) makes all-exited pods Succeeded/Failed whatever the restart policy.
// statuses holds init and regular container statuses; podHasInitialized says a regular container was
// created in the pod's current sandbox.
func Phase(pod *v1.Pod, statuses []v1.ContainerStatus, podIsTerminal, podHasInitialized bool) v1.PodPhase {
	spec := &pod.Spec
	var pendingSidecars, pendingInit, failedInitNotRestartable int
	for _, c := range spec.InitContainers {
		if IsRestartableInitContainer(&c) {
			continue
		}
		s, ok := findStatus(statuses, c.Name)
		if !ok {
			pendingInit++
			continue
		}
		switch {
		case s.State.Running != nil:
			pendingInit++
		case s.State.Terminated != nil:
			if code := s.State.Terminated.ExitCode; code != 0 &&
				!(ContainerShouldRestart(&c, spec, code) || s.State.Terminated.Reason == reasonRestartingAll) {
				failedInitNotRestartable++
			}
		case s.State.Waiting != nil:
			if t := s.LastTerminationState.Terminated; t != nil {
				if t.ExitCode != 0 && !(ContainerShouldRestart(&c, spec, t.ExitCode) || t.Reason == reasonRestartingAll) {
					failedInitNotRestartable++
				}
			} else {
				pendingInit++
			}
		default:
			pendingInit++
		}
	}

	var unknown, running, waiting, stopped, stoppedNotRestartable, succeeded int
	for _, c := range spec.InitContainers {
		if !IsRestartableInitContainer(&c) {
			continue
		}
		s, ok := findStatus(statuses, c.Name)
		if !ok {
			unknown++
			continue
		}
		switch {
		case s.State.Running != nil:
			if s.Started == nil || !*s.Started {
				pendingSidecars++
			}
			running++
		case s.State.Terminated != nil:
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated == nil {
				pendingSidecars++
				waiting++
			}
		default:
			pendingSidecars++
			unknown++
		}
	}
	for _, c := range spec.Containers {
		s, ok := findStatus(statuses, c.Name)
		if !ok {
			unknown++
			continue
		}
		var t *v1.ContainerStateTerminated
		switch {
		case s.State.Running != nil:
			running++
			continue
		case s.State.Terminated != nil:
			t = s.State.Terminated
			if t.ExitCode == 0 {
				succeeded++
			}
		case s.State.Waiting != nil:
			if t = s.LastTerminationState.Terminated; t == nil {
				waiting++
				continue
			}
		default:
			unknown++
			continue
		}
		stopped++
		if !(ContainerShouldRestart(&c, spec, t.ExitCode) || t.Reason == reasonRestartingAll) {
			stoppedNotRestartable++
		}
	}

	if failedInitNotRestartable > 0 {
		return v1.PodFailed
	}
	switch {
	case pendingInit > 0 || (pendingSidecars > 0 && !podHasInitialized), waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if podIsTerminal && !isStaticPod(pod) {
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		}
		if stopped != stoppedNotRestartable {
			return v1.PodRunning
		}
		if stopped == succeeded {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	default:
		return v1.PodPending
	}
}

// ContainerShouldRestart mirrors podutil.ContainerShouldRestart: the container's restart rules, then its
// restartPolicy, then the pod's (Always when unset).
func ContainerShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.ExitCodes == nil || !exitCodeMatches(rule.ExitCodes, exitCode) {
				continue
			}
			if rule.Action == v1.ContainerRestartRuleActionRestart || rule.Action == v1.ContainerRestartRuleActionRestartAllContainers {
				return true
			}
			break
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	}
	return true
}

// exitCodeMatches is podutil's rule matching: In or NotIn the listed values.
func exitCodeMatches(r *v1.ContainerRestartRuleOnExitCodes, code int32) bool {
	in := slices.Contains(r.Values, code)
	switch r.Operator {
	case v1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case v1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}

func isStaticPod(pod *v1.Pod) bool {
	src, ok := pod.Annotations[configSourceAnnotation]
	return ok && src != "api"
}

// CheckContainerStateTransition mirrors the status manager's checkContainerStateTransition: with
// restartPolicy other than Always, a container (or regular init container) that terminated and will not
// be restarted may not leave Terminated. The error names the container.
func CheckContainerStateTransition(oldStatus, newStatus *v1.PodStatus, spec *v1.PodSpec) error {
	if spec.RestartPolicy == v1.RestartPolicyAlways || podCouldRestartAll(spec) {
		return nil
	}
	check := func(kind string, olds, news []v1.ContainerStatus, specs []v1.Container) error {
		for _, o := range olds {
			if o.State.Terminated == nil {
				continue
			}
			i := slices.IndexFunc(specs, func(c v1.Container) bool { return c.Name == o.Name })
			if i < 0 {
				if kind == "init container" {
					return fmt.Errorf("found mismatch between pod spec and status, container: %v", o.Name)
				}
				continue
			}
			if kind == "init container" && IsRestartableInitContainer(&specs[i]) {
				continue
			}
			code := o.State.Terminated.ExitCode
			if code != 0 && spec.RestartPolicy == v1.RestartPolicyOnFailure {
				continue
			}
			if ContainerShouldRestart(&specs[i], spec, code) {
				continue
			}
			for _, n := range news {
				if n.Name == o.Name && n.State.Terminated == nil {
					return fmt.Errorf("terminated %s %v attempted illegal transition to non-terminated state", kind, n.Name)
				}
			}
		}
		return nil
	}
	if err := check("container", oldStatus.ContainerStatuses, newStatus.ContainerStatuses, spec.Containers); err != nil {
		return err
	}
	return check("init container", oldStatus.InitContainerStatuses, newStatus.InitContainerStatuses, spec.InitContainers)
}

// podCouldRestartAll is podutil.AllContainersCouldRestart: some container has a RestartAllContainers rule.
func podCouldRestartAll(spec *v1.PodSpec) bool {
	return hasRestartAllRule(&v1.Pod{Spec: *spec})
}

// normalizeStatus mirrors the status manager's normalizeStatus: times to whole seconds (the API's
// precision, so that comparing with the API's copy does not see a change), terminated messages cut to
// the pod's share of 12 KiB, regular and ephemeral statuses by name, init ones in spec order.
func normalizeStatus(pod *v1.Pod, s *v1.PodStatus) {
	per := maxTerminationMessageBytes
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > 0 {
		per /= n
	}
	state := func(c *v1.ContainerState) {
		if c.Running != nil {
			c.Running.StartedAt = c.Running.StartedAt.Rfc3339Copy()
		}
		if t := c.Terminated; t != nil {
			t.StartedAt, t.FinishedAt = t.StartedAt.Rfc3339Copy(), t.FinishedAt.Rfc3339Copy()
			if len(t.Message) > per {
				t.Message = t.Message[:per]
			}
		}
	}
	if s.StartTime != nil {
		t := s.StartTime.Rfc3339Copy()
		s.StartTime = &t
	}
	for i := range s.Conditions {
		s.Conditions[i].LastProbeTime = s.Conditions[i].LastProbeTime.Rfc3339Copy()
		s.Conditions[i].LastTransitionTime = s.Conditions[i].LastTransitionTime.Rfc3339Copy()
	}
	for _, list := range [][]v1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			state(&list[i].State)
			state(&list[i].LastTerminationState)
		}
	}
	byName := func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(s.ContainerStatuses, byName)
	slices.SortFunc(s.EphemeralContainerStatuses, byName)
	slices.SortStableFunc(s.InitContainerStatuses, func(a, b v1.ContainerStatus) int {
		return slices.IndexFunc(pod.Spec.InitContainers, func(c v1.Container) bool { return c.Name == a.Name }) -
			slices.IndexFunc(pod.Spec.InitContainers, func(c v1.Container) bool { return c.Name == b.Name })
	})
}
