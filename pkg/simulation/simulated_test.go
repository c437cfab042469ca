package simulation

import (
	"context"
	"errors"
	"fmt"
	"github.com/nodeagent/nodeagent/pkg/pod"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var (
	t0      = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	simHost = []netip.Addr{netip.MustParseAddr("192.168.0.10")}
	simIP   = []netip.Addr{netip.MustParseAddr("10.244.0.2")}
)

// basePod is a pod named p in ns with one container (busybox) per name.
func basePod(restart v1.RestartPolicy, names ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Generation: 1},
		Spec: v1.PodSpec{RestartPolicy: restart, NodeName: "machine1"}}
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "busybox"})
	}
	return p
}

// simState renders the first regular (or, when there is none, the last init) container as
// "State/Reason restarts=N ready=B".
func simState(rt *pod.RuntimeStatus) string {
	list := rt.Containers
	if len(list) == 0 {
		list = rt.InitContainers[len(rt.InitContainers)-1:]
	}
	c := list[0]
	var s string
	switch {
	case c.State.Running != nil:
		s = "Running"
	case c.State.Terminated != nil:
		s = "Terminated/" + c.State.Terminated.Reason
	case c.State.Waiting != nil:
		s = "Waiting/" + c.State.Waiting.Reason
	}
	return s + " restarts=" + string(rune('0'+c.RestartCount)) + map[bool]string{true: " ready", false: ""}[c.Ready]
}

func TestSimulate(t *testing.T) {
	start := t0
	job := func(p *v1.Pod) { p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "j"}} }
	annotate := func(kv ...string) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Annotations = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				p.Annotations[kv[i]] = kv[i+1]
			}
		}
	}
	for _, tc := range []struct {
		name      string
		restart   v1.RestartPolicy
		mutate    []func(*v1.Pod)
		overrides Overrides
		at        time.Duration
		// startAt is the pod's StartTime after start; seen, if not 0, when its deletion was seen.
		startAt, seen time.Duration
		want          string
		wantNext      time.Duration // -1: never
	}{
		{name: "default: running and ready at once", restart: v1.RestartPolicyAlways, at: 0, want: "Running restarts=0 ready", wantNext: -1},
		{name: "Job pod completes at once", restart: v1.RestartPolicyNever, mutate: []func(*v1.Pod){job}, at: 0, want: "Terminated/Completed restarts=0", wantNext: -1},
		{name: "start delay: ContainerCreating", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationStartDelay, "2s")},
			at: time.Second, want: "Waiting/ restarts=0", wantNext: 2 * time.Second},
		{name: "readiness delay", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationReadinessDelay, "5s")},
			at: time.Second, want: "Running restarts=0", wantNext: 5 * time.Second},
		{name: "run then exit 3, Never: Error", restart: v1.RestartPolicyNever, mutate: []func(*v1.Pod){annotate(AnnotationRunDuration, "1s", AnnotationExitCode, "3")},
			at: 2 * time.Second, want: "Terminated/Error restarts=0", wantNext: -1},
		// Crash loop, run 1s exit 1: runs [0,1) [1,2) then back-off 10s [12,13), 20s [33,34), 40s ...
		{name: "crash loop: first restart at once", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationRunDuration, "1s", AnnotationExitCode, "1")},
			at: 1500 * time.Millisecond, want: "Running restarts=1 ready", wantNext: 2 * time.Second},
		{name: "crash loop: back-off 10s", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationRunDuration, "1s", AnnotationExitCode, "1")},
			at: 5 * time.Second, want: "Waiting/CrashLoopBackOff restarts=1", wantNext: 12 * time.Second},
		{name: "crash loop: third run", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationRunDuration, "1s", AnnotationExitCode, "1")},
			at: 12500 * time.Millisecond, want: "Running restarts=2 ready", wantNext: 13 * time.Second},
		{name: "crash loop: back-off 20s", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationRunDuration, "1s", AnnotationExitCode, "1")},
			at: 20 * time.Second, want: "Waiting/CrashLoopBackOff restarts=2", wantNext: 33 * time.Second},
		{name: "image pull error", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationImagePullError, "not found")},
			at: 500 * time.Millisecond, want: "Waiting/ErrImagePull restarts=0", wantNext: time.Second},
		{name: "image pull back-off", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationImagePullError, "not found")},
			at: 5 * time.Second, want: "Waiting/ImagePullBackOff restarts=0", wantNext: 10 * time.Second},
		{name: "per-container exit code", restart: v1.RestartPolicyNever,
			mutate: []func(*v1.Pod){job, annotate(AnnotationExitCode+".c", "4")}, at: 0, want: "Terminated/Error restarts=0", wantNext: -1},
		{name: "control API: crash", restart: v1.RestartPolicyAlways, overrides: Overrides{"c": {Crashes: []Crash{{At: start.Add(3 * time.Second)}}}},
			at: 3 * time.Second, want: "Running restarts=1 ready", wantNext: -1},
		{name: "control API: a second crash is a crash loop", restart: v1.RestartPolicyAlways,
			overrides: Overrides{"c": {Crashes: []Crash{{At: start.Add(3 * time.Second), ExitCode: 2}, {At: start.Add(5 * time.Second), ExitCode: 3}}}},
			at:        6 * time.Second, want: "Waiting/CrashLoopBackOff restarts=1", wantNext: 15 * time.Second},
		{name: "control API: running again after the back-off", restart: v1.RestartPolicyAlways,
			overrides: Overrides{"c": {Crashes: []Crash{{At: start.Add(3 * time.Second), ExitCode: 2}, {At: start.Add(5 * time.Second), ExitCode: 3}}}},
			at:        15 * time.Second, want: "Running restarts=2 ready", wantNext: -1},
		{name: "control API: stop, Never", restart: v1.RestartPolicyNever, overrides: Overrides{"c": {StopAt: start.Add(3 * time.Second)}},
			at: 4 * time.Second, want: "Terminated/Completed restarts=0", wantNext: -1},
		{name: "control API: unready", restart: v1.RestartPolicyAlways, overrides: Overrides{"c": {Unready: true}},
			at: time.Second, want: "Running restarts=0", wantNext: -1},
		{name: "deleted: stopped after the stop delay", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationStopDelay, "3s"), func(p *v1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: start.Add(40 * time.Second)}
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
		}}, at: 12 * time.Second, want: "Running restarts=0 ready", wantNext: 13 * time.Second},
		{name: "deleted and stopped", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationStopDelay, "3s"), func(p *v1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: start.Add(40 * time.Second)}
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
		}}, at: 13 * time.Second, want: "Terminated/Completed restarts=0", wantNext: -1},
		{name: "deleted in the second it started, seen after its start: it ran, then stopped", restart: v1.RestartPolicyAlways,
			mutate: []func(*v1.Pod){func(p *v1.Pod) {
				p.DeletionTimestamp = &metav1.Time{Time: start.Add(30 * time.Second)} // requested in the second of start
				p.DeletionGracePeriodSeconds = ptr.To[int64](30)
			}}, startAt: 300 * time.Millisecond, seen: 600 * time.Millisecond,
			at: 700 * time.Millisecond, want: "Terminated/Completed restarts=0", wantNext: -1},
		{name: "deleted in the second it started, seen late: stopped at the end of that second", restart: v1.RestartPolicyAlways,
			mutate: []func(*v1.Pod){func(p *v1.Pod) {
				p.DeletionTimestamp = &metav1.Time{Time: start.Add(30 * time.Second)} // requested in the second of start
				p.DeletionGracePeriodSeconds = ptr.To[int64](30)
			}}, startAt: 300 * time.Millisecond, seen: 5 * time.Second,
			at: 5 * time.Second, want: "Terminated/Completed restarts=0", wantNext: -1},
		{name: "deleted before it started (seen before the start)", restart: v1.RestartPolicyAlways,
			mutate: []func(*v1.Pod){func(p *v1.Pod) {
				p.DeletionTimestamp = &metav1.Time{Time: start.Add(30 * time.Second)} // requested in the second of start
				p.DeletionGracePeriodSeconds = ptr.To[int64](30)
			}}, startAt: 300 * time.Millisecond, seen: 200 * time.Millisecond,
			at: 700 * time.Millisecond, want: " restarts=0", wantNext: -1}, // no state: never created
		{name: "init containers in turn", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationStartDelay, "1s"), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i1", Image: "busybox"}, {Name: "i2", Image: "busybox"}}
			zero := "0s"
			p.Annotations[AnnotationRunDuration+".i1"], p.Annotations[AnnotationRunDuration+".i2"] = zero, zero
		}}, at: 3500 * time.Millisecond, want: "Running restarts=0 ready", wantNext: -1}, // three start delays: i1, i2, main
		// Issue 35 H1: an init container without a run duration of its own exits 0 once started.
		{name: "init container with a start delay: completes after it, main after its own", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationStartDelay, "2s"), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox"}}
		}}, at: 3 * time.Second, want: "Waiting/ restarts=0", wantNext: 4 * time.Second},
		{name: "sidecar init container keeps running beside main", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "side", Image: "busybox", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}}
		}}, at: time.Second, want: "Running restarts=0 ready", wantNext: -1},
		{name: "init container with a run duration of its own runs for it", restart: v1.RestartPolicyAlways, mutate: []func(*v1.Pod){annotate(AnnotationRunDuration+".init", "5s"), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox"}}
		}}, at: 2 * time.Second, want: "Running restarts=0 ready", wantNext: 5 * time.Second}, // simState shows the init container: no regular one yet
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod(tc.restart, "c")
			for _, m := range tc.mutate {
				m(p)
			}
			b, err := PodBehaviour(p, Behaviour{})
			if err != nil {
				t.Fatal(err)
			}
			in := &SimInput{StartTime: start.Add(tc.startAt), RuntimeName: "containerd", PodIPs: simIP, HostIPs: simHost, Overrides: tc.overrides}
			if tc.seen != 0 {
				in.DeletionSeen = start.Add(tc.seen)
			}
			rt, next := Simulate(p, &b, in, start.Add(tc.at))
			if got := simState(rt); got != tc.want {
				t.Errorf("at %v: %s, want %s", tc.at, got, tc.want)
			}
			wantNext := time.Time{}
			if tc.wantNext >= 0 {
				wantNext = start.Add(tc.wantNext)
			}
			if !next.Equal(wantNext) {
				t.Errorf("next change %v, want %v", next, wantNext)
			}
			// The view always makes a status.
			if _, err := pod.GenerateStatus(p, rt, start.Add(tc.at)); err != nil {
				t.Errorf("GenerateStatus: %v", err)
			}
		})
	}
}

// TestSimulateInitContainersComplete is issue 35's H1: a plain init container (no annotation) exits 0
// once started, whatever its command, and the pod's containers start after it; a sidecar keeps running.
func TestSimulateInitContainersComplete(t *testing.T) {
	for _, tc := range []struct {
		name     string
		init     []v1.Container
		at       time.Duration
		wantInit []string // per init container: "Terminated/Completed exit=0" or "Running"
	}{
		{name: "one plain init container", init: []v1.Container{{Name: "init", Image: "busybox", Command: []string{"sh", "-c", "true"}}},
			wantInit: []string{"Terminated/Completed exit=0"}},
		{name: "two in turn", init: []v1.Container{{Name: "i1", Image: "busybox"}, {Name: "i2", Image: "busybox"}},
			wantInit: []string{"Terminated/Completed exit=0", "Terminated/Completed exit=0"}},
		{name: "a sidecar then a plain one", init: []v1.Container{
			{Name: "side", Image: "busybox", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}, {Name: "i", Image: "busybox"}},
			wantInit: []string{"Running", "Terminated/Completed exit=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod(v1.RestartPolicyAlways, "c")
			p.Spec.InitContainers = tc.init
			b, err := PodBehaviour(p, Behaviour{})
			if err != nil {
				t.Fatal(err)
			}
			rt, _ := Simulate(p, &b, &SimInput{StartTime: t0, RuntimeName: "containerd", PodIPs: simIP, HostIPs: simHost}, t0.Add(tc.at))
			var got []string
			for _, cs := range rt.InitContainers {
				switch {
				case cs.State.Terminated != nil:
					got = append(got, fmt.Sprintf("Terminated/%s exit=%d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode))
				case cs.State.Running != nil:
					got = append(got, "Running")
				default:
					got = append(got, "Waiting")
				}
			}
			if !slices.Equal(got, tc.wantInit) {
				t.Errorf("init containers %v, want %v", got, tc.wantInit)
			}
			if len(rt.Containers) != 1 || rt.Containers[0].State.Running == nil {
				t.Errorf("containers %+v, want c running", rt.Containers)
			}
		})
	}
}

func TestSimulateCrashLoopMessageAndIDs(t *testing.T) {
	p := basePod(v1.RestartPolicyAlways, "c")
	b := Behaviour{Default: ContainerBehaviour{RunDuration: ptr.To(time.Second), ExitCode: 1}}
	in := &SimInput{StartTime: t0, RuntimeName: "containerd"}
	rt, _ := Simulate(p, &b, in, t0.Add(5*time.Second))
	c := rt.Containers[0]
	if want := "back-off 10s restarting failed container=c pod=p_ns(uid-1)"; c.State.Waiting.Message != want {
		t.Errorf("message %q, want %q", c.State.Waiting.Message, want)
	}
	if len(c.ID) != 64 || c.LastTerminated == nil || c.LastTerminated.ExitCode != 1 || c.ImageID == "" {
		t.Errorf("container %+v", c)
	}
	again, _ := Simulate(p, &b, in, t0.Add(5*time.Second))
	if again.Containers[0].ID != c.ID {
		t.Errorf("IDs not stable")
	}
	first, _ := Simulate(p, &b, in, t0.Add(500*time.Millisecond))
	if first.Containers[0].ID == c.ID {
		t.Errorf("a restarted container has the same ID as the first run")
	}
	s, _ := pod.GenerateStatus(p, rt, t0.Add(5*time.Second))
	if cs := s.ContainerStatuses[0]; cs.RestartCount != 1 || cs.LastTerminationState.Terminated.ContainerID != "containerd://"+c.ID || cs.Image != "docker.io/library/busybox:latest" {
		t.Errorf("status %+v", cs)
	}
}

// TestPodBehaviourBoundsPullError: an image pull error annotation of 200 KB (a status the API server
// would refuse, 413) is cut to MaxImagePullErrorBytes.
func TestPodBehaviourBoundsPullError(t *testing.T) {
	p := basePod(v1.RestartPolicyAlways, "c")
	p.Annotations = map[string]string{AnnotationImagePullError: strings.Repeat("e", 200<<10)}
	b, err := PodBehaviour(p, Behaviour{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b.For("c").ImagePullError); n != MaxImagePullErrorBytes {
		t.Errorf("image pull error of %d bytes, want %d", n, MaxImagePullErrorBytes)
	}
}

func TestPodBehaviourErrors(t *testing.T) {
	p := basePod(v1.RestartPolicyAlways, "c")
	p.Annotations = map[string]string{AnnotationStartDelay: "soon", AnnotationExitCode + ".c": "300", AnnotationReadinessDelay: "2s"}
	b, err := PodBehaviour(p, Behaviour{})
	if !errors.Is(err, ErrBadAnnotation) || !strings.Contains(err.Error(), `nodeagent.io/container-start-delay: "soon"`) ||
		!strings.Contains(err.Error(), `nodeagent.io/exit-code.c: "300"`) {
		t.Errorf("error %v", err)
	}
	if b.Default.ReadinessDelay != 2*time.Second || b.For("c").ExitCode != 0 || b.Default.StartDelay != 0 {
		t.Errorf("good annotations not applied or bad ones not defaulted: %+v", b)
	}
}

// TestPodBehaviourOtherAnnotations: the nodeagent.io/ annotations read elsewhere (the kubelet API's
// answers, Streaming; the resource usage) are not told as unknown, a typo is.
func TestPodBehaviourOtherAnnotations(t *testing.T) {
	p := basePod(v1.RestartPolicyAlways, "c")
	p.Annotations = map[string]string{AnnotationLogLines: "3", AnnotationLogPeriod: "1s", AnnotationLogText: "x",
		AnnotationExec: `{"*":{"exitCode":0}}`, AnnotationAttach: "hi", AnnotationPortForward: "127.0.0.1:80",
		AnnotationCPUUsage: "100m", AnnotationMemoryUsage + ".c": "10Mi"}
	if _, err := PodBehaviour(p, Behaviour{}); err != nil {
		t.Errorf("known annotations told as bad: %v", err)
	}
	p.Annotations["nodeagent.io/log-line"] = "3"
	if _, err := PodBehaviour(p, Behaviour{}); !errors.Is(err, ErrBadAnnotation) || !strings.Contains(err.Error(), "nodeagent.io/log-line:") {
		t.Errorf("a typo: error %v, want one naming nodeagent.io/log-line", err)
	}
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                     "docker.io/library/busybox:latest",
		"busybox:1.36":                "docker.io/library/busybox:1.36",
		"user/app":                    "docker.io/user/app:latest",
		"registry.k8s.io/pause:3.10":  "registry.k8s.io/pause:3.10",
		"localhost:5000/app":          "localhost:5000/app:latest",
		"quay.io/x/y@sha256:abc":      "quay.io/x/y@sha256:abc",
		"registry.local:5000/a/b:1.0": "registry.local:5000/a/b:1.0",
	} {
		if got := NormalizeImage(in); got != want {
			t.Errorf("NormalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ImageID("docker.io/library/busybox:1.36"); !strings.HasPrefix(got, "docker.io/library/busybox@sha256:") {
		t.Errorf("ImageID = %q", got)
	}
}

// TestSimulateProbes: a container's probes (from its spec) answer as their annotation says, with the
// kubelet's prober semantics: the first probe initialDelaySeconds after the start, then every
// periodSeconds; readiness not ready until it succeeds and not ready again after failureThreshold
// failures; a startup probe gates started and readiness; a liveness (or startup) failure kills the
// container (exit 137), restarted by its policy.
func TestSimulateProbes(t *testing.T) {
	readiness := &v1.Probe{InitialDelaySeconds: 5, PeriodSeconds: 10, FailureThreshold: 3, SuccessThreshold: 1}
	liveness := &v1.Probe{PeriodSeconds: 10, FailureThreshold: 3, SuccessThreshold: 1}
	fastLiveness := &v1.Probe{InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1}
	startup := &v1.Probe{PeriodSeconds: 5, FailureThreshold: 5, SuccessThreshold: 1}
	for _, tc := range []struct {
		name                         string
		readiness, liveness, startup *v1.Probe
		annotations                  map[string]string
		at                           time.Duration
		want                         string
		wantStarted                  bool
		wantLastExit                 int32 // of lastState.terminated; 0 for none
	}{
		{name: "readiness passes: not ready before its first probe", readiness: readiness, at: 4 * time.Second, want: "Running restarts=0", wantStarted: true},
		{name: "readiness passes: ready at its first probe", readiness: readiness, at: 5 * time.Second, want: "Running restarts=0 ready", wantStarted: true},
		{name: "readiness fails: never ready", readiness: readiness, annotations: map[string]string{AnnotationReadinessProbe: "fail"},
			at: time.Hour, want: "Running restarts=0", wantStarted: true},
		{name: "readiness fails after 30s: ready until the 3rd failure", readiness: readiness, annotations: map[string]string{AnnotationReadinessProbe: "fail-after:30s"},
			at: 54 * time.Second, want: "Running restarts=0 ready", wantStarted: true},
		{name: "readiness fails after 30s: unready at the 3rd failure", readiness: readiness, annotations: map[string]string{AnnotationReadinessProbe: "fail-after:30s"},
			at: 55 * time.Second, want: "Running restarts=0", wantStarted: true},
		{name: "startup passes after 12s: not started before", startup: startup, readiness: readiness, annotations: map[string]string{AnnotationStartupProbe: "pass-after:12s"},
			at: 14 * time.Second, want: "Running restarts=0"},
		{name: "startup passes after 12s: started, readiness probed from then", startup: startup, readiness: readiness, annotations: map[string]string{AnnotationStartupProbe: "pass-after:12s"},
			at: 15 * time.Second, want: "Running restarts=0 ready", wantStarted: true},
		{name: "liveness fails after 20s: running until the 3rd failure", liveness: liveness, annotations: map[string]string{AnnotationLivenessProbe: "fail-after:20s"},
			at: 39 * time.Second, want: "Running restarts=0 ready", wantStarted: true},
		{name: "liveness fails after 20s: killed and restarted", liveness: liveness, annotations: map[string]string{AnnotationLivenessProbe: "fail-after:20s"},
			at: 41 * time.Second, want: "Running restarts=1 ready", wantStarted: true, wantLastExit: 137},
		// The kubelet kills a probe-failed container and starts it again in one sync, its back-off
		// looking at the run before: restarted at once twice, then backing off 10 s, 20 s, ...
		{name: "liveness fails: killed at its first probe, restarted at once", liveness: fastLiveness, annotations: map[string]string{AnnotationLivenessProbe: "fail"},
			at: 1500 * time.Millisecond, want: "Running restarts=1 ready", wantStarted: true, wantLastExit: 137},
		{name: "liveness fails: killed again, restarted at once again", liveness: fastLiveness, annotations: map[string]string{AnnotationLivenessProbe: "fail"},
			at: 2500 * time.Millisecond, want: "Running restarts=2 ready", wantStarted: true, wantLastExit: 137},
		{name: "liveness fails: the third kill backs off 10 s", liveness: fastLiveness, annotations: map[string]string{AnnotationLivenessProbe: "fail"},
			at: 12 * time.Second, want: "Waiting/CrashLoopBackOff restarts=2", wantLastExit: 137},
		{name: "liveness fails: restarted after the back-off", liveness: fastLiveness, annotations: map[string]string{AnnotationLivenessProbe: "fail"},
			at: 13500 * time.Millisecond, want: "Running restarts=3 ready", wantStarted: true, wantLastExit: 137},
		{name: "liveness fails: the fourth kill backs off 20 s", liveness: fastLiveness, annotations: map[string]string{AnnotationLivenessProbe: "fail"},
			at: 33 * time.Second, want: "Waiting/CrashLoopBackOff restarts=3", wantLastExit: 137},
		{name: "startup fails: killed at its 5th failure", startup: startup, annotations: map[string]string{AnnotationStartupProbe: "fail"},
			at: 21 * time.Second, want: "Running restarts=1", wantLastExit: 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod(v1.RestartPolicyAlways, "c")
			p.Annotations = tc.annotations
			c := &p.Spec.Containers[0]
			c.ReadinessProbe, c.LivenessProbe, c.StartupProbe = tc.readiness, tc.liveness, tc.startup
			b, err := PodBehaviour(p, Behaviour{})
			if err != nil {
				t.Fatal(err)
			}
			rt, _ := Simulate(p, &b, &SimInput{StartTime: t0, RuntimeName: "containerd"}, t0.Add(tc.at))
			if got := simState(rt); got != tc.want {
				t.Errorf("at %s: %s, want %s", tc.at, got, tc.want)
			}
			cs := rt.Containers[0]
			if cs.Started != tc.wantStarted {
				t.Errorf("at %s: started %v, want %v", tc.at, cs.Started, tc.wantStarted)
			}
			var lastExit int32
			if cs.LastTerminated != nil {
				lastExit = cs.LastTerminated.ExitCode
			}
			if lastExit != tc.wantLastExit {
				t.Errorf("at %s: last exit %d, want %d", tc.at, lastExit, tc.wantLastExit)
			}
		})
	}
}

// TestProbeAnnotationErrors: a probe annotation that does not parse is told, naming the key and value.
func TestProbeAnnotationErrors(t *testing.T) {
	for _, v := range []string{"sometimes", "fail-after", "flap:-1s", "pass:3s"} {
		p := basePod(v1.RestartPolicyAlways, "c")
		p.Annotations = map[string]string{AnnotationLivenessProbe + ".c": v}
		if _, err := PodBehaviour(p, Behaviour{}); !errors.Is(err, ErrBadAnnotation) || !strings.Contains(err.Error(), v) {
			t.Errorf("%q: error %v, want ErrBadAnnotation naming the value", v, err)
		}
	}
}

// TestPodBehaviourUnknownKeys: a nodeagent.io/ annotation that is none of the behaviour's (a typo), or a
// per-container key naming no container of the pod, is told, naming the key; other prefixes are not ours.
func TestPodBehaviourUnknownKeys(t *testing.T) {
	p := basePod(v1.RestartPolicyAlways, "c")
	p.Annotations = map[string]string{
		"nodeagent.io/exitcode":           "1",
		AnnotationRunDuration + ".worker": "1s",
		AnnotationRunDuration + ".c":      "1s",
		"example.com/exitcode":            "1",
	}
	_, err := PodBehaviour(p, Behaviour{})
	if !errors.Is(err, ErrBadAnnotation) {
		t.Fatalf("error %v, want ErrBadAnnotation", err)
	}
	for _, want := range []string{`nodeagent.io/exitcode: "1" is not a nodeagent.io/ pod annotation`, `nodeagent.io/run-duration.worker: "1s" names no container of the pod ("worker")`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "example.com") || strings.Contains(err.Error(), "run-duration.c") {
		t.Errorf("error %v names a key that is fine", err)
	}
}

// TestSimulateBaselineAfterRestart: a simulator restarted goes on from the history the pod's status shows
// (issue 35 M2): a container crashed through the control API (an override the new process does not have)
// stays restarted once, running since its restart, its last state the crash; it does not come back as
// its first run with the ID of its own last state, nor does its startedAt move back.
func TestSimulateBaselineAfterRestart(t *testing.T) {
	p := basePod(v1.RestartPolicyAlways, "c")
	b, _ := PodBehaviour(p, Behaviour{})
	in := &SimInput{StartTime: t0, RuntimeName: "containerd", Overrides: Overrides{"c": {Crashes: []Crash{{At: t0.Add(3 * time.Second), ExitCode: 2}}}}}
	rt, _ := Simulate(p, &b, in, t0.Add(10*time.Second))
	status, err := pod.GenerateStatus(p, rt, t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	written := p.DeepCopy()
	written.Status = status

	// The process restarts at 20 s: no overrides, the status as written.
	at := t0.Add(20 * time.Second)
	again := &SimInput{StartTime: t0, RuntimeName: "containerd", Baseline: BaselineFromStatus(written, at)}
	rt2, _ := Simulate(written, &b, again, t0.Add(30*time.Second))
	cs := rt2.Containers[0]
	if cs.RestartCount != 1 || cs.State.Running == nil || !cs.State.Running.StartedAt.Equal(t0.Add(3*time.Second)) {
		t.Errorf("after the restart: %+v, want restartCount 1, running since the restart at 3 s", cs)
	}
	if cs.LastTerminated == nil || cs.LastTerminated.ExitCode != 2 || cs.ID == cs.LastTerminated.ID {
		t.Errorf("after the restart: last %+v, ID %s; want the crash (exit 2), another container's ID", cs.LastTerminated, cs.ID)
	}
}

// TestSimPodsBehaviourChangeKeepsHistory: behaviour annotations added to a running pod apply from then
// on (issue 35 Low): a run duration added after 100 s ends the run in progress at once, and the
// container restarts once, not 0→N restarts at once, its startedAt never before its last finishedAt.
func TestSimPodsBehaviourChangeKeepsHistory(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	s := newSimPods(Behaviour{}, "containerd", record.NewFakeRecorder(100), clk)
	p := basePod(v1.RestartPolicyAlways, "c")
	ctx := context.Background()
	if err := s.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(100 * time.Second))
	if r, _ := s.GetPodStatus(ctx, p); r.Status.Containers[0].State.Running == nil {
		t.Fatal("not running before the change")
	}
	p = p.DeepCopy()
	p.Annotations = map[string]string{AnnotationRunDuration: "10s", AnnotationExitCode: "1"}
	if err := s.UpdatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(101 * time.Second))
	r, _ := s.GetPodStatus(ctx, p)
	cs := r.Status.Containers[0]
	if cs.RestartCount != 1 || cs.State.Running == nil || cs.LastTerminated == nil {
		t.Fatalf("after the change: %+v, want restarted once and running", cs)
	}
	if cs.State.Running.StartedAt.Before(cs.LastTerminated.FinishedAt) || !cs.LastTerminated.FinishedAt.Equal(t0.Add(100*time.Second)) {
		t.Errorf("running since %s, last finished %s: want the run in progress ended at the change (100 s), the next after it",
			cs.State.Running.StartedAt.Sub(t0), cs.LastTerminated.FinishedAt.Sub(t0))
	}
}
