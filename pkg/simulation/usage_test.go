package simulation

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

func usagePod(annotations map[string]string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", Annotations: annotations},
		Spec: v1.PodSpec{NodeName: "sim-node-0000", Containers: containers}}
}

func withResources(name string, requests, limits v1.ResourceList) v1.Container {
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func rl(cpu, memory string) v1.ResourceList {
	return v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(memory)}
}

func TestContainerUsage(t *testing.T) {
	for _, tc := range []struct {
		name                string
		annotations         map[string]string
		container           v1.Container
		wantCPU, wantMemory int64
		wantErr             string
	}{
		{name: "a tenth of the requests", container: withResources("app", rl("500m", "200Mi"), nil), wantCPU: 50_000_000, wantMemory: 20 << 20},
		{name: "limits when no requests", container: withResources("app", nil, rl("1", "1Gi")), wantCPU: 100_000_000, wantMemory: 1 << 30 / 10},
		{name: "no requests: the minimum, never zero", container: withResources("app", nil, nil), wantCPU: MinCPUUsage, wantMemory: MinMemoryUsage},
		{name: "tiny requests: the minimum", container: withResources("app", rl("1m", "1Ki"), nil), wantCPU: MinCPUUsage, wantMemory: MinMemoryUsage},
		{name: "pod-wide annotations", annotations: map[string]string{AnnotationCPUUsage: "800m", AnnotationMemoryUsage: "300Mi"},
			container: withResources("app", rl("500m", "200Mi"), nil), wantCPU: 800_000_000, wantMemory: 300 << 20},
		{name: "the container's key over the pod's", annotations: map[string]string{AnnotationCPUUsage: "800m", AnnotationCPUUsage + ".app": "2"},
			container: withResources("app", rl("500m", "200Mi"), nil), wantCPU: 2_000_000_000, wantMemory: 20 << 20},
		{name: "another container's key does not apply", annotations: map[string]string{AnnotationCPUUsage + ".side": "2"},
			container: withResources("app", rl("500m", "200Mi"), nil), wantCPU: 50_000_000, wantMemory: 20 << 20},
		{name: "bad cpu: the default and an error naming it", annotations: map[string]string{AnnotationCPUUsage: "lots", AnnotationMemoryUsage: "64Mi"},
			container: withResources("app", rl("500m", "200Mi"), nil), wantCPU: 50_000_000, wantMemory: 64 << 20,
			wantErr: `bad annotation nodeagent.io/cpu-usage: "lots" is not a positive quantity such as 250m or 100Mi`},
		{name: "zero memory is bad", annotations: map[string]string{AnnotationMemoryUsage + ".app": "0"},
			container: withResources("app", rl("500m", "200Mi"), nil), wantCPU: 50_000_000, wantMemory: 20 << 20,
			wantErr: `bad annotation nodeagent.io/memory-usage.app: "0" is not a positive quantity`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := usagePod(tc.annotations, tc.container)
			cpu, memory, err := ContainerUsage(p, &p.Spec.Containers[0])
			if cpu != tc.wantCPU || memory != tc.wantMemory {
				t.Errorf("usage %d nanocores %d bytes, want %d %d", cpu, memory, tc.wantCPU, tc.wantMemory)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrBadAnnotation)):
				t.Errorf("error %v, want ErrBadAnnotation containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestUsageAnnotationsError(t *testing.T) {
	p := usagePod(map[string]string{AnnotationCPUUsage: "x", AnnotationMemoryUsage + ".nope": "1Gi"},
		withResources("a", nil, nil), withResources("b", nil, nil))
	err := UsageAnnotationsError(p)
	want := `bad annotation nodeagent.io/cpu-usage: "x" is not a positive quantity such as 250m or 100Mi` + "\n" +
		`bad annotation nodeagent.io/memory-usage.nope: "1Gi": the pod has no container "nope"`
	if err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
	if err := UsageAnnotationsError(usagePod(map[string]string{AnnotationCPUUsage + ".a": "1"}, withResources("a", nil, nil))); err != nil {
		t.Errorf("good annotations: error %v", err)
	}
}

// running sets the pod's container statuses: each container running since startedAt.
func running(p *v1.Pod, startedAt time.Time) *v1.Pod {
	p = p.DeepCopy()
	p.Status.StartTime = &metav1.Time{Time: startedAt}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, v1.ContainerStatus{Name: c.Name,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Time{Time: startedAt}}}})
	}
	return p
}

func TestUsageSummary(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-node-0000", CreationTimestamp: metav1.Time{Time: t0.Add(-time.Minute)}},
		Status: v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceMemory: resource.MustParse("4Gi")}}}
	base := usagePod(map[string]string{AnnotationCPUUsage: "200m", AnnotationMemoryUsage: "100Mi"}, withResources("app", rl("1", "1Gi"), nil))
	type step struct {
		at      time.Duration // from t0
		do      func(u *Usage) error
		pod     *v1.Pod // nil: the last one
		wantCum uint64  // the container's core-nanoseconds
		wantCPU uint64  // its nanocores
		wantMem uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "constant: rate × time since the container started", steps: []step{
			{at: 10 * time.Second, pod: running(base, t0), wantCum: 2_000_000_000, wantCPU: 200_000_000, wantMem: 100 << 20},
			{at: 25 * time.Second, wantCum: 5_000_000_000, wantCPU: 200_000_000, wantMem: 100 << 20},
		}},
		{name: "run-time change: the counter goes on from where it was", steps: []step{
			{at: 10 * time.Second, pod: running(base, t0), do: func(u *Usage) error { return u.SetPod("ns", "web", UsageChange{CPU: "800m", Memory: "300Mi"}) },
				wantCum: 2_000_000_000, wantCPU: 800_000_000, wantMem: 300 << 20},
			{at: 20 * time.Second, wantCum: 10_000_000_000, wantCPU: 800_000_000, wantMem: 300 << 20},
			{at: 30 * time.Second, do: func(u *Usage) error { return u.SetPod("ns", "web", UsageChange{CPU: "100m"}) },
				wantCum: 18_000_000_000, wantCPU: 100_000_000, wantMem: 300 << 20},
			{at: 40 * time.Second, wantCum: 19_000_000_000, wantCPU: 100_000_000, wantMem: 300 << 20},
		}},
		{name: "a restarted container starts again from 0 at the rate in force", steps: []step{
			{at: 10 * time.Second, pod: running(base, t0), do: func(u *Usage) error { return u.SetPod("ns", "web", UsageChange{CPU: "1"}) },
				wantCum: 2_000_000_000, wantCPU: 1_000_000_000, wantMem: 100 << 20},
			{at: 20 * time.Second, pod: running(base, t0.Add(15*time.Second)), wantCum: 5_000_000_000, wantCPU: 1_000_000_000, wantMem: 100 << 20},
		}},
		{name: "read to the millisecond, the precision of the samples' timestamps", steps: []step{
			{at: 10*time.Second + 999*time.Microsecond, pod: running(base, t0), wantCum: 2_000_000_000, wantCPU: 200_000_000, wantMem: 100 << 20},
			{at: 10*time.Second + 1500*time.Microsecond, wantCum: 2_000_200_000, wantCPU: 200_000_000, wantMem: 100 << 20},
		}},
		{name: "a change for another container does not apply", steps: []step{
			{at: 10 * time.Second, pod: running(base, t0), do: func(u *Usage) error { return u.SetPod("ns", "web", UsageChange{Container: "other", CPU: "1"}) },
				wantCum: 2_000_000_000, wantCPU: 200_000_000, wantMem: 100 << 20},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			u := NewUsage(clk)
			var pod *v1.Pod
			var lastNodeCum uint64
			for i, s := range tc.steps {
				clk.SetTime(t0.Add(s.at))
				if s.pod != nil {
					pod = s.pod
				}
				if s.do != nil {
					if err := s.do(u); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				sum := u.Summary(node, []*v1.Pod{pod})
				if len(sum.Pods) != 1 || len(sum.Pods[0].Containers) != 1 {
					t.Fatalf("step %d: pods %+v, want one pod of one container", i, sum.Pods)
				}
				c := sum.Pods[0].Containers[0]
				if got := *c.CPU.UsageCoreNanoSeconds; got != s.wantCum {
					t.Errorf("step %d: usageCoreNanoSeconds %d, want %d", i, got, s.wantCum)
				}
				if got := *c.CPU.UsageNanoCores; got != s.wantCPU {
					t.Errorf("step %d: usageNanoCores %d, want %d", i, got, s.wantCPU)
				}
				if got := *c.Memory.WorkingSetBytes; got != s.wantMem {
					t.Errorf("step %d: workingSetBytes %d, want %d", i, got, s.wantMem)
				}
				if !c.StartTime.Equal(&pod.Status.ContainerStatuses[0].State.Running.StartedAt) || !c.CPU.Time.Time.Equal(clk.Now().Truncate(time.Millisecond)) {
					t.Errorf("step %d: startTime %v, time %v", i, c.StartTime, c.CPU.Time)
				}
				n := sum.Node
				if got, want := *n.CPU.UsageNanoCores, uint64(DefaultNodeBaseCPU)+s.wantCPU; got != want {
					t.Errorf("step %d: node usageNanoCores %d, want base + pods %d", i, got, want)
				}
				if got, want := *n.Memory.WorkingSetBytes, uint64(DefaultNodeBaseMemory)+s.wantMem; got != want {
					t.Errorf("step %d: node workingSetBytes %d, want base + pods %d", i, got, want)
				}
				if got, want := *n.Memory.AvailableBytes, uint64(4<<30)-*n.Memory.WorkingSetBytes; got != want {
					t.Errorf("step %d: node availableBytes %d, want capacity − working set %d", i, got, want)
				}
				if *n.CPU.UsageCoreNanoSeconds <= lastNodeCum {
					t.Errorf("step %d: node usageCoreNanoSeconds %d, not above the last read's %d", i, *n.CPU.UsageCoreNanoSeconds, lastNodeCum)
				}
				lastNodeCum = *n.CPU.UsageCoreNanoSeconds
				if len(n.SystemContainers) != 1 || n.SystemContainers[0].Name != statsv1alpha1.SystemContainerPods || *n.SystemContainers[0].CPU.UsageNanoCores != s.wantCPU {
					t.Errorf("step %d: system containers %+v, want pods with the pods' usage", i, n.SystemContainers)
				}
			}
		})
	}
}

func TestUsageNode(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	u := NewUsage(clk)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-node-0001", CreationTimestamp: metav1.Time{Time: t0}}}
	pending := usagePod(nil, withResources("app", nil, nil))
	pending.Spec.NodeName = node.Name
	other := running(usagePod(nil, withResources("app", nil, nil)), t0)
	other.Name = "elsewhere" // bound to sim-node-0000
	read := func() statsv1alpha1.NodeStats {
		s := u.Summary(node, []*v1.Pod{pending, other})
		if len(s.Pods) != 0 {
			t.Fatalf("pods %+v: want none (one has no running container, one is another Node's)", s.Pods)
		}
		return s.Node
	}
	clk.Step(10 * time.Second)
	if n := read(); *n.CPU.UsageCoreNanoSeconds != 1_000_000_000 || *n.Memory.WorkingSetBytes != uint64(DefaultNodeBaseMemory) || n.Memory.AvailableBytes != nil {
		t.Errorf("node %+v %+v: want the base, 100m for 10 s since its creation, and no available bytes without a capacity", n.CPU, n.Memory)
	}
	if err := u.SetNode(node.Name, UsageChange{CPU: "2", Memory: "1Gi"}); err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Second)
	if n := read(); *n.CPU.UsageCoreNanoSeconds != 11_000_000_000 || *n.CPU.UsageNanoCores != 2_000_000_000 || *n.Memory.WorkingSetBytes != 1<<30 {
		t.Errorf("node %+v %+v: want 1 s + 2 cores × 5 s, 1Gi", n.CPU, n.Memory)
	}
	if err := u.SetNode(node.Name, UsageChange{CPU: "10m"}); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	if n := read(); *n.CPU.UsageCoreNanoSeconds != 11_100_000_000 {
		t.Errorf("node cpu %+v: want monotonic, 11 s + 10m × 10 s", n.CPU)
	}
	for _, tc := range []struct {
		c       UsageChange
		wantErr string
	}{
		{UsageChange{}, "bad usage change: give cpu, memory or both"},
		{UsageChange{CPU: "-1"}, `bad usage change: cpu "-1" is not a positive quantity such as 800m or 2`},
		{UsageChange{Memory: "lots"}, `bad usage change: memory "lots" is not a positive quantity such as 300Mi or 1G`},
		{UsageChange{Container: "app", CPU: "1"}, `bad usage change: container "app": a Node's usage has no container`},
	} {
		if err := u.SetNode(node.Name, tc.c); err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrBadUsage) {
			t.Errorf("SetNode(%+v) = %v, want %q", tc.c, err, tc.wantErr)
		}
	}
}

// TestSimPodsUsageAnnotationEvent: a usage annotation that does not parse is told in a Warning Event
// InvalidAnnotation naming the key and the value when the pod is created or updated.
func TestSimPodsUsageAnnotationEvent(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	s := newSimPods(Behaviour{}, "simulated", rec, clocktesting.NewFakeClock(time.Now()))
	p := usagePod(map[string]string{AnnotationMemoryUsage: "much"}, withResources("app", nil, nil))
	for _, call := range []func(context.Context, *v1.Pod) error{s.CreatePod, s.UpdatePod} {
		if err := call(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-rec.Events:
			if want := `Warning InvalidAnnotation bad annotation nodeagent.io/memory-usage: "much" is not a positive quantity such as 250m or 100Mi`; e != want {
				t.Errorf("event %q, want %q", e, want)
			}
		default:
			t.Error("no Event")
		}
	}
	if err := s.CreatePod(context.Background(), usagePod(map[string]string{AnnotationMemoryUsage: "1Gi"}, withResources("app", nil, nil))); err != nil {
		t.Fatal(err)
	}
	if len(rec.Events) != 0 {
		t.Errorf("event %q for good annotations", <-rec.Events)
	}
}

// TestUsageAvailableBytes: a pod's and a container's memory.availableBytes are containerd's (the memory
// limit − the working set, 0 without a limit; the pod's limit the sum of its containers' when all have
// one), their swapAvailableBytes 0, as the reference kubelet reports them.
func TestUsageAvailableBytes(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-node-0000", CreationTimestamp: metav1.Time{Time: t0}}}
	usage := map[string]string{AnnotationMemoryUsage: "20Mi"}
	for _, tc := range []struct {
		name       string
		containers []v1.Container
		want       []uint64 // the containers', then the pod's
	}{
		{name: "no limits", containers: []v1.Container{withResources("a", nil, nil), withResources("b", nil, nil)}, want: []uint64{0, 0, 0}},
		{name: "one limit", containers: []v1.Container{withResources("a", nil, rl("1", "100Mi")), withResources("b", nil, nil)},
			want: []uint64{80 << 20, 0, 0}},
		{name: "all limited", containers: []v1.Container{withResources("a", nil, rl("1", "100Mi")), withResources("b", nil, rl("1", "50Mi"))},
			want: []uint64{80 << 20, 30 << 20, 110 << 20}},
		{name: "over the limit", containers: []v1.Container{withResources("a", nil, rl("1", "10Mi"))}, want: []uint64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := NewUsage(clocktesting.NewFakeClock(t0.Add(time.Minute)))
			sum := u.Summary(node, []*v1.Pod{running(usagePod(usage, tc.containers...), t0)})
			if len(sum.Pods) != 1 {
				t.Fatalf("%d pods, want 1", len(sum.Pods))
			}
			ps := sum.Pods[0]
			var got []uint64
			for _, c := range ps.Containers {
				got = append(got, *c.Memory.AvailableBytes)
				if c.Swap.SwapAvailableBytes == nil || *c.Swap.SwapAvailableBytes != 0 {
					t.Errorf("container %s: swapAvailableBytes %v, want 0", c.Name, c.Swap.SwapAvailableBytes)
				}
			}
			got = append(got, *ps.Memory.AvailableBytes)
			if !slices.Equal(got, tc.want) {
				t.Errorf("availableBytes %v, want %v", got, tc.want)
			}
		})
	}
}
