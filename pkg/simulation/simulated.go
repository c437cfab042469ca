package simulation

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/nodeagent/nodeagent/pkg/pod"
	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Annotations that set a pod's simulated behaviour; a key with a ".<container>" suffix sets it for that
// container only (e.g. nodeagent.io/exit-code.worker: "3"), taking precedence over the pod-wide key.
// Durations are Go durations ("2s", "1m30s", not negative); exit codes integers 0-255.
//
//	nodeagent.io/container-start-delay: 2s    from the pod's start (admission) to its containers running;
//	                                          each init container and sidecar takes it again in turn
//	nodeagent.io/readiness-delay: 5s          from a container running to it turning ready
//	nodeagent.io/run-duration: 30s            how long a container runs before it exits (default: for
//	                                          ever; 0 for init containers other than sidecars, and for
//	                                          pods owned by a Job, as KWOK's fast Stages).
//	                                          KWOK's pod-complete.stage.kwok.x-k8s.io/delay has this
//	                                          meaning for Job pods
//	nodeagent.io/exit-code: 1                 the exit code when it does (default 0); as KWOK's
//	                                          pod-container-running-failed.stage.kwok.x-k8s.io/exit-code.
//	                                          With a run duration and restartPolicy Always or OnFailure
//	                                          this is a crash loop: restartCount grows, CrashLoopBackOff
//	                                          with the kubelet's back-off (10 s doubling to 5 min, reset
//	                                          when a run lasted 10 min)
//	nodeagent.io/image-pull-error: "not found"  the image pull fails with this message (its first
//	                                          MaxImagePullErrorBytes): ErrImagePull, then
//	                                          ImagePullBackOff with the same back-off
//	nodeagent.io/stop-delay: 3s               from a delete to the containers stopped (exit 0); at or
//	                                          beyond the grace period they are killed (exit 137)
const (
	AnnotationStartDelay     = "nodeagent.io/container-start-delay"
	AnnotationReadinessDelay = "nodeagent.io/readiness-delay"
	AnnotationRunDuration    = "nodeagent.io/run-duration"
	AnnotationExitCode       = "nodeagent.io/exit-code"
	AnnotationImagePullError = "nodeagent.io/image-pull-error"
	AnnotationStopDelay      = "nodeagent.io/stop-delay"
)

// The kubelet's back-offs (pkg/kubelet/kubelet.go): crash loops and image pulls start at 10 s and double
// up to 5 min; a back-off is forgotten after twice its maximum without a failure.
const (
	InitialBackOff = 10 * time.Second
	MaxBackOff     = 5 * time.Minute
	backOffReset   = 2 * MaxBackOff
	// errImagePullShown is how long a failed pull shows ErrImagePull before ImagePullBackOff (the
	// kubelet's next sync of the pod).
	errImagePullShown = time.Second
)

// annotationPrefix is the prefix of the simulated behaviour's annotations: a pod's key with it that
// is none of them is told as a bad annotation (a typo would otherwise be ignored).
const annotationPrefix = "nodeagent.io/"

// MaxImagePullErrorBytes bounds the message of a simulated image pull error (the annotation's value is
// cut there): a runtime's pull errors are a few hundred bytes, and the message is written in the pod's
// status twice and in its Events, where a long one would make the API server refuse the writes (413).
const MaxImagePullErrorBytes = 1024

// ErrBadAnnotation is wrapped by Behaviour's errors: an annotation whose value does not parse.
var ErrBadAnnotation = errors.New("bad annotation")

// ContainerBehaviour is how one simulated container behaves. Durations are from the event before.
type ContainerBehaviour struct {
	StartDelay, ReadinessDelay time.Duration
	// RunDuration is how long it runs before it exits; nil: for ever.
	RunDuration *time.Duration
	ExitCode    int32
	// ImagePullError, when set, is the message every pull of its image fails with.
	ImagePullError string
	// Readiness, Liveness and Startup are what its probes answer (probes.go), for the probes its spec
	// has.
	Readiness, Liveness, Startup ProbeBehaviour
	// RunAnnotated: nodeagent.io/run-duration or exit-code set RunDuration or ExitCode, which then
	// take precedence over the container's command (SimInput.Run is not asked).
	RunAnnotated bool
}

// Behaviour is how a simulated pod behaves: Default for every container, PerContainer by name on top.
type Behaviour struct {
	Default      ContainerBehaviour
	PerContainer map[string]ContainerBehaviour
	// StopDelay is from the delete request to the containers stopped, capped by the grace period.
	StopDelay time.Duration
	// StopDelaySet: StopDelay was given (the nodeagent.io/stop-delay annotation, or a non-zero
	// default). Without it, a container whose run its command decided stops as that command's process
	// does on a kubelet's Node: a shell or sleep, PID 1 without a SIGTERM handler, ignores the SIGTERM
	// and is killed at the grace period (exit 137); with shareProcessNamespace it is not PID 1 and dies
	// of the SIGTERM at once (exit 143). A process with a SIGTERM handler that exits (/pause:
	// RunOutcome.ExitsOnSIGTERM) stops at the delete request with exit 0.
	StopDelaySet bool
}

// For returns the behaviour of the named container.
func (b *Behaviour) For(name string) ContainerBehaviour {
	if c, ok := b.PerContainer[name]; ok {
		return c
	}
	return b.Default
}

// PodBehaviour returns pod's simulated behaviour: def (the simulation-wide default; its zero value is
// KWOK's fast Stages: containers run and turn ready at once and run for ever) with a run duration of 0
// for pods owned by a Job, then the pod's annotations on top. Errors (errors.Join of one per bad
// annotation, each wrapping ErrBadAnnotation and naming the key and the value): the returned behaviour
// then has the default for those keys, so that the caller can emit an Event and go on.
func PodBehaviour(p *v1.Pod, def Behaviour) (Behaviour, error) {
	b := Behaviour{Default: def.Default, StopDelay: def.StopDelay, StopDelaySet: def.StopDelaySet || def.StopDelay > 0}
	for _, o := range p.OwnerReferences {
		if o.Kind == "Job" && b.Default.RunDuration == nil {
			zero := time.Duration(0)
			b.Default.RunDuration = &zero
		}
	}
	var errs []error
	bad := func(key, value, why string) {
		errs = append(errs, fmt.Errorf("%w %s: %q %s", ErrBadAnnotation, key, value, why))
	}
	duration := func(key, value string) (time.Duration, bool) {
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 {
			bad(key, value, "is not a non-negative duration such as 2s or 1m30s")
			return 0, false
		}
		return d, true
	}
	apply := func(c *ContainerBehaviour, field, key, value string) {
		switch field {
		case AnnotationStartDelay:
			if d, ok := duration(key, value); ok {
				c.StartDelay = d
			}
		case AnnotationReadinessDelay:
			if d, ok := duration(key, value); ok {
				c.ReadinessDelay = d
			}
		case AnnotationRunDuration:
			if d, ok := duration(key, value); ok {
				c.RunDuration = &d
				c.RunAnnotated = true
			}
		case AnnotationExitCode:
			n, err := strconv.ParseInt(value, 10, 32)
			if err != nil || n < 0 || n > 255 {
				bad(key, value, "is not an exit code from 0 to 255")
				return
			}
			c.ExitCode = int32(n)
			c.RunAnnotated = true
		case AnnotationImagePullError:
			c.ImagePullError = value[:min(len(value), MaxImagePullErrorBytes)]
		case AnnotationReadinessProbe, AnnotationLivenessProbe, AnnotationStartupProbe:
			pb, ok := parseProbe(value)
			if !ok {
				bad(key, value, "is not pass, fail, fail-after:<duration>, pass-after:<duration> or flap:<duration>")
				return
			}
			switch field {
			case AnnotationReadinessProbe:
				c.Readiness = pb
			case AnnotationLivenessProbe:
				c.Liveness = pb
			default:
				c.Startup = pb
			}
		}
	}
	fields := []string{AnnotationStartDelay, AnnotationReadinessDelay, AnnotationRunDuration, AnnotationExitCode, AnnotationImagePullError,
		AnnotationReadinessProbe, AnnotationLivenessProbe, AnnotationStartupProbe}
	// Pod-wide keys first, then per-container ones on top of the pod-wide result.
	for _, f := range fields {
		if v, ok := p.Annotations[f]; ok {
			apply(&b.Default, f, f, v)
		}
	}
	if v, ok := p.Annotations[AnnotationStopDelay]; ok {
		if d, ok := duration(AnnotationStopDelay, v); ok {
			b.StopDelay, b.StopDelaySet = d, true
		}
	}
	containers := map[string]bool{}
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range l {
			containers[c.Name] = true
		}
	}
	for i := range p.Spec.EphemeralContainers {
		containers[p.Spec.EphemeralContainers[i].Name] = true
	}
	for key, v := range p.Annotations {
		if !strings.HasPrefix(key, annotationPrefix) || key == AnnotationStopDelay || key == AnnotationPrepareError || slices.Contains(fields, key) || IsUsageAnnotation(key) || IsStreamingAnnotation(key) {
			continue
		}
		known := false
		for _, f := range fields {
			if name, ok := strings.CutPrefix(key, f+"."); ok {
				known = true
				if !containers[name] {
					bad(key, v, fmt.Sprintf("names no container of the pod (%q)", name))
				}
			}
		}
		if !known {
			bad(key, v, "is not a nodeagent.io/ pod annotation (known: "+strings.Join(append(slices.Clone(fields), AnnotationStopDelay), ", ")+", each but stop-delay with an optional .<container>)")
		}
	}
	for key, v := range p.Annotations {
		for _, f := range fields {
			name, ok := strings.CutPrefix(key, f+".")
			if !ok {
				continue
			}
			if b.PerContainer == nil {
				b.PerContainer = map[string]ContainerBehaviour{}
			}
			c, seen := b.PerContainer[name]
			if !seen {
				c = b.Default
			}
			apply(&c, f, key, v)
			b.PerContainer[name] = c
		}
	}
	return b, errors.Join(errs...)
}

// Overrides are what the control API changed in a pod's running containers, by container name; the
// caller stores them per pod and passes them to Simulate.
type Overrides map[string]ContainerOverride

// ContainerOverride: each of Crashes ends the container's run in progress at its time with its exit
// code (1 when 0; its restart policy then applies, as after any exit: a second crash within the
// back-off is a crash loop); Stop ends it at StopAt with exit 0 (Completed); Unready makes it not ready
// while set.
type ContainerOverride struct {
	Crashes []Crash
	StopAt  time.Time
	Unready bool
}

// Crash is one crash of a container made through the control API: at At, with ExitCode.
type Crash struct {
	At       time.Time
	ExitCode int32
}

// SimInput is what Simulate needs of a pod beyond its spec: when it was admitted (StartTime), the
// runtime's name for container IDs, the pod's and Node's addresses, the control API's Overrides, and
// when the deletion was first seen (DeletionSeen; zero: not seen, or not deleted).
type SimInput struct {
	StartTime       time.Time
	RuntimeName     string
	PodIPs, HostIPs []netip.Addr
	Overrides       Overrides
	// Baseline, when set, is the containers' history up to Baseline.At as it was (a status already
	// written, or the view before a change of behaviour): Simulate goes on from there instead of
	// computing the whole history again from StartTime with the behaviour now.
	Baseline *Baseline
	// EphemeralStarts are when each ephemeral container (by name) was first seen in the pod's spec:
	// it runs from then; one not there is not started yet.
	EphemeralStarts map[string]time.Time
	// DeletionSeen places the delete request within its second: deletionTimestamp − grace is only
	// known to the second (the API's times are), so a pod deleted in the second it started would
	// otherwise seem deleted before its containers started, which the status already written says
	// they did. The request is taken at DeletionSeen, kept within that second.
	DeletionSeen time.Time
	// Run, when set, gives the outcome of a container's run from its command (the pod's simulated
	// runtime interprets it in pkg/simulation/sandbox), asked for each run (restarts: its restart
	// count) once it has started, unless the container's behaviour is RunAnnotated; ok false: the
	// behaviour's RunDuration and ExitCode apply. It must give the same answer for the same run.
	Run func(c *v1.Container, restarts int32, start time.Time) (out RunOutcome, ok bool)
	// PreStop are the preStop exec hooks run at the deletion (the simulated runtime interprets each
	// once, when it first sees the deletion), by container name: each delays its container's SIGTERM
	// as the kubelet's killContainer does (PreStopHook). A container not there has no hook run.
	PreStop map[string]PreStopHook
}

// RunOutcome is how one run of a container ends: after Duration with ExitCode, or never by itself
// (Forever); and how its process takes the kubelet's SIGTERM when a deletion (or the kubelet's kill)
// stops it first.
type RunOutcome struct {
	Forever  bool
	Duration time.Duration
	ExitCode int32
	// ExitsOnSIGTERM: the process has a SIGTERM handler that exits 0 at once (/pause: its sigdown), so
	// it stops at the delete request with exit 0 (Completed), as a container without a command. False:
	// the process is PID 1 of its container without a handler (a shell, sleep: the sandbox honours no
	// trap), which ignores the SIGTERM and is killed at the grace period (exit 137), or, with
	// shareProcessNamespace, not PID 1 and dies of it at once (exit 143).
	ExitsOnSIGTERM bool
	// SIGTERMExitCode is the code ExitsOnSIGTERM's handler exits with (0 for /pause, 2 for agnhost's
	// pause).
	SIGTERMExitCode int32
	// Output is what the command wrote to its standard output and error (its last lines, with their
	// times from the run's start); the container's log when not empty.
	Output []sandbox.Line
	// TerminationMessage is the content of the container's terminationMessagePath when the command
	// exits by itself (its last 4096 bytes).
	TerminationMessage string
	// CreateError: the container is not created (its config cannot be made: a missing env source that is
	// not optional, CreateContainerConfigError with this message; or a volume cannot be set up, a
	// mountError: ContainerCreating). The view asks the run again at its next pass (createRetry later
	// at most), as the kubelet tries again at its next sync.
	CreateError error
	// Delay: the container was created this long after its run could have started (its config could not
	// be made before: CreateError at the views before); the run starts that much later.
	Delay time.Duration
	// Probe, when set, answers the container's exec probes from its command's run (the files it has at
	// each probe's time): the ProbeBehaviour of the probe of kind probeType ("Liveness", "Readiness",
	// "Startup"), ok false when that probe is not answered from the run (no exec handler).
	Probe func(probeType string, probe *v1.Probe) (ProbeBehaviour, bool)
}

// createRetry is when a view of a container not created (RunOutcome.CreateError) is asked again at the
// latest: the kubelet's pod worker syncs a pod with an error again after its back-off, 10 s at first.
const createRetry = 10 * time.Second

// Baseline is the containers' history up to At: what a simulator restarted finds in the pod's status
// (the control API's crashes and stops included), or the view just before the pod's behaviour
// annotations changed. From At on, the behaviour now applies: a run in progress keeps its start (its
// run duration counts from it, but it does not end before At), a container that exited is restarted
// as its restart policy says, with the back-off of a crash loop when it had exited before.
type Baseline struct {
	At time.Time
	// Containers are the init, regular and ephemeral containers' states at At, by name; a container
	// not there has no history yet.
	Containers map[string]pod.ContainerStatus
}

// BaselineFromStatus returns the Baseline of the container statuses the pod's status shows (an earlier
// run of the simulator wrote them), at at; nil when it shows none.
func BaselineFromStatus(p *v1.Pod, at time.Time) *Baseline {
	var b *Baseline
	for _, l := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, cs := range l {
			c := pod.ContainerStatus{Name: cs.Name, RestartCount: cs.RestartCount, Ready: cs.Ready, Started: cs.Started != nil && *cs.Started}
			switch st := cs.State; {
			case st.Running != nil:
				c.State.Running = &pod.Running{StartedAt: st.Running.StartedAt.Time}
			case st.Terminated != nil:
				c.State.Terminated = apiTerminated(st.Terminated)
			default:
				c.State.Waiting = &pod.Waiting{}
				if st.Waiting != nil {
					c.State.Waiting.Reason = st.Waiting.Reason
				}
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				c.LastTerminated = apiTerminated(t)
			}
			if c.State.Waiting != nil && c.LastTerminated == nil && c.RestartCount == 0 {
				continue // never ran: no history
			}
			if b == nil {
				b = &Baseline{At: at, Containers: map[string]pod.ContainerStatus{}}
			}
			b.Containers[cs.Name] = c
		}
	}
	return b
}

// BaselineFromView returns the Baseline of a view Simulate gave at at.
func BaselineFromView(rt *pod.RuntimeStatus, at time.Time) *Baseline {
	b := &Baseline{At: at, Containers: map[string]pod.ContainerStatus{}}
	for _, l := range [][]pod.ContainerStatus{rt.InitContainers, rt.Containers, rt.EphemeralContainers} {
		for _, cs := range l {
			if cs.State.Running == nil && cs.State.Terminated == nil && cs.LastTerminated == nil {
				continue // not run yet
			}
			b.Containers[cs.Name] = cs
		}
	}
	return b
}

func apiTerminated(t *v1.ContainerStateTerminated) *pod.Terminated {
	id := t.ContainerID
	if _, hex, ok := strings.Cut(id, "://"); ok {
		id = hex
	}
	return &pod.Terminated{ExitCode: t.ExitCode, Reason: t.Reason, Message: t.Message, StartedAt: t.StartedAt.Time, FinishedAt: t.FinishedAt.Time, ID: id}
}

// Simulate returns the simulated runtime's view of pod at now, given its behaviour b, and the next time
// anything in that view changes (zero: never), so that the caller schedules exactly one re-sync. It is a
// pure function of its arguments: the same inputs give the same view (container IDs are derived from
// the pod's UID, the container's name and its restart count). Containers run as the kubelet runs them:
// init containers one after the other, each after the one before exited 0 (a sidecar once it started),
// regular containers after all of them; a container that exited is restarted as its restart policy
// says, after the kubelet's crash-loop back-off; on deletion (deletionTimestamp set) every container
// stops at the delete request plus b.StopDelay, capped by the grace period (one whose command decides its
// run, without a stop delay given: as its process would, Behaviour.StopDelaySet and
// RunOutcome.ExitsOnSIGTERM), and the view is
// Terminal once all have stopped.
func Simulate(p *v1.Pod, b *Behaviour, in *SimInput, now time.Time) (*pod.RuntimeStatus, time.Time) {
	return simulate(p, b, in, now, nil)
}

// simulateProbes is Simulate that also returns the probes the containers ran after in.Baseline's time
// (since the pod started without one) up to now (tallyRun).
func simulateProbes(p *v1.Pod, b *Behaviour, in *SimInput, now time.Time) (*pod.RuntimeStatus, time.Time, probeTallies) {
	tally := probeTallies{}
	rt, next := simulate(p, b, in, now, tally)
	return rt, next, tally
}

// simulate is Simulate, adding each run's probes to tally when it is not nil.
func simulate(p *v1.Pod, b *Behaviour, in *SimInput, now time.Time, tally probeTallies) (*pod.RuntimeStatus, time.Time) {
	rt := &pod.RuntimeStatus{RuntimeName: in.RuntimeName, Sandbox: pod.SandboxReady, PodIPs: in.PodIPs, HostIPs: in.HostIPs}
	sim := simulation{pod: p, b: b, in: in, now: now, tally: tally}
	if p.DeletionTimestamp != nil {
		grace := time.Duration(0)
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		requested := p.DeletionTimestamp.Add(-grace)
		if seen := in.DeletionSeen; !seen.IsZero() && seen.After(requested) {
			// The request was in [requested, requested+1s), and not after it was seen.
			requested = requested.Add(min(seen.Sub(requested), time.Second-time.Nanosecond))
		}
		sim.requested, sim.grace = requested, grace
		sim.stopAt, sim.stopCode = requested.Add(b.StopDelay), 0
		if b.StopDelay >= grace {
			sim.stopAt, sim.stopCode = requested.Add(grace), 137
		}
		// A container whose command decides its run stops as its process would (Behaviour.StopDelaySet).
		sim.killAt, sim.killCode = requested.Add(grace), 137
		if p.Spec.ShareProcessNamespace != nil && *p.Spec.ShareProcessNamespace {
			sim.killAt, sim.killCode = requested, 143
		}
	}
	t := in.StartTime // when the next container may start
	initDone := true
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		cs, doneAt, ok := sim.container(c, t, true, pod.IsRestartableInitContainer(c))
		rt.InitContainers = append(rt.InitContainers, cs)
		if !ok {
			initDone = false
			break
		}
		t = doneAt
	}
	if initDone {
		for i := range p.Spec.Containers {
			cs, _, _ := sim.container(&p.Spec.Containers[i], t, false, false)
			rt.Containers = append(rt.Containers, cs)
		}
	}
	// Ephemeral containers (kubectl debug) run from when the runtime was first asked about them, once:
	// the kubelet never restarts them.
	for i := range p.Spec.EphemeralContainers {
		ec := p.Spec.EphemeralContainers[i]
		from, ok := in.EphemeralStarts[ec.Name]
		if !ok {
			continue
		}
		c := v1.Container(ec.EphemeralContainerCommon)
		never := v1.ContainerRestartPolicyNever
		c.RestartPolicy = &never
		cs, _, _ := sim.container(&c, from, false, false)
		rt.EphemeralContainers = append(rt.EphemeralContainers, cs)
	}
	if !sim.stopAt.IsZero() { // Terminal once the last container stopped
		last := sim.stopAt
		if sim.lastStop.After(last) {
			last = sim.lastStop
		}
		if !now.Before(last) {
			rt.Terminal = true
		} else {
			sim.note(last)
		}
	}
	return rt, sim.next
}

type simulation struct {
	pod      *v1.Pod
	b        *Behaviour
	in       *SimInput
	now      time.Time
	next     time.Time
	stopAt   time.Time // zero: not being deleted
	stopCode int32
	// killAt, killCode: how a container whose command decides its run stops on deletion, without a
	// stop delay given (Behaviour.StopDelaySet); lastStop: the latest stop of a container that ran
	// until the deletion stopped it, after stopAt.
	killAt   time.Time
	killCode int32
	lastStop time.Time
	// requested and grace: the delete request as placed (DeletionSeen) and the deletion's grace
	// period (deletionGracePeriodSeconds), for the preStop hooks (afterPreStop).
	requested time.Time
	grace     time.Duration
	// tally, when not nil, gets the probes each container run ran (tallyRun).
	tally probeTallies
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// baseline returns the baseline of container name, if any.
func (s *simulation) baseline(name string) (pod.ContainerStatus, bool) {
	if s.in.Baseline == nil {
		return pod.ContainerStatus{}, false
	}
	cs, ok := s.in.Baseline.Containers[name]
	return cs, ok
}

// note records a future change.
func (s *simulation) note(t time.Time) {
	if t.After(s.now) && (s.next.IsZero() || t.Before(s.next)) {
		s.next = t
	}
}

// container returns the view of container c allowed to start at from, and, for an init container,
// when the next one may start (ok false: not yet, or never).
func (s *simulation) container(c *v1.Container, from time.Time, isInit, sidecar bool) (pod.ContainerStatus, time.Time, bool) {
	cb := s.b.For(c.Name)
	if isInit && !sidecar && cb.RunDuration == nil {
		// An init container runs to completion: without a run duration of its own it exits 0 as soon
		// as it started (after its start delay), as a Job's containers do and KWOK's default Stages
		// complete them. Never "for ever": that is a pod stuck Init:0/N.
		zero := time.Duration(0)
		cb.RunDuration = &zero
	}
	ov := s.in.Overrides[c.Name]
	image := NormalizeImage(c.Image)
	cs := pod.ContainerStatus{Name: c.Name, Image: image}
	start := from.Add(cb.StartDelay)
	_, hasHistory := s.baseline(c.Name)
	if !s.stopAt.IsZero() && !start.Before(s.stopAt) && !s.now.Before(s.stopAt) && !hasHistory {
		return cs, time.Time{}, false // deleted before it started: never created
	}
	if cb.ImagePullError != "" && !hasHistory {
		s.imagePull(&cs, c, cb, from)
		return cs, time.Time{}, false
	}
	cs.ImageID = ImageID(image)
	if s.now.Before(start) && !hasHistory {
		cs.State = pod.ContainerState{Waiting: &pod.Waiting{}} // not created yet: ContainerCreating / PodInitializing
		s.note(start)
		if !s.stopAt.IsZero() {
			s.note(s.stopAt)
		}
		return cs, time.Time{}, false
	}
	var last *pod.Terminated
	var lastRestart time.Time // when the back-off was last advanced
	backOff := time.Duration(0)
	restarts0 := int32(0)
	var floor time.Time // the baseline's time: nothing of the history before it is simulated again
	if bl, ok := s.baseline(c.Name); ok {
		floor, restarts0, last = s.in.Baseline.At, bl.RestartCount, bl.LastTerminated
		if last != nil {
			backOff, lastRestart = InitialBackOff, floor // in a crash loop: its next restart backs off
		}
		switch {
		case bl.State.Running != nil:
			start = bl.State.Running.StartedAt // the run in progress goes on
		case bl.State.Terminated != nil:
			term := bl.State.Terminated
			restart := pod.ContainerShouldRestart(c, &s.pod.Spec, term.ExitCode)
			if isInit && !sidecar {
				restart = term.ExitCode != 0 && restart
			}
			if !restart || s.stopAt.Before(floor) && !s.stopAt.IsZero() {
				cs.RestartCount, cs.ID = bl.RestartCount, term.ID
				cs.State, cs.LastTerminated = pod.ContainerState{Terminated: term}, bl.LastTerminated
				if isInit && !sidecar && term.ExitCode == 0 {
					return cs, term.FinishedAt, true
				}
				return cs, time.Time{}, false
			}
			last, restarts0, start = term, restarts0+1, later(floor, start)
		default: // waiting: to start, or in a back-off
			if last != nil {
				restarts0++
			}
			start = later(floor, start)
		}
	}
	crashes, stoppedByAPI := 0, false // each crash, and the stop, ends one run only
	forced := func(runStart, end time.Time) (time.Time, int32, string, bool) {
		for crashes < len(ov.Crashes) && (ov.Crashes[crashes].At.Before(runStart) || ov.Crashes[crashes].At.Before(floor)) {
			crashes++ // came while the container was not running, or is history already: nothing to end
		}
		if crashes < len(ov.Crashes) {
			if c := ov.Crashes[crashes]; end.IsZero() || c.At.Before(end) {
				crashes++
				code := c.ExitCode
				if code == 0 {
					code = 1
				}
				return c.At, code, pod.ReasonError, true
			}
		}
		if !stoppedByAPI && !ov.StopAt.IsZero() && !ov.StopAt.Before(runStart) && !ov.StopAt.Before(floor) && (end.IsZero() || ov.StopAt.Before(end)) {
			stoppedByAPI = true
			return ov.StopAt, 0, pod.ReasonCompleted, true
		}
		return time.Time{}, 0, "", false
	}
	for restarts := restarts0; ; restarts++ {
		cs.RestartCount = restarts
		cs.ID = containerRuntimeID(s.pod, c.Name, restarts)
		cb := cb // this run's: its exec probes may be answered from its command's run
		var end time.Time
		code, reason := cb.ExitCode, pod.ReasonCompleted
		if cb.RunDuration != nil {
			end = start.Add(*cb.RunDuration)
			if end.Before(floor) {
				end = floor // a run that the new behaviour ends earlier ends at the change
			}
		}
		stopAt, stopCode := s.stopAt, s.stopCode
		var cmdRun *RunOutcome // the run of the container's command, when it decides
		if s.in.Run != nil && !cb.RunAnnotated {
			if o, ok := s.in.Run(c, restarts, start); ok { // the container's command decides
				if o.CreateError != nil {
					w := &pod.Waiting{Reason: pod.ReasonContainerCreating}
					if !isMountError(o.CreateError) {
						w = &pod.Waiting{Reason: ReasonCreateContainerConfigError, Message: o.CreateError.Error()}
					}
					cs.State, cs.LastTerminated = pod.ContainerState{Waiting: w}, last
					s.note(s.now.Add(createRetry))
					return cs, time.Time{}, false
				}
				cmdRun = &o
				start = start.Add(o.Delay)
				if o.Probe != nil {
					cb = execProbes(c, cb, o.Probe)
				}
				end, code = time.Time{}, o.ExitCode
				if !o.Forever {
					end = start.Add(o.Duration)
				}
				if !stopAt.IsZero() && !s.b.StopDelaySet && !o.ExitsOnSIGTERM {
					stopAt, stopCode = s.killAt, s.killCode // PID 1 without a SIGTERM handler
				}
				if h, ok := s.in.PreStop[c.Name]; ok && !stopAt.IsZero() && s.grace > 0 {
					stopAt, stopCode = s.afterPreStop(h, o.ExitsOnSIGTERM)
				}
				if o.ExitsOnSIGTERM && !s.b.StopDelaySet && stopCode == 0 {
					stopCode = o.SIGTERMExitCode // its handler's code, at the SIGTERM
				}
			}
		}
		if code != 0 {
			reason = pod.ReasonError
		}
		startedAt, probeKill := runProbes(c, cb, start)
		killedByProbe := false
		if !probeKill.IsZero() && (end.IsZero() || probeKill.Before(end)) {
			end, code, reason = probeKill, 137, pod.ReasonError // killed by the kubelet: a liveness or startup probe failed
			killedByProbe = true
		}
		if fe, fc, fr, ok := forced(start, end); ok {
			end, code, reason = fe, fc, fr
			killedByProbe = false
		}
		if !stopAt.IsZero() && (end.IsZero() || stopAt.Before(end)) {
			killedByProbe = false
			end, code, reason = stopAt, stopCode, pod.ReasonCompleted
			if code != 0 {
				reason = pod.ReasonError
			}
			if end.After(s.lastStop) {
				s.lastStop = end
			}
		}
		if s.tally != nil {
			s.tallyRun(c, cb, start, startedAt, end, floor)
		}
		if end.IsZero() || s.now.Before(end) { // running now
			cs.State = pod.ContainerState{Running: &pod.Running{StartedAt: start}}
			cs.LastTerminated = last
			cs.Started = !startedAt.IsZero() && !s.now.Before(startedAt)
			if !cs.Started && !startedAt.IsZero() {
				s.note(startedAt)
			}
			readyAt := start.Add(cb.ReadinessDelay)
			cs.Ready = cs.Started && !s.now.Before(readyAt) && !ov.Unready
			s.note(readyAt)
			if c.ReadinessProbe != nil && cs.Started {
				rp := newSimProbe(c.ReadinessProbe, cb.Readiness, start, false)
				rp.gate = startedAt
				ready, change := rp.resultAt(s.now)
				cs.Ready = cs.Ready && ready
				s.note(change)
			}
			if !end.IsZero() {
				s.note(end)
			}
			if sidecar {
				return cs, start, true
			}
			return cs, time.Time{}, false
		}
		term := &pod.Terminated{ExitCode: code, Reason: reason, StartedAt: start, FinishedAt: end, ID: cs.ID}
		if cmdRun != nil {
			term.Message = cmdRun.terminationMessage(c, start, end, code)
		}
		stopped := !s.stopAt.IsZero() && !end.Before(s.stopAt)
		// A regular init container that exited 0 is never run again; one that failed is, unless the
		// pod's restartPolicy is Never (kubelet's computeInitContainerActions).
		restart := !stopped && pod.ContainerShouldRestart(c, &s.pod.Spec, code)
		if isInit && !sidecar {
			restart = !stopped && code != 0 && pod.ContainerShouldRestart(c, &s.pod.Spec, code)
		}
		if !restart {
			cs.State = pod.ContainerState{Terminated: term}
			cs.LastTerminated = last
			if isInit && !sidecar && code == 0 && !stopped {
				return cs, end, true // an init container that succeeded: the next one may start
			}
			return cs, time.Time{}, false
		}
		// The kubelet's doBackOff: the first restart (or one after a quiet 10 min) at once, the next
		// ones after the back-off since the exit, doubling up to MaxBackOff.
		var delay time.Duration
		switch {
		case killedByProbe && last == nil:
			// The kubelet kills a container whose liveness (startup) probe failed and starts it again in
			// the same sync (computePodActions: ContainersToKill and ContainersToStart); its doBackOff looks
			// at the pod's status from before the kill, where the latest exited run is the one before: with
			// none, the restart is at once and the back-off is not advanced (so a probe-killed container
			// is restarted at once twice before it backs off, where one that exits by itself is once).
		case killedByProbe && backOff != 0 && last.FinishedAt.Sub(lastRestart) <= backOffReset && end.Sub(last.FinishedAt) >= backOff:
			backOff = min(backOff*2, MaxBackOff) // the run before ended a back-off ago: at once, advanced
		case backOff == 0 || (killedByProbe && last.FinishedAt.Sub(lastRestart) > backOffReset) || (!killedByProbe && end.Sub(lastRestart) > backOffReset):
			backOff = InitialBackOff
		default:
			delay = backOff
			backOff = min(backOff*2, MaxBackOff)
		}
		restartAt := end.Add(delay)
		if !s.stopAt.IsZero() && !restartAt.Before(s.stopAt) && !s.now.Before(s.stopAt) {
			cs.State = pod.ContainerState{Terminated: term} // deleted while backing off: not restarted
			cs.LastTerminated = last
			return cs, time.Time{}, false
		}
		if s.now.Before(restartAt) {
			cs.State = pod.ContainerState{Waiting: &pod.Waiting{Reason: pod.ReasonCrashLoopBackOff,
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", delay, c.Name, s.pod.Name, s.pod.Namespace, s.pod.UID)}}
			cs.LastTerminated = term
			s.note(restartAt)
			return cs, time.Time{}, false
		}
		lastRestart = restartAt
		last = term
		start = restartAt
		if restarts > 10000 { // a guard: a run duration of 0 restarting for ever, over weeks
			cs.State = pod.ContainerState{Waiting: &pod.Waiting{Reason: pod.ReasonCrashLoopBackOff}}
			return cs, time.Time{}, false
		}
	}
}

// execProbes returns cb with its probes of c answered by answer (RunOutcome.Probe) where it answers
// them.
func execProbes(c *v1.Container, cb ContainerBehaviour, answer func(string, *v1.Probe) (ProbeBehaviour, bool)) ContainerBehaviour {
	for _, k := range []struct {
		kind  string
		probe *v1.Probe
		b     *ProbeBehaviour
	}{{"Startup", c.StartupProbe, &cb.Startup}, {"Liveness", c.LivenessProbe, &cb.Liveness}, {"Readiness", c.ReadinessProbe, &cb.Readiness}} {
		if k.probe == nil {
			continue
		}
		if b, ok := answer(k.kind, k.probe); ok {
			*k.b = b
		}
	}
	return cb
}

// runProbes returns, for a run of container c started at start, when it is started (its startup
// probe's first success; start without one; zero: never) and when a probe failure kills it (its startup
// probe's failure, or its liveness probe's once started; zero: never).
func runProbes(c *v1.Container, cb ContainerBehaviour, start time.Time) (startedAt, killAt time.Time) {
	startedAt = start
	if c.StartupProbe != nil {
		sp := newSimProbe(c.StartupProbe, cb.Startup, start, false)
		if startedAt = sp.succeedsAt(); startedAt.IsZero() {
			return time.Time{}, sp.failsAt()
		}
	}
	if c.LivenessProbe != nil {
		lp := newSimProbe(c.LivenessProbe, cb.Liveness, start, true)
		lp.gate = startedAt
		killAt = lp.failsAt()
	}
	return startedAt, killAt
}

// imagePull sets cs to the kubelet's view of a container whose image pulls fail: attempts at from and
// then after the image back-off (10 s doubling to 5 min), ErrImagePull with the pull's message for a
// moment after each attempt, ImagePullBackOff "Back-off pulling image ..." in between.
func (s *simulation) imagePull(cs *pod.ContainerStatus, c *v1.Container, cb ContainerBehaviour, from time.Time) {
	if s.now.Before(from) {
		s.note(from)
		return
	}
	pullMsg := fmt.Sprintf("failed to pull and unpack image %q: %s", cs.Image, cb.ImagePullError)
	attempt, backOff := from, InitialBackOff
	for s.now.Sub(attempt) >= backOff {
		attempt = attempt.Add(backOff)
		backOff = min(backOff*2, MaxBackOff)
	}
	if s.now.Before(attempt.Add(errImagePullShown)) {
		cs.State = pod.ContainerState{Waiting: &pod.Waiting{Reason: pod.ReasonErrImagePull, Message: pullMsg}}
		s.note(attempt.Add(errImagePullShown))
		return
	}
	cs.State = pod.ContainerState{Waiting: &pod.Waiting{Reason: pod.ReasonImagePullBackOff,
		Message: fmt.Sprintf("Back-off pulling image %q: %s: %s", c.Image, pod.ReasonErrImagePull, pullMsg)}}
	s.note(attempt.Add(backOff))
}

// containerRuntimeID is a stable 64-hex-digit ID, as containerd's, for a container's restarts-th run.
func containerRuntimeID(p *v1.Pod, name string, restarts int32) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", p.UID, name, restarts))
	return hex.EncodeToString(sum[:])
}

// NormalizeImage returns an image reference as containerd reports it in the status: the docker.io
// domain and library/ path for short names (index.docker.io and docker.io/NAME as
// github.com/distribution/reference normalizes them: imageRepository), :latest when neither a tag nor
// a digest is given.
func NormalizeImage(image string) string {
	prefix, name, suffix := splitImage(image)
	if suffix == "" {
		suffix = ":latest"
	} else if prefix == "" {
		return image // name is where image starts: nothing to add
	}
	return prefix + name + suffix
}

// ImageID returns a simulated image's ID as the status shows it, "<repository>@sha256:<digest>", the
// digest derived from the normalized reference.
func ImageID(normalized string) string {
	sum := sha256.Sum256([]byte(normalized))
	return imageRepository(normalized) + "@sha256:" + hex.EncodeToString(sum[:])
}
