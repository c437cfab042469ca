package simulation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/pod"
	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// runFiles is what a container's run has of files over its simulated time: its own layer as its
// command changed it (sandbox.Result.Layer) and as the commands exec'd into it since changed it
// (execs), with its environment and volumes (prog); and the answers of its exec probes so far, by the
// layer's state they ran against (a probe's answer changes only when the files do).
type runFiles struct {
	prog  sandbox.Program // env, mounts, working directory, hostname and PID of the run
	layer *sandbox.Timeline

	mu    sync.Mutex
	execs *sandbox.Timeline // what the exec'd commands changed, at their times (nil: none yet)
	memo  map[probeState]probeResult
}

// probeResult is a probe's answer against one state of the files, and the time from the run's start to
// which it holds (math.MaxInt64: for ever).
type probeResult struct {
	ok    bool
	until time.Duration
}

// probeState is one probe's command against one state of the layer: the changes of the command and
// of the execs up to then.
type probeState struct {
	kind          string
	layer, execed int
}

// maxProbeMemo bounds a run's memoized probe answers (more: forgotten, and run again when asked).
const maxProbeMemo = 4096

// probeWaitTimeout bounds how long an exec probe waits for the process's sandbox budget; past it the
// probe answers as without a command (success), not memoized.
const probeWaitTimeout = 2 * time.Second

// stateAt returns the run's layer at since from its start (with the execs' changes up to then), and
// the indices that name it.
func (rf *runFiles) stateAt(since time.Duration, maxBytes int64) (*sandbox.FS, int, int) {
	return sandbox.StateAt(since, maxBytes, rf.layer, rf.execs), rf.layer.Until(since), rf.execs.Until(since)
}

func (c *commands) memory() int64 {
	if c.limits.Memory > 0 {
		return c.limits.Memory
	}
	return sandbox.DefaultLimits.Memory
}

// sandboxRunner returns the process's runner of commands.
func (c *commands) sandboxRunner() *sandbox.Runner {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runner == nil {
		c.runner = sandbox.NewRunner(sandbox.Budget{})
	}
	return c.runner
}

// probeAnswer returns RunOutcome.Probe for a run of container ctr of p: an exec probe (without a
// nodeagent.io/ probe annotation for the container) answered by running its command in the sandbox
// against the run's files at each probe's time, success when it exits 0 within timeoutSeconds (the
// kubelet's exec prober); a command the sandbox cannot honour answers success (as without a command).
// Answers are memoized by the files' state, so that a probe costs one run per change of the files,
// not one per period.
func (c *commands) probeAnswer(p *v1.Pod, ctr *v1.Container, rf *runFiles) func(string, *v1.Probe) (ProbeBehaviour, bool) {
	annotated := map[string]bool{}
	for _, kind := range []string{"Startup", "Liveness", "Readiness"} {
		annotated[kind] = probeAnnotated(p, ctr.Name, kind)
	}
	return func(kind string, probe *v1.Probe) (ProbeBehaviour, bool) {
		if probe.Exec == nil || len(probe.Exec.Command) == 0 || annotated[kind] {
			return ProbeBehaviour{}, false
		}
		timeout := time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
		return ProbeBehaviour{Mode: ProbeTimeline, Answer: func(since time.Duration) (bool, time.Duration) {
			return c.runProbe(rf, kind, probe.Exec.Command, timeout, since)
		}}, true
	}
}

// probeAnnotated reports whether p has a nodeagent.io/ probe annotation of kind for container (it then
// answers, not the command).
func probeAnnotated(p *v1.Pod, container, kind string) bool {
	key := map[string]string{"Liveness": AnnotationLivenessProbe, "Readiness": AnnotationReadinessProbe, "Startup": AnnotationStartupProbe}[kind]
	_, pod := p.Annotations[key]
	_, own := p.Annotations[key+"."+container]
	return pod || own
}

// runProbe answers one exec probe at since (memoized by the files' state), with the time to which
// the answer holds: the next change of the files, or past it when the states after it are known to
// answer the same (so that the probes over them are walked as one).
func (c *commands) runProbe(rf *runFiles, kind string, command []string, timeout, since time.Duration) (bool, time.Duration) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	li, ei := rf.layer.Until(since), rf.execs.Until(since)
	key := probeState{kind: kind, layer: li, execed: ei}
	a, found := rf.memo[key]
	if !found {
		next := time.Duration(math.MaxInt64)
		if li < rf.layer.Len() {
			next = rf.layer.At(li)
		}
		if ei < rf.execs.Len() {
			next = min(next, rf.execs.At(ei))
		}
		state, _, _ := rf.stateAt(since, c.memory())
		prog := rf.prog
		prog.Command, prog.Args, prog.Rootfs, prog.TerminationMessagePath = command, nil, state, ""
		prog.Seed = sandbox.Seed(prog.Hostname, kind, strconv.Itoa(li), strconv.Itoa(ei))
		ctx, cancel := context.WithTimeout(context.Background(), probeWaitTimeout)
		defer cancel()
		res, err := c.sandboxRunner().Run(ctx, &prog, c.limits)
		if err != nil {
			return true, next // not memoized: asked again
		}
		a = probeResult{ok: !res.Honoured || (!res.Forever && res.Duration <= timeout && res.ExitCode == 0), until: next}
		if len(rf.memo) >= maxProbeMemo {
			clear(rf.memo)
		}
		if rf.memo == nil {
			rf.memo = map[probeState]probeResult{}
		}
	}
	for a.until != math.MaxInt64 { // the states after, known to answer the same
		b, known := rf.memo[probeState{kind: kind, layer: rf.layer.Until(a.until), execed: rf.execs.Until(a.until)}]
		if !known || b.ok != a.ok || b.until <= a.until {
			break
		}
		a.until = b.until
	}
	rf.memo[key] = a
	return a.ok, a.until
}

// ExecResult is what a command exec'd into a simulated container wrote and its exit code.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int32
}

// ErrExecNotInterpreted: the command exec'd cannot be interpreted in the container's sandbox (it runs
// a program or reads a file the sandbox does not know: in a container whose command is not
// interpreted, any file of its own layer); the error says why. The caller answers as without
// interpretation.
var ErrExecNotInterpreted = errors.New("not interpreted")

// execInContainer runs cmd in container of p as the kubelet's exec would (RunInContainer): in the
// sandbox, with the container's environment, volumes and cgroup files (from its resources as the
// runtime has them now, cgroupFiles), against its own layer as its run has it now in simulated time
// (a run whose command is not interpreted: a layer of which nothing is known, unknownRun); what cmd
// changes in the layer is seen by the later execs and exec probes of the run (its volumes are the
// pod's, shared at once). The command's simulated time passes at once
// (its sleeps are not waited for). Every limit of the sandbox applies; the output is its last
// sandbox.MaxOutputBytes. changed reports whether it changed the layer. Errors: ErrExecNotInterpreted
// (wrapped, with the reason), or the end of ctx while waiting for the budget.
func (s *simPods) execInContainer(ctx context.Context, p *v1.Pod, container string, cmd []string) (res ExecResult, changed bool, err error) {
	if s.commands == nil || len(cmd) == 0 {
		return res, false, fmt.Errorf("%w: the simulator does not interpret commands", ErrExecNotInterpreted)
	}
	sp, rt, _, now := s.view(ctx, p)
	var restarts int32
	var start time.Time
	found := false
	for _, l := range [][]pod.ContainerStatus{rt.InitContainers, rt.Containers, rt.EphemeralContainers} {
		for _, cs := range l {
			if cs.Name == container && cs.State.Running != nil {
				restarts, start, found = cs.RestartCount, cs.State.Running.StartedAt, true
			}
		}
	}
	if !found {
		return res, false, fmt.Errorf("%w: container %q of pod %s/%s is not running", ErrExecNotInterpreted, container, p.Namespace, p.Name)
	}
	key := runKey{container: container, restarts: restarts}
	sp.cmdsMu.Lock()
	r, ok := sp.cmds.runs[key]
	rf := r.files
	if !ok || !r.ok || rf == nil {
		// Its command is not interpreted (none, an image's entrypoint, one the sandbox cannot honour):
		// the exec runs against a layer of which nothing is known but what the exec writes, with the
		// container's env and volumes.
		rf, err = s.commands.unknownRun(ctx, p, &sp.cmds, key, start)
	}
	sp.cmdsMu.Unlock()
	if err != nil {
		return res, false, err
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	since := max(0, now.Sub(start))
	state, _, _ := rf.stateAt(since, s.commands.memory())
	if rf.execs == nil {
		rf.execs = sandbox.NewTimeline(s.commands.memory())
	}
	before := rf.execs.Len()
	state.Record(rf.execs, func() time.Duration { return since })
	prog := rf.prog
	prog.Command, prog.Args, prog.Rootfs, prog.TerminationMessagePath, prog.Now = cmd, nil, state, "", now
	prog.Seed = sandbox.Seed(prog.Hostname, "exec", strconv.Itoa(rf.execs.Len()), now.String())
	prog.Cgroup = cgroupFiles(actuatedResources(p, container)) // as the runtime has them now (a resize actuated since)
	out, err := s.commands.sandboxRunner().Run(ctx, &prog, s.commands.limits)
	if err != nil {
		return res, false, err
	}
	changed = rf.execs.Len() != before
	if changed {
		clear(rf.memo) // the answers at and after now may change; those before are made again alike
	}
	switch {
	case !out.Honoured:
		return res, changed, fmt.Errorf("%w: %s", ErrExecNotInterpreted, out.Reason)
	case out.Forever:
		return res, changed, fmt.Errorf("%w: the command runs until stopped", ErrExecNotInterpreted)
	}
	for _, l := range out.Output {
		b := &res.Stdout
		if l.Stderr {
			b = &res.Stderr
		}
		*b = append(*b, l.Text...)
		if !l.Partial {
			*b = append(*b, '\n')
		}
	}
	res.ExitCode = out.ExitCode
	return res, changed, nil
}

// The kubelet's Event of a postStart hook that failed (events.FailedPostStartHook, "PostStartHook
// failed": its output is not told, so that no secret leaks) and the message of the Killing Event of
// the container it then kills.
const (
	EventReasonFailedPostStartHook = "FailedPostStartHook"
	postStartFailedMessage         = "PostStartHook failed"
)

// minimumGracePeriod is the kubelet's shortest grace period of a container it kills
// (minimumGracePeriodInSeconds).
const minimumGracePeriod = 2 * time.Second

// postStart runs container ctr's postStart exec hook (if it has one) as the kubelet does right after
// the container started: in the sandbox, against the run's layer at its start, its changes seen by the
// later execs and probes. A hook that exits non-zero makes the kubelet kill the container
// (killContainer "FailedPostStartHook"): out then ends at most the pod's grace period after its
// start (at least 2 s), killed with 137 as a shell without a SIGTERM handler is. A hook the sandbox
// cannot honour counts as succeeded (as without a command). It reports whether the hook failed.
func (c *commands) postStart(ctx context.Context, p *v1.Pod, ctr *v1.Container, rf *runFiles, out *RunOutcome) (bool, error) {
	if ctr.Lifecycle == nil || ctr.Lifecycle.PostStart == nil || ctr.Lifecycle.PostStart.Exec == nil || len(ctr.Lifecycle.PostStart.Exec.Command) == 0 {
		return false, nil
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	state, _, _ := rf.stateAt(0, c.memory())
	if rf.execs == nil {
		rf.execs = sandbox.NewTimeline(c.memory())
	}
	state.Record(rf.execs, func() time.Duration { return 0 })
	prog := rf.prog
	prog.Command, prog.Args, prog.Rootfs, prog.TerminationMessagePath = ctr.Lifecycle.PostStart.Exec.Command, nil, state, ""
	prog.Seed = sandbox.Seed(prog.Hostname, "postStart")
	res, err := c.sandboxRunner().Run(ctx, &prog, c.limits)
	if err != nil {
		return false, err
	}
	if !res.Honoured || res.Forever || res.ExitCode == 0 {
		return false, nil
	}
	grace := 30 * time.Second
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	grace = max(grace, minimumGracePeriod)
	if out.Forever || out.Duration > grace {
		out.Forever, out.Duration, out.ExitCode = false, grace, 137
	}
	return true, nil
}

// unknownRun returns the files of run key of container of p whose command is not interpreted, for the
// commands exec'd into it: its env, volumes and working directory as for an interpreted run
// (commands.program), its own layer not known (sandbox.Program.UnknownLayer: a read of a file of it
// that no exec wrote is not honoured). Made at its first exec and kept for the run (pc.execOnly);
// pc's lock held. Errors: ErrExecNotInterpreted for the pause image (no program but /pause) or when
// the container's config cannot be made.
func (c *commands) unknownRun(ctx context.Context, p *v1.Pod, pc *podCommands, key runKey, start time.Time) (*runFiles, error) {
	if rf := pc.execOnly[key]; rf != nil {
		return rf, nil
	}
	ctr := podContainer(p, key.container)
	if ctr == nil {
		return nil, fmt.Errorf("%w: no container %q in pod %s/%s", ErrExecNotInterpreted, key.container, p.Namespace, p.Name)
	}
	if isPauseImage(ctr.Image) && len(ctr.Command) == 0 {
		return nil, fmt.Errorf("%w: the pause image has no program but /pause", ErrExecNotInterpreted)
	}
	noCommand := *ctr
	noCommand.Command, noCommand.Args = nil, nil
	prog, err := c.program(ctx, p, &noCommand, pc, key.restarts, start)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrExecNotInterpreted, err)
	}
	prog.UnknownLayer, prog.TerminationMessagePath = true, ""
	rf := &runFiles{prog: *prog}
	for k := range pc.execOnly { // one run per container: the earlier ones' are forgotten
		if k.container == key.container {
			delete(pc.execOnly, k)
		}
	}
	if pc.execOnly == nil {
		pc.execOnly = map[runKey]*runFiles{}
	}
	pc.execOnly[key] = rf
	return rf, nil
}

// podContainer returns the container, init container or ephemeral container name of p (nil: none).
func podContainer(p *v1.Pod, name string) *v1.Container {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if l[i].Name == name {
				return &l[i]
			}
		}
	}
	for i := range p.Spec.EphemeralContainers {
		if p.Spec.EphemeralContainers[i].Name == name {
			c := v1.Container(p.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}
