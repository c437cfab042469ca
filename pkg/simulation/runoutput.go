package simulation

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// The kubelet's bounds of a termination message read from the container's log
// (k8s.io/kubernetes pkg/kubelet/container: MaxContainerTerminationMessageLogLines and
// MaxContainerTerminationMessageLogLength, read by kuberuntime's readLastStringFromContainerLogs).
const (
	terminationMessageLogLines = 80
	terminationMessageLogBytes = 2 << 10
)

// terminationMessage is the message of the terminated state of run o of container c (started at start,
// ended at end with code), as the kubelet's convertToKubeContainerStatus makes it: the content of the
// termination message file at the exit (getTerminationMessage: its last 4096 bytes), known when the
// command exited by itself (not when a probe, a stop or a crash ended it first); else, when
// terminationMessagePolicy is FallbackToLogsOnError and the exit code is not 0, the log's tail
// (logTail).
func (o *RunOutcome) terminationMessage(c *v1.Container, start, end time.Time, code int32) string {
	if !o.Forever && end.Equal(start.Add(o.Duration)) && code == o.ExitCode && o.TerminationMessage != "" {
		return o.TerminationMessage
	}
	if c.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError && code != 0 {
		return logTail(o.Output, end.Sub(start))
	}
	return ""
}

// logTail is what the kubelet's readLastStringFromContainerLogs reads of a log: its last 80 lines
// (both streams, each with its newline, a partial line without), then the last 2048 bytes of those;
// the lines written by until (from the run's start).
func logTail(lines []sandbox.Line, until time.Duration) string {
	n := sort.Search(len(lines), func(i int) bool { return lines[i].Offset > until })
	lines = lines[max(0, n-terminationMessageLogLines):n]
	var b []byte
	for _, l := range lines {
		b = append(b, l.Text...)
		if !l.Partial {
			b = append(b, '\n')
		}
	}
	if len(b) > terminationMessageLogBytes {
		b = b[len(b)-terminationMessageLogBytes:]
	}
	return string(b)
}

// runOutput returns what run restart of container of pod p wrote (RunOutcome.Output) as this process
// interpreted its command; nil when it wrote nothing, its command was not interpreted, or this
// process did not run it (its record gone, or the run older than the process).
func (s *simPods) runOutput(p *v1.Pod, container string, restart int32) []sandbox.Line {
	s.mu.Lock()
	sp := s.pods[p.UID]
	s.mu.Unlock()
	if sp == nil {
		return nil
	}
	sp.cmdsMu.Lock()
	defer sp.cmdsMu.Unlock()
	r, ok := sp.cmds.runs[runKey{container: container, restarts: restart}]
	if !ok || !r.ok {
		return nil
	}
	return r.out.Output
}

// recordedLog makes s the log of the lines a command wrote: line k at the run's start plus its offset.
func recordedLog(lines []sandbox.Line) logSpec {
	return logSpec{recorded: lines, lines: len(lines)}
}

// recordedLinesUntil is how many recorded lines were written by d from the run's start.
func (s logSpec) recordedLinesUntil(d time.Duration) int {
	return sort.Search(len(s.recorded), func(i int) bool { return s.recorded[i].Offset > d })
}

// recordedFirstSince is the first recorded line written at or after d from the run's start.
func (s logSpec) recordedFirstSince(d time.Duration) int {
	return sort.Search(len(s.recorded), func(i int) bool { return s.recorded[i].Offset >= d })
}

// forgetOutput drops the output of the container's runs before the one before run restarts: as the
// kubelet keeps the logs of a container's current and previous runs only (kubectl logs --previous),
// a container restarting without end holds at most two runs' output.
func (pc *podCommands) forgetOutput(container string, restarts int32) {
	for k, r := range pc.runs {
		if k.container == container && k.restarts < restarts-1 && r.out.Output != nil {
			r.out.Output = nil
			pc.runs[k] = r
		}
	}
}
