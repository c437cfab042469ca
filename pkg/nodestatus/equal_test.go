package nodestatus

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/apiequal/apiequaltest"
)

// comparedFields are the NodeStatus fields statusEqualButConditions compares (Conditions is
// conditionsChanged's). A field added to NodeStatus by a new k8s.io/api must be added there and here.
var comparedFields = []string{"Capacity", "Allocatable", "Phase", "Conditions", "Addresses", "DaemonEndpoints", "NodeInfo",
	"Images", "VolumesInUse", "VolumesAttached", "Config", "RuntimeHandlers", "Features", "DeclaredFeatures"}

// TestStatusEqualButConditionsCoversNodeStatus fails when NodeStatus or NodeSystemInfo has a field
// that statusEqualButConditions does not know: it would then miss a change of it.
func TestStatusEqualButConditionsCoversNodeStatus(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[v1.NodeStatus](), comparedFields},
		// NodeSystemInfo is compared with == but for these two pointers; a new pointer, slice or map
		// field would not compile with ==, a new string or number is compared by it.
		{reflect.TypeFor[v1.NodeDaemonEndpoints](), []string{"KubeletEndpoint"}},
	} {
		apiequaltest.Fields(t, "statusEqualButConditions", tc.typ, tc.want)
	}
}

// TestStatusEqualButConditionsAgreesWithSemantic compares statusEqualButConditions with
// apiequality.Semantic.DeepEqual (what the kubelet's nodeStatusHasChanged uses) on random statuses and
// copies of them with one field changed at any depth, conditions left out.
func TestStatusEqualButConditionsAgreesWithSemantic(t *testing.T) {
	apiequaltest.Agree(t, 10000, statusEqualButConditions, func(s *v1.NodeStatus) { s.Conditions = nil })
}

// BenchmarkNodeStatusHasChanged compares an unchanged status of a typical Node (the sync's common
// case), with the comparison the kubelet makes (deep copies and Semantic.DeepEqual).
func BenchmarkNodeStatusHasChanged(b *testing.B) {
	n := &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "R"}}}}
	n.Status.Capacity = v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("16Gi"),
		v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "n1"}}
	n.Status.NodeInfo = v1.NodeSystemInfo{KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.6.20",
		KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64"}
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: c, Status: v1.ConditionFalse, Reason: "R", Message: "m"})
	}
	other := n.Status.DeepCopy()
	b.Run("nodeagent", func(b *testing.B) {
		for b.Loop() {
			if NodeStatusHasChanged(&n.Status, other) {
				b.Fatal("changed")
			}
		}
	})
	b.Run("kubelet's deep copies and Semantic.DeepEqual", func(b *testing.B) {
		for b.Loop() {
			x, y := n.Status.DeepCopy(), other.DeepCopy()
			x.Conditions, y.Conditions = nil, nil
			if conditionsChanged(n.Status.Conditions, other.Conditions) || !apiequality.Semantic.DeepEqual(x, y) {
				b.Fatal("changed")
			}
		}
	})
}

// TestNodeStatusHasChanged mirrors the kubelet's TestNodeStatusHasChanged.
func TestNodeStatusHasChanged(t *testing.T) {
	fakeNow := metav1.Date(2015, 1, 1, 12, 0, 0, 0, time.UTC)
	fakeFuture := metav1.Time{Time: fakeNow.Time.Add(time.Minute)}
	readyCondition := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: fakeNow, LastTransitionTime: fakeNow}
	readyConditionAtDiffHeartbeatTime := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: fakeFuture, LastTransitionTime: fakeNow}
	readyConditionAtDiffTransitionTime := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: fakeFuture, LastTransitionTime: fakeFuture}
	notReadyCondition := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, LastHeartbeatTime: fakeNow, LastTransitionTime: fakeNow}
	memoryPressureCondition := v1.NodeCondition{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, LastHeartbeatTime: fakeNow, LastTransitionTime: fakeNow}
	readyWithMessage := readyConditionAtDiffHeartbeatTime
	readyWithMessage.Message = "new message"
	cases := []struct {
		name           string
		originalStatus *v1.NodeStatus
		status         *v1.NodeStatus
		expectChange   bool
	}{
		{"Node status does not change with nil status.", nil, nil, false},
		{"Node status does not change with default status.", &v1.NodeStatus{}, &v1.NodeStatus{}, false},
		{"Node status changes with nil and default status.", nil, &v1.NodeStatus{}, true},
		{"Node status changes with nil and status.", nil, &v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}}, true},
		{"Node status does not change with empty conditions.", &v1.NodeStatus{Conditions: []v1.NodeCondition{}}, &v1.NodeStatus{Conditions: []v1.NodeCondition{}}, false},
		{"Node status does not change",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}}, false},
		{"Node status does not change even if heartbeat time changes.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyConditionAtDiffHeartbeatTime, memoryPressureCondition}}, false},
		{"Node status does not change even if the orders of conditions are different.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{memoryPressureCondition, readyConditionAtDiffHeartbeatTime}}, false},
		{"Node status changes if condition status differs.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{notReadyCondition, memoryPressureCondition}}, true},
		{"Node status changes if transition time changes.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyConditionAtDiffTransitionTime, memoryPressureCondition}}, true},
		{"Node status changes if the message changes.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyWithMessage}}, true},
		{"Node status changes with different number of conditions.",
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition}},
			&v1.NodeStatus{Conditions: []v1.NodeCondition{readyCondition, memoryPressureCondition}}, true},
		{"Node status changes with different phase.",
			&v1.NodeStatus{Phase: v1.NodePending, Conditions: []v1.NodeCondition{readyCondition}},
			&v1.NodeStatus{Phase: v1.NodeRunning, Conditions: []v1.NodeCondition{readyCondition}}, true},
		{"Node status changes with different capacity.",
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourcePods: resource.MustParse("110")}},
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourcePods: resource.MustParse("111")}}, true},
		{"Node status does not change with semantically equal quantities.",
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}},
			&v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(1<<30, resource.DecimalSI)}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			originalCopy, statusCopy := tc.originalStatus.DeepCopy(), tc.status.DeepCopy()
			if got := NodeStatusHasChanged(tc.originalStatus, tc.status); got != tc.expectChange {
				t.Errorf("changed = %v, want %v", got, tc.expectChange)
			}
			if !apiequality.Semantic.DeepEqual(originalCopy, tc.originalStatus) || !apiequality.Semantic.DeepEqual(statusCopy, tc.status) {
				t.Errorf("NodeStatusHasChanged modified its arguments")
			}
		})
	}
}
