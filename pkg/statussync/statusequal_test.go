package statussync

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"
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
		var got []string
		for f := range tc.typ.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v has fields %v; statusEqualButConditions compares %v: compare the new ones", tc.typ, got, tc.want)
		}
	}
}

// TestStatusEqualButConditionsAgreesWithSemantic compares statusEqualButConditions with
// apiequality.Semantic.DeepEqual (what the kubelet's nodeStatusHasChanged uses) on random statuses and
// on copies with one field filled again at random: often to an equal value in another form (the same
// quantity in another format, an empty slice for a nil one), often to a different one.
func TestStatusEqualButConditionsAgreesWithSemantic(t *testing.T) {
	formats := []resource.Format{resource.DecimalSI, resource.BinarySI, resource.DecimalExponent}
	fill := randfill.NewWithSeed(1).NilChance(0.3).NumElements(0, 2).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(3)*1024, formats[c.Intn(len(formats))])
		},
		func(s *string, c randfill.Continue) { *s = []string{"", "a", "b"}[c.Intn(3)] },
		func(n *int64, c randfill.Continue) { *n = c.Int63n(2) },
		func(n *int32, c randfill.Continue) { *n = c.Int31n(2) },
		func(b *bool, c randfill.Continue) { *b = c.Intn(2) == 0 },
		func(m *metav1.Time, c randfill.Continue) {},
	)
	r := rand.New(rand.NewPCG(1, 2))
	var equal, unequal int
	for i := range 20000 {
		var a v1.NodeStatus
		fill.Fill(&a)
		a.Conditions = nil
		b := a.DeepCopy()
		field := reflect.ValueOf(b).Elem().Field(r.IntN(reflect.TypeFor[v1.NodeStatus]().NumField()))
		if field.CanAddr() && r.IntN(4) > 0 {
			fill.Fill(field.Addr().Interface())
		}
		b.Conditions = nil
		want := apiequality.Semantic.DeepEqual(&a, b)
		if got := statusEqualButConditions(&a, b); got != want {
			t.Fatalf("case %d: statusEqualButConditions = %v, Semantic.DeepEqual = %v\na: %#v\nb: %#v", i, got, want, a, *b)
		}
		if want {
			equal++
		} else {
			unequal++
		}
	}
	if equal < 1000 || unequal < 1000 {
		t.Errorf("%d equal and %d unequal pairs: the generator should give plenty of both", equal, unequal)
	}
}

// BenchmarkNodeStatusHasChanged compares an unchanged status of a typical Node (the sync's common
// case), with the comparison the kubelet makes (deep copies and Semantic.DeepEqual).
func BenchmarkNodeStatusHasChanged(b *testing.B) {
	n := readyNode(v1.ConditionTrue, "1")
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
