package nodestatus

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/apiequal"
)

// NodeStatusHasChanged reports whether status differs from original, ignoring condition heartbeat
// times and condition order. Mirrors the kubelet's nodeStatusHasChanged (pkg/kubelet/kubelet_node_status.go).
func NodeStatusHasChanged(original, status *v1.NodeStatus) bool {
	if original == nil || status == nil {
		return original != status
	}
	return conditionsChanged(original.Conditions, status.Conditions) || !statusEqualButConditions(original, status)
}

func conditionsChanged(original, current []v1.NodeCondition) bool {
	if len(original) != len(current) {
		return true
	}
	a := slices.Clone(original)
	b := slices.Clone(current)
	byType := func(x, y v1.NodeCondition) int { return strings.Compare(string(x.Type), string(y.Type)) }
	slices.SortStableFunc(a, byType)
	slices.SortStableFunc(b, byType)
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason || a[i].Message != b[i].Message ||
			!a[i].LastTransitionTime.Equal(&b[i].LastTransitionTime) {
			return true
		}
	}
	return false
}

// statusEqualButConditions reports whether a and b are equal in every field but Conditions, as
// apiequality.Semantic.DeepEqual would say (quantities by value, nil and empty slices and maps alike),
// without its reflection: the kubelet's nodeStatusHasChanged deep-copies both statuses and compares
// them with it, which at thousands of simulated Nodes was a tenth of the simulator's CPU (deep copies,
// and a reflect.Call for every Quantity). The rarely set pointer fields are still compared
// with Semantic.DeepEqual. TestStatusEqualButConditionsCoversNodeStatus fails when NodeStatus gains a
// field this does not compare; TestStatusEqualButConditionsAgreesWithSemantic checks it against
// Semantic.DeepEqual on random statuses.
func statusEqualButConditions(a, b *v1.NodeStatus) bool {
	return apiequal.ResourceList(a.Capacity, b.Capacity) && apiequal.ResourceList(a.Allocatable, b.Allocatable) &&
		a.Phase == b.Phase &&
		slices.Equal(a.Addresses, b.Addresses) &&
		a.DaemonEndpoints == b.DaemonEndpoints &&
		nodeInfoEqual(&a.NodeInfo, &b.NodeInfo) &&
		slices.EqualFunc(a.Images, b.Images, func(x, y v1.ContainerImage) bool {
			return x.SizeBytes == y.SizeBytes && slices.Equal(x.Names, y.Names)
		}) &&
		slices.Equal(a.VolumesInUse, b.VolumesInUse) &&
		slices.Equal(a.VolumesAttached, b.VolumesAttached) &&
		apiequality.Semantic.DeepEqual(a.Config, b.Config) &&
		apiequality.Semantic.DeepEqual(a.RuntimeHandlers, b.RuntimeHandlers) &&
		apiequality.Semantic.DeepEqual(a.Features, b.Features) &&
		slices.Equal(a.DeclaredFeatures, b.DeclaredFeatures)
}

// nodeInfoEqual compares every NodeSystemInfo field: the strings with ==, the pointers by what they
// point to.
func nodeInfoEqual(a, b *v1.NodeSystemInfo) bool {
	x, y := *a, *b
	x.Swap, y.Swap = nil, nil
	x.RunningInUserNamespace, y.RunningInUserNamespace = nil, nil
	return x == y && ptr.Equal(a.RunningInUserNamespace, b.RunningInUserNamespace) && apiequality.Semantic.DeepEqual(a.Swap, b.Swap)
}
