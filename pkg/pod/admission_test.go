package pod

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func testNode(mutate ...func(*v1.Node)) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "machine1", Labels: map[string]string{v1.LabelOSStable: "linux"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: *resource.NewMilliQuantity(10, resource.DecimalSI), v1.ResourceMemory: *resource.NewQuantity(20, resource.BinarySI),
			v1.ResourcePods: *resource.NewQuantity(32, resource.DecimalSI), "example.com/gpu": *resource.NewQuantity(1, resource.DecimalSI),
		}},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func reqPod(requests v1.ResourceList, mutate ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: requests}}}}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func cpuMem(milliCPU, mem int64) v1.ResourceList {
	return v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI), v1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI)}
}

func withPort(port int32, ip string) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Containers[0].Ports = []v1.ContainerPort{{HostPort: port, HostIP: ip}} }
}

// TestAdmit takes the kubelet's TestGeneralPredicates cases (pkg/kubelet/lifecycle/predicate_test.go)
// and adds the reasons and messages the kubelet's Admit turns them into.
func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		node        *v1.Node
		pod         *v1.Pod
		others      []*v1.Pod
		wantReason  string
		wantMessage string
	}{
		{name: "no resources/port/host requested always fits", node: testNode(), pod: &v1.Pod{}, others: []*v1.Pod{reqPod(cpuMem(9, 19))}},
		{name: "not enough cpu and memory resource: cpu first", node: testNode(), pod: reqPod(cpuMem(8, 10)), others: []*v1.Pod{reqPod(cpuMem(5, 19))},
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 8, used: 5, capacity: 10"},
		{name: "not enough memory", node: testNode(), pod: reqPod(cpuMem(1, 10)), others: []*v1.Pod{reqPod(cpuMem(5, 19))},
			wantReason: "OutOfmemory", wantMessage: "Node didn't have enough resource: memory, requested: 10, used: 19, capacity: 20"},
		{name: "pods count", node: testNode(func(n *v1.Node) { n.Status.Allocatable[v1.ResourcePods] = resource.MustParse("1") }),
			pod: &v1.Pod{}, others: []*v1.Pod{{}},
			wantReason: "OutOfpods", wantMessage: "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"},
		{name: "extended resource short", node: testNode(), pod: reqPod(v1.ResourceList{"example.com/gpu": resource.MustParse("2")}),
			wantReason: "OutOfexample.com/gpu", wantMessage: "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, capacity: 1"},
		{name: "extended resource the node does not list is ignored", node: testNode(), pod: reqPod(v1.ResourceList{"example.com/fpga": resource.MustParse("2")})},
		{name: "init container's larger request counts", node: testNode(), pod: reqPod(cpuMem(1, 1), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Requests: cpuMem(11, 1)}}}
		}), wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 11, used: 0, capacity: 10"},
		{name: "sidecar adds to the containers", node: testNode(), pod: reqPod(cpuMem(6, 1), func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "s", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), Resources: v1.ResourceRequirements{Requests: cpuMem(5, 1)}}}
		}), wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 11, used: 0, capacity: 10"},
		{name: "overhead counts", node: testNode(), pod: reqPod(cpuMem(6, 1), func(p *v1.Pod) { p.Spec.Overhead = cpuMem(5, 0) }),
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 11, used: 0, capacity: 10"},
		{name: "host not match", node: testNode(), pod: &v1.Pod{Spec: v1.PodSpec{NodeName: "machine2"}},
			wantReason: "NodeName", wantMessage: "Predicate NodeName failed: node(s) didn't match the requested node name"},
		{name: "hostport conflict", node: testNode(), pod: reqPod(nil, withPort(123, "")), others: []*v1.Pod{reqPod(nil, withPort(123, ""))},
			wantReason: "NodePorts", wantMessage: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "hostport on another IP", node: testNode(), pod: reqPod(nil, withPort(123, "10.0.0.1")), others: []*v1.Pod{reqPod(nil, withPort(123, "10.0.0.2"))}},
		{name: "hostport on one IP against 0.0.0.0", node: testNode(), pod: reqPod(nil, withPort(123, "10.0.0.1")), others: []*v1.Pod{reqPod(nil, withPort(123, ""))},
			wantReason: "NodePorts", wantMessage: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "taint/toleration match", node: testNode(func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "foo", Effect: v1.TaintEffectNoSchedule}, {Key: "bar", Effect: v1.TaintEffectNoExecute}}
		}), pod: &v1.Pod{Spec: v1.PodSpec{Tolerations: []v1.Toleration{{Key: "foo"}, {Key: "bar"}}}}},
		{name: "NoSchedule taint/toleration not match", node: testNode(func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "foo", Effect: v1.TaintEffectNoSchedule}}
		}), pod: &v1.Pod{}},
		{name: "NoExecute taint/toleration not match", node: testNode(func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "bar", Effect: v1.TaintEffectNoExecute}}
		}), pod: &v1.Pod{}, wantReason: "TaintToleration", wantMessage: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"},
		{name: "static pods ignore taints", node: testNode(func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "bar", Effect: v1.TaintEffectNoExecute}}
		}), pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kubernetes.io/config.source": "file"}}}},
		{name: "node affinity failure", node: testNode(), pod: &v1.Pod{Spec: v1.PodSpec{Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "foo", Operator: v1.NodeSelectorOpExists}}}}}}}}},
			wantReason: "NodeAffinity", wantMessage: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "nodeSelector failure", node: testNode(), pod: &v1.Pod{Spec: v1.PodSpec{NodeSelector: map[string]string{"zone": "a"}}},
			wantReason: "NodeAffinity", wantMessage: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "resources before node name", node: testNode(), pod: reqPod(cpuMem(11, 1), func(p *v1.Pod) { p.Spec.NodeName = "other" }),
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 11, used: 0, capacity: 10"},
		{name: "OS label mismatch", node: testNode(), pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.LabelOSStable: "windows"}}},
			wantReason: "PodOSSelectorNodeLabelDoesNotMatch", wantMessage: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
		{name: "OS field mismatch", node: testNode(), pod: &v1.Pod{Spec: v1.PodSpec{OS: &v1.PodOS{Name: v1.Windows}}},
			wantReason: "PodOSNotSupported", wantMessage: "Failed to admit pod as the OS field doesn't match node OS"},
		{name: "a windows node admits windows pods", node: testNode(func(n *v1.Node) { n.Labels[v1.LabelOSStable] = "windows" }),
			pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.LabelOSStable: "windows"}}, Spec: v1.PodSpec{OS: &v1.PodOS{Name: v1.Windows}}}},
		{name: "SupplementalGroupsPolicy Strict not supported",
			node: testNode(), pod: &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict)}}},
			wantReason: "SupplementalGroupsPolicyNotSupported", wantMessage: "SupplementalGroupsPolicy=Strict is not supported in this node"},
		{name: "SupplementalGroupsPolicy Strict supported",
			node: testNode(func(n *v1.Node) { n.Status.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)} }),
			pod:  &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Admit(tc.node, tc.pod, tc.others)
			want := AdmitResult{Admit: tc.wantReason == "", Reason: tc.wantReason, Message: tc.wantMessage}
			if got != want {
				t.Errorf("Admit = %+v, want %+v", got, want)
			}
		})
	}
}

func TestRejectedStatus(t *testing.T) {
	p := reqPod(cpuMem(11, 1))
	s := RejectedStatus(p, Admit(testNode(), p, nil))
	want := v1.PodStatus{Phase: v1.PodFailed, Reason: "OutOfcpu", QOSClass: v1.PodQOSBurstable,
		Message: "Pod was rejected: Node didn't have enough resource: cpu, requested: 11, used: 0, capacity: 10"}
	if s.Phase != want.Phase || s.Reason != want.Reason || s.Message != want.Message || s.QOSClass != want.QOSClass {
		t.Errorf("RejectedStatus = %+v, want %+v", s, want)
	}
}

func TestComputePodQOS(t *testing.T) {
	guaranteed := v1.ResourceRequirements{Requests: cpuMem(100, 100), Limits: cpuMem(100, 100)}
	for _, tc := range []struct {
		name string
		spec v1.PodSpec
		want v1.PodQOSClass
	}{
		{"no resources", v1.PodSpec{Containers: []v1.Container{{}}}, v1.PodQOSBestEffort},
		{"equal requests and limits", v1.PodSpec{Containers: []v1.Container{{Resources: guaranteed}}}, v1.PodQOSGuaranteed},
		{"requests only", v1.PodSpec{Containers: []v1.Container{{Resources: v1.ResourceRequirements{Requests: cpuMem(1, 1)}}}}, v1.PodQOSBurstable},
		{"one guaranteed, one best effort", v1.PodSpec{Containers: []v1.Container{{Resources: guaranteed}, {}}}, v1.PodQOSBurstable},
		{"init container counts", v1.PodSpec{InitContainers: []v1.Container{{}}, Containers: []v1.Container{{Resources: guaranteed}}}, v1.PodQOSBurstable},
		{"pod-level resources decide", v1.PodSpec{Resources: &guaranteed, Containers: []v1.Container{{}}}, v1.PodQOSGuaranteed},
	} {
		if got := ComputePodQOS(&v1.Pod{Spec: tc.spec}); got != tc.want {
			t.Errorf("%s: ComputePodQOS = %s, want %s", tc.name, got, tc.want)
		}
	}
	if got := PodQOS(&v1.Pod{Status: v1.PodStatus{QOSClass: v1.PodQOSGuaranteed}}); got != v1.PodQOSGuaranteed {
		t.Errorf("PodQOS does not keep status.qosClass: %s", got)
	}
}

// TestUsageAddRemove: a Usage kept incrementally (pods added, then some removed with what Add returned)
// admits as Admit over the pods still active: the same result and message.
func TestUsageAddRemove(t *testing.T) {
	a := reqPod(cpuMem(5, 10), withPort(8080, ""))
	b := reqPod(cpuMem(3, 5), withPort(9090, "127.0.0.1"))
	c := reqPod(v1.ResourceList{"example.com/gpu": resource.MustParse("1")})
	for _, tc := range []struct {
		name    string
		add     []*v1.Pod
		remove  []int // indexes into add
		pod     *v1.Pod
		wantOK  bool
		wantMsg string
	}{
		{name: "cpu freed by a removed pod", add: []*v1.Pod{a, b}, remove: []int{0}, pod: reqPod(cpuMem(7, 1)), wantOK: true},
		{name: "cpu still used", add: []*v1.Pod{a, b}, remove: []int{1}, pod: reqPod(cpuMem(7, 1)),
			wantMsg: "Node didn't have enough resource: cpu, requested: 7, used: 5, capacity: 10"},
		{name: "host port freed", add: []*v1.Pod{a, b}, remove: []int{0}, pod: reqPod(nil, withPort(8080, "10.0.0.1")), wantOK: true},
		{name: "host port of a specific IP against a wanted 0.0.0.0", add: []*v1.Pod{a, b}, pod: reqPod(nil, withPort(9090, "")),
			wantMsg: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "host port on 0.0.0.0 against a specific IP", add: []*v1.Pod{a, b}, pod: reqPod(nil, withPort(8080, "10.0.0.2")),
			wantMsg: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "extended resource freed", add: []*v1.Pod{c, a}, remove: []int{0}, pod: reqPod(v1.ResourceList{"example.com/gpu": resource.MustParse("1")}), wantOK: true},
		{name: "extended resource held", add: []*v1.Pod{c, a}, pod: reqPod(v1.ResourceList{"example.com/gpu": resource.MustParse("1")}),
			wantMsg: "Node didn't have enough resource: example.com/gpu, requested: 1, used: 1, capacity: 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u Usage
			entries := make([]UsageEntry, len(tc.add))
			for i, p := range tc.add {
				entries[i] = u.Add(p)
			}
			var active []*v1.Pod
			for i, p := range tc.add {
				if slices.Contains(tc.remove, i) {
					u.Remove(entries[i])
					continue
				}
				active = append(active, p)
			}
			got, want := AdmitWith(testNode(), tc.pod, &u), Admit(testNode(), tc.pod, active)
			if got != want {
				t.Errorf("AdmitWith %+v, Admit over the active pods %+v", got, want)
			}
			if got.Admit != tc.wantOK || got.Message != tc.wantMsg {
				t.Errorf("got %+v, want admit %v message %q", got, tc.wantOK, tc.wantMsg)
			}
			if u.Pods() != len(active) {
				t.Errorf("Pods() %d, want %d", u.Pods(), len(active))
			}
		})
	}
}
