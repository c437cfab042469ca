package simulation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	utilexec "k8s.io/utils/exec"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// The annotations that shape what the kubelet's API answers for a simulated pod (docs/simulation.md,
// "Logs, exec, attach and port-forward"). Nothing runs on the simulator's host: logs are computed,
// exec and attach answered from these annotations (exec also by the sandbox, Streaming.Exec),
// port-forward answered in memory (portforward.go).
const (
	// AnnotationLogLines is how many log lines each container writes when it starts ("0" none;
	// default 1).
	AnnotationLogLines = "nodeagent.io/log-lines"
	// AnnotationLogPeriod makes each container write one more line every period while it runs
	// (a Go duration, "1s"; default none).
	AnnotationLogPeriod = "nodeagent.io/log-period"
	// AnnotationLogText is the text of each line, before " container=<c> restart=<n> line=<k>"
	// (default "simulated log").
	AnnotationLogText = "nodeagent.io/log-text"
	// AnnotationExec answers kubectl exec: a JSON object from the command (its words joined by
	// spaces, or "*" for any) to {"stdout": "...", "stderr": "...", "exitCode": N}.
	AnnotationExec = "nodeagent.io/exec"
	// AnnotationAttach is what kubectl attach shows before it echoes stdin back.
	AnnotationAttach = "nodeagent.io/attach"
	// AnnotationPortForward says what the pod's ports answer to kubectl port-forward: a JSON object
	// from a port ("80") or "*" to a PortAnswer (an HTTP response, an echo, refused, or the name of
	// one of the operator's --port-forward-target targets); default: an HTTP 200 naming the pod.
	AnnotationPortForward = "nodeagent.io/port-forward"
)

// streamingAnnotations are the annotations above: pod-wide only (no .<container> form).
var streamingAnnotations = []string{AnnotationLogLines, AnnotationLogPeriod, AnnotationLogText, AnnotationLogConfigMap, AnnotationExec, AnnotationAttach, AnnotationPortForward}

// IsStreamingAnnotation reports whether key is one of the annotations of the kubelet's API's answers,
// which PodBehaviour leaves to Streaming.
func IsStreamingAnnotation(key string) bool { return slices.Contains(streamingAnnotations, key) }

// ExitCodeNotSimulated is the exit code of a command no annotation answers: 126, the shell's
// "command found but cannot be run".
const ExitCodeNotSimulated = 126

// maxLogLines caps nodeagent.io/log-lines.
const maxLogLines = 1_000_000

// Streaming answers the kubelet's API for the simulated pods (kubeletserver's
// ContainerLogsGetter, ContainerRunner, ContainerAttacher and PortForwarder) from their annotations
// and the container status the Node wrote, holding nothing per pod: a log line is computed from
// the container's start time, its index and the annotations, so that --previous, --since, --tail
// and -f cost no memory per container, and a log stream is bounded whatever it asks (logStream).
type Streaming struct {
	Pods  node.PodLister
	Clock clock.WithTicker
	// ConfigMaps reads the ConfigMaps of AnnotationLogConfigMap; nil: a pod that names one gets
	// an error for its log.
	ConfigMaps ConfigMapGetter
	// configMapLines shares the lines of each ConfigMap among the streams reading it.
	configMapLines logLinesCache
	// Output returns the lines run restart of a container of pod p wrote as its command was
	// interpreted (nil: none, the log is the annotations'). Nil: no command's output.
	Output func(p *v1.Pod, container string, restart int32) []sandbox.Line
	// Exec, when set, interprets a command exec'd into a container in its sandbox (simPods'
	// execInContainer): an error wrapping ErrExecNotInterpreted leaves it to AnnotationExec's "*"
	// answer, else exit code 126. Nil: exec is answered from AnnotationExec only.
	Exec func(ctx context.Context, p *v1.Pod, container string, cmd []string) (ExecResult, error)
	// PortForwardTargets are the operator's port-forward targets (--port-forward-target), by name:
	// the only addresses a port-forward to a simulated pod ever dials, when the pod's
	// AnnotationPortForward picks one by name. Nil: none.
	PortForwardTargets map[string]string
	// follow is the clock every follow stream waits on.
	follow followClock
}

// logSpec is a container's log as its pod's annotations shape it.
type logSpec struct {
	lines  int
	period time.Duration
	text   string
	// from, when set, are the lines of AnnotationLogConfigMap: line k is from.lines[k % len].
	from *logLines
	// recorded, when set, are the lines the container's command wrote (sandbox.Result.Output), each
	// at the run's start plus its offset; the annotations do not apply.
	recorded []sandbox.Line
}

func parseLogSpec(p *v1.Pod) (logSpec, error) {
	s := logSpec{lines: 1, text: "simulated log"}
	if v, ok := p.Annotations[AnnotationLogLines]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxLogLines {
			return s, fmt.Errorf("annotation %s %q: want a number of lines from 0 to %d", AnnotationLogLines, v, maxLogLines)
		}
		s.lines = n
	}
	if v, ok := p.Annotations[AnnotationLogPeriod]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Millisecond {
			return s, fmt.Errorf("annotation %s %q: want a duration of 1ms or more", AnnotationLogPeriod, v)
		}
		s.period = d
	}
	if v, ok := p.Annotations[AnnotationLogText]; ok {
		s.text = strings.ReplaceAll(v, "\n", " ")
	}
	return s, nil
}

// run is one run of a container: its restart count, when it started, and when it ended (zero
// while it runs).
type run struct {
	restart        int32
	started, ended time.Time
}

// containerRun finds the container's current run (or, previous, its last terminated one) among the pod's
// containers, init containers and ephemeral containers, as the kubelet's validateContainerLogStatus.
func containerRun(p *v1.Pod, container string, previous bool) (run, error) {
	for _, list := range [][]v1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, st := range list {
			if st.Name != container {
				continue
			}
			if previous {
				t := st.LastTerminationState.Terminated
				if t == nil {
					return run{}, fmt.Errorf("previous terminated container %q in pod %q not found", container, p.Name)
				}
				return run{restart: st.RestartCount - 1, started: t.StartedAt.Time, ended: t.FinishedAt.Time}, nil
			}
			switch {
			case st.State.Running != nil:
				return run{restart: st.RestartCount, started: st.State.Running.StartedAt.Time}, nil
			case st.State.Terminated != nil:
				return run{restart: st.RestartCount, started: st.State.Terminated.StartedAt.Time, ended: st.State.Terminated.FinishedAt.Time}, nil
			}
			return run{}, fmt.Errorf("container %q in pod %q is waiting to start: ContainerCreating", container, p.Name)
		}
	}
	return run{}, fmt.Errorf("container %q in pod %q is waiting to start: ContainerCreating", container, p.Name)
}

// lineTime is when line k of a run was written: the run's start for the first s.lines lines, then
// one more line every s.period. A line beyond the longest time.Duration after the start (about 292
// years) is at started plus that Duration: no run lives that long, so no such line is ever written
// (linesUntil saturates alike), and a follow stream waiting for one waits its followCheckPeriod.
func (s logSpec) lineTime(r run, k int) time.Time {
	if s.recorded != nil {
		return r.started.Add(s.recorded[min(k, len(s.recorded)-1)].Offset)
	}
	if k < s.lines || s.period == 0 {
		return r.started
	}
	steps := int64(k - s.lines) // >= 0: the line at started + (steps+1)*period
	if steps >= int64(maxDuration/s.period) {
		return r.started.Add(maxDuration)
	}
	return r.started.Add(time.Duration(steps+1) * s.period)
}

// maxDuration is the longest time.Duration (time.Time.Sub's saturation).
const maxDuration = time.Duration(math.MaxInt64)

// linesUntil is how many lines the run had written by t: s.lines at the start, then one per
// s.period (t.Sub saturates at maxDuration, so the count is at most s.lines + maxDuration/s.period).
func (s logSpec) linesUntil(r run, t time.Time) int {
	if t.Before(r.started) {
		return 0
	}
	if s.recorded != nil {
		return s.recordedLinesUntil(t.Sub(r.started))
	}
	n := s.lines
	if s.period > 0 {
		n += int(t.Sub(r.started) / s.period)
	}
	return n
}

// firstSince is the first line written at or after since, as the kubelet's log reader skips the
// lines before since (k8s.io/cri-client/pkg/logs, logWriter.write): 0 when since is not after the
// start; s.lines when the run writes no line after its start; math.MaxInt, a line never written,
// when since is beyond the longest time.Duration after the start (sinceTime=9999-12-31T23:59:59Z:
// an empty log, as the kubelet answers, and a follow stream that sends nothing). It neither
// overflows nor returns a negative line.
func (s logSpec) firstSince(r run, since time.Time) int {
	if !since.After(r.started) {
		return 0
	}
	if s.recorded != nil {
		return s.recordedFirstSince(since.Sub(r.started))
	}
	if s.period == 0 {
		return s.lines // every line was written at the start, before since
	}
	d := since.Sub(r.started) // > 0
	if d == maxDuration {
		return math.MaxInt
	}
	// line k (k >= lines) is at started + (k-lines+1)*period >= since: k-lines+1 = ceil(d/period)
	steps := d / s.period
	if d%s.period != 0 {
		steps++
	}
	return s.lines + int(steps) - 1
}

// GetContainerLogs implements kubeletserver.ContainerLogsGetter: the lines of the container's
// current (or, with Previous, last terminated) run, as the options ask; with Follow the stream
// stays open while the container runs, as the kubelet's, and gets each new line at its time (within
// followTick). The stream is a logStream: it runs on the caller's goroutine and ends when ctx ends.
func (st *Streaming) GetContainerLogs(ctx context.Context, namespace, podName, container string, opts kubeletserver.ContainerLogOpts) (io.ReadCloser, error) {
	p, err := st.Pods.Get(namespace, podName)
	if err != nil {
		return nil, err
	}
	spec, err := parseLogSpec(p)
	if err != nil {
		return nil, err
	}
	if v, ok := p.Annotations[AnnotationLogConfigMap]; ok {
		if spec.from, err = st.configMapLines.configMapLines(ctx, st.ConfigMaps, namespace, v); err != nil {
			return nil, err
		}
		if _, set := p.Annotations[AnnotationLogLines]; !set {
			spec.lines = len(spec.from.lines)
		}
	}
	r, err := containerRun(p, container, opts.Previous)
	if err != nil {
		return nil, err
	}
	if st.Output != nil {
		if lines := st.Output(p, container, r.restart); len(lines) > 0 {
			spec = recordedLog(lines)
		}
	}
	now := st.Clock.Now()
	end := now
	if !r.ended.IsZero() {
		end = r.ended
	}
	last := spec.linesUntil(r, end) // lines [0, last) written so far
	first := 0
	// The kubelet's kuberuntime ReadLogs: since is now less sinceSeconds, in the kubelet's own
	// arithmetic (past about 292 years of seconds the Duration wraps, as the kubelet's does, and so
	// does its answer), else sinceTime.
	since := opts.SinceTime
	if opts.SinceSeconds > 0 {
		since = now.Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	if !since.IsZero() {
		first = spec.firstSince(r, since)
	}
	if opts.TailSet && last-opts.Tail > first {
		first = max(last-opts.Tail, 0)
	}
	return &logStream{st: st, namespace: namespace, pod: podName, container: container, spec: spec, run: r,
		timestamps: opts.Timestamps, follow: opts.Follow && r.ended.IsZero(), next: first, last: last,
		limit: opts.LimitBytes, done: ctx.Done(), closed: make(chan struct{})}, nil
}

// stillRunning reports whether the container's current run is still r, running.
func (st *Streaming) stillRunning(namespace, podName, container string, r run) bool {
	p, err := st.Pods.Get(namespace, podName)
	if err != nil {
		return false
	}
	cur, err := containerRun(p, container, false)
	return err == nil && cur.ended.IsZero() && cur.started.Equal(r.started)
}

// execAnswer is one command's answer in AnnotationExec.
type execAnswer struct {
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
}

// RunInContainer implements kubeletserver.ContainerRunner: AnnotationExec's answer for the command
// when the annotation names it; else the command interpreted in the container's sandbox (Exec), its
// exit code through the CRI's ExitError as the kubelet's; else the annotation's "*" answer; else exit
// code 126 and a message saying why.
func (st *Streaming) RunInContainer(ctx context.Context, namespace, podName, container string, cmd []string, a kubeletserver.AttachIO) error {
	p, err := st.Pods.Get(namespace, podName)
	if err != nil {
		return err
	}
	command := strings.Join(cmd, " ")
	var answers map[string]execAnswer
	if v, found := p.Annotations[AnnotationExec]; found {
		if err := json.Unmarshal([]byte(v), &answers); err != nil {
			return fmt.Errorf("annotation %s of pod %s/%s: %w", AnnotationExec, namespace, podName, err)
		}
	}
	ans, ok := answers[command]
	why := fmt.Sprintf("no answer for it in annotation %s", AnnotationExec)
	if !ok && st.Exec != nil {
		res, err := st.Exec(ctx, p, container, cmd)
		switch {
		case err == nil:
			ok, ans = true, execAnswer{Stdout: string(res.Stdout), Stderr: string(res.Stderr), ExitCode: int(res.ExitCode)}
		case errors.Is(err, ErrExecNotInterpreted):
			why = fmt.Sprintf("%s, %v", why, err)
		default:
			return err
		}
	}
	if !ok {
		ans, ok = answers["*"]
	}
	if !ok {
		ans = execAnswer{ExitCode: ExitCodeNotSimulated, Stderr: fmt.Sprintf(
			"nodeagent simulate: command %q is not simulated in container %q of pod %s/%s (%s)\n",
			command, container, namespace, podName, why)}
	}
	if w := a.Stdout(); w != nil && ans.Stdout != "" {
		_, _ = io.WriteString(w, ans.Stdout)
	}
	if w := a.Stderr(); w != nil && ans.Stderr != "" {
		_, _ = io.WriteString(w, ans.Stderr)
	}
	if ans.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", ans.ExitCode), Code: ans.ExitCode}
	}
	return nil
}

// AttachToContainer implements kubeletserver.ContainerAttacher: AnnotationAttach's text on stdout,
// then stdin echoed back until the client closes it or goes.
func (st *Streaming) AttachToContainer(ctx context.Context, namespace, podName, _ string, a kubeletserver.AttachIO) error {
	p, err := st.Pods.Get(namespace, podName)
	if err != nil {
		return err
	}
	out := a.Stdout()
	if out != nil && p.Annotations[AnnotationAttach] != "" {
		_, _ = io.WriteString(out, p.Annotations[AnnotationAttach])
	}
	if in := a.Stdin(); in != nil {
		if out == nil {
			out = nopWriteCloser{io.Discard}
		}
		done := make(chan struct{})
		go func() { _, _ = io.Copy(out, in); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
