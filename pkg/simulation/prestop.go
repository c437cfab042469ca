package simulation

import (
	"context"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// The kubelet's Event of a preStop hook that failed (events.FailedPreStopHook, "PreStopHook failed":
// its output is not told, so that no secret leaks).
const (
	EventReasonFailedPreStopHook = "FailedPreStopHook"
	preStopFailedMessage         = "PreStopHook failed"
)

// PreStopHook is how a container's preStop exec hook ran at the deletion: for Duration of simulated
// time, or until stopped (Forever: the kubelet waits for it the whole grace period); Failed: it exited
// non-zero or could not be run (the kubelet's FailedPreStopHook Event; the container still stops).
type PreStopHook struct {
	Duration time.Duration
	Forever  bool
	Failed   bool
}

// afterPreStop returns when and with which exit code a container stops on the deletion after its
// preStop hook h ran, with the arithmetic of the kubelet's killContainer (pkg/kubelet/kuberuntime
// kuberuntime_container.go): the hook gets at most the grace period (executePreStopHook), the SIGTERM
// follows it, and the SIGKILL comes after the grace period less the hook's whole seconds, at least
// minimumGracePeriod (2 s). The process takes the SIGTERM as without a hook: one with a handler that
// exits (exitsOnSIGTERM, /pause) exits 0 at the SIGTERM; with shareProcessNamespace the command is not
// PID 1 and dies of it (143); else it is killed (137). A stop delay given (Behaviour.StopDelaySet)
// counts from the SIGTERM, capped by the SIGKILL. s.grace must be positive (the kubelet runs no hook
// otherwise).
func (s *simulation) afterPreStop(h PreStopHook, exitsOnSIGTERM bool) (time.Time, int32) {
	elapsed := h.Duration
	if h.Forever || elapsed > s.grace {
		elapsed = s.grace
	}
	sigterm := s.requested.Add(elapsed)
	// gracePeriod - int64(elapsed.Seconds()), then max(…, minimumGracePeriodInSeconds).
	kill := sigterm.Add(max(s.grace-elapsed.Truncate(time.Second), minimumGracePeriod))
	switch {
	case s.b.StopDelaySet:
		if stop := sigterm.Add(s.b.StopDelay); stop.Before(kill) {
			return stop, 0
		}
		return kill, 137
	case exitsOnSIGTERM:
		return sigterm, 0
	case s.pod.Spec.ShareProcessNamespace != nil && *s.pod.Spec.ShareProcessNamespace:
		return sigterm, 143
	}
	return kill, 137
}

// hasPreStopExec reports whether a container or init container of p has a preStop exec hook (only
// such a pod's deletion runs anything more).
func hasPreStopExec(p *v1.Pod) bool {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if preStopCommand(&l[i]) != nil {
				return true
			}
		}
	}
	return false
}

// preStopCommand returns c's preStop exec hook's command (nil: none).
func preStopCommand(c *v1.Container) []string {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		return nil
	}
	return c.Lifecycle.PreStop.Exec.Command
}

// preStopHooks runs, once, the preStop exec hooks of p's containers running at now (the deletion as
// first seen), as the kubelet's killContainer does before it stops each (executePreStopHook): in the
// container's sandbox against its files at that moment, within every limit of the sandbox and the
// process's budget, its writes seen by the later execs and exec probes of the run. A container whose
// command is not interpreted runs no hook, except the pause image without a command, which has no
// program but /pause: its hook fails at once (the runtime's exec finds no executable). A hook the
// sandbox cannot honour counts as succeeded at once, as without a command. nil when p has no preStop
// exec hook, commands are not interpreted, or the deletion has no grace period.
func (s *simPods) preStopHooks(ctx context.Context, p *v1.Pod) map[string]PreStopHook {
	if s.commands == nil || !hasPreStopExec(p) || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds <= 0 {
		return nil // the kubelet runs no hook without a grace period
	}
	q := *p // the containers as they run before the deletion stops them
	q.DeletionTimestamp, q.DeletionGracePeriodSeconds = nil, nil
	sp, rt, _, now := s.view(ctx, &q)
	specs := map[string]*v1.Container{}
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if preStopCommand(&l[i]) != nil {
				specs[l[i].Name] = &l[i]
			}
		}
	}
	hooks := map[string]PreStopHook{}
	for _, cs := range append(rt.InitContainers, rt.Containers...) {
		c := specs[cs.Name]
		if c == nil || cs.State.Running == nil {
			continue
		}
		sp.cmdsMu.Lock()
		r, ok := sp.cmds.runs[runKey{container: cs.Name, restarts: cs.RestartCount}]
		sp.cmdsMu.Unlock()
		switch {
		case !ok || !r.ok:
		case r.files == nil && len(c.Command) == 0 && isPauseImage(c.Image):
			hooks[cs.Name] = PreStopHook{Failed: true}
		case r.files != nil:
			h, err := s.commands.preStop(ctx, preStopCommand(c), r.files, max(0, now.Sub(cs.State.Running.StartedAt)), now)
			if err != nil {
				continue // the budget was not given before ctx ended: as without a hook
			}
			hooks[cs.Name] = h
		}
	}
	return hooks
}

// preStop runs a preStop exec hook's command in the run rf at since from its start (now), against
// its files then; its changes to the layer are recorded at since. err: the end of ctx while waiting
// for the budget.
func (c *commands) preStop(ctx context.Context, command []string, rf *runFiles, since time.Duration, now time.Time) (PreStopHook, error) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	state, _, _ := rf.stateAt(since, c.memory())
	if rf.execs == nil {
		rf.execs = sandbox.NewTimeline(c.memory())
	}
	before := rf.execs.Len()
	state.Record(rf.execs, func() time.Duration { return since })
	prog := rf.prog
	prog.Command, prog.Args, prog.Rootfs, prog.TerminationMessagePath, prog.Now = command, nil, state, "", now
	prog.Seed = sandbox.Seed(prog.Hostname, "preStop", strconv.FormatInt(int64(since), 10))
	res, err := c.sandboxRunner().Run(ctx, &prog, c.limits)
	if err != nil {
		return PreStopHook{}, err
	}
	if rf.execs.Len() != before {
		clear(rf.memo)
	}
	switch {
	case !res.Honoured:
		return PreStopHook{}, nil
	case res.Forever:
		return PreStopHook{Forever: true}, nil
	}
	return PreStopHook{Duration: res.Duration, Failed: res.ExitCode != 0}, nil
}
