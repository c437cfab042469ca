package integration_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestSimulatePodsPressureEviction (issue 35 M5): memory pressure set on a simulated Node through the
// control API, with the real node-lifecycle (the memory-pressure taint), taint-eviction and disruption
// controllers running: the Node's eviction manager evicts as the kubelet's does, one pod every 10 s,
// the pods over their memory requests first whatever their priority (with no usage measured: those that
// request no memory, BestEffort or not), by priority among them, then those within their requests by
// priority (Failed, Evicted, "The node was low on resource: memory. ", DisruptionTarget
// TerminationByKubelet); a new BestEffort pod bound to the Node by name is rejected
// ("The node had condition: [MemoryPressure]. "), a Burstable one admitted.
func TestSimulatePodsPressureEviction(t *testing.T) {
	t.Parallel()
	const (
		prefix = "press-"
		ns     = "sim-pressure"
		node   = prefix + "0000"
	)
	ctx := t.Context()
	dir := t.TempDir()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "cp"), ControllerManager: true,
		ExtraControllerManagerArgs: []string{"--controllers=nodelifecycle,disruption,podgc,taint-eviction-controller",
			"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24"},
	})
	admin := cp.AdminClient
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes=1", "--node-name-prefix="+prefix)
	waitNodesReady(ctx, t, admin, sim, 1, 2*time.Minute)

	mem := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
	}
	cpu := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	// The pods' priorities, through PriorityClasses (the Priority admission plugin sets spec.priority).
	for _, v := range []int32{1000, 2000, 3000, 5000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", v)}, Value: v}
		if _, err := admin.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newPod := func(name string, requests corev1.ResourceList, priority int32) *corev1.Pod {
		class := ""
		if priority != 0 {
			class = fmt.Sprintf("p%d", priority)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			NodeName: node, PriorityClassName: class,
			Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{Requests: requests}}},
		}}
	}
	// Created in the reverse of the order they are to be evicted in.
	pods := []*corev1.Pod{
		newPod("within-high", mem("64Mi"), 1000),
		newPod("within-low", mem("64Mi"), 0),
		newPod("cpu-only", cpu, 5000),
		newPod("besteffort", nil, 2000),
	}
	for _, p := range pods {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		for _, p := range pods {
			got, err := admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	sim.mustPost(t, node, `{"memoryPressure":true}`)
	pressured := time.Now()
	// New pods bound by name: BestEffort rejected, Burstable admitted.
	late := newPod("late-besteffort", nil, 0)
	// Within its memory request, with the highest priority: evicted last, after the test looked.
	lateBurstable := newPod("late-burstable", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}, 3000)
	evictedAt := map[string]time.Duration{}
	err = framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		if time.Since(pressured) > 90*time.Second {
			return false, fmt.Errorf("evicted so far: %v: %w", evictedAt, framework.ErrStop)
		}
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if late.UID == "" && nodeConditionTrue(n, corev1.NodeMemoryPressure) {
			for _, p := range []*corev1.Pod{late, lateBurstable} {
				created, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				if err != nil {
					return false, err
				}
				p.UID = created.UID
			}
		}
		for _, p := range pods {
			if _, ok := evictedAt[p.Name]; ok {
				continue
			}
			got, err := admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Status.Phase == corev1.PodFailed {
				evictedAt[p.Name] = time.Since(pressured)
				if got.Status.Reason != "Evicted" || got.Status.Message != "The node was low on resource: memory. " {
					t.Errorf("%s: %q %q, want Evicted, the kubelet's message", p.Name, got.Status.Reason, got.Status.Message)
				}
				if c := podCondition(got, corev1.DisruptionTarget); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" {
					t.Errorf("%s: DisruptionTarget %+v, want True TerminationByKubelet", p.Name, c)
				}
			}
		}
		return len(evictedAt) == len(pods), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("evicted after the pressure (s): %v", evictedAt)
	order := []string{"besteffort", "cpu-only", "within-low", "within-high"}
	for i := 1; i < len(order); i++ {
		if d := evictedAt[order[i]] - evictedAt[order[i-1]]; d < 5*time.Second {
			t.Errorf("%s evicted %v after %s, want in this order, one per 10 s: %v", order[i], d, order[i-1], order)
		}
	}
	for _, c := range []struct {
		name, phase, message string
	}{{late.Name, "Failed", "Pod was rejected: The node had condition: [MemoryPressure]. "}, {lateBurstable.Name, "Running", ""}} {
		err := framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
			got, err := admin.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return string(got.Status.Phase) == c.phase && got.Status.Message == c.message, nil
		})
		if err != nil {
			t.Errorf("%s: not %s %q: %v", c.name, c.phase, c.message, err)
		}
	}
}

func nodeConditionTrue(n *corev1.Node, t corev1.NodeConditionType) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
