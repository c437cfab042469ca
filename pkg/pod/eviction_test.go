package pod

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func evictionPod(name string, requests v1.ResourceList, priority int32, mutate func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: v1.PodSpec{Priority: ptr.To(priority), Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: requests}}}}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

var (
	memReq = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	cpuReq = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
)

// TestEvictionAdmit: the eviction manager's admission: BestEffort pods are rejected under memory
// pressure unless they tolerate its taint, every pod under another pressure, critical pods never; the
// reason and message are the kubelet's.
func TestEvictionAdmit(t *testing.T) {
	tolerates := func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	}
	critical := func(p *v1.Pod) { p.Spec.Priority = ptr.To[int32](2000001000) }
	for _, tc := range []struct {
		name  string
		pod   *v1.Pod
		conds []v1.NodeConditionType
		want  string // "" admitted
	}{
		{name: "no pressure", pod: evictionPod("p", nil, 0, nil)},
		{name: "memory: BestEffort", pod: evictionPod("p", nil, 0, nil), conds: []v1.NodeConditionType{v1.NodeMemoryPressure},
			want: "Evicted: The node had condition: [MemoryPressure]. "},
		{name: "memory: Burstable", pod: evictionPod("p", cpuReq, 0, nil), conds: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{name: "memory: BestEffort tolerating", pod: evictionPod("p", nil, 0, tolerates), conds: []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{name: "disk: Burstable", pod: evictionPod("p", cpuReq, 0, nil), conds: []v1.NodeConditionType{v1.NodeDiskPressure},
			want: "Evicted: The node had condition: [DiskPressure]. "},
		{name: "memory and disk: critical", pod: evictionPod("p", nil, 0, critical), conds: []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := EvictionAdmit(tc.pod, tc.conds)
			got := ""
			if !r.Admit {
				got = r.Reason + ": " + r.Message
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRankForEviction: under memory pressure the pods exceeding their memory requests (none
// requested) go first, then by priority; critical pods never; under PID pressure by priority only.
func TestRankForEviction(t *testing.T) {
	pods := []*v1.Pod{
		evictionPod("guaranteed-low", memReq, 0, nil),
		evictionPod("besteffort-high", nil, 1000, nil),
		evictionPod("burstable-cpu-only", cpuReq, 500, nil),
		evictionPod("besteffort-low", nil, 0, nil),
		evictionPod("critical", nil, 0, func(p *v1.Pod) { p.Spec.Priority = ptr.To[int32](2000000000) }),
	}
	names := func(ps []*v1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	if got, want := names(RankForEviction(pods, v1.ResourceMemory)), []string{"besteffort-low", "burstable-cpu-only", "besteffort-high", "guaranteed-low"}; !slices.Equal(got, want) {
		t.Errorf("memory: %q, want %q", got, want)
	}
	if got, want := names(RankForEviction(pods, "pids")), []string{"besteffort-low", "guaranteed-low", "burstable-cpu-only", "besteffort-high"}; !slices.Equal(got, want) {
		t.Errorf("pids: %q, want %q", got, want)
	}
}
