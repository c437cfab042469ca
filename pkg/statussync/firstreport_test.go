package statussync

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
)

// TestFirstReportCountsNodeHeartbeat: with no report of its own yet (just registered with a full
// status, or restarted), the syncer counts the Node's Ready heartbeat as the last report, so an
// unchanged status is not posted again at once (an empty patch); an old heartbeat or a changed
// status still is.
func TestFirstReportCountsNodeHeartbeat(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) // newWorld's fake clock
	posted := func(heartbeat time.Time, status v1.ConditionStatus, reason, message string) *v1.Node {
		n := baseNode()
		n.Status.Capacity = v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
			v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		}
		n.Status.NodeInfo.KernelVersion = "6.1.0"
		n.Status.Conditions = []v1.NodeCondition{{
			Type: v1.NodeReady, Status: status, Reason: reason, Message: message,
			LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(heartbeat),
		}}
		return n
	}
	ready := func(hb time.Time) *v1.Node {
		return posted(hb, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
	}
	tests := []struct {
		name        string
		node        *v1.Node
		rand        float64
		wantActions string
	}{
		{name: "just created with the same status: no patch", node: ready(now.Add(-time.Second)), rand: 0.5},
		{name: "restart, status posted 1m ago: no patch", node: ready(now.Add(-time.Minute)), rand: 0.5},
		{name: "restart, status posted 6m ago: report", node: ready(now.Add(-6 * time.Minute)), rand: 0.5, wantActions: "patch/status"},
		{name: "posted 4m ago, first interval offset −50%: report", node: ready(now.Add(-4 * time.Minute)), rand: 0, wantActions: "patch/status"},
		{name: "lifecycle controller set Unknown: changed, patch", rand: 0.5, wantActions: "patch/status",
			node: posted(now.Add(-time.Second), v1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.")},
		{name: "no Ready condition yet: report", node: baseNode(), rand: 0.5, wantActions: "patch/status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOpts{inAPI: tc.node, inLister: tc.node, rand: tc.rand})
			w.sync(ctx)
			if got := join(w.actions()); got != tc.wantActions {
				t.Errorf("actions %q, want %q", got, tc.wantActions)
			}
		})
	}
}
