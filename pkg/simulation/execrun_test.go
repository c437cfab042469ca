package simulation

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	utilexec "k8s.io/utils/exec"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// The conformance specs' liveness commands (k8s.io/kubernetes v1.37.2 test/e2e/common/node/container_probe.go).
const (
	healthRemoved = "echo ok >/tmp/health; sleep 10; rm -rf /tmp/health; sleep 600"
	healthKept    = "echo ok >/tmp/health; sleep 600"
)

func execPod(script string, probe *v1.Probe, ann map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID("uid-exec"), Annotations: ann},
		Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyAlways,
			Volumes: []v1.Volume{{Name: "data", VolumeSource: emptyDir}},
			Containers: []v1.Container{{Name: "c", Image: "busybox", Command: []string{"/bin/sh", "-c", script},
				Env: []v1.EnvVar{{Name: "X", Value: "ex"}}, LivenessProbe: probe,
				VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}}
}

// simStart is when the command tests' simulated pods start.
var simStart = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// commandSim is the command tests' setup: a simPods interpreting commands (commands set), on a fake
// clock at simStart, its Events in a recorder holding 100.
type commandSim struct {
	*simPods
	clk      *testingclock.FakeClock
	recorder *record.FakeRecorder
}

func newCommandSim() *commandSim {
	clk := testingclock.NewFakeClock(simStart)
	recorder := record.NewFakeRecorder(100)
	s := newSimPods(Behaviour{}, "fakeRuntime", recorder, clk)
	s.commands = &commands{}
	return &commandSim{simPods: s, clk: clk, recorder: recorder}
}

// startPod creates p and takes its first status at the clock's time (the pod worker's first sync),
// failing t on an error.
func (c *commandSim) startPod(t testing.TB, p *v1.Pod) {
	t.Helper()
	if err := c.CreatePod(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	c.podStatus(t, p)
}

// podStatusAt sets the clock to after past simStart and returns p's status then, failing t on an
// error.
func (c *commandSim) podStatusAt(t testing.TB, p *v1.Pod, after time.Duration) node.PodRuntimeStatus {
	t.Helper()
	c.clk.SetTime(simStart.Add(after))
	return c.podStatus(t, p)
}

// streaming is the kubelet API's Streaming over the one pod p, its exec run in c's sandbox.
func (c *commandSim) streaming(p *v1.Pod) *Streaming {
	return &Streaming{Pods: onePod{p}, Clock: c.clk, Exec: func(ctx context.Context, p *v1.Pod, container string, cmd []string) (ExecResult, error) {
		res, _, err := c.execInContainer(ctx, p, container, cmd)
		return res, err
	}}
}

// podStatus returns p's status at the clock's time, failing t on an error.
func (c *commandSim) podStatus(t testing.TB, p *v1.Pod) node.PodRuntimeStatus {
	t.Helper()
	r, err := c.GetPodStatus(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSimPodsExec: kubectl exec into a running container interprets the command in its sandbox, with
// its env and volumes, against its own layer as its run has it at that moment in simulated time; the
// exec's writes are seen by later execs; an annotation naming the command answers first, a program
// the sandbox does not know falls to the annotation's "*" answer or 126.
func TestSimPodsExec(t *testing.T) {
	s := newCommandSim()
	p := execPod(healthRemoved+"; echo never", nil, map[string]string{AnnotationExec: `{"date": {"stdout": "today\n"}, "cat /data/x": {"stdout": "annotated\n"}}`})
	ctx := context.Background()
	if err := s.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	st := s.streaming(p)
	for _, tc := range []struct {
		at             time.Duration
		cmd            []string
		stdout, stderr string
		code           int
	}{
		{5 * time.Second, []string{"cat", "/tmp/health"}, "ok\n", "", 0},
		{5 * time.Second, []string{"sh", "-c", "echo $X; echo mine > /tmp/mine; echo shared > /data/s"}, "ex\n", "", 0},
		{6 * time.Second, []string{"/bin/cat", "/tmp/mine", "/data/s"}, "mine\nshared\n", "", 0},
		{6 * time.Second, []string{"test", "-f", "/tmp/health"}, "", "", 0},
		{12 * time.Second, []string{"cat", "/tmp/health"}, "", "cat: /tmp/health: No such file or directory\n", 1},
		{12 * time.Second, []string{"ls", "/tmp"}, "mine\n", "", 0},
		{12 * time.Second, []string{"date"}, "today\n", "", 0},
		{12 * time.Second, []string{"cat", "/data/x"}, "annotated\n", "", 0},
		{12 * time.Second, []string{"wget", "x"}, "", `nodeagent simulate: command "wget x" is not simulated in container "c" of pod ns/p ` +
			`(no answer for it in annotation nodeagent.io/exec, not interpreted: runs wget, a program the sandbox does not implement)` + "\n", 126},
	} {
		s.clk.SetTime(simStart.Add(tc.at))
		var b bufIO
		err := st.RunInContainer(ctx, "ns", "p", "c", tc.cmd, &b)
		code := 0
		if e, ok := err.(utilexec.ExitError); ok {
			code = e.ExitStatus()
		} else if err != nil {
			t.Fatal(err)
		}
		if b.out.String() != tc.stdout || b.err.String() != tc.stderr || code != tc.code {
			t.Errorf("+%v %q: got %q %q %d, want %q %q %d", tc.at, tc.cmd, b.out.String(), b.err.String(), code, tc.stdout, tc.stderr, tc.code)
		}
	}
	if _, _, err := s.execInContainer(ctx, p, "nope", []string{"true"}); !errors.Is(err, ErrExecNotInterpreted) {
		t.Errorf("exec into a container that is not running: %v", err)
	}
}

// TestSimPodsExecLivenessProbe: an exec liveness probe runs its command against the container's files
// at each probe's time: the conformance specs' `cat /tmp/health` restarts the container once its
// command removed the file, and never while it keeps it; a nodeagent.io/ probe annotation answers
// instead; a file an exec removes fails the probe from then on.
func TestSimPodsExecLivenessProbe(t *testing.T) {
	probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/health"}}},
		InitialDelaySeconds: 15, TimeoutSeconds: 5, FailureThreshold: 1, PeriodSeconds: 10}
	for _, tc := range []struct {
		name         string
		script       string
		ann          map[string]string
		execRemoveAt time.Duration // 0: none
		at           time.Duration
		restarts     int32
	}{
		{name: "removed after 10 s: restarted at the first probe", script: healthRemoved, at: 16 * time.Second, restarts: 1},
		{name: "removed after 10 s: not before", script: healthRemoved, at: 14 * time.Second, restarts: 0},
		{name: "kept: never restarted (its command exits at 600 s)", script: healthKept, at: 599 * time.Second, restarts: 0},
		{name: "annotation pass answers instead", script: healthRemoved, ann: map[string]string{AnnotationLivenessProbe: "pass"}, at: 10 * time.Minute, restarts: 0},
		{name: "kept, removed by an exec at 30 s: restarted at the probe after", script: healthKept, execRemoveAt: 30 * time.Second, at: 36 * time.Second, restarts: 1},
		{name: "kept, removed by an exec at 30 s: not before the probe", script: healthKept, execRemoveAt: 30 * time.Second, at: 34 * time.Second, restarts: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := execPod(tc.script, probe, tc.ann)
			s.startPod(t, p)
			if tc.execRemoveAt > 0 {
				s.clk.SetTime(simStart.Add(tc.execRemoveAt))
				if _, changed, err := s.execInContainer(context.Background(), p, "c", []string{"rm", "/tmp/health"}); err != nil || !changed {
					t.Fatal(changed, err)
				}
			}
			r := s.podStatusAt(t, p, tc.at)
			if got := r.Status.Containers[0].RestartCount; got != tc.restarts {
				t.Errorf("restarts %d at +%v, want %d (state %+v)", got, tc.at, tc.restarts, r.Status.Containers[0].State)
			}
		})
	}
}

// TestSimPodsPostStartExec: a postStart exec hook runs in the sandbox at the container's start: its
// files are seen by exec; one that fails is told (FailedPostStartHook, Killing) and the container is
// killed at the grace period (137), then restarted.
func TestSimPodsPostStartExec(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hook       string
		at         time.Duration
		restarts   int32
		lastCode   int32 // -1: none
		wantEvents []string
	}{
		{name: "succeeds: its file seen by exec", hook: "echo hi > /tmp/ps", at: time.Minute, lastCode: -1},
		{name: "fails: killed at the grace period, restarted (and its hook fails again)", hook: "echo hi > /tmp/ps; exit 1", at: 5 * time.Second, restarts: 1, lastCode: 137,
			wantEvents: []string{"Warning FailedPostStartHook PostStartHook failed", "Normal Killing FailedPostStartHook",
				"Warning FailedPostStartHook PostStartHook failed", "Normal Killing FailedPostStartHook"}},
		{name: "fails: running before the grace period", hook: "exit 2", at: 4 * time.Second, lastCode: -1,
			wantEvents: []string{"Warning FailedPostStartHook PostStartHook failed", "Normal Killing FailedPostStartHook"}},
		{name: "a program the sandbox does not know: succeeded", hook: "wget http://x; exit 1", at: time.Minute, lastCode: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := execPod("sleep 3600", nil, nil)
			grace := int64(5)
			p.Spec.TerminationGracePeriodSeconds = &grace
			p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", tc.hook}}}}
			s.startPod(t, p)
			cs := s.podStatusAt(t, p, tc.at).Status.Containers[0]
			last := int32(-1)
			if cs.LastTerminated != nil {
				last = cs.LastTerminated.ExitCode
			}
			if cs.RestartCount != tc.restarts || last != tc.lastCode {
				t.Errorf("restarts %d, last exit %d; want %d, %d (state %+v)", cs.RestartCount, last, tc.restarts, tc.lastCode, cs.State)
			}
			var events []string
			for len(s.recorder.Events) > 0 {
				if e := <-s.recorder.Events; strings.Contains(e, "PostStart") {
					events = append(events, e)
				}
			}
			if !slices.Equal(events, tc.wantEvents) {
				t.Errorf("events %q, want %q", events, tc.wantEvents)
			}
			if tc.name == "succeeds: its file seen by exec" {
				res, _, err := s.execInContainer(context.Background(), p, "c", []string{"cat", "/tmp/ps"})
				if err != nil || string(res.Stdout) != "hi\n" {
					t.Errorf("exec cat /tmp/ps: %q %v", res.Stdout, err)
				}
			}
		})
	}
}

// TestSimPodsDownwardHostIP: a container's status.hostIP and status.hostIPs env come from the Node's
// addresses nodeagent gave the pod at its creation, as the kubelet's getHostIPsAnyWay gives them before the
// pod's status has them (the conformance specs "Downward API should provide host IP(s) as an env var").
func TestSimPodsDownwardHostIP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		created []v1.HostIP // what CreatePod is given
		want    string
	}{
		{"the Node's addresses at creation", []v1.HostIP{{IP: "192.0.2.7"}, {IP: "2001:db8::7"}}, "192.0.2.7 192.0.2.7,2001:db8::7\n"},
		{"none known", nil, "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := execPod("sleep 600", nil, nil)
			p.Spec.Containers[0].Env = []v1.EnvVar{
				{Name: "HOST_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
				{Name: "HOST_IPS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.hostIPs"}}},
			}
			ctx := context.Background()
			withIPs := *p
			withIPs.Status.PodIPs = []v1.PodIP{{IP: "10.0.0.5"}}
			withIPs.Status.HostIPs = tc.created
			if err := s.CreatePod(ctx, &withIPs); err != nil {
				t.Fatal(err)
			}
			s.clk.SetTime(simStart.Add(time.Second))
			var b bufIO
			if err := s.streaming(p).RunInContainer(ctx, "ns", "p", "c", []string{"sh", "-c", "echo $HOST_IP $HOST_IPS"}, &b); err != nil {
				t.Fatal(err)
			}
			if got := b.out.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
