package simulation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/dra"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/pod"
	"github.com/nodeagent/nodeagent/pkg/probemetrics"
)

// simPods is the simulated Nodes' node.PodProvider, one for the whole process: each pod's containers
// are Simulate over the pod's start, its behaviour (PodBehaviour: the nodeagent.io/
// annotations over the simulation's default) and the control API's overrides. It holds, per pod
// created and not yet forgotten, its start time, its behaviour (parsed when the pod is created and
// again only when its annotations change, not at every pass) and its overrides; nothing runs in the
// background: the view at any time is computed when asked, with the time of its next change.
type simPods struct {
	defaults    Behaviour
	runtimeName string
	recorder    record.EventRecorder
	clock       clock.Clock
	// commands interprets the containers' commands (nil: not interpreted, Config.InterpretPodCommands).
	commands *commands
	// dra is the Nodes' DRA manager (dra.go; nil: no client), driverEnv the template's drivers that
	// name an environment variable for their devices, in the template's order.
	dra       *dra.Manager
	driverEnv []driverEnvName
	// plugins is the Nodes' device manager of the template's device-plugin resources (deviceplugin.go;
	// nil: none).
	plugins *deviceAllocator

	mu   sync.Mutex
	pods map[types.UID]*simPod
	// behaviours are the last distinct behaviours parsed, shared by the records whose pods parse alike
	// (most pods: the simulation's defaults); at most maxSharedBehaviours.
	behaviours []*Behaviour
}

// maxSharedBehaviours bounds simPods.behaviours.
const maxSharedBehaviours = 8

// sharedBehaviour returns a behaviour held equal to b, else holds b. mu held.
func (s *simPods) sharedBehaviour(b Behaviour) *Behaviour {
	for _, h := range s.behaviours {
		if reflect.DeepEqual(*h, b) {
			return h
		}
	}
	if len(s.behaviours) == maxSharedBehaviours {
		s.behaviours = s.behaviours[1:]
	}
	s.behaviours = append(s.behaviours, &b)
	return &b
}

type simPod struct {
	// namespace, name and node are the pod's (strings shared with the informer's copy), for GetPods.
	namespace, name, node string
	start                 time.Time
	stopping              bool       // DeletePod was called with a deletionTimestamp
	stopSeen              time.Time  // when: the delete request as Simulate places it within its second
	behaviour             *Behaviour // read-only, shared with the pods that parse alike (sharedBehaviour)
	overrides             Overrides
	// seen is the view of its containers last told in Events (containerEvents).
	seen []containerSeen
	// ephemeralStarts are when each ephemeral container was first seen (SimInput.EphemeralStarts).
	ephemeralStarts map[string]time.Time
	// baseline is the containers' history Simulate goes on from (SimInput.Baseline): the pod's status
	// when the record was made for a pod that ran before (the simulator restarted), or the view before
	// its behaviour last changed; nil: none.
	baseline *Baseline
	// probeBase are the probes its containers ran up to the baseline's time, when the baseline is the
	// view before a change of behaviour (none before a simulator's restart: the kubelet's counters
	// start again at 0 when it restarts); the probes since are simulated again at each count.
	probeBase probeTallies
	// preStop are its containers' preStop exec hooks as they ran at the deletion (SimInput.PreStop;
	// nil: none).
	preStop map[string]PreStopHook
	// cmds holds the outcome of each container run its command decided (memoized: a run is
	// interpreted once, when it starts), under its own lock, held while a run is interpreted.
	cmdsMu sync.Mutex
	cmds   podCommands
}

var _ node.PodProvider = (*simPods)(nil)

func newSimPods(defaults Behaviour, runtimeName string, recorder record.EventRecorder, clk clock.Clock) *simPods {
	return &simPods{defaults: defaults, runtimeName: runtimeName, recorder: recorder, clock: clk, pods: map[types.UID]*simPod{}}
}

// CreatePod starts the pod's simulated containers: from its status.startTime when an earlier run of
// the simulator started it, else now, with the behaviour its annotations set. An annotation that does
// not parse is told in a Warning Event (InvalidAnnotation, naming the key and the value) and its
// default used.
func (s *simPods) CreatePod(ctx context.Context, p *v1.Pod) error {
	// The kubelet's device manager allocates at admission, before the pod worker starts the pod; an
	// error (too few free devices: a pod that held them is not seen terminal yet) is tried again.
	if err := s.plugins.allocate(p); err != nil {
		return err
	}
	s.parseBehaviour(ctx, p)
	if s.commands != nil && (len(p.Status.PodIPs) > 0 || len(p.Status.HostIPs) > 0) { // the addresses nodeagent gave it, for the downward API
		sp := s.entry(p, nil)
		sp.cmdsMu.Lock()
		sp.cmds.podIPs = sp.cmds.podIPs[:0]
		for _, ip := range p.Status.PodIPs {
			sp.cmds.podIPs = append(sp.cmds.podIPs, ip.IP)
		}
		sp.cmds.hostIPs = slices.Clone(p.Status.HostIPs)
		sp.cmdsMu.Unlock()
	}
	return nil
}

// UpdatePod reads the pod's behaviour annotations again (the controller calls it when they, or the
// spec, changed), telling a bad one as CreatePod does; the simulated containers follow the spec as
// Simulate reads it at every pass.
func (s *simPods) UpdatePod(ctx context.Context, p *v1.Pod) error {
	s.parseBehaviour(ctx, p)
	return nil
}

// parseBehaviour sets the pod's behaviour from its annotations, telling a bad one in a Warning Event.
//
// A pod it runs already whose behaviour changes keeps its history: the view just before the change is its
// Baseline, and the new behaviour applies from now on (restartCount never jumps, startedAt never moves
// back).
func (s *simPods) parseBehaviour(ctx context.Context, p *v1.Pod) {
	b, err := PodBehaviour(p, s.defaults)
	if err != nil {
		s.recorder.Event(p, v1.EventTypeWarning, "InvalidAnnotation", err.Error())
	}
	if err := UsageAnnotationsError(p); err != nil {
		s.recorder.Event(p, v1.EventTypeWarning, "InvalidAnnotation", err.Error())
	}
	s.mu.Lock()
	sp := s.pods[p.UID]
	changed := sp != nil && !reflect.DeepEqual(*sp.behaviour, b)
	s.mu.Unlock()
	if changed {
		_, rt, _, now, tally := s.viewWith(ctx, p, hasProbe(p))
		s.mu.Lock()
		sp.baseline = BaselineFromView(rt, now)
		if tally != nil {
			sp.probeBase = tally
		}
		s.mu.Unlock()
	}
	s.entry(p, &b)
}

// DeletePod marks the pod stopping (Simulate stops its containers after the stop delay, within the
// grace period) the first time, with a deletionTimestamp, after running its containers' preStop exec
// hooks once (preStopHooks: they delay the containers' SIGTERM; a failed one is told in the kubelet's
// Warning FailedPreStopHook Event); forgets it otherwise.
func (s *simPods) DeletePod(ctx context.Context, p *v1.Pod) error {
	s.plugins.release(p) // the kubelet's activePods leave out a pod whose termination was requested
	s.mu.Lock()
	if sp := s.pods[p.UID]; sp != nil && p.DeletionTimestamp != nil && !sp.stopping {
		seen := s.clock.Now()
		s.mu.Unlock()
		hooks := s.preStopHooks(ctx, p) // before the view sees the deletion: they delay the stops
		s.mu.Lock()
		if sp.stopping {
			s.mu.Unlock()
			return nil
		}
		sp.stopping, sp.stopSeen, sp.preStop = true, seen, hooks
		events := killingEvents(p, sp.seen)
		s.mu.Unlock()
		s.record(events)
		if len(hooks) == 0 {
			return nil
		}
		for _, name := range slices.Sorted(maps.Keys(hooks)) {
			if hooks[name].Failed { // the kubelet tells it when the hook ends; here at the deletion
				s.recorder.Event(containerRef(p, containerField(p, name), name), v1.EventTypeWarning, EventReasonFailedPreStopHook, preStopFailedMessage)
			}
		}
		return nil
	}
	delete(s.pods, p.UID)
	s.mu.Unlock()
	if s.dra != nil { // a pod that left the API without its containers stopping here: its claims too
		return s.dra.UnprepareResources(ctx, p)
	}
	return nil
}

// GetPods returns the pods the simulated runtime runs, with their namespace, name, UID and
// spec.nodeName only. It forgets every pod when the process ends: after a restart it returns none.
func (s *simPods) GetPods(context.Context) ([]*v1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*v1.Pod, 0, len(s.pods))
	for uid, sp := range s.pods {
		out = append(out, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sp.namespace, Name: sp.name, UID: uid},
			Spec: v1.PodSpec{NodeName: sp.node}})
	}
	return out, nil
}

// record records events.
func (s *simPods) record(events []podEvent) {
	for _, e := range events {
		s.recorder.Event(e.ref, e.eventType, e.reason, e.message)
	}
}

// GetPodStatus returns Simulate's view of the pod now, with the behaviour parsed at its creation or
// last annotation change, and the time to its next change; what changed since the view before is
// told in the kubelet's container Events (containerEvents).
func (s *simPods) GetPodStatus(ctx context.Context, p *v1.Pod) (node.PodRuntimeStatus, error) {
	sp, rt, next, now := s.view(ctx, p)
	s.mu.Lock()
	if sp.seen == nil {
		sp.seen = seenInStatus(p)
	}
	b := *sp.behaviour
	readinessFailed := func(c *v1.Container, start time.Time) time.Time {
		return readinessFailedAt(c, b.For(c.Name), start, now)
	}
	events, seen := containerEvents(p, rt, sp.seen, readinessFailed)
	sp.seen = seen
	s.mu.Unlock()
	s.record(events)
	s.setAllocatedResourcesStatus(p, rt)
	r := node.PodRuntimeStatus{Status: rt}
	if !next.IsZero() {
		r.RecheckAfter = max(next.Sub(now), time.Millisecond)
	}
	return r, nil
}

// view returns Simulate's view of the pod now and the time of its next change, with the pod's record.
// Each container run that starts is interpreted from its command (when interpretation is on), once,
// bounded by ctx and the sandbox's limits.
func (s *simPods) view(ctx context.Context, p *v1.Pod) (*simPod, *pod.RuntimeStatus, time.Time, time.Time) {
	sp, rt, next, now, _ := s.viewWith(ctx, p, false)
	return sp, rt, next, now
}

// viewWith is view, with the probes the containers ran since the record was made (the record's
// probeBase and those since its baseline, simulateProbes) when probes is true (nil otherwise).
func (s *simPods) viewWith(ctx context.Context, p *v1.Pod, probes bool) (*simPod, *pod.RuntimeStatus, time.Time, time.Time, probeTallies) {
	sp := s.entry(p, nil)
	now := s.clock.Now()
	s.mu.Lock()
	for i := range p.Spec.EphemeralContainers {
		name := p.Spec.EphemeralContainers[i].Name
		if _, ok := sp.ephemeralStarts[name]; !ok {
			if sp.ephemeralStarts == nil {
				sp.ephemeralStarts = map[string]time.Time{}
			}
			sp.ephemeralStarts[name] = now
		}
	}
	b := *sp.behaviour
	var base probeTallies
	if probes {
		base = probeTallies{}
		base.add(sp.probeBase)
	}
	in := SimInput{StartTime: sp.start, RuntimeName: s.runtimeName, Overrides: sp.overrides, DeletionSeen: sp.stopSeen,
		EphemeralStarts: sp.ephemeralStarts, Baseline: sp.baseline, PreStop: sp.preStop}
	s.mu.Unlock()
	if s.commands != nil && (hasCommand(p) || referencesObjects(p)) {
		in.Run = func(c *v1.Container, restarts int32, start time.Time) (RunOutcome, bool) {
			return s.commandRun(ctx, p, sp, c, restarts, start)
		}
	}
	if probes {
		rt, next, tally := simulateProbes(p, &b, &in, now)
		tally.add(base)
		return sp, rt, next, now, tally
	}
	rt, next := Simulate(p, &b, &in, now)
	return sp, rt, next, now, nil
}

// probeCounts returns the probes pod p's containers ran since this process created its record (the
// probe counts the kubelet's prober workers keep for a pod): the record's probeBase and those since
// its baseline, simulated again now. None for a pod without a probe or without a record (not created
// by the Node yet, or forgotten).
func (s *simPods) probeCounts(ctx context.Context, p *v1.Pod) []probemetrics.Count {
	if !hasProbe(p) {
		return nil
	}
	s.mu.Lock()
	_, ok := s.pods[p.UID]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	_, _, _, _, tally := s.viewWith(ctx, p, true)
	out := make([]probemetrics.Count, 0, len(tally))
	for k, v := range tally {
		out = append(out, probemetrics.Count{ProbeType: k.probeType, Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID),
			Container: k.container, Successful: v.successful, Failed: v.failed})
	}
	slices.SortFunc(out, func(a, b probemetrics.Count) int {
		return cmp.Or(strings.Compare(a.Container, b.Container), strings.Compare(a.ProbeType, b.ProbeType))
	})
	return out
}

// referencesObjects reports whether a container or init container of p reads a ConfigMap, a Secret or
// a resource field in its env, or p has a volume the kubelet writes from the API's objects (their
// config is made by the commands' runtime, whether or not they have a command).
func referencesObjects(p *v1.Pod) bool {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if containerReferencesObjects(&l[i]) {
				return true
			}
		}
	}
	return false
}

// containerReferencesObjects reports whether c's env reads a ConfigMap, a Secret or a resource field,
// or a volume mount of c has a subPathExpr (expanded from that env: its config may fail too).
func containerReferencesObjects(c *v1.Container) bool {
	if len(c.EnvFrom) > 0 {
		return true
	}
	for _, m := range c.VolumeMounts {
		if m.SubPathExpr != "" {
			return true
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && (e.ValueFrom.ConfigMapKeyRef != nil || e.ValueFrom.SecretKeyRef != nil || e.ValueFrom.ResourceFieldRef != nil) {
			return true
		}
	}
	return false
}

// containerField is the field path of container name's list in p's spec.
func containerField(p *v1.Pod, name string) string {
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == name {
			return "spec.initContainers"
		}
	}
	return "spec.containers"
}

// hasCommand reports whether a container, init container or ephemeral container of p has a command
// the sandbox interprets (commandDecides): only those are interpreted, a pod without one costs
// nothing more.
func hasCommand(p *v1.Pod) bool {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if commandDecides(&l[i]) {
				return true
			}
		}
	}
	for i := range p.Spec.EphemeralContainers { // kubectl debug --image=busybox -- sh -c ...
		if commandDecides((*v1.Container)(&p.Spec.EphemeralContainers[i].EphemeralContainerCommon)) {
			return true
		}
	}
	return false
}

// commandDecides reports whether c's run may be decided by a command: it has one, or its image's
// entrypoint is known (the pause image, imageEntrypoints), looked up without building its command. It
// does not allocate.
func commandDecides(c *v1.Container) bool {
	if len(c.Command) > 0 || isPauseImage(c.Image) {
		return true
	}
	_, _, known := entrypointOf(c)
	return known
}

// commandRun returns the outcome of run restarts of container c as its command decides (memoized per
// run), telling once per container in a Warning Event (EventReasonCommandNotInterpreted) that its
// command cannot be honoured; ok false then, and for a container without a command.
func (s *simPods) commandRun(ctx context.Context, p *v1.Pod, sp *simPod, c *v1.Container, restarts int32, start time.Time) (RunOutcome, bool) {
	sp.cmdsMu.Lock()
	defer sp.cmdsMu.Unlock()
	key := runKey{container: c.Name, restarts: restarts}
	if r, ok := sp.cmds.runs[key]; ok {
		return r.out, r.ok
	}
	r, reason, err := s.commands.run(ctx, p, c, &sp.cmds, restarts, start)
	if err != nil {
		// Nothing ran (the request ended while other runs held the budget): not memoized, the next
		// view runs it. This view sees the container as without a command.
		klog.FromContext(ctx).V(4).Info("Command not interpreted yet", "pod", klog.KObj(p), "err", err)
		return RunOutcome{}, false
	}
	if r.out.CreateError != nil {
		// Not created: not memoized, asked again at the next view (at most createRetry later).
		if sp.cmds.createFailed == nil {
			sp.cmds.createFailed = map[runKey]bool{}
		}
		if !sp.cmds.createFailed[key] && isMountError(r.out.CreateError) {
			s.recorder.Event(p, v1.EventTypeWarning, EventReasonFailedMount, r.out.CreateError.Error())
		}
		sp.cmds.createFailed[key] = true
		return r.out, r.ok
	}
	if sp.cmds.createFailed[key] {
		delete(sp.cmds.createFailed, key)
		r.out.Delay = max(0, s.clock.Now().Sub(start))
	}
	if sp.cmds.runs == nil {
		sp.cmds.runs = map[runKey]runResult{}
	}
	sp.cmds.runs[key] = r
	sp.cmds.forgetOutput(c.Name, restarts)
	if r.postStartFailed {
		ref := containerRef(p, containerField(p, c.Name), c.Name)
		s.recorder.Event(ref, v1.EventTypeWarning, EventReasonFailedPostStartHook, postStartFailedMessage)
		s.recorder.Event(ref, v1.EventTypeNormal, EventReasonKilling, EventReasonFailedPostStartHook)
	}
	if reason != "" && !sp.cmds.warned[c.Name] {
		if sp.cmds.warned == nil {
			sp.cmds.warned = map[string]bool{}
		}
		sp.cmds.warned[c.Name] = true
		s.recorder.Eventf(p, v1.EventTypeWarning, EventReasonCommandNotInterpreted,
			"Container %s: its command is not interpreted (%s); it runs as without a command (nodeagent.io/ annotations, the simulation's defaults)", c.Name, reason)
	}
	return r.out, r.ok
}

// entry returns the pod's record, made when absent: started at its status.startTime (an earlier run of
// the simulator started it) or now. A behaviour b given replaces the record's; without one, a new
// record gets the behaviour of the pod's annotations, parsed here without an Event (a pod that this
// process asks the status of without having created it: terminal, or being deleted, when the
// simulator started; CreatePod tells of bad annotations).
func (s *simPods) entry(p *v1.Pod, b *Behaviour) *simPod {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.pods[p.UID]
	if sp == nil {
		start := s.clock.Now()
		if p.Status.StartTime != nil {
			start = p.Status.StartTime.Time
		}
		sp = &simPod{namespace: p.Namespace, name: p.Name, node: p.Spec.NodeName, start: start,
			baseline: BaselineFromStatus(p, s.clock.Now())}
		if b == nil { // rare (see above): parsed under the lock
			b, _ := PodBehaviour(p, s.defaults)
			sp.behaviour = s.sharedBehaviour(b)
		}
		s.pods[p.UID] = sp
	}
	if b != nil {
		sp.behaviour = s.sharedBehaviour(*b)
	}
	return sp
}

// trimPod is the pod informer's transform: a pod bound to one of this shard's Nodes is kept without
// its managedFields (never read), sharing with the shard's other pods what they hold alike (podCache);
// a pod of any other Node is cut down to its name, namespace, UID, resourceVersion and spec.nodeName
// (node.PodOfOtherNode), so that a shard holds whole only its own Nodes' pods. With adopt, the pods
// of any other Node this shard would adopt by its name (AdoptedShard) are kept whole too.
func trimPod(prefix string, shard Shard, nodes int, adopt bool) func(any) (any, error) {
	first := shard.First(nodes)
	pc := newPodCache()
	return func(obj any) (any, error) {
		p, ok := obj.(*v1.Pod)
		if !ok {
			return obj, nil
		}
		if ownNode(p.Spec.NodeName, prefix, first, nodes) ||
			(adopt && AdoptedShard(p.Spec.NodeName, shard.count()) == shard.Index && !isTemplateName(p.Spec.NodeName, prefix)) {
			return pc.compact(p), nil
		}
		return pc.otherNode(p), nil
	}
}

// isTemplateName reports whether name is one NodeName makes with prefix (of any shard).
func isTemplateName(name, prefix string) bool {
	_, ok := ParseNodeName(name, prefix)
	return ok
}

// ownNode reports whether name is NodeName(prefix, i) for an i in [first, first+nodes).
func ownNode(name, prefix string, first, nodes int) bool {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok || len(digits) < 4 {
		return false
	}
	i, err := strconv.Atoi(digits)
	return err == nil && i >= first && i < first+nodes && NodeName(prefix, i) == name
}

// ContainerChange is a control API change of one container of a pod on a simulated Node (POST
// /simulation/pods/{namespace}/{name}): Crash makes its running container exit now with that code (its
// restart policy then applies: a crash loop with the kubelet's back-off); Stop (true) makes it exit 0 now
// (Completed); Ready false makes it not ready until Ready true.
type ContainerChange struct {
	Container string `json:"container"`
	Crash     *int32 `json:"crash,omitempty"`
	Stop      *bool  `json:"stop,omitempty"`
	Ready     *bool  `json:"ready,omitempty"`
}

// PodState is the control API's view of a pod on a simulated Node: where it runs and what the control
// API changed in its containers.
type PodState struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Node      string `json:"node"`
	// Containers are the containers the control API changed, by name.
	Containers map[string]ContainerOverrideState `json:"containers,omitempty"`
}

// ContainerOverrideState is what the control API set on one container.
type ContainerOverrideState struct {
	Crashes   []CrashState `json:"crashes,omitempty"`
	StoppedAt *time.Time   `json:"stoppedAt,omitempty"`
	Unready   bool         `json:"unready,omitempty"`
}

// CrashState is one crash made through the control API.
type CrashState struct {
	At       time.Time `json:"at"`
	ExitCode int32     `json:"exitCode"`
}

// Errors of SetPodContainer: the pod is not on one of this simulator's running Nodes, or the change is
// not one that can be applied.
var (
	ErrUnknownPod = errors.New("no such pod on this simulator's Nodes")
	ErrBadChange  = errors.New("bad change")
)

// SetPodContainer applies c to the pod namespace/name, bound to one of this simulator's Nodes, and
// queues the pod for a status write at once. Errors wrap ErrUnknownPod (not found, or on another Node)
// or ErrBadChange (no such container in the spec, no change named, crash with an exit code outside
// 1-255, or the Nodes run no pods), naming the value.
func (s *Simulator) SetPodContainer(ctx context.Context, namespace, name string, c ContainerChange) (PodState, error) {
	if s.pods == nil || s.cfg.Dependencies.Pods == nil {
		return PodState{}, fmt.Errorf("%w: this simulator runs no pods", ErrBadChange)
	}
	p, err := s.cfg.Dependencies.Pods.Get(namespace, name)
	if err != nil {
		return PodState{}, fmt.Errorf("%w: %s/%s: %v", ErrUnknownPod, namespace, name, err)
	}
	_, ok := s.lookup(p.Spec.NodeName)
	if !ok {
		return PodState{}, fmt.Errorf("%w: %s/%s is bound to %q", ErrUnknownPod, namespace, name, p.Spec.NodeName)
	}
	if !hasContainer(p, c.Container) {
		return PodState{}, fmt.Errorf("%w: pod %s/%s has no container %q", ErrBadChange, namespace, name, c.Container)
	}
	if c.Crash == nil && c.Stop == nil && c.Ready == nil {
		return PodState{}, fmt.Errorf("%w: name at least one of crash, stop, ready", ErrBadChange)
	}
	if c.Crash != nil && (*c.Crash < 1 || *c.Crash > 255) {
		return PodState{}, fmt.Errorf("%w: crash %d: an exit code from 1 to 255", ErrBadChange, *c.Crash)
	}
	if c.Stop != nil && !*c.Stop {
		return PodState{}, fmt.Errorf("%w: stop false changes nothing: a stopped container is started again only by its restart policy", ErrBadChange)
	}
	if c.Crash != nil || c.Stop != nil {
		if state := s.pods.containerState(ctx, p, c.Container); state != "running" {
			return PodState{}, fmt.Errorf("%w: container %q of pod %s/%s is %s, not running: nothing to crash or stop", ErrBadChange, c.Container, namespace, name, state)
		}
	}
	now := s.cfg.Dependencies.Clock.Now()
	s.pods.override(p, c.Container, func(o *ContainerOverride) {
		if c.Crash != nil {
			o.Crashes = append(o.Crashes, Crash{At: now, ExitCode: *c.Crash})
		}
		if c.Stop != nil && *c.Stop {
			o.StopAt = now
		}
		if c.Ready != nil {
			o.Unready = !*c.Ready
		}
	})
	s.notifyPod(p)
	return s.pods.state(p), nil
}

// notifyPod queues p for a sync by its simulated Node's controller (when this simulator runs it).
func (s *Simulator) notifyPod(p *v1.Pod) {
	n, ok := s.lookup(p.Spec.NodeName)
	if !ok {
		return
	}
	n.mu.Lock()
	ctrl := n.ctrl
	n.mu.Unlock()
	if ctrl != nil {
		ctrl.NotifyPod(p.Namespace, p.Name)
	}
}

func hasContainer(p *v1.Pod, name string) bool {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range l {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// override changes the control API's override of one container of p.
func (s *simPods) override(p *v1.Pod, container string, change func(*ContainerOverride)) {
	sp := s.entry(p, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp.overrides == nil {
		sp.overrides = Overrides{}
	}
	o := sp.overrides[container]
	change(&o)
	sp.overrides[container] = o
}

// containerState returns what container name of p does now: running, waiting, terminated, or "not
// started" when the runtime has no status for it yet.
func (s *simPods) containerState(ctx context.Context, p *v1.Pod, name string) string {
	_, rt, _, _ := s.view(ctx, p)
	for _, l := range [][]pod.ContainerStatus{rt.InitContainers, rt.Containers} {
		for _, cs := range l {
			if cs.Name != name {
				continue
			}
			switch {
			case cs.State.Running != nil:
				return "running"
			case cs.State.Terminated != nil:
				return "terminated"
			}
			return "waiting"
		}
	}
	return "not started"
}

// state returns p's PodState.
func (s *simPods) state(p *v1.Pod) PodState {
	st := PodState{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName}
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.pods[p.UID]
	if sp == nil {
		return st
	}
	for name, o := range sp.overrides {
		if st.Containers == nil {
			st.Containers = map[string]ContainerOverrideState{}
		}
		cs := ContainerOverrideState{Unready: o.Unready}
		for _, c := range o.Crashes {
			cs.Crashes = append(cs.Crashes, CrashState{At: c.At, ExitCode: c.ExitCode})
		}
		if !o.StopAt.IsZero() {
			cs.StoppedAt = &o.StopAt
		}
		st.Containers[name] = cs
	}
	return st
}
