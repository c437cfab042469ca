package nodecache

import (
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// simulatedNode is a Node as `nodeagent simulate` writes it from its default template: what every
// simulated Node of one template holds equal (capacity, allocatable, images, nodeInfo's versions,
// condition reasons) and what each holds of its own (name, UID, hostname label, addresses, IDs).
func simulatedNode(i int) *v1.Node {
	name := fmt.Sprintf("sim-node-%04d", i)
	res := func(pods string) v1.ResourceList {
		return v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("16343164Ki"),
			v1.ResourcePods: resource.MustParse(pods), v1.ResourceEphemeralStorage: resource.MustParse("102626232Ki"),
			"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
		}
	}
	var images []v1.ContainerImage
	for j := range 10 {
		images = append(images, v1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.k8s.io/image-%d@sha256:%064d", j, j), fmt.Sprintf("registry.k8s.io/image-%d:v1.%d", j, j)},
			SizeBytes: int64(1000000 * (j + 1)),
		})
	}
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg}
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: strconv.Itoa(1000 + i),
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "nodeagent.io/simulated": "true"},
			Annotations:   map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "nodeagent", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Status: v1.NodeStatus{
			Capacity: res("110"), Allocatable: res("110"),
			Conditions: []v1.NodeCondition{
				cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)}, {Type: v1.NodeHostName, Address: name}},
			NodeInfo: v1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("%032x", i+1), BootID: fmt.Sprintf("%032x", i+2),
				KernelVersion: "6.1.0-28-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.6.20",
				KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64"},
			Images: images,
		},
	}
}

// decoded returns n decoded from its protobuf encoding, as the informer gets it: every string and
// map its own.
func decoded(t testing.TB, n *v1.Node) *v1.Node {
	b, err := n.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out := &v1.Node{}
	if err := out.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTrimNodeSharesValues: Nodes with equal capacity, allocatable and images share one copy of each
// after TrimNode, and are still equal to what they were; a Node whose values differ (in a quantity,
// a format or an image's size) gets its own.
func TestTrimNodeSharesValues(t *testing.T) {
	other := simulatedNode(3)
	other.Status.Capacity[v1.ResourceCPU] = resource.MustParse("8")
	other.Status.Images[9].SizeBytes++
	formatted := simulatedNode(4)
	formatted.Status.Allocatable[v1.ResourceMemory] = resource.MustParse("16735399936") // 16343164Ki in another form

	nodes := []*v1.Node{decoded(t, simulatedNode(1)), decoded(t, simulatedNode(2)), decoded(t, other), decoded(t, formatted)}
	var want []*v1.Node
	for _, n := range nodes {
		w := n.DeepCopy()
		w.ManagedFields = nil
		want = append(want, w)
		if _, err := TrimNode(n); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range nodes {
		if !reflect.DeepEqual(n, want[i]) {
			t.Errorf("node %d: TrimNode changed it:\n%#v\nwant\n%#v", i, n.Status, want[i].Status)
		}
	}
	sameMap := func(a, b v1.ResourceList) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	sameImages := func(a, b []v1.ContainerImage) bool { return &a[0] == &b[0] }
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"equal capacity shared", sameMap(nodes[0].Status.Capacity, nodes[1].Status.Capacity), true},
		{"equal allocatable shared", sameMap(nodes[0].Status.Allocatable, nodes[1].Status.Allocatable), true},
		{"capacity and allocatable of one Node, equal, shared", sameMap(nodes[0].Status.Capacity, nodes[0].Status.Allocatable), true},
		{"equal images shared", sameImages(nodes[0].Status.Images, nodes[1].Status.Images), true},
		{"other cpu not shared", sameMap(nodes[0].Status.Capacity, nodes[2].Status.Capacity), false},
		{"other image size not shared", sameImages(nodes[0].Status.Images, nodes[2].Status.Images), false},
		{"same memory in another form not shared", sameMap(nodes[0].Status.Allocatable, nodes[3].Status.Allocatable), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestSharedValuesBounded: a sharedValues never holds more than sharedValuesMax values; past that it
// starts again.
func TestSharedValuesBounded(t *testing.T) {
	var s sharedValues[int]
	for i := range 3 * sharedValuesMax {
		if got := s.get(strconv.Itoa(i), func() int { return i }); got != i {
			t.Fatalf("get(%d) = %d", i, got)
		}
		if len(s.m) > sharedValuesMax {
			t.Fatalf("after %d values it holds %d, more than %d", i+1, len(s.m), sharedValuesMax)
		}
	}
	if got := s.get("x", func() int { return 1 }); got != 1 {
		t.Fatalf("new key: got %d", got)
	}
	if got := s.get("x", func() int { return 2 }); got != 1 {
		t.Fatalf("same key again: got %d, want the first value 1", got)
	}
}

// BenchmarkTrimNodeHeap reports the heap each simulated Node of one template holds in the informer's
// store: decoded only, without managedFields (StripManagedFields), and after TrimNode (interned
// strings, shared capacity, allocatable and images). go test -run '^$' -bench TrimNodeHeap ./pkg/nodecache
func BenchmarkTrimNodeHeap(b *testing.B) {
	const n = 2000
	encoded := make([][]byte, n)
	for i := range n {
		var err error
		if encoded[i], err = simulatedNode(i).Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name      string
		transform func(any) (any, error)
	}{{"StripManagedFields", StripManagedFields}, {"TrimNode", TrimNode}} {
		b.Run(bc.name, func(b *testing.B) {
			var perNode float64
			for b.Loop() {
				kept := make([]any, n)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := range n {
					node := &v1.Node{}
					if err := node.Unmarshal(encoded[i]); err != nil {
						b.Fatal(err)
					}
					kept[i], _ = bc.transform(node)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perNode = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(kept)
			}
			b.ReportMetric(perNode, "heapB/node")
		})
	}
}
