package simulation

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Annotations that set what a container's probes answer (the probe itself, its timing and thresholds,
// comes from the container's spec: a probe the spec does not have is not run, and its annotation is
// ignored). Values:
//
//	pass              every probe succeeds (the default)
//	fail              every probe fails
//	fail-after:30s    probes succeed, then fail from 30 s after the container started
//	pass-after:30s    probes fail, then succeed from 30 s after the container started
//	flap:20s          probes succeed for 20 s, fail for 20 s, and so on, from the container's start
//
// With the kubelet's prober semantics (pkg/kubelet/prober): a probe runs initialDelaySeconds after the
// container started, then every periodSeconds; the result turns to failure after failureThreshold
// failures in a row and to success after successThreshold successes in a row; readiness starts as
// failure, liveness as success; a startup probe gates the other two (they do not run until it
// succeeded, and the container is not started until then); a liveness or startup failure kills the
// container (exit 137) and its restart policy applies, with the crash-loop back-off.
const (
	AnnotationReadinessProbe = "nodeagent.io/readiness-probe"
	AnnotationLivenessProbe  = "nodeagent.io/liveness-probe"
	AnnotationStartupProbe   = "nodeagent.io/startup-probe"
)

// ProbeMode is what a simulated probe answers over time.
type ProbeMode uint8

const (
	ProbePass ProbeMode = iota
	ProbeFail
	ProbeFailAfter
	ProbePassAfter
	ProbeFlap
)

// ProbeBehaviour is what one kind of probe of a container answers: Mode, with After the duration the
// mode names (fail-after, pass-after, flap).
type ProbeBehaviour struct {
	Mode  ProbeMode
	After time.Duration
}

// parseProbe parses a probe annotation's value.
func parseProbe(value string) (ProbeBehaviour, bool) {
	mode, arg, hasArg := strings.Cut(value, ":")
	var b ProbeBehaviour
	switch mode {
	case "pass":
		b.Mode = ProbePass
	case "fail":
		b.Mode = ProbeFail
	case "fail-after":
		b.Mode = ProbeFailAfter
	case "pass-after":
		b.Mode = ProbePassAfter
	case "flap":
		b.Mode = ProbeFlap
	default:
		return b, false
	}
	if b.Mode == ProbePass || b.Mode == ProbeFail {
		return b, !hasArg
	}
	d, err := time.ParseDuration(arg)
	if err != nil || d <= 0 || !hasArg {
		return b, false
	}
	b.After = d
	return b, true
}

// succeeds reports what the probe answers at t, for a container started at start.
func (b ProbeBehaviour) succeeds(start, t time.Time) bool {
	since := t.Sub(start)
	switch b.Mode {
	case ProbeFail:
		return false
	case ProbeFailAfter:
		return since < b.After
	case ProbePassAfter:
		return since >= b.After
	case ProbeFlap:
		return (since/b.After)%2 == 0
	}
	return true
}

// maxProbes bounds the probes a result is computed over: the result at a time is that of the last
// maxProbes probes before it (enough for any threshold), and a change is looked for at most maxProbes
// probes ahead.
const maxProbes = 1000

// simProbe is one probe of one run of a container: its spec's timing and thresholds, what it answers,
// and when the run started.
type simProbe struct {
	b                ProbeBehaviour
	delay, period    time.Duration
	failure, success int
	initial          bool      // the result before the first probe: readiness false, liveness true
	start, gate      time.Time // the run's start; no probe before gate (a startup probe's success)
}

func newSimProbe(p *v1.Probe, b ProbeBehaviour, start time.Time, initial bool) *simProbe {
	sp := &simProbe{b: b, delay: time.Duration(p.InitialDelaySeconds) * time.Second, period: time.Duration(p.PeriodSeconds) * time.Second,
		failure: int(p.FailureThreshold), success: int(p.SuccessThreshold), initial: initial, start: start, gate: start}
	if sp.period <= 0 {
		sp.period = 10 * time.Second
	}
	if sp.failure <= 0 {
		sp.failure = 3
	}
	if sp.success <= 0 {
		sp.success = 1
	}
	return sp
}

// probeTime is the time of the k-th probe.
func (p *simProbe) probeTime(k int) time.Time {
	return p.start.Add(p.delay + time.Duration(k)*p.period)
}

// firstProbe is the index of the first probe at or after the gate.
func (p *simProbe) firstProbe() int {
	first := p.start.Add(p.delay)
	if !p.gate.After(first) {
		return 0
	}
	return int((p.gate.Sub(first) + p.period - 1) / p.period)
}

// step applies one probe's answer to the result and the run of equal answers.
func (p *simProbe) step(result bool, streak int, ok bool) (bool, int) {
	if ok != (streak > 0) {
		streak = 0
	}
	if ok {
		streak++
		if streak >= p.success {
			result = true
		}
	} else {
		streak--
		if -streak >= p.failure {
			result = false
		}
	}
	return result, streak
}

// resultAt returns the probe's result at now and the time of its next change (zero: none within
// maxProbes probes).
func (p *simProbe) resultAt(now time.Time) (bool, time.Time) {
	if p.b.Mode == ProbePass && p.initial {
		return true, time.Time{}
	}
	first := p.firstProbe()
	last := first - 1 // the last probe at or before now
	if t := p.probeTime(first); !t.After(now) {
		last = first + int(now.Sub(t)/p.period)
	}
	k := max(first, last-maxProbes)
	result, streak := p.initial, 0
	for ; k <= last; k++ {
		result, streak = p.step(result, streak, p.b.succeeds(p.start, p.probeTime(k)))
	}
	for end := k + maxProbes; k < end; k++ {
		t := p.probeTime(k)
		next, s := p.step(result, streak, p.b.succeeds(p.start, t))
		if next != result {
			return result, t
		}
		streak = s
	}
	return result, time.Time{}
}

// lastFailure returns the time of the last probe at or before now that failed (zero: none within the
// last maxProbes probes).
func (p *simProbe) lastFailure(now time.Time) time.Time {
	first := p.firstProbe()
	t0 := p.probeTime(first)
	if t0.After(now) {
		return time.Time{}
	}
	last := first + int(now.Sub(t0)/p.period)
	for k := last; k >= max(first, last-maxProbes); k-- {
		if t := p.probeTime(k); !p.b.succeeds(p.start, t) {
			return t
		}
	}
	return time.Time{}
}

// failsAt returns when the probe's result first turns to failure (zero: not within maxProbes×10
// probes), for a liveness or startup probe whose failure kills the container.
func (p *simProbe) failsAt() time.Time {
	if p.b.Mode == ProbePass {
		return time.Time{}
	}
	result, streak := true, 0
	for k := p.firstProbe(); k < p.firstProbe()+10*maxProbes; k++ {
		t := p.probeTime(k)
		if result, streak = p.step(result, streak, p.b.succeeds(p.start, t)); !result {
			return t
		}
	}
	return time.Time{}
}

// succeedsAt returns when a startup probe first succeeds (zero: not within maxProbes×10 probes).
func (p *simProbe) succeedsAt() time.Time {
	result, streak := false, 0
	for k := p.firstProbe(); k < p.firstProbe()+10*maxProbes; k++ {
		t := p.probeTime(k)
		if result, streak = p.step(result, streak, p.b.succeeds(p.start, t)); result {
			return t
		}
		if -streak >= p.failure {
			return time.Time{} // failed first: the container is killed
		}
	}
	return time.Time{}
}

// probeFailedMessage is the output of a failed simulated probe, as the kubelet's prober words the
// probe's handler failing.
func probeFailedMessage(p *v1.Probe) string {
	switch {
	case p.HTTPGet != nil:
		return "HTTP probe failed with statuscode: 500"
	case p.TCPSocket != nil:
		return fmt.Sprintf("dial tcp: connect: connection refused (port %s)", p.TCPSocket.Port.String())
	case p.GRPC != nil:
		return "service unhealthy (responded with \"NOT_SERVING\")"
	}
	return "command failed with exit code 1"
}
