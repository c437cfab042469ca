package simulation

import (
	"fmt"
	"math"
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
	// ProbeTimeline: the probe's answer at each time comes from Answer (an exec probe's command run
	// against the container's files at that time, RunOutcome.Probe).
	ProbeTimeline
)

// ProbeBehaviour is what one kind of probe of a container answers: Mode, with After the duration the
// mode names (fail-after, pass-after, flap).
type ProbeBehaviour struct {
	Mode  ProbeMode
	After time.Duration
	// Answer is the probe's answer at since from the run's start (ProbeTimeline), the same until next
	// (later than since; math.MaxInt64: for ever). It must give the same answer for the same time,
	// except that a kubectl exec into the container may change those at and after its own time.
	Answer func(since time.Duration) (ok bool, next time.Duration)
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
	case ProbeTimeline:
		ok, _ := b.Answer(since)
		return ok
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
	result, streak := p.initial, 0
	_, result, streak = p.walk(max(first, last-maxProbes), last+1, result, streak, nil)
	before := result
	k, _, _ := p.walk(last+1, last+1+maxProbes, result, streak, func(r bool) bool { return r != before })
	if k < last+1+maxProbes {
		return result, p.probeTime(k)
	}
	return result, time.Time{}
}

// answer returns probe k's answer and the index of the first probe after it whose answer may differ:
// k+1, but for a ProbeTimeline, the first probe at or after its answer's next change.
func (p *simProbe) answer(k int) (bool, int) {
	t := p.probeTime(k)
	if p.b.Mode != ProbeTimeline {
		return p.b.succeeds(p.start, t), k + 1
	}
	ok, next := p.b.Answer(t.Sub(p.start))
	if next == math.MaxInt64 || next < 0 {
		return ok, math.MaxInt
	}
	return ok, max(k+1, int(min(p.indexAtOrAfter(p.start.Add(next)), math.MaxInt/2)))
}

// walk applies probes from, from+1... before to to (result, streak) in order; stop (nil: none), asked
// after each probe with the result, ends the walk there: walk returns that probe's index (else to)
// and the result and streak. Probes whose answer is that of the one before and cannot change the
// result (its streak past the threshold) are skipped: a ProbeTimeline's answer changes only when the
// container's files do, so an hour of probes of a file that stays costs one step.
func (p *simProbe) walk(from, to int, result bool, streak int, stop func(result bool) bool) (int, bool, int) {
	for k := from; k < to; {
		ok, kEnd := p.answer(k)
		for ; k < kEnd && k < to; k++ {
			result, streak = p.step(result, streak, ok)
			if stop != nil && stop(result) {
				return k, result, streak
			}
			if result == ok && ((ok && streak >= p.success) || (!ok && -streak >= p.failure)) {
				k = kEnd // the same answers up to kEnd change nothing
				break
			}
		}
	}
	return to, result, streak
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
	first := p.firstProbe()
	if k, _, _ := p.walk(first, first+10*maxProbes, true, 0, func(r bool) bool { return !r }); k < first+10*maxProbes {
		return p.probeTime(k)
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

// probeKey names one probe of one container: its name and the probe type (probemetrics.Readiness,
// Liveness or Startup).
type probeKey struct{ container, probeType string }

// probeTally is how many probes of one probe of one container answered success and failure.
type probeTally struct{ successful, failed uint64 }

// probeTallies are the probes a pod's containers ran, by container and probe type.
type probeTallies map[probeKey]probeTally

// add adds o's counts to t.
func (t probeTallies) add(o probeTallies) {
	for k, v := range o {
		c := t[k]
		c.successful += v.successful
		c.failed += v.failed
		t[k] = c
	}
}

// indexAtOrAfter is the index of the first probe at or after x (0 when x is before the first one).
func (p *simProbe) indexAtOrAfter(x time.Time) int64 {
	d := x.Sub(p.start.Add(p.delay))
	if d <= 0 {
		return 0
	}
	return int64((d + p.period - 1) / p.period)
}

// count returns how many of the probes after from (zero: since the first) and at or before until
// answered success and failure: the probes the kubelet's prober worker runs on the container's
// ticker, initialDelaySeconds after it started, every periodSeconds, none before the gate (a startup
// probe's success). It is computed from the times alone, without a pass over each probe but for a
// flap whose half-period is shorter than the probe period.
func (p *simProbe) count(from, until time.Time) (ok, failed uint64) {
	lo := int64(p.firstProbe())
	if !from.IsZero() {
		lo = max(lo, p.indexAtOrAfter(from.Add(time.Nanosecond)))
	}
	end := p.indexAtOrAfter(until.Add(time.Nanosecond)) // one past the last probe at or before until
	if end <= lo {
		return 0, 0
	}
	n := uint64(end - lo)
	clamp := func(k int64) int64 { return min(max(k, lo), end) }
	switch p.b.Mode {
	case ProbePass:
		return n, 0
	case ProbeFail:
		return 0, n
	case ProbeFailAfter:
		ok = uint64(clamp(p.indexAtOrAfter(p.start.Add(p.b.After))) - lo)
		return ok, n - ok
	case ProbePassAfter:
		ok = uint64(end - clamp(p.indexAtOrAfter(p.start.Add(p.b.After))))
		return ok, n - ok
	case ProbeTimeline: // one answer per stretch of probes between changes of the files
		for k := lo; k < end; {
			yes, kEnd := p.answer(int(k))
			next := min(int64(kEnd), end)
			if yes {
				ok += uint64(next - k)
			}
			k = next
		}
		return ok, n - ok
	}
	// Flap: success in the even half-periods [2jA, (2j+1)A) since the start.
	first, last := p.probeTime(int(lo)), p.probeTime(int(end-1))
	if half := p.b.After; int64(last.Sub(first)/(2*half)) > int64(n) {
		for k := lo; k < end; k++ {
			if p.b.succeeds(p.start, p.probeTime(int(k))) {
				ok++
			}
		}
		return ok, n - ok
	}
	for j := int64(first.Sub(p.start) / (2 * p.b.After)); ; j++ {
		on := p.start.Add(time.Duration(2*j) * p.b.After)
		if on.After(last) {
			break
		}
		ok += uint64(clamp(p.indexAtOrAfter(on.Add(p.b.After))) - clamp(p.indexAtOrAfter(on)))
	}
	return ok, n - ok
}

// tallyRun adds to s.tally the probes container c's run ran: the run started at start, was started
// (its startup probe's success; start without one; zero: never) at startedAt, and ended at end (zero:
// running). Only probes after floor (the baseline's time; zero: none) count: those before it are the
// pod record's probeBase. As the kubelet's worker: the startup probe runs until the container is
// started, the liveness and readiness probes from then on, none while it is not running.
func (s *simulation) tallyRun(c *v1.Container, cb ContainerBehaviour, start, startedAt, end, floor time.Time) {
	until := s.now
	if !end.IsZero() && end.Before(until) {
		until = end
	}
	add := func(probeType string, ok, failed uint64) {
		if ok+failed == 0 {
			return
		}
		k := probeKey{c.Name, probeType}
		t := s.tally[k]
		t.successful += ok
		t.failed += failed
		s.tally[k] = t
	}
	if c.StartupProbe != nil {
		sp := newSimProbe(c.StartupProbe, cb.Startup, start, false)
		last := until
		if !startedAt.IsZero() && startedAt.Before(last) {
			last = startedAt
		}
		ok, failed := sp.count(floor, last)
		add("Startup", ok, failed)
	}
	if startedAt.IsZero() {
		return
	}
	for _, pr := range []struct {
		probe     *v1.Probe
		b         ProbeBehaviour
		probeType string
	}{{c.LivenessProbe, cb.Liveness, "Liveness"}, {c.ReadinessProbe, cb.Readiness, "Readiness"}} {
		if pr.probe == nil {
			continue
		}
		p := newSimProbe(pr.probe, pr.b, start, false)
		p.gate = startedAt
		ok, failed := p.count(floor, until)
		add(pr.probeType, ok, failed)
	}
}

// hasProbe reports whether a container of p has a probe.
func hasProbe(p *v1.Pod) bool {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if l[i].StartupProbe != nil || l[i].LivenessProbe != nil || l[i].ReadinessProbe != nil {
				return true
			}
		}
	}
	return false
}
