package simulation

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/pod"
)

// The kubelet's container and image Event reasons (k8s.io/kubernetes pkg/kubelet/events) that the
// simulated runtime records, with the kubelet's messages (kuberuntime_container.go, image_manager.go).
const (
	EventReasonPulling = "Pulling"
	EventReasonPulled  = "Pulled"
	EventReasonCreated = "Created"
	EventReasonStarted = "Started"
	EventReasonKilling = "Killing"
	EventReasonBackOff = "BackOff"
	EventReasonFailed  = "Failed"
	// EventReasonUnhealthy is the prober's (prober.go): a probe failed.
	EventReasonUnhealthy = "Unhealthy"
)

// containerSeen is what the simulated runtime last told of one container in Events: its run (the
// restart count, and whether that run was created) and its waiting reason.
type containerSeen struct {
	restarts                int32
	created, running, ready bool
	reason                  string
	// readinessFailed is the time of the last failed readiness probe told (zero: none).
	readinessFailed time.Time
}

// podEvent is one Event to record.
type podEvent struct {
	ref                        *v1.ObjectReference
	eventType, reason, message string
}

// containerEvents returns the Events of what changed in the simulated containers of p since seen (the
// view told before, by position: init containers then regular ones), as the kubelet's runtime records
// them while it does it: an image pulled or found present (Pulled, with Pulling first under
// imagePullPolicy Always), the container created and started (Created, Started) at each run; a failed
// pull (Pulling, Failed "Failed to pull image ...", Failed "Error: ErrImagePull"), the back-off after it
// (BackOff "Back-off pulling image ...", Failed "Error: ImagePullBackOff"); a restart held back
// (BackOff "Back-off restarting failed container ..."); a readiness probe that failed since the view
// before (Unhealthy "Readiness probe failed: ...", as the kubelet's prober records at every failed
// probe, whether or not it changes the container's readiness; readinessFailed, when set, gives the time
// of the last failed readiness probe of a container running since start). Several runs or probes between
// two views are told once. It returns the view to keep.
func containerEvents(p *v1.Pod, rt *pod.RuntimeStatus, seen []containerSeen, readinessFailed func(c *v1.Container, start time.Time) time.Time) ([]podEvent, []containerSeen) {
	var out []podEvent
	next := make([]containerSeen, 0, len(rt.InitContainers)+len(rt.Containers))
	i := 0
	tell := func(specs []v1.Container, statuses []pod.ContainerStatus, field string) {
		for j, cs := range statuses {
			var prev containerSeen
			if i < len(seen) {
				prev = seen[i]
			}
			i++
			var c *v1.Container
			if j < len(specs) {
				c = &specs[j]
			}
			now := containerSeen{restarts: cs.RestartCount, created: cs.State.Running != nil || cs.State.Terminated != nil,
				running: cs.State.Running != nil, ready: cs.Ready}
			if cs.State.Waiting != nil {
				now.reason = cs.State.Waiting.Reason
			}
			if c != nil && c.ReadinessProbe != nil && cs.State.Running != nil && cs.Started && readinessFailed != nil {
				if now.readinessFailed = readinessFailed(c, cs.State.Running.StartedAt); now.readinessFailed.Before(prev.readinessFailed) {
					now.readinessFailed = prev.readinessFailed
				}
			}
			next = append(next, now)
			if c == nil {
				continue
			}
			ref := containerRef(p, field, c.Name)
			event := func(eventType, reason, format string, args ...any) {
				out = append(out, podEvent{ref: ref, eventType: eventType, reason: reason, message: fmt.Sprintf(format, args...)})
			}
			// A run the kubelet killed for a failed liveness or startup probe (exit 137, not on deletion).
			var ended *pod.Terminated
			switch {
			case now.restarts > prev.restarts && prev.created:
				ended = cs.LastTerminated
			case now.restarts == prev.restarts && prev.running && cs.State.Terminated != nil:
				ended = cs.State.Terminated
			}
			if probe, kind := killingProbe(c); ended != nil && ended.ExitCode == 137 && probe != nil && p.DeletionTimestamp == nil {
				event(v1.EventTypeWarning, EventReasonUnhealthy, "%s probe failed: %s", kind, probeFailedMessage(probe))
				event(v1.EventTypeNormal, EventReasonKilling, "Container %s failed %s probe, will be restarted", c.Name, strings.ToLower(kind))
			}
			if now.created && (!prev.created || now.restarts != prev.restarts) {
				if c.ImagePullPolicy == v1.PullAlways {
					event(v1.EventTypeNormal, EventReasonPulling, "Pulling image %q", c.Image)
					event(v1.EventTypeNormal, EventReasonPulled, "Successfully pulled image %q in 0s (0s including waiting). Image size: 0 bytes.", c.Image)
				} else {
					event(v1.EventTypeNormal, EventReasonPulled, "Container image %q already present on machine and can be accessed by the pod", c.Image)
				}
				event(v1.EventTypeNormal, EventReasonCreated, "Container created")
				event(v1.EventTypeNormal, EventReasonStarted, "Container started")
			}
			if now.readinessFailed.After(prev.readinessFailed) {
				event(v1.EventTypeWarning, EventReasonUnhealthy, "Readiness probe failed: %s", probeFailedMessage(c.ReadinessProbe))
			}
			if now.reason == prev.reason && now.restarts == prev.restarts {
				continue
			}
			switch now.reason {
			case pod.ReasonErrImagePull:
				event(v1.EventTypeNormal, EventReasonPulling, "Pulling image %q", c.Image)
				event(v1.EventTypeWarning, EventReasonFailed, "Failed to pull image %q: %s", c.Image, cs.State.Waiting.Message)
				event(v1.EventTypeWarning, EventReasonFailed, "Error: %s", pod.ReasonErrImagePull)
			case pod.ReasonImagePullBackOff:
				event(v1.EventTypeNormal, EventReasonBackOff, "Back-off pulling image %q", c.Image)
				event(v1.EventTypeWarning, EventReasonFailed, "Error: %s", pod.ReasonImagePullBackOff)
			case ReasonCreateContainerConfigError:
				event(v1.EventTypeWarning, EventReasonFailed, "Error: %s", cs.State.Waiting.Message)
			case pod.ReasonCrashLoopBackOff:
				event(v1.EventTypeWarning, EventReasonBackOff, "Back-off restarting failed container %s in pod %s", c.Name, formatPod(p))
			}
		}
	}
	tell(p.Spec.InitContainers, rt.InitContainers, "spec.initContainers")
	tell(p.Spec.Containers, rt.Containers, "spec.containers")
	if len(rt.EphemeralContainers) > 0 {
		// Skip the regular containers not in the view (init containers still running).
		i = len(p.Spec.InitContainers) + len(p.Spec.Containers)
		for len(next) < i {
			next = append(next, containerSeen{})
		}
		specs := make([]v1.Container, len(p.Spec.EphemeralContainers))
		for j := range p.Spec.EphemeralContainers {
			specs[j] = v1.Container(p.Spec.EphemeralContainers[j].EphemeralContainerCommon)
		}
		tell(specs, rt.EphemeralContainers, "spec.ephemeralContainers")
	}
	return out, next
}

// readinessFailedAt returns the time of the last failed readiness probe of container c (behaviour cb),
// for its run started at start, at or before now; zero when it has no readiness probe or none failed yet
// (none runs before the startup probe passed).
func readinessFailedAt(c *v1.Container, cb ContainerBehaviour, start, now time.Time) time.Time {
	if c.ReadinessProbe == nil || cb.Readiness.Mode == ProbePass {
		return time.Time{}
	}
	startedAt, _ := runProbes(c, cb, start)
	if startedAt.IsZero() || now.Before(startedAt) {
		return time.Time{}
	}
	rp := newSimProbe(c.ReadinessProbe, cb.Readiness, start, false)
	rp.gate = startedAt
	return rp.lastFailure(now)
}

// killingProbe returns the probe whose failure kills container c, and its kind as the prober names it:
// its liveness probe, else its startup probe; nil for none.
func killingProbe(c *v1.Container) (*v1.Probe, string) {
	switch {
	case c.LivenessProbe != nil:
		return c.LivenessProbe, "Liveness"
	case c.StartupProbe != nil:
		return c.StartupProbe, "Startup"
	}
	return nil, ""
}

// seenInStatus returns the view of p's containers that its API status shows: what an earlier run of
// the simulator told already (a pod it created before a restart), the view before the first one.
func seenInStatus(p *v1.Pod) []containerSeen {
	var out []containerSeen
	for _, l := range []struct {
		specs    []v1.Container
		statuses []v1.ContainerStatus
	}{{p.Spec.InitContainers, p.Status.InitContainerStatuses}, {p.Spec.Containers, p.Status.ContainerStatuses}} {
		for _, c := range l.specs {
			var seen containerSeen
			for _, cs := range l.statuses {
				if cs.Name != c.Name {
					continue
				}
				seen = containerSeen{restarts: cs.RestartCount, created: cs.State.Running != nil || cs.State.Terminated != nil,
					running: cs.State.Running != nil, ready: cs.Ready}
				if cs.State.Waiting != nil {
					seen.reason = cs.State.Waiting.Reason
					seen.created = cs.LastTerminationState.Terminated != nil
				}
			}
			out = append(out, seen)
		}
	}
	return out
}

// killingEvents returns the kubelet's Killing Events ("Stopping container <name>") of the containers
// of p that seen (the view last told) shows running, as killContainer records them on a deletion.
func killingEvents(p *v1.Pod, seen []containerSeen) []podEvent {
	var out []podEvent
	i := 0
	for _, l := range []struct {
		specs []v1.Container
		field string
	}{{p.Spec.InitContainers, "spec.initContainers"}, {p.Spec.Containers, "spec.containers"}} {
		for _, c := range l.specs {
			if i >= len(seen) {
				return out
			}
			if seen[i].running {
				out = append(out, podEvent{ref: containerRef(p, l.field, c.Name), eventType: v1.EventTypeNormal,
					reason: EventReasonKilling, message: "Stopping container " + c.Name})
			}
			i++
		}
	}
	return out
}

// containerRef is the kubelet's GenerateContainerRef: the pod, with the container's field path.
func containerRef(p *v1.Pod, field, name string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		ResourceVersion: p.ResourceVersion, FieldPath: field + "{" + name + "}"}
}

// formatPod is the kubelet's format.Pod: "<name>_<namespace>(<uid>)".
func formatPod(p *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", p.Name, p.Namespace, p.UID)
}
