package pod

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var (
	t0   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	host = []netip.Addr{netip.MustParseAddr("192.168.0.10")}
	ip   = []netip.Addr{netip.MustParseAddr("10.244.0.2")}
)

func basePod(restart v1.RestartPolicy, names ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Generation: 1},
		Spec: v1.PodSpec{RestartPolicy: restart, NodeName: "machine1"}}
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "busybox"})
	}
	return p
}

func running(name string, ready bool) ContainerStatus {
	return ContainerStatus{Name: name, ID: "id-" + name, Image: "docker.io/library/busybox:latest", ImageID: "img",
		State: ContainerState{Running: &Running{StartedAt: t0}}, Started: true, Ready: ready}
}

func exited(name string, code int32) ContainerStatus {
	reason := ReasonCompleted
	if code != 0 {
		reason = ReasonError
	}
	return ContainerStatus{Name: name, ID: "id-" + name, Image: "docker.io/library/busybox:latest",
		State: ContainerState{Terminated: &Terminated{ExitCode: code, Reason: reason, StartedAt: t0, FinishedAt: t0.Add(time.Second)}}}
}

// condSummary renders conditions as "Type=Status/Reason" in order.
func condSummary(conds []v1.PodCondition) string {
	var parts []string
	for _, c := range conds {
		s := fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Reason != "" {
			s += "/" + c.Reason
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestGenerateStatus(t *testing.T) {
	now := t0.Add(time.Minute + 300*time.Millisecond)
	for _, tc := range []struct {
		name      string
		pod       *v1.Pod
		rt        RuntimeStatus
		wantPhase v1.PodPhase
		wantConds string
		check     func(t *testing.T, s v1.PodStatus)
	}{
		{
			name: "nothing started yet", pod: basePod(v1.RestartPolicyAlways, "b", "a"),
			rt:        RuntimeStatus{RuntimeName: "containerd", HostIPs: host},
			wantPhase: v1.PodPending,
			wantConds: "PodReadyToStartContainers=False/PodSandboxNotReady Initialized=True Ready=False/ContainersNotReady ContainersReady=False/ContainersNotReady PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				if _, c := findCondition(s.Conditions, v1.PodReady); c.Message != "containers with unready status: [b a]" {
					t.Errorf("Ready message %q", c.Message)
				}
				if _, c := findCondition(s.Conditions, v1.PodReadyToStartContainers); c.Message != "no pod sandbox exists" {
					t.Errorf("PodReadyToStartContainers message %q", c.Message)
				}
				if s.ContainerStatuses[0].Name != "a" || s.ContainerStatuses[0].State.Waiting.Reason != ReasonContainerCreating ||
					s.ContainerStatuses[0].Started == nil || *s.ContainerStatuses[0].Started || s.ContainerStatuses[0].Image != "busybox" {
					t.Errorf("container statuses not sorted or not ContainerCreating: %+v", s.ContainerStatuses)
				}
				if s.StartTime == nil || !s.StartTime.Time.Equal(t0.Add(time.Minute)) {
					t.Errorf("startTime %v, want now in whole seconds", s.StartTime)
				}
				if s.HostIP != "192.168.0.10" || len(s.HostIPs) != 1 || s.PodIP != "" || s.QOSClass != v1.PodQOSBestEffort || s.ObservedGeneration != 1 {
					t.Errorf("hostIP %q hostIPs %v podIP %q qos %s observedGeneration %d", s.HostIP, s.HostIPs, s.PodIP, s.QOSClass, s.ObservedGeneration)
				}
			},
		},
		{
			name: "running and ready", pod: basePod(v1.RestartPolicyAlways, "a"),
			rt:        RuntimeStatus{RuntimeName: "containerd", Sandbox: SandboxReady, PodIPs: ip, HostIPs: host, Containers: []ContainerStatus{running("a", true)}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=True ContainersReady=True PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				c := s.ContainerStatuses[0]
				if c.ContainerID != "containerd://id-a" || !c.Ready || !*c.Started || c.State.Running == nil || s.PodIP != "10.244.0.2" {
					t.Errorf("container %+v podIP %s", c, s.PodIP)
				}
			},
		},
		{
			name: "running, readiness probe not passed", pod: basePod(v1.RestartPolicyAlways, "a"),
			rt:        RuntimeStatus{Sandbox: SandboxReady, Containers: []ContainerStatus{running("a", false)}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=False/ContainersNotReady ContainersReady=False/ContainersNotReady PodScheduled=True",
		},
		{
			name: "Job pod completed", pod: basePod(v1.RestartPolicyNever, "a"),
			rt:        RuntimeStatus{Sandbox: SandboxNotReady, Containers: []ContainerStatus{exited("a", 0)}},
			wantPhase: v1.PodSucceeded,
			wantConds: "PodReadyToStartContainers=False/PodSandboxNotReady Initialized=True/PodCompleted Ready=False/PodCompleted ContainersReady=False/PodCompleted PodScheduled=True",
		},
		{
			name: "failed", pod: basePod(v1.RestartPolicyNever, "a"),
			rt:        RuntimeStatus{Sandbox: SandboxReady, Containers: []ContainerStatus{exited("a", 2)}},
			wantPhase: v1.PodFailed,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=False/PodFailed ContainersReady=False/PodFailed PodScheduled=True",
		},
		{
			name: "OnFailure restarts a failed container: Running", pod: basePod(v1.RestartPolicyOnFailure, "a"),
			rt:        RuntimeStatus{Sandbox: SandboxReady, Containers: []ContainerStatus{exited("a", 2)}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=False/ContainersNotReady ContainersReady=False/ContainersNotReady PodScheduled=True",
		},
		{
			name: "Always: exited 0 is restarted, Running; Terminal: Succeeded", pod: basePod(v1.RestartPolicyAlways, "a"),
			rt:        RuntimeStatus{Sandbox: SandboxReady, Terminal: true, Containers: []ContainerStatus{exited("a", 0)}},
			wantPhase: v1.PodSucceeded,
			wantConds: "PodReadyToStartContainers=True Initialized=True/PodCompleted Ready=False/PodCompleted ContainersReady=False/PodCompleted PodScheduled=True",
		},
		{
			name: "crash loop", pod: basePod(v1.RestartPolicyAlways, "a"),
			rt: RuntimeStatus{Sandbox: SandboxReady, Containers: []ContainerStatus{{Name: "a", ID: "x", RestartCount: 3,
				State:          ContainerState{Waiting: &Waiting{Reason: ReasonCrashLoopBackOff, Message: "back-off 40s"}},
				LastTerminated: &Terminated{ExitCode: 1, Reason: ReasonError}}}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=False/ContainersNotReady ContainersReady=False/ContainersNotReady PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				c := s.ContainerStatuses[0]
				if c.RestartCount != 3 || c.State.Waiting.Reason != ReasonCrashLoopBackOff || c.LastTerminationState.Terminated.ContainerID != "://x" {
					t.Errorf("crash-looping container %+v", c)
				}
			},
		},
		{
			name: "init container done, sidecar started, main running",
			pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyAlways, "main")
				p.Spec.InitContainers = []v1.Container{{Name: "z-init"}, {Name: "a-sidecar", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}}
				return p
			}(),
			rt: RuntimeStatus{Sandbox: SandboxReady, InitContainers: []ContainerStatus{exited("z-init", 0), running("a-sidecar", false)},
				Containers: []ContainerStatus{running("main", true)}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=False/ContainersNotReady ContainersReady=False/ContainersNotReady PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				if s.InitContainerStatuses[0].Name != "z-init" || !s.InitContainerStatuses[0].Ready || s.InitContainerStatuses[1].Ready {
					t.Errorf("init statuses (spec order, init ready once exited 0, sidecar not ready): %+v", s.InitContainerStatuses)
				}
				if _, c := findCondition(s.Conditions, v1.ContainersReady); c.Message != "containers with unready status: [a-sidecar]" {
					t.Errorf("ContainersReady message %q", c.Message)
				}
			},
		},
		{
			name: "init container running: PodInitializing",
			pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyAlways, "main")
				p.Spec.InitContainers = []v1.Container{{Name: "init"}}
				return p
			}(),
			rt:        RuntimeStatus{Sandbox: SandboxReady, InitContainers: []ContainerStatus{running("init", false)}},
			wantPhase: v1.PodPending,
			wantConds: "PodReadyToStartContainers=True Initialized=False/ContainersNotInitialized Ready=False/ContainersNotReady ContainersReady=False/ContainersNotReady PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				if s.ContainerStatuses[0].State.Waiting.Reason != ReasonPodInitializing {
					t.Errorf("main waiting %+v", s.ContainerStatuses[0].State.Waiting)
				}
				if _, c := findCondition(s.Conditions, v1.PodInitialized); c.Message != "containers with incomplete status: [init]" {
					t.Errorf("Initialized message %q", c.Message)
				}
			},
		},
		{
			name: "readiness gate and other writers' conditions kept first",
			pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyAlways, "a")
				p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}, {ConditionType: "example.com/missing"}}
				p.Status.Conditions = []v1.PodCondition{{Type: "example.com/lb", Status: v1.ConditionFalse}, {Type: v1.DisruptionTarget, Status: v1.ConditionTrue}}
				return p
			}(),
			rt:        RuntimeStatus{Sandbox: SandboxReady, Containers: []ContainerStatus{running("a", true)}},
			wantPhase: v1.PodRunning,
			wantConds: "example.com/lb=False DisruptionTarget=True PodReadyToStartContainers=True Initialized=True Ready=False/ReadinessGatesNotReady ContainersReady=True PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				want := `the status of pod readiness gate "example.com/lb" is not "True", but False, corresponding condition of pod readiness gate "example.com/missing" does not exist.`
				if _, c := findCondition(s.Conditions, v1.PodReady); c.Message != want {
					t.Errorf("Ready message\n%q, want\n%q", c.Message, want)
				}
			},
		},
		{
			name: "terminal phase never goes back", pod: func() *v1.Pod {
				p := basePod(v1.RestartPolicyAlways, "a")
				p.Status.Phase, p.Status.Reason, p.Status.Message = v1.PodFailed, "Evicted", "evicted"
				return p
			}(),
			rt:        RuntimeStatus{Sandbox: SandboxReady, Containers: []ContainerStatus{running("a", true)}},
			wantPhase: v1.PodFailed,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=False/PodFailed ContainersReady=False/PodFailed PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				if s.Reason != "Evicted" || s.Message != "evicted" {
					t.Errorf("phase reason/message not kept: %q %q", s.Reason, s.Message)
				}
			},
		},
		{
			name: "no terminal phase while a container runs", pod: basePod(v1.RestartPolicyNever, "a", "b"),
			rt:        RuntimeStatus{Sandbox: SandboxReady, Terminal: true, Containers: []ContainerStatus{exited("a", 0), running("b", true)}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=False/ContainersNotReady ContainersReady=False/ContainersNotReady PodScheduled=True",
		},
		{
			name: "hostNetwork pods get the host's IPs, dual-stack in the host's family order",
			pod:  func() *v1.Pod { p := basePod(v1.RestartPolicyAlways, "a"); p.Spec.HostNetwork = true; return p }(),
			rt: RuntimeStatus{Sandbox: SandboxReady, HostIPs: []netip.Addr{netip.MustParseAddr("fd00::10"), netip.MustParseAddr("192.168.0.10")},
				Containers: []ContainerStatus{running("a", true)}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=True ContainersReady=True PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				if s.PodIP != "fd00::10" || len(s.PodIPs) != 2 || s.PodIPs[1].IP != "192.168.0.10" || s.HostIP != "fd00::10" || len(s.HostIPs) != 2 {
					t.Errorf("podIPs %v hostIPs %v", s.PodIPs, s.HostIPs)
				}
			},
		},
		{
			name: "pod IPs ordered by the host's family",
			pod:  basePod(v1.RestartPolicyAlways, "a"),
			rt: RuntimeStatus{Sandbox: SandboxReady, HostIPs: host, PodIPs: []netip.Addr{netip.MustParseAddr("fd00::2"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")},
				Containers: []ContainerStatus{running("a", true)}},
			wantPhase: v1.PodRunning,
			wantConds: "PodReadyToStartContainers=True Initialized=True Ready=True ContainersReady=True PodScheduled=True",
			check: func(t *testing.T, s v1.PodStatus) {
				if fmt.Sprint(s.PodIPs) != "[{10.0.0.2} {fd00::2}]" {
					t.Errorf("podIPs %v", s.PodIPs)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			s, err := GenerateStatus(tc.pod, &tc.rt, now)
			if err != nil {
				t.Fatal(err)
			}
			if s.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", s.Phase, tc.wantPhase)
			}
			if got := condSummary(s.Conditions); got != tc.wantConds {
				t.Errorf("conditions\n%s, want\n%s", got, tc.wantConds)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
			if fmt.Sprint(before) != fmt.Sprint(tc.pod) {
				t.Errorf("GenerateStatus modified the pod")
			}
		})
	}
}

func TestGenerateStatusTransitions(t *testing.T) {
	pod := basePod(v1.RestartPolicyAlways, "a")
	rt := &RuntimeStatus{Sandbox: SandboxReady, Containers: []ContainerStatus{running("a", true)}}
	first, err := GenerateStatus(pod, rt, t0)
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = first

	// Unchanged a minute later: same transition times and start time, and no patch.
	second, _ := GenerateStatus(pod, rt, t0.Add(time.Minute))
	if patch, err := StatusPatch(pod.UID, &pod.Status, &second); err != nil || patch != nil {
		t.Errorf("unchanged status gives patch %s, %v", patch, err)
	}

	// The node-lifecycle controller marks the pod not Ready: the next status sets it back, at now.
	i, _ := findCondition(pod.Status.Conditions, v1.PodReady)
	pod.Status.Conditions[i] = v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}
	later := t0.Add(2 * time.Minute)
	third, _ := GenerateStatus(pod, rt, later)
	_, ready := findCondition(third.Conditions, v1.PodReady)
	_, cready := findCondition(third.Conditions, v1.ContainersReady)
	if ready.Status != v1.ConditionTrue || !ready.LastTransitionTime.Time.Equal(later) || !cready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready %+v ContainersReady %+v: want Ready True since %v, ContainersReady's time kept %v", ready, cready, later, t0)
	}
	if !third.StartTime.Time.Equal(t0) {
		t.Errorf("startTime %v, want kept %v", third.StartTime, t0)
	}
	patch, err := StatusPatch(pod.UID, &pod.Status, &third)
	if err != nil || !strings.Contains(string(patch), `"type":"Ready"`) || !strings.Contains(string(patch), `"uid":"uid-1"`) {
		t.Errorf("patch %s, %v: want the Ready condition and the UID precondition", patch, err)
	}
}

func TestCheckContainerStateTransition(t *testing.T) {
	term := v1.ContainerStatus{Name: "a", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}}
	run := v1.ContainerStatus{Name: "a", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	for _, tc := range []struct {
		policy  v1.RestartPolicy
		wantErr bool
	}{
		{v1.RestartPolicyNever, true},
		{v1.RestartPolicyOnFailure, false}, // failed and allowed to restart
		{v1.RestartPolicyAlways, false},
	} {
		spec := basePod(tc.policy, "a").Spec
		err := CheckContainerStateTransition(&v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{term}},
			&v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{run}}, &spec)
		if (err != nil) != tc.wantErr {
			t.Errorf("restartPolicy %s: err %v, want error %v", tc.policy, err, tc.wantErr)
		}
	}
	// GenerateStatus refuses it.
	pod := basePod(v1.RestartPolicyNever, "a")
	pod.Status.ContainerStatuses = []v1.ContainerStatus{term}
	if _, err := GenerateStatus(pod, &RuntimeStatus{Containers: []ContainerStatus{running("a", true)}}, t0); err == nil ||
		!strings.Contains(err.Error(), "terminated container a attempted illegal transition") {
		t.Errorf("GenerateStatus error %v", err)
	}
}

// sameJSON reports whether a and b hold the same JSON value (keys in any order), or are both empty.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func TestStatusPatch(t *testing.T) {
	old := v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{Type: "example.com/x", Status: v1.ConditionTrue}}}
	for _, tc := range []struct {
		name string
		new  v1.PodStatus
		want string
	}{
		{name: "unchanged", new: *old.DeepCopy(), want: ""},
		{name: "phase", new: v1.PodStatus{Phase: v1.PodRunning, Conditions: old.Conditions},
			want: `{"metadata":{"uid":"u"},"status":{"phase":"Running"}}`},
		{name: "a condition added by type", new: v1.PodStatus{Phase: v1.PodPending, Conditions: append(old.Conditions[:1:1], v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse})},
			want: `{"metadata":{"uid":"u"},"status":{"$setElementOrder/conditions":[{"type":"example.com/x"},{"type":"Ready"}],"conditions":[{"lastProbeTime":null,"lastTransitionTime":null,"status":"False","type":"Ready"}]}}`},
	} {
		got, err := StatusPatch("u", &old, &tc.new)
		if err != nil || !sameJSON(got, []byte(tc.want)) {
			t.Errorf("%s: StatusPatch = %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

// TestTerminatedStatus takes the kubelet's TestTerminatePod_DefaultUnknownStatus cases
// (pkg/kubelet/status/status_manager_test.go): the status given is the pod's own, as there.
func TestTerminatedStatus(t *testing.T) {
	waiting := v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}
	exited := func(code int32) v1.ContainerState {
		return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}
	}
	unknown := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: ReasonContainerStatusUnknown, Message: MessageTerminatedUnknown, ExitCode: 137}}
	newPod := func(inits, containers int, phase v1.PodPhase, initStates, states []v1.ContainerState) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever}, Status: v1.PodStatus{Phase: phase}}
		for i := range inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: fmt.Sprintf("init-%d", i)})
		}
		for i := range containers {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprint(i)})
		}
		for i, s := range initStates {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, v1.ContainerStatus{Name: fmt.Sprintf("init-%d", i), State: s})
		}
		for i, s := range states {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, v1.ContainerStatus{Name: fmt.Sprint(i), State: s})
		}
		return p
	}
	for _, tc := range []struct {
		name                 string
		pod                  *v1.Pod
		wantPhase            v1.PodPhase
		wantInit, wantStates []v1.ContainerState
	}{
		{name: "failed stays failed", pod: newPod(0, 1, v1.PodFailed, nil, []v1.ContainerState{exited(2)}), wantPhase: v1.PodFailed, wantStates: []v1.ContainerState{exited(2)}},
		{name: "running pod with an exited container is failed", pod: newPod(0, 1, v1.PodRunning, nil, []v1.ContainerState{exited(2)}), wantPhase: v1.PodFailed, wantStates: []v1.ContainerState{exited(2)}},
		{name: "no previous state: the waiting container is terminated unknown", pod: newPod(0, 1, v1.PodRunning, nil, []v1.ContainerState{waiting}),
			wantPhase: v1.PodFailed, wantStates: []v1.ContainerState{unknown}},
		{name: "deleted before it started: pending becomes failed", pod: newPod(0, 1, v1.PodPending, nil, []v1.ContainerState{waiting}),
			wantPhase: v1.PodFailed, wantStates: []v1.ContainerState{unknown}},
		{name: "uninitialized pod defaults only the first init container", pod: newPod(2, 1, v1.PodPending, []v1.ContainerState{waiting, waiting}, []v1.ContainerState{waiting}),
			wantPhase: v1.PodFailed, wantInit: []v1.ContainerState{unknown, waiting}, wantStates: []v1.ContainerState{waiting}},
		{name: "uninitialized pod defaults gaps", pod: newPod(4, 1, v1.PodPending, []v1.ContainerState{waiting, waiting, exited(1), waiting}, []v1.ContainerState{waiting}),
			wantPhase: v1.PodFailed, wantInit: []v1.ContainerState{unknown, unknown, exited(1), waiting}, wantStates: []v1.ContainerState{waiting}},
		{name: "successful last init container is initialized", pod: newPod(3, 1, v1.PodRunning, []v1.ContainerState{waiting, waiting, exited(0)}, []v1.ContainerState{waiting}),
			wantPhase: v1.PodFailed, wantInit: []v1.ContainerState{unknown, unknown, exited(0)}, wantStates: []v1.ContainerState{unknown}},
		{name: "succeeded stays succeeded", pod: newPod(0, 2, v1.PodSucceeded, nil, []v1.ContainerState{exited(0), exited(0)}),
			wantPhase: v1.PodSucceeded, wantStates: []v1.ContainerState{exited(0), exited(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pod.Status.DeepCopy()
			got := TerminatedStatus(tc.pod, tc.pod.Status)
			if got.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", got.Phase, tc.wantPhase)
			}
			for i, want := range tc.wantInit {
				if g := got.InitContainerStatuses[i].State; !equality.Semantic.DeepEqual(g, want) {
					t.Errorf("init container %d: %+v, want %+v", i, g, want)
				}
			}
			for i, want := range tc.wantStates {
				if g := got.ContainerStatuses[i].State; !equality.Semantic.DeepEqual(g, want) {
					t.Errorf("container %d: %+v, want %+v", i, g, want)
				}
			}
			if !equality.Semantic.DeepEqual(&tc.pod.Status, before) {
				t.Error("the pod's status was modified")
			}
		})
	}
}

// TestGenerateEvictedStatus: a pod a sync handler fails (its active deadline) is Failed with the
// handler's reason and message, and its conditions are those of a Failed pod (PodFailed, not
// PodCompleted), as generateAPIPodStatus overrides the phase before it generates them.
func TestGenerateEvictedStatus(t *testing.T) {
	p := basePod(v1.RestartPolicyNever, "c")
	p.Status.StartTime = &metav1.Time{Time: t0}
	p.Status.Phase = v1.PodRunning
	rt := &RuntimeStatus{RuntimeName: "containerd", Sandbox: SandboxNotReady, PodIPs: ip, HostIPs: host, Terminal: true,
		Containers: []ContainerStatus{{Name: "c", ID: "id-c", Image: "docker.io/library/busybox:latest", ImageID: "img",
			State: ContainerState{Terminated: &Terminated{ExitCode: 0, Reason: ReasonCompleted, StartedAt: t0, FinishedAt: t0.Add(3 * time.Second)}}}}}
	s, err := GenerateEvictedStatus(p, rt, t0.Add(4*time.Second), Evict{Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != v1.PodFailed || s.Reason != "DeadlineExceeded" {
		t.Errorf("phase %s reason %q, want Failed DeadlineExceeded", s.Phase, s.Reason)
	}
	for _, c := range s.Conditions {
		if (c.Type == v1.PodReady || c.Type == v1.ContainersReady) && c.Reason != "PodFailed" {
			t.Errorf("%s reason %q, want PodFailed", c.Type, c.Reason)
		}
		if c.Type == v1.PodInitialized && c.Reason != "" {
			t.Errorf("Initialized reason %q, want none", c.Reason)
		}
	}
}
