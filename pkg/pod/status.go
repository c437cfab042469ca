package pod

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Container waiting reasons the kubelet writes (pkg/kubelet/kubelet_pods.go, pkg/kubelet/images,
// pkg/kubelet/kuberuntime).
const (
	ReasonContainerCreating = "ContainerCreating"
	ReasonPodInitializing   = "PodInitializing"
	ReasonCrashLoopBackOff  = "CrashLoopBackOff"
	ReasonErrImagePull      = "ErrImagePull"
	ReasonImagePullBackOff  = "ImagePullBackOff"
	// Terminated reasons as containerd (through the kubelet) reports them.
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	// ReasonContainerStatusUnknown is kubecontainer.ContainerReasonStatusUnknown.
	ReasonContainerStatusUnknown = "ContainerStatusUnknown"
	reasonRestartingAll          = "RestartingAllContainers"
	// maxTerminationMessageBytes is kubecontainer.MaxPodTerminationMessageLogLength: the bytes of
	// terminated messages a pod's status holds, shared out evenly between its containers.
	maxTerminationMessageBytes = 1024 * 12
)

// SandboxState is the state of a pod's sandbox: none yet, ready (network set up), or not ready.
type SandboxState uint8

// The sandbox states; the zero value is SandboxNone.
const (
	SandboxNone SandboxState = iota
	SandboxReady
	SandboxNotReady
)

// Waiting is a container not running: Reason empty means the kubelet's default (ContainerCreating, or
// PodInitializing in a pod with init containers) for a container never created (ID ""), and no reason
// for one created but not started; else e.g. CrashLoopBackOff, ErrImagePull, ImagePullBackOff.
type Waiting struct {
	Reason, Message string
}

// Running is a running container since StartedAt.
type Running struct {
	StartedAt time.Time
}

// Terminated is an exited container. ID is the runtime's ID of the container that exited; empty means
// the ID of the ContainerStatus it belongs to. Reason is containerd's: Completed for exit 0, Error
// otherwise, OOMKilled, ContainerCannotRun, ...
type Terminated struct {
	ExitCode              int32
	Reason, Message, ID   string
	StartedAt, FinishedAt time.Time
}

// ContainerState is one of Waiting, Running or Terminated (the first non-nil in that order wins); all
// nil is an unknown state, shown as waiting.
type ContainerState struct {
	Waiting    *Waiting
	Running    *Running
	Terminated *Terminated
}

// ContainerStatus is what the runtime and the prober say of one container, by Name: ID is the runtime's
// container ID without scheme ("" when never created; the status shows RuntimeName://ID), Image and
// ImageID as the runtime reports them (Image empty: the spec's), the State, the previous run's
// LastTerminated (nil: carried from the pod's current status as the kubelet does), Started (the startup
// probe passed, or there is none) and Ready (the readiness probe passed, or there is none); both only
// count while the container runs. RestartCount is how many times it has been restarted.
// AllocatedResourcesStatus is the health of the devices of the container's ResourceClaims (the
// kubelet's DRA manager's UpdateAllocatedResourcesStatus, KEP-4680; pkg/dra), shown as given.
type ContainerStatus struct {
	Name, ID, Image, ImageID string
	State                    ContainerState
	LastTerminated           *Terminated
	Started, Ready           bool
	RestartCount             int32
	AllocatedResourcesStatus []v1.ResourceStatus
}

// RuntimeStatus is the runtime's view of one pod, the part of the kubelet's kubecontainer.PodStatus and
// prober state that the pod's API status is made from. RuntimeName is the scheme of container IDs
// ("containerd"). PodIPs are the sandbox's IPs (any order; ignored for hostNetwork pods, which get
// HostIPs), HostIPs the Node's, primary first (at most two used). Terminal says the pod's containers
// have stopped for good (deleted, evicted, past activeDeadlineSeconds): the kubelet's podIsTerminal,
// which makes a pod whose containers all exited Succeeded or Failed whatever its restartPolicy.
// Containers not listed are treated as the kubelet treats containers the runtime does not know.
type RuntimeStatus struct {
	RuntimeName                                     string
	Sandbox                                         SandboxState
	PodIPs, HostIPs                                 []netip.Addr
	Terminal                                        bool
	InitContainers, Containers, EphemeralContainers []ContainerStatus
}

// ContainerID returns a container's ID as the API shows it, "<runtime>://<id>", or "" for an empty id.
func ContainerID(runtimeName, id string) string {
	if id == "" {
		return ""
	}
	return runtimeName + "://" + id
}

// GenerateStatus returns the status the kubelet would patch for pod given the runtime's view rt at time
// now, and an error when that status is refused (a container of a pod that does not restart it leaving
// Terminated; nothing is to be written then). pod is the informer's copy: its status is both the
// kubelet's old status and the API's. It mirrors, in order:
//   - Kubelet.generateAPIPodStatus and convertStatusToAPIStatus / convertToAPIContainerStatuses
//     (pkg/kubelet/kubelet_pods.go): container statuses (regular ones by name, init ones in spec order,
//     default waiting reasons, restart counts and last states carried from the old status), getPhase,
//     a terminal phase kept, the phase's reason and message kept, the prober's started/ready rules,
//     the conditions of other writers kept and the kubelet's appended in its order
//     (PodReadyToStartContainers, Initialized, Ready, ContainersReady, PodScheduled), hostIP/hostIPs,
//     podIP/podIPs ordered by the host's IP family, host IPs for hostNetwork pods, qosClass;
//   - status_manager.go SetPodStatus (observedGeneration) and updateStatusInternal
//     (checkContainerStateTransition, updateLastTransitionTime, startTime kept once set, normalizeStatus);
//   - status_manager.go mergePodStatus against the API's status: conditions other writers set kept
//     first, no terminal phase while a container runs, Ready and ContainersReady False with
//     PodCompleted/PodFailed once terminal.
//
// Intended differences: the kubelet compares against its own cache of what it last wrote, nodeagent
// against the API's copy (so it holds no status per pod, and a condition another writer flipped, e.g. the
// node-lifecycle controller's Ready False, gets a new transition time when set back); volumeMounts are
// always derived from the spec (the kubelet copies them from its previous status, which has them from its
// first, ContainerCreating, write) with recursiveReadOnly Disabled (no RRO support simulated); container
// and pod resources are the spec's (the kubelet reads running containers' from the CRI and cgroups);
// allocatedResourcesStatus only of containers the runtime knows (the provider's); no user or stopSignal.
func GenerateStatus(pod *v1.Pod, rt *RuntimeStatus, now time.Time) (v1.PodStatus, error) {
	return generateStatus(pod, rt, now, nil)
}

// Evict is a pod sync handler's request that the pod be failed (the kubelet's
// lifecycle.ShouldEvictResponse: its active deadline, the eviction manager): Reason and Message of the
// Failed phase.
type Evict struct {
	Reason, Message string
}

// GenerateEvictedStatus is GenerateStatus for a pod a pod sync handler fails: as generateAPIPodStatus
// overrides them, the phase is Failed with e's reason and message, before the conditions are generated
// (Ready and ContainersReady False PodFailed) and the status manager's merge (which keeps the old phase
// while a container may run).
func GenerateEvictedStatus(pod *v1.Pod, rt *RuntimeStatus, now time.Time, e Evict) (v1.PodStatus, error) {
	return generateStatus(pod, rt, now, &e)
}

func generateStatus(pod *v1.Pod, rt *RuntimeStatus, now time.Time, evict *Evict) (v1.PodStatus, error) {
	old := pod.Status
	hasInit := len(pod.Spec.InitContainers) > 0
	s := v1.PodStatus{QOSClass: PodQOS(pod)}

	ips := podIPs(rt.PodIPs, rt.HostIPs)
	if pod.Spec.HostNetwork && len(ips) == 0 {
		ips = rt.HostIPs[:min(len(rt.HostIPs), 2)]
	}
	for _, ip := range ips {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip.String()})
	}
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}
	for i, ip := range rt.HostIPs[:min(len(rt.HostIPs), 2)] {
		if i == 0 {
			s.HostIP = ip.String()
		}
		s.HostIPs = append(s.HostIPs, v1.HostIP{IP: ip.String()})
	}

	s.ContainerStatuses = convertContainers(pod, rt, old.ContainerStatuses, pod.Spec.Containers, rt.Containers, hasInit, false)
	s.InitContainerStatuses = convertContainers(pod, rt, old.InitContainerStatuses, pod.Spec.InitContainers, rt.InitContainers, hasInit, true)
	if n := len(pod.Spec.EphemeralContainers); n > 0 {
		specs := make([]v1.Container, n)
		for i := range pod.Spec.EphemeralContainers {
			specs[i] = v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
		s.EphemeralContainerStatuses = convertContainers(pod, rt, old.EphemeralContainerStatuses, specs, rt.EphemeralContainers, hasInit, false)
	}
	s.AllocatedResources = resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	s.Resources = effectivePodResources(pod)

	all := append(append([]v1.ContainerStatus{}, s.ContainerStatuses...), s.InitContainerStatuses...)
	s.Phase = Phase(pod, all, rt.Terminal, anyActiveRegularContainer(pod, rt))
	if !isTerminal(s.Phase) && isTerminal(old.Phase) {
		s.Phase = old.Phase // the three-way merge and "pods are not allowed to transition out of terminal phases"
	}
	if s.Phase == old.Phase {
		s.Reason, s.Message = old.Reason, old.Message
	}
	if evict != nil {
		s.Phase, s.Reason, s.Message = v1.PodFailed, evict.Reason, evict.Message
		if isTerminal(old.Phase) {
			s.Phase = old.Phase // pods are not allowed to transition out of terminal phases
		}
	}

	applyProber(pod, rt, &s)

	// Room for the other writers' conditions and the kubelet's five (one allocation, not four).
	s.Conditions = make([]v1.PodCondition, 0, len(old.Conditions)+5)
	for _, c := range old.Conditions {
		if !isKubeletCondition(c.Type) {
			s.Conditions = append(s.Conditions, c)
		}
	}
	allStatuses := append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
	s.Conditions = append(s.Conditions, ReadyToStartContainersCondition(pod, rt.Sandbox))
	s.Conditions = append(s.Conditions, InitializedCondition(pod, allStatuses, s.Phase))
	s.Conditions = append(s.Conditions, ReadyCondition(pod, s.Conditions, allStatuses, s.Phase))
	s.Conditions = append(s.Conditions, ContainersReadyCondition(pod, allStatuses, s.Phase))
	s.Conditions = append(s.Conditions, v1.PodCondition{Type: v1.PodScheduled, ObservedGeneration: pod.Generation, Status: v1.ConditionTrue})
	s.ObservedGeneration = pod.Generation

	// updateStatusInternal, against the API's status.
	if err := CheckContainerStateTransition(&old, &s, &pod.Spec); err != nil {
		return v1.PodStatus{}, err
	}
	nowT := metav1.NewTime(now).Rfc3339Copy()
	for _, t := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady, v1.PodInitialized,
		v1.PodReadyToStartContainers, v1.PodScheduled, v1.DisruptionTarget} {
		updateLastTransitionTime(&s, &old, t, nowT)
	}
	if old.StartTime != nil && !old.StartTime.IsZero() {
		s.StartTime = old.StartTime.DeepCopy()
	} else {
		s.StartTime = nowT.DeepCopy()
	}
	if old.ObservedGeneration > s.ObservedGeneration {
		s.ObservedGeneration = old.ObservedGeneration
	}
	normalizeStatus(pod, &s)

	return MergeStatus(pod, old, s, couldHaveRunningContainers(rt), now), nil
}

// MergeStatus mirrors the status manager's mergePodStatus (pkg/kubelet/status/status_manager.go): the
// conditions of other writers in oldStatus (the API's) first, then the kubelet's from newStatus; the
// API's resource claim statuses kept; no move to a terminal phase while couldHaveRunningContainers;
// once terminal, Ready and ContainersReady False with PodCompleted/PodFailed (transition time now if
// they change). newStatus is not modified.
func MergeStatus(pod *v1.Pod, oldStatus, newStatus v1.PodStatus, couldHaveRunningContainers bool, now time.Time) v1.PodStatus {
	conds := make([]v1.PodCondition, 0, len(oldStatus.Conditions)+len(newStatus.Conditions))
	for _, c := range oldStatus.Conditions {
		if !isKubeletCondition(c.Type) {
			conds = append(conds, c)
		}
	}
	for _, c := range newStatus.Conditions {
		if isKubeletCondition(c.Type) {
			conds = append(conds, c)
		}
	}
	newStatus.Conditions = conds
	newStatus.ResourceClaimStatuses = oldStatus.ResourceClaimStatuses
	newStatus.ExtendedResourceClaimStatus = oldStatus.ExtendedResourceClaimStatus
	newStatus.NodeAllocatableResourceClaimStatuses = oldStatus.NodeAllocatableResourceClaimStatuses

	if !isTerminal(oldStatus.Phase) && isTerminal(newStatus.Phase) && couldHaveRunningContainers {
		newStatus.Phase, newStatus.Reason, newStatus.Message = oldStatus.Phase, oldStatus.Reason, oldStatus.Message
	}
	if isTerminal(newStatus.Phase) {
		_, ready := findCondition(newStatus.Conditions, v1.PodReady)
		_, cready := findCondition(newStatus.Conditions, v1.ContainersReady)
		if (ready != nil && ready.Status == v1.ConditionTrue) || (cready != nil && cready.Status == v1.ConditionTrue) {
			nowT := metav1.NewTime(now).Rfc3339Copy()
			for _, t := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady} {
				c := v1.PodCondition{Type: t, ObservedGeneration: pod.Generation, Status: v1.ConditionFalse, Reason: terminalReason(newStatus.Phase)}
				updatePodCondition(&newStatus, c, nowT)
			}
		}
	}
	return newStatus
}

// updatePodCondition is podutil.UpdatePodCondition: replace (transition time kept when the status is
// unchanged) or append. The conditions slice is copied first so that the caller's is not modified.
func updatePodCondition(s *v1.PodStatus, c v1.PodCondition, now metav1.Time) {
	c.LastTransitionTime = now
	s.Conditions = slices.Clone(s.Conditions)
	i, old := findCondition(s.Conditions, c.Type)
	if old == nil {
		s.Conditions = append(s.Conditions, c)
		return
	}
	if c.Status == old.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	s.Conditions[i] = c
}

// updateLastTransitionTime mirrors the status manager's: now unless the old condition has the same status.
func updateLastTransitionTime(s, old *v1.PodStatus, t v1.PodConditionType, now metav1.Time) {
	_, c := findCondition(s.Conditions, t)
	if c == nil {
		return
	}
	if _, o := findCondition(old.Conditions, t); o != nil && o.Status == c.Status {
		c.LastTransitionTime = o.LastTransitionTime
		return
	}
	c.LastTransitionTime = now
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

func couldHaveRunningContainers(rt *RuntimeStatus) bool {
	for _, list := range [][]ContainerStatus{rt.InitContainers, rt.Containers, rt.EphemeralContainers} {
		for i := range list {
			if list[i].State.Waiting == nil && list[i].State.Running != nil {
				return true
			}
		}
	}
	return false
}

// anyActiveRegularContainer is kubecontainer.HasAnyActiveRegularContainerStarted: a regular container
// created in the current sandbox.
func anyActiveRegularContainer(pod *v1.Pod, rt *RuntimeStatus) bool {
	for _, c := range rt.Containers {
		if c.ID != "" && slices.ContainsFunc(pod.Spec.Containers, func(s v1.Container) bool { return s.Name == c.Name }) {
			return true
		}
	}
	return false
}

// podIPs is Kubelet.sortPodIPs: the first IP of the host's primary family (IPv4 when the host has
// none), then the first of the other family.
func podIPs(ips, hostIPs []netip.Addr) []netip.Addr {
	primaryV4 := len(hostIPs) == 0 || hostIPs[0].Unmap().Is4()
	out := make([]netip.Addr, 0, 2)
	for _, wantV4 := range []bool{primaryV4, !primaryV4} {
		for _, ip := range ips {
			if ip.IsValid() && ip.Unmap().Is4() == wantV4 {
				out = append(out, ip.Unmap())
				break
			}
		}
	}
	return out
}

func toAPITerminated(t *Terminated, runtimeName, defaultID string) *v1.ContainerStateTerminated {
	id := ContainerID(runtimeName, t.ID)
	if id == "" {
		id = defaultID
	}
	return &v1.ContainerStateTerminated{
		ExitCode: t.ExitCode, Reason: t.Reason, Message: t.Message,
		StartedAt: metav1.NewTime(t.StartedAt), FinishedAt: metav1.NewTime(t.FinishedAt), ContainerID: id,
	}
}

// convertContainers mirrors Kubelet.convertToAPIContainerStatuses for one list of containers.
func convertContainers(pod *v1.Pod, rt *RuntimeStatus, previous []v1.ContainerStatus, specs []v1.Container,
	view []ContainerStatus, hasInit, isInit bool) []v1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	defaultWaiting := ReasonContainerCreating
	if hasInit {
		defaultWaiting = ReasonPodInitializing
	}
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		spec := &specs[i]
		old, hasOld := findStatus(previous, spec.Name)
		vi := slices.IndexFunc(view, func(c ContainerStatus) bool { return c.Name == spec.Name })
		var st v1.ContainerStatus
		if vi < 0 {
			// Not known to the runtime: the default waiting state with the old counts, the old status
			// when it was terminated, a ContainerStatusUnknown last state when it used to run.
			st = v1.ContainerStatus{Name: spec.Name, Image: spec.Image,
				State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: defaultWaiting}}}
			if hasOld {
				if old.State.Terminated != nil {
					st = *old.DeepCopy()
				} else {
					st.RestartCount = old.RestartCount
					st.LastTerminationState = *old.LastTerminationState.DeepCopy()
					if old.State.Running != nil && st.LastTerminationState.Terminated == nil {
						st.LastTerminationState.Terminated = &v1.ContainerStateTerminated{
							Reason:   ReasonContainerStatusUnknown,
							Message:  "The container could not be located when the pod was deleted.  The container used to be Running",
							ExitCode: 137,
						}
						if pod.DeletionTimestamp == nil {
							st.RestartCount++
						}
					}
				}
			}
		} else {
			c := &view[vi]
			cid := ContainerID(rt.RuntimeName, c.ID)
			st = v1.ContainerStatus{Name: spec.Name, Image: c.Image, ImageID: c.ImageID, ContainerID: cid, RestartCount: c.RestartCount}
			if st.Image == "" {
				st.Image = spec.Image
			}
			if hasOld {
				// RestartAllContainersOnContainerExits (beta, on): counts never go down, last states carried.
				st.RestartCount = max(st.RestartCount, old.RestartCount)
				if old.ContainerID != cid && old.State.Terminated != nil {
					st.LastTerminationState.Terminated = old.State.Terminated.DeepCopy()
				} else if old.LastTerminationState.Terminated != nil {
					st.LastTerminationState.Terminated = old.LastTerminationState.Terminated.DeepCopy()
				}
			}
			switch {
			case c.State.Waiting != nil:
				w := &v1.ContainerStateWaiting{Reason: c.State.Waiting.Reason, Message: c.State.Waiting.Message}
				if w.Reason == "" && c.ID == "" {
					w.Reason = defaultWaiting
				}
				st.State.Waiting = w
			case c.State.Running != nil:
				st.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(c.State.Running.StartedAt)}
				if hasOld && old.Started != nil {
					started := *old.Started // ChangeContainerStatusOnKubeletRestart off: started carried until the prober runs
					st.Started = &started
				}
			case c.State.Terminated != nil:
				st.State.Terminated = toAPITerminated(c.State.Terminated, rt.RuntimeName, cid)
			default:
				st.State.Waiting = &v1.ContainerStateWaiting{}
			}
			if c.LastTerminated != nil {
				st.LastTerminationState = v1.ContainerState{Terminated: toAPITerminated(c.LastTerminated, rt.RuntimeName, cid)}
			}
			st.Resources = spec.Resources.DeepCopy()
			st.AllocatedResources = spec.Resources.Requests.DeepCopy()
			st.AllocatedResourcesStatus = c.AllocatedResourcesStatus
		}
		st.VolumeMounts = volumeMountStatuses(spec)
		out = append(out, st)
	}
	if !isInit {
		slices.SortFunc(out, func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

func volumeMountStatuses(c *v1.Container) []v1.VolumeMountStatus {
	if len(c.VolumeMounts) == 0 {
		return nil
	}
	out := make([]v1.VolumeMountStatus, 0, len(c.VolumeMounts))
	for _, m := range c.VolumeMounts {
		vs := v1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if m.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			vs.RecursiveReadOnly = &mode
		}
		out = append(out, vs)
	}
	return out
}

// effectivePodResources is the kubelet's getEffectiveAllocatedResources: the pod's aggregated requests
// and limits (pod-level ones when set).
func effectivePodResources(pod *v1.Pod) *v1.ResourceRequirements {
	r := pod.Spec.Resources.DeepCopy()
	if r == nil {
		r = &v1.ResourceRequirements{}
	}
	r.Requests = resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	r.Limits = resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	return r
}

// applyProber mirrors the prober manager's UpdatePodStatus: started only while running and the view
// says the startup probe passed (or there is none); ready only when started, running and the view says
// the readiness probe passed; a regular init container is ready once it exited 0.
func applyProber(pod *v1.Pod, rt *RuntimeStatus, s *v1.PodStatus) {
	flags := func(view []ContainerStatus, name string) (started, ready bool) {
		if i := slices.IndexFunc(view, func(c ContainerStatus) bool { return c.Name == name }); i >= 0 {
			return view[i].Started, view[i].Ready
		}
		return false, false
	}
	for i := range s.ContainerStatuses {
		c := &s.ContainerStatuses[i]
		vs, vr := flags(rt.Containers, c.Name)
		started := c.State.Running != nil && vs
		c.Started = &started
		c.Ready = started && vr
	}
	for i := range s.InitContainerStatuses {
		c := &s.InitContainerStatuses[i]
		vs, vr := flags(rt.InitContainers, c.Name)
		started := c.State.Running != nil && vs
		c.Started = &started
		if j := slices.IndexFunc(pod.Spec.InitContainers, func(x v1.Container) bool { return x.Name == c.Name }); j >= 0 && !IsRestartableInitContainer(&pod.Spec.InitContainers[j]) {
			c.Ready = c.State.Terminated != nil && c.State.Terminated.ExitCode == 0
			continue
		}
		c.Ready = started && vr
	}
}

// MessageTerminatedUnknown is the message of a container the kubelet's status manager marks terminated
// when the pod terminated without it (status_manager.go TerminatePod).
const MessageTerminatedUnknown = "The container could not be located when the pod was terminated"

// TerminatedStatus returns the final status of a pod whose containers have stopped for good (deleted,
// evicted, its phase terminal), made from s, the status GenerateStatus gave with rt.Terminal: it
// mirrors the kubelet's status manager TerminatePod, which SyncTerminatedPod calls on the generated
// status. Once the pod has initialized (hasPodInitialized, read from pod.Status as the kubelet reads
// it), every regular container not terminated is marked terminated, exit code 137, reason
// ContainerStatusUnknown, MessageTerminatedUnknown; so is every init container up to the last one that
// shows evidence of a start; a non-static pod not in a terminal phase is marked Failed. A pod deleted
// before its containers started so ends Failed instead of Pending for ever. s is not modified.
func TerminatedStatus(pod *v1.Pod, s v1.PodStatus) v1.PodStatus {
	out := *s.DeepCopy()
	unknown := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		Reason: ReasonContainerStatusUnknown, Message: MessageTerminatedUnknown, ExitCode: 137}}
	if hasPodInitialized(pod) {
		for i := range out.ContainerStatuses {
			if out.ContainerStatuses[i].State.Terminated == nil {
				out.ContainerStatuses[i].State = *unknown.DeepCopy()
			}
		}
	}
	for i := range initializedContainers(out.InitContainerStatuses) {
		if out.InitContainerStatuses[i].State.Terminated == nil {
			out.InitContainerStatuses[i].State = *unknown.DeepCopy()
		}
	}
	if !isStaticPod(pod) && !isTerminal(out.Phase) {
		out.Phase = v1.PodFailed
	}
	return out
}

// hasPodInitialized mirrors the status manager's hasPodInitialized: no init containers, a regular
// container that ever left waiting, or the last init container started (a sidecar) or exited 0 (now
// or in its last termination).
func hasPodInitialized(pod *v1.Pod) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.LastTerminationState.Terminated != nil || s.State.Waiting == nil {
			return true
		}
	}
	l := len(pod.Status.InitContainerStatuses)
	if l == 0 || l > len(pod.Spec.InitContainers) {
		return false
	}
	c, s := &pod.Spec.InitContainers[l-1], pod.Status.InitContainerStatuses[l-1]
	if IsRestartableInitContainer(c) {
		return s.State.Running != nil && s.Started != nil && *s.Started
	}
	if t := s.LastTerminationState.Terminated; t != nil && t.ExitCode == 0 {
		return true
	}
	return s.State.Terminated != nil && s.State.Terminated.ExitCode == 0
}

// initializedContainers mirrors the status manager's initializedContainers: the init container
// statuses up to the last one that left waiting or has a last termination, at least the first.
func initializedContainers(cs []v1.ContainerStatus) []v1.ContainerStatus {
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].State.Waiting == nil || cs[i].LastTerminationState.Terminated != nil {
			return cs[:i+1]
		}
	}
	if len(cs) > 0 {
		return cs[:1]
	}
	return nil
}
