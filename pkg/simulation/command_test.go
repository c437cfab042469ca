package simulation

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// The e2e job fixtures' commands (k8s.io/kubernetes v1.37.2 test/e2e/framework/job/fixtures.go).
const (
	fixtureFailOddSucceedEven = `
			if [ $(expr ${JOB_COMPLETION_INDEX} % 2) -ne 0 ]; then
				exit 1
			else
				exit 0
			fi
			`
	fixtureFailOncePerIndex = `
			if [[ -r /data/foo-$JOB_COMPLETION_INDEX ]]
			then
				exit 0
			else
				touch /data/foo-$JOB_COMPLETION_INDEX
				exit 42
			fi
		`
)

// jobPod is a pod of an Indexed Job as the job controller makes it: the completion index annotation
// and JOB_COMPLETION_INDEX from it through the downward API, the e2e's "data" volume.
func jobPod(name string, index string, restartPolicy v1.RestartPolicy, vol v1.VolumeSource, command, args []string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: index},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "j", APIVersion: "batch/v1", UID: "job-uid"}}},
		Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: restartPolicy,
			Volumes: []v1.Volume{{Name: "data", VolumeSource: vol}},
			Containers: []v1.Container{{Name: "c", Image: "busybox", Command: command, Args: args,
				Env: []v1.EnvVar{{Name: "JOB_COMPLETION_INDEX", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{
					FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"}}}},
				VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}}},
	}
}

var emptyDir = v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}

// TestSimPodsCommands: the containers' commands decide their runs, per run, through simPods: the e2e
// fixtures' exit codes by index, sleeps in simulated time, failOncePerIndex's marker file in an
// emptyDir seen by the restart (restartPolicy OnFailure) and in a hostPath seen by the next pod on the
// Node (Never); an annotation overrides the command; an unknown program keeps the default, with one
// Warning Event; interpretation off keeps the default silently.
func TestSimPodsCommands(t *testing.T) {
	hostPath := v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp/job-e2e/abc"}}
	type want struct {
		after    time.Duration // from the start
		restarts int32
		exitCode int32 // -1: running
		last     int32 // the last termination's exit code, -1: none
	}
	for _, tc := range []struct {
		name      string
		pods      []*v1.Pod // run one after the other on the same Node
		off       bool      // interpretation off
		want      []want    // the last pod's container, at each time
		wantEvent string
	}{
		{name: "failOddSucceedEven: odd fails", pods: []*v1.Pod{jobPod("odd", "1", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c"}, []string{fixtureFailOddSucceedEven})},
			want: []want{{after: 0, exitCode: 1, last: -1}}},
		{name: "failOddSucceedEven: even succeeds", pods: []*v1.Pod{jobPod("even", "2", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c"}, []string{fixtureFailOddSucceedEven})},
			want: []want{{after: 0, exitCode: 0, last: -1}}},
		{name: "sleep 300 runs 300 s of simulated time", pods: []*v1.Pod{jobPod("sleep", "0", v1.RestartPolicyNever, emptyDir, []string{"sleep", "300"}, nil)},
			want: []want{{after: 299 * time.Second, exitCode: -1, last: -1}, {after: 300 * time.Second, exitCode: 0, last: -1}}},
		{name: "failOncePerIndex over an emptyDir: the restart succeeds", pods: []*v1.Pod{jobPod("once", "3", v1.RestartPolicyOnFailure, emptyDir, []string{"/bin/sh", "-c"}, []string{fixtureFailOncePerIndex})},
			want: []want{{after: time.Second, restarts: 1, exitCode: 0, last: 42}}},
		{name: "failOncePerIndex over a hostPath: the next pod on the Node succeeds", pods: []*v1.Pod{
			jobPod("first", "3", v1.RestartPolicyNever, hostPath, []string{"/bin/sh", "-c"}, []string{fixtureFailOncePerIndex}),
			jobPod("second", "3", v1.RestartPolicyNever, hostPath, []string{"/bin/sh", "-c"}, []string{fixtureFailOncePerIndex}),
		}, want: []want{{after: 0, exitCode: 0, last: -1}}},
		{name: "the exit-code annotation overrides the command", pods: func() []*v1.Pod {
			p := jobPod("annotated", "1", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c"}, []string{fixtureFailOddSucceedEven})
			p.Annotations[AnnotationExitCode] = "7"
			return []*v1.Pod{p}
		}(), want: []want{{after: 0, exitCode: 7, last: -1}}},
		{name: "an unknown program: the default (a Job's pod exits 0), one Warning Event",
			pods: []*v1.Pod{jobPod("wget", "1", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c", "wget http://x && exit 3"}, nil)},
			want: []want{{after: 0, exitCode: 0, last: -1}, {after: time.Second, exitCode: 0, last: -1}},
			wantEvent: "Warning CommandNotInterpreted Container c: its command is not interpreted (runs wget, a program the sandbox does not implement); " +
				"it runs as without a command (nodeagent.io/ annotations, the simulation's defaults)"},
		{name: "a command past the memory limit (issue 45's nested expansion): the default, one Warning Event",
			pods: []*v1.Pod{jobPod("nested", "1", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c"}, []string{nestedExpansion(256)})},
			want: []want{{after: 0, exitCode: 0, last: -1}},
			wantEvent: "Warning CommandNotInterpreted Container c: its command is not interpreted (would hold more than 1048576 bytes (the statement at 1:1029)); " +
				"it runs as without a command (nodeagent.io/ annotations, the simulation's defaults)"},
		{name: "notTerminate: the pause image without a command runs until stopped, even in a Job", pods: func() []*v1.Pod {
			p := jobPod("pause", "1", v1.RestartPolicyNever, emptyDir, nil, nil)
			p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10.2"
			return []*v1.Pod{p}
		}(), want: []want{{after: time.Hour, exitCode: -1, last: -1}}},
		{name: "interpretation off: the default", off: true, pods: []*v1.Pod{jobPod("off", "1", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c"}, []string{fixtureFailOddSucceedEven})},
			want: []want{{after: 0, exitCode: 0, last: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			clk := testingclock.NewFakeClock(start)
			recorder := record.NewFakeRecorder(10)
			s := newSimPods(Behaviour{}, "fakeRuntime", recorder, clk)
			if !tc.off {
				s.commands = &commands{}
			}
			ctx := context.Background()
			for i, p := range tc.pods {
				podStart := clk.Now()
				if err := s.CreatePod(ctx, p); err != nil {
					t.Fatal(err)
				}
				wants := tc.want
				if i < len(tc.pods)-1 {
					wants = []want{{after: 0}}
				}
				for _, w := range wants {
					clk.SetTime(podStart.Add(w.after))
					r, err := s.GetPodStatus(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					if i < len(tc.pods)-1 {
						continue
					}
					c := r.Status.Containers[0]
					got := want{after: w.after, restarts: c.RestartCount, exitCode: -1, last: -1}
					if c.State.Terminated != nil {
						got.exitCode = c.State.Terminated.ExitCode
					}
					if c.LastTerminated != nil {
						got.last = c.LastTerminated.ExitCode
					}
					if got != w {
						t.Errorf("pod %s at +%v: %+v (state %+v), want %+v", p.Name, w.after, got, c.State, w)
					}
				}
				clk.Step(time.Second)
			}
			var events []string // the sandbox's own; the container Events (podevents.go) have tests of their own
			for len(recorder.Events) > 0 {
				if e := <-recorder.Events; strings.Contains(e, EventReasonCommandNotInterpreted) {
					events = append(events, e)
				}
			}
			var wantEvents []string
			if tc.wantEvent != "" {
				wantEvents = []string{tc.wantEvent}
			}
			if !slices.Equal(events, wantEvents) {
				t.Errorf("events %q, want %q", events, wantEvents)
			}
		})
	}
}

// nestedExpansion is issue 45's command: one assignment of n MiB.
func nestedExpansion(n int) string {
	return "a=" + strings.Repeat("x", 1024) + "; b=" + strings.Repeat("$a", 1024) + "; c=" + strings.Repeat("$b", n) + "; exit 3"
}

// TestCommandsLimitNotRunAgain: a container whose run broke a limit of the sandbox is not interpreted
// again at its restarts (the same reason at once); one whose run was refused for another reason, or
// honoured, is; a run whose wait for the budget ended is not remembered.
func TestCommandsLimitNotRunAgain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   string
		wantRuns int // of three runs (restarts 0, 1, 2)
		reason   string
	}{
		{"past the memory limit", nestedExpansion(256), 1, "would hold more than 1048576 bytes (the statement at 1:1029)"},
		{"past the steps", "while :; do :; done", 1, "took more than 10000 steps"},
		{"an unknown program", "wget x", 3, "runs wget, a program the sandbox does not implement"},
		{"honoured", "exit 3", 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The default limits but for real time: 10 000 steps take more than 500 ms under -race on a
			// loaded machine, and which limit a run breaks is not what this test is about.
			limits := sandbox.DefaultLimits
			limits.RealTime = time.Minute
			c := &commands{limits: limits}
			p := jobPod("p", "1", v1.RestartPolicyOnFailure, emptyDir, []string{"sh", "-c", tc.script}, nil)
			var pc podCommands
			for restarts := range int32(3) {
				r, reason, err := c.run(context.Background(), p, &p.Spec.Containers[0], &pc, restarts, time.Unix(0, 0))
				if err != nil || reason != tc.reason || r.ok != (tc.reason == "") {
					t.Errorf("run %d: %+v %q %v, want %q", restarts, r, reason, err, tc.reason)
				}
			}
			if n := c.runner.Runs(); n != tc.wantRuns {
				t.Errorf("interpreted %d times, want %d", n, tc.wantRuns)
			}
		})
	}
	c := &commands{runner: sandbox.NewRunner(sandbox.Budget{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := jobPod("p", "1", v1.RestartPolicyNever, emptyDir, []string{"sh", "-c", "exit 3"}, nil)
	// A budget held by others: the wait ends with ctx.
	busy := sandbox.NewRunner(sandbox.Budget{Memory: 1 << 20, Parallel: 1})
	c.runner = busy
	release := holdBudget(t, busy)
	if _, _, err := c.run(ctx, p, &p.Spec.Containers[0], &podCommands{}, 0, time.Unix(0, 0)); err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("run with the budget held and ctx done: %v, want context.Canceled", err)
	}
	release()
}

// holdBudget holds all of rr's budget (a run that waits in a command until released).
func holdBudget(t *testing.T, rr *sandbox.Runner) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		close(started)
		_, _ = rr.Run(ctx, &sandbox.Program{Command: []string{"sh", "-c", "while :; do :; done"}}, sandbox.Limits{Steps: 1 << 30, RealTime: time.Hour})
	}()
	<-started
	for rr.Runs() == 0 {
		runtime.Gosched()
	}
	return func() { cancel(); <-done }
}

// TestContainerEnv: the container's environment as the kubelet's makeEnvironmentVariables makes it
// (without services): values with $(VAR) references to the variables before them expanded, $$
// escaping, the downward API's fields; the command's $(VAR) expanded from the whole environment.
func TestContainerEnv(t *testing.T) {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", UID: "u-1", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"a": "b"}},
		Spec:   v1.PodSpec{NodeName: "sim-0001", ServiceAccountName: "sa"},
		Status: v1.PodStatus{HostIPs: []v1.HostIP{{IP: "10.0.0.1"}}},
	}
	field := func(path string) *v1.EnvVarSource {
		return &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}
	}
	ctr := &v1.Container{Name: "c", Env: []v1.EnvVar{
		{Name: "NAME", ValueFrom: field("metadata.name")},
		{Name: "NS", ValueFrom: field("metadata.namespace")},
		{Name: "UID", ValueFrom: field("metadata.uid")},
		{Name: "NODE", ValueFrom: field("spec.nodeName")},
		{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
		{Name: "APP", ValueFrom: field("metadata.labels['app']")},
		{Name: "ANN", ValueFrom: field("metadata.annotations['a']")},
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
		{Name: "SECRET", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}},
		{Name: "REF", Value: "$(NAME).$(NS) $(LATER) $$(NAME) $(UNKNOWN"},
		{Name: "LATER", Value: "x"},
	}}
	env, vars, err := containerEnv(context.Background(), p, ctr, []string{"10.244.1.5"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"NAME=web-1", "NS=ns", "UID=u-1", "NODE=sim-0001", "SA=sa", "APP=web", "ANN=b", "POD_IP=10.244.1.5",
		"HOST_IP=10.0.0.1", "REF=web-1.ns $(LATER) $(NAME) $(UNKNOWN", "LATER=x"}
	if !slices.Equal(env, want) {
		t.Errorf("env\n%q, want\n%q", env, want)
	}
	c := &commands{}
	prog, _ := c.program(context.Background(), p, &v1.Container{Name: "c", Env: ctr.Env, Command: []string{"echo", "$(LATER)", "$(NAME)"}, Args: []string{"$$(NAME)"}}, &podCommands{}, 0, time.Time{})
	if got := append(prog.Command, prog.Args...); !slices.Equal(got, []string{"echo", "x", "web-1", "$(NAME)"}) {
		t.Errorf("command %q", got)
	}
	if vars["LATER"] != "x" {
		t.Errorf("vars %v", vars)
	}
	if h := podHostname(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{Hostname: "h"}}); h != "h" {
		t.Errorf("hostname %q", h)
	}
}

// TestSimPodsCommandStop: on deletion, a container whose command decides its run stops as that process
// would on a kubelet's Node: sh or sleep, PID 1 without a SIGTERM handler, killed at the grace period
// (exit 137, the pod Terminal only then); with shareProcessNamespace, dead of the SIGTERM at once (143);
// with nodeagent.io/stop-delay, after it with exit 0; a container without a command at once with exit 0;
// the pause image's /pause, whose SIGTERM handler exits 0, at once with exit 0 (issue 46), whoever owns it.
func TestSimPodsCommandStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		command  []string
		change   func(*v1.Pod)
		at       time.Duration // after the delete request
		wantCode int32         // -1: still running
		terminal bool
	}{
		{"sleep: running before the grace period", []string{"sleep", "1000000"}, nil, 29 * time.Second, -1, false},
		{"sleep: killed at the grace period", []string{"sleep", "1000000"}, nil, 30 * time.Second, 137, true},
		{"shareProcessNamespace: SIGTERM kills it at once", []string{"sleep", "1000000"}, func(p *v1.Pod) { p.Spec.ShareProcessNamespace = ptrTo(true) }, 0, 143, true},
		{"stop-delay annotation: exit 0 after it", []string{"sleep", "1000000"}, func(p *v1.Pod) { p.Annotations[AnnotationStopDelay] = "3s" }, 3 * time.Second, 0, true},
		{"no command: exit 0 at once", nil, func(p *v1.Pod) { p.Annotations[AnnotationRunDuration] = "1h" }, 0, 0, true},
		// /pause has a SIGTERM handler (sigdown) that exits 0: a kubelet deletes its pod in about a second.
		{"pause image, a Deployment's pod: its handler exits 0 at once", nil, func(p *v1.Pod) {
			p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", APIVersion: "apps/v1", UID: "rs-uid"}}
			p.Spec.RestartPolicy = v1.RestartPolicyAlways
		}, 0, 0, true},
		{"pause image in a Job (notTerminate): its handler exits 0 at once", nil, func(p *v1.Pod) { p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10" }, 0, 0, true},
		{"pause image, shareProcessNamespace: its handler exits 0 at once", nil, func(p *v1.Pod) {
			p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
			p.Spec.ShareProcessNamespace = ptrTo(true)
		}, 0, 0, true},
		// agnhost pause's handler exits 2 on SIGTERM (KubeletManagedEtcHosts' containers).
		{"agnhost pause: its handler exits 2 at once", nil, func(p *v1.Pod) {
			p.Spec.Containers[0].Image, p.Spec.Containers[0].Args = "registry.k8s.io/e2e-test-images/agnhost:2.56", []string{"pause"}
		}, 0, 2, true},
		{"pause image, stop-delay annotation: exit 0 after it", nil, func(p *v1.Pod) {
			p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
			p.Annotations[AnnotationStopDelay] = "3s"
		}, 3 * time.Second, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := jobPod("stop", "0", v1.RestartPolicyNever, emptyDir, tc.command, nil)
			if tc.change != nil {
				tc.change(p)
			}
			ctx := context.Background()
			_ = s.CreatePod(ctx, p)
			if _, err := s.GetPodStatus(ctx, p); err != nil {
				t.Fatal(err)
			}
			s.clk.Step(10 * time.Second)
			p = p.DeepCopy()
			p.DeletionGracePeriodSeconds = ptrTo(int64(30))
			p.DeletionTimestamp = &metav1.Time{Time: s.clk.Now().Add(30 * time.Second)}
			_ = s.DeletePod(ctx, p)
			s.clk.Step(tc.at)
			r, err := s.GetPodStatus(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			c := r.Status.Containers[0]
			got := int32(-1)
			if c.State.Terminated != nil {
				got = c.State.Terminated.ExitCode
			}
			if got != tc.wantCode || r.Status.Terminal != tc.terminal {
				t.Errorf("at +%v: exit code %d terminal %v (state %+v), want %d %v", tc.at, got, r.Status.Terminal, c.State, tc.wantCode, tc.terminal)
			}
			if term := c.State.Terminated; term != nil {
				wantReason := "Completed"
				if term.ExitCode != 0 {
					wantReason = "Error"
				}
				if term.Reason != wantReason {
					t.Errorf("at +%v: reason %q, want %q (exit %d)", tc.at, term.Reason, wantReason, term.ExitCode)
				}
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestContainerPID: the shell's $$ is 1 in the container's own PID namespace; with
// shareProcessNamespace the pause process is 1 and the containers follow in the spec's order.
func TestContainerPID(t *testing.T) {
	pod := func(shared *bool) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{ShareProcessNamespace: shared,
			InitContainers: []v1.Container{{Name: "init"}}, Containers: []v1.Container{{Name: "a"}, {Name: "b"}}}}
	}
	yes, no := true, false
	for _, tc := range []struct {
		name      string
		shared    *bool
		container string
		want      int
	}{
		{"own namespace", nil, "b", 1},
		{"shareProcessNamespace false", &no, "a", 1},
		{"shared: the init container", &yes, "init", 2},
		{"shared: the second container", &yes, "b", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(tc.shared)
			var ctr *v1.Container
			for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
				for i := range l {
					if l[i].Name == tc.container {
						ctr = &l[i]
					}
				}
			}
			if got := containerPID(p, ctr); got != tc.want {
				t.Errorf("containerPID = %d, want %d", got, tc.want)
			}
			prog, _ := (&commands{}).program(context.Background(), p, &v1.Container{Name: tc.container, Command: []string{"sh", "-c", "exit $$$$"}}, &podCommands{}, 0, time.Unix(0, 0)) // the kubelet makes $$ of $$$$
			if res := sandbox.Run(context.Background(), prog, sandbox.Limits{}); res.ExitCode != int32(tc.want) {
				t.Errorf("exit $$ = %+v, want %d", res, tc.want)
			}
		})
	}
}
