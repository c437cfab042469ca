package simulation

import (
	"context"
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

// TestSimPodsEvents: the simulated runtime records the kubelet's container Events (reasons of
// pkg/kubelet/events, the kubelet's messages) as what they tell happens: each run Pulled, Created,
// Started; a crash loop BackOff; a failed pull Pulling, Failed, Failed then BackOff, Failed; a deletion
// Killing for the containers running; a pod whose status shows its containers running already (a
// simulator restarted) nothing.
func TestSimPodsEvents(t *testing.T) {
	const (
		pulled  = `Normal Pulled Container image "app:1" already present on machine and can be accessed by the pod`
		created = "Normal Created Container created"
		started = "Normal Started Container started"
	)
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	type step struct {
		at   time.Duration // after the start
		call string        // status, delete
		want []string
	}
	for _, tc := range []struct {
		name     string
		annotate map[string]string
		mutate   func(*v1.Pod)
		steps    []step
	}{
		{name: "runs", steps: []step{
			{at: 0, call: "status", want: []string{pulled, created, started}},
			{at: time.Second, call: "status"},
			{at: 2 * time.Second, call: "delete", want: []string{"Normal Killing Stopping container c"}},
		}},
		{name: "pull policy Always", mutate: func(p *v1.Pod) { p.Spec.Containers[0].ImagePullPolicy = v1.PullAlways }, steps: []step{
			{at: 0, call: "status", want: []string{`Normal Pulling Pulling image "app:1"`,
				`Normal Pulled Successfully pulled image "app:1" in 0s (0s including waiting). Image size: 0 bytes.`, created, started}},
		}},
		{name: "crash loop", annotate: map[string]string{AnnotationRunDuration: "1s", AnnotationExitCode: "1"}, steps: []step{
			{at: 0, call: "status", want: []string{pulled, created, started}},
			{at: 1500 * time.Millisecond, call: "status", want: []string{pulled, created, started}}, // restarted at once
			{at: 5 * time.Second, call: "status", want: []string{"Warning BackOff Back-off restarting failed container c in pod p_ns(uid-p)"}},
			{at: 6 * time.Second, call: "status"},
			{at: 12500 * time.Millisecond, call: "status", want: []string{pulled, created, started}},
		}},
		{name: "image pull error", annotate: map[string]string{AnnotationImagePullError: "not found"}, steps: []step{
			{at: 0, call: "status", want: []string{`Normal Pulling Pulling image "app:1"`,
				`Warning Failed Failed to pull image "app:1": failed to pull and unpack image "docker.io/library/app:1": not found`,
				"Warning Failed Error: ErrImagePull"}},
			{at: 2 * time.Second, call: "status", want: []string{`Normal BackOff Back-off pulling image "app:1"`, "Warning Failed Error: ImagePullBackOff"}},
			{at: 3 * time.Second, call: "status"},
			{at: 2 * time.Second, call: "delete"},
		}},
		{name: "liveness probe fails", annotate: map[string]string{AnnotationLivenessProbe: "fail-after:20s"},
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].LivenessProbe = &v1.Probe{PeriodSeconds: 10, FailureThreshold: 3, SuccessThreshold: 1,
					ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
			}, steps: []step{
				{at: 0, call: "status", want: []string{pulled, created, started}},
				{at: 41 * time.Second, call: "status", want: []string{"Warning Unhealthy Liveness probe failed: command failed with exit code 1",
					"Normal Killing Container c failed liveness probe, will be restarted", pulled, created, started}},
			}},
		{name: "readiness probe fails", annotate: map[string]string{AnnotationReadinessProbe: "fail-after:30s"},
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 10, FailureThreshold: 3, SuccessThreshold: 1,
					ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/"}}}
			}, steps: []step{
				{at: 0, call: "status", want: []string{pulled, created, started}},
				{at: 10 * time.Second, call: "status"},
				{at: 50 * time.Second, call: "status", want: []string{"Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 500"}},
			}},
		{name: "readiness probe never passes: Unhealthy at every failed probe", annotate: map[string]string{AnnotationReadinessProbe: "fail"},
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 10, FailureThreshold: 3, SuccessThreshold: 1,
					ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
			}, steps: []step{
				{at: 0, call: "status", want: []string{pulled, created, started, "Warning Unhealthy Readiness probe failed: command failed with exit code 1"}},
				{at: 5 * time.Second, call: "status"},
				{at: 10 * time.Second, call: "status", want: []string{"Warning Unhealthy Readiness probe failed: command failed with exit code 1"}},
				{at: 35 * time.Second, call: "status", want: []string{"Warning Unhealthy Readiness probe failed: command failed with exit code 1"}},
				{at: 39 * time.Second, call: "status"},
			}},
		{name: "readiness probe fails below its threshold: Unhealthy, still ready", annotate: map[string]string{AnnotationReadinessProbe: "flap:10s"},
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 10, FailureThreshold: 3, SuccessThreshold: 1,
					ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
			}, steps: []step{
				{at: 0, call: "status", want: []string{pulled, created, started}},
				{at: 10 * time.Second, call: "status", want: []string{"Warning Unhealthy Readiness probe failed: command failed with exit code 1"}},
				{at: 20 * time.Second, call: "status"},
			}},
		{name: "running before a restart of the simulator", mutate: func(p *v1.Pod) {
			p.Status.StartTime = &metav1.Time{Time: start}
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c", Started: ptr.To(true), Ready: true,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Time{Time: start}}}}}
		}, steps: []step{
			{at: time.Minute, call: "status"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(start)
			recorder := record.NewFakeRecorder(100)
			s := newSimPods(Behaviour{}, "containerd", recorder, clk)
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p", Annotations: tc.annotate},
				Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "c", Image: "app:1"}}}}
			if tc.mutate != nil {
				tc.mutate(p)
			}
			if err := s.CreatePod(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				clk.SetTime(start.Add(st.at))
				var err error
				switch st.call {
				case "status":
					_, err = s.GetPodStatus(context.Background(), p)
				case "delete":
					p = p.DeepCopy()
					p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: clk.Now().Add(30 * time.Second)}, ptr.To[int64](30)
					err = s.DeletePod(context.Background(), p)
				}
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for len(recorder.Events) > 0 {
					got = append(got, <-recorder.Events)
				}
				if !slices.Equal(got, st.want) {
					t.Errorf("step %d (%s at %s): Events\n%s\nwant\n%s", i, st.call, st.at, strings.Join(got, "\n"), strings.Join(st.want, "\n"))
				}
			}
		})
	}
}

// TestSimPodsEphemeralContainer: an ephemeral container added to a running pod (kubectl debug) runs
// from when the runtime first sees it, with Created and Started Events on its field path, and is never
// restarted once it exited.
func TestSimPodsEphemeralContainer(t *testing.T) {
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	recorder := record.NewFakeRecorder(100)
	s := newSimPods(Behaviour{}, "containerd", recorder, clk)
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "c", Image: "app:1"}}}}
	ctx := context.Background()
	if err := s.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetPodStatus(ctx, p); len(r.Status.EphemeralContainers) != 0 {
		t.Fatalf("ephemeral containers %+v before any was added", r.Status.EphemeralContainers)
	}
	for len(recorder.Events) > 0 {
		<-recorder.Events
	}
	clk.SetTime(start.Add(time.Minute))
	p = p.DeepCopy()
	p.Annotations = map[string]string{AnnotationRunDuration + ".debugger": "10s"}
	p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox:1.36"}}}
	if err := s.UpdatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	r, _ := s.GetPodStatus(ctx, p)
	if ecs := r.Status.EphemeralContainers; len(ecs) != 1 || ecs[0].State.Running == nil || !ecs[0].State.Running.StartedAt.Equal(start.Add(time.Minute)) {
		t.Fatalf("ephemeral containers %+v, want debugger running since it was added", ecs)
	}
	var got []string
	for len(recorder.Events) > 0 {
		got = append(got, <-recorder.Events)
	}
	if want := []string{`Normal Pulled Container image "busybox:1.36" already present on machine and can be accessed by the pod`,
		"Normal Created Container created", "Normal Started Container started"}; !slices.Equal(got, want) {
		t.Errorf("Events %q, want %q", got, want)
	}
	clk.SetTime(start.Add(2 * time.Minute))
	r, _ = s.GetPodStatus(ctx, p)
	if ecs := r.Status.EphemeralContainers; len(ecs) != 1 || ecs[0].State.Terminated == nil || ecs[0].RestartCount != 0 {
		t.Errorf("ephemeral container after its run: %+v, want terminated, not restarted", ecs)
	}
}
