package simulation

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestNodeSelectorValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sel     NodeSelector
		wantErr string // "" for valid
	}{
		{"none", NodeSelector{}, ""},
		{"all", NodeSelector{AllNodes: true}, ""},
		{"annotation", NodeSelector{AnnotationSelector: "kwok.x-k8s.io/node=fake"}, ""},
		{"both selectors", NodeSelector{AnnotationSelector: "kwok.x-k8s.io/node=fake", LabelSelector: "type=kwok"}, ""},
		{"single", NodeSelector{SingleNode: "node-1"}, ""},
		{"all and label", NodeSelector{AllNodes: true, LabelSelector: "a=b"}, "--manage-all-nodes"},
		{"all and single", NodeSelector{AllNodes: true, SingleNode: "n"}, "--manage-all-nodes"},
		{"single and annotation", NodeSelector{SingleNode: "n", AnnotationSelector: "a=b"}, `--manage-single-node "n"`},
		{"bad annotation selector", NodeSelector{AnnotationSelector: "a=b=c"}, `--manage-nodes-with-annotation-selector "a=b=c"`},
		{"bad label selector", NodeSelector{LabelSelector: "!!"}, `--manage-nodes-with-label-selector "!!"`},
		{"bad name", NodeSelector{SingleNode: "Not_A_Name"}, `--manage-single-node "Not_A_Name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sel.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNodeSelectorMatches(t *testing.T) {
	node := func(name string, lbls, annotations map[string]string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls, Annotations: annotations}}
	}
	fake := map[string]string{"kwok.x-k8s.io/node": "fake"}
	kwok := map[string]string{"type": "kwok"}
	own := map[string]string{LabelSimulated: "true", "type": "kwok"}
	for _, tc := range []struct {
		name string
		sel  NodeSelector
		node *v1.Node
		want bool
	}{
		{"none selects nothing", NodeSelector{}, node("a", kwok, fake), false},
		{"all", NodeSelector{AllNodes: true}, node("a", nil, nil), true},
		{"all but the simulation's own", NodeSelector{AllNodes: true}, node("a", own, nil), false},
		{"annotation matches", NodeSelector{AnnotationSelector: "kwok.x-k8s.io/node=fake"}, node("a", nil, fake), true},
		{"annotation is not a label", NodeSelector{AnnotationSelector: "kwok.x-k8s.io/node=fake"}, node("a", fake, nil), false},
		{"label matches", NodeSelector{LabelSelector: "type=kwok"}, node("a", kwok, nil), true},
		{"label does not", NodeSelector{LabelSelector: "type=kwok"}, node("a", nil, fake), false},
		{"both must match", NodeSelector{LabelSelector: "type=kwok", AnnotationSelector: "kwok.x-k8s.io/node=fake"}, node("a", kwok, nil), false},
		{"both match", NodeSelector{LabelSelector: "type=kwok", AnnotationSelector: "kwok.x-k8s.io/node=fake"}, node("a", kwok, fake), true},
		{"own Node never", NodeSelector{LabelSelector: "type=kwok"}, node("a", own, nil), false},
		{"single", NodeSelector{SingleNode: "a"}, node("a", nil, nil), true},
		{"single, another", NodeSelector{SingleNode: "a"}, node("b", nil, nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sel.Matches(tc.node); got != tc.want {
				t.Errorf("Matches(%s labels %v annotations %v) = %v, want %v", tc.node.Name, tc.node.Labels, tc.node.Annotations, got, tc.want)
			}
		})
	}
}

func TestNodeSelectorTweakListOptions(t *testing.T) {
	for _, tc := range []struct {
		name                string
		sel                 NodeSelector
		wantLabel, wantName string
	}{
		{"all", NodeSelector{AllNodes: true}, LabelSimulated + "!=true", ""},
		{"label", NodeSelector{LabelSelector: "type=kwok"}, LabelSimulated + "!=true,type=kwok", ""},
		{"annotation only: every Node but the simulation's", NodeSelector{AnnotationSelector: "a=b"}, LabelSimulated + "!=true", ""},
		{"single", NodeSelector{SingleNode: "n1"}, "", "metadata.name=n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o metav1.ListOptions
			tc.sel.TweakListOptions(&o)
			if tc.wantLabel != "" {
				want, _ := labels.Parse(tc.wantLabel)
				if got, err := labels.Parse(o.LabelSelector); err != nil || got.String() != want.String() {
					t.Errorf("LabelSelector %q, want %q", o.LabelSelector, tc.wantLabel)
				}
			} else if o.LabelSelector != "" {
				t.Errorf("LabelSelector %q, want none", o.LabelSelector)
			}
			if o.FieldSelector != tc.wantName {
				t.Errorf("FieldSelector %q, want %q", o.FieldSelector, tc.wantName)
			}
		})
	}
}

// TestAdoptedShard: the shard of a name is FNV-1a 64 modulo the count (documented, so that every
// shard and a restarted one agree), and the names spread over the shards.
func TestAdoptedShard(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
		want  int
	}{
		{"anything", 1, 0},
		{"anything", 0, 0},
		// FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
		{"a", 7, int(uint64(0xaf63dc4c8601ec8c) % 7)},
		{"a", 1000, int(uint64(0xaf63dc4c8601ec8c) % 1000)},
	} {
		if got := AdoptedShard(tc.name, tc.count); got != tc.want {
			t.Errorf("AdoptedShard(%q, %d) = %d, want %d", tc.name, tc.count, got, tc.want)
		}
	}
	counts := make([]int, 4)
	for i := range 4000 {
		counts[AdoptedShard(NodeName("karpenter-", i), 4)]++
	}
	for shard, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("shard %d of 4 adopts %d of 4000 names, want about 1000 (counts %v)", shard, n, counts)
		}
	}
}

// TestKeepCreatorStatus: after the kubelet's setters filled an adopted Node's status from the
// template, what its creator set is back: capacity and allocatable entries (allocatable defaulting to
// the creator's capacity), and the addresses when any.
func TestKeepCreatorStatus(t *testing.T) {
	rl := func(kv ...string) v1.ResourceList {
		out := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	template := func() *v1.Node { // what the setters made of the template
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{
			Capacity:    rl("cpu", "4", "memory", "16Gi", "pods", "110"),
			Allocatable: rl("cpu", "4", "memory", "16Gi", "pods", "110"),
			Addresses:   []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "100.64.0.1"}, {Type: v1.NodeHostName, Address: "n"}},
		}}
	}
	for _, tc := range []struct {
		name            string
		creator         v1.NodeStatus
		wantCapacity    v1.ResourceList
		wantAllocatable v1.ResourceList
		wantAddresses   int
	}{
		{"nothing set: the template's", v1.NodeStatus{},
			rl("cpu", "4", "memory", "16Gi", "pods", "110"), rl("cpu", "4", "memory", "16Gi", "pods", "110"), 2},
		{"capacity only: allocatable is it", v1.NodeStatus{Capacity: rl("cpu", "2", "example.com/gpu", "1")},
			rl("cpu", "2", "memory", "16Gi", "pods", "110", "example.com/gpu", "1"), rl("cpu", "2", "memory", "16Gi", "pods", "110", "example.com/gpu", "1"), 2},
		{"both", v1.NodeStatus{Capacity: rl("cpu", "2", "pods", "20"), Allocatable: rl("cpu", "1900m", "pods", "20")},
			rl("cpu", "2", "memory", "16Gi", "pods", "20"), rl("cpu", "1900m", "memory", "16Gi", "pods", "20"), 2},
		{"addresses", v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}}},
			rl("cpu", "4", "memory", "16Gi", "pods", "110"), rl("cpu", "4", "memory", "16Gi", "pods", "110"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creator := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: tc.creator}
			get := func(name string) (*v1.Node, error) { return creator, nil }
			n := template()
			if err := keepCreatorStatus(get)(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			for what, lists := range map[string][2]v1.ResourceList{"capacity": {tc.wantCapacity, n.Status.Capacity}, "allocatable": {tc.wantAllocatable, n.Status.Allocatable}} {
				want, got := lists[0], lists[1]
				if len(got) != len(want) {
					t.Errorf("%s %v, want %v", what, got, want)
				}
				for r, q := range want {
					if g := got[r]; g.Cmp(q) != 0 {
						t.Errorf("%s %s = %s, want %s", what, r, g.String(), q.String())
					}
				}
			}
			if len(n.Status.Addresses) != tc.wantAddresses {
				t.Errorf("addresses %v, want %d", n.Status.Addresses, tc.wantAddresses)
			}
		})
	}
	t.Run("node gone", func(t *testing.T) {
		get := func(name string) (*v1.Node, error) { return nil, apierrors.NewNotFound(v1.Resource("nodes"), name) }
		if err := keepCreatorStatus(get)(context.Background(), template()); !apierrors.IsNotFound(err) {
			t.Errorf("error %v, want NotFound wrapped", err)
		}
	})
}

func TestAdoptedPort(t *testing.T) {
	for _, tc := range []struct {
		name               string
		first, nodes, slot int
		want               int
	}{
		{"adopt only: the first port", 10250, 0, 0, 10250},
		{"past the template Nodes", 10250, 100, 0, 10350},
		{"the k-th slot", 10250, 100, 7, 10357},
		{"the last port", 65000, 500, 35, 65535},
		{"past 65535: none", 65000, 500, 36, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &KubeletAPI{FirstPort: tc.first}
			if got := k.adoptedPort(tc.nodes, tc.slot); got != tc.want {
				t.Errorf("adoptedPort(%d, %d) with FirstPort %d = %d, want %d", tc.nodes, tc.slot, tc.first, got, tc.want)
			}
		})
	}
}

func TestAdoptedPodCIDR(t *testing.T) {
	cluster := netip.MustParsePrefix("10.128.0.0/9")
	for _, tc := range []struct {
		name                      string
		nodes, count, shard, slot int
		want                      string // "" for none
	}{
		{"adopt only: the first /21", 0, 1, 0, 0, "10.128.0.0/21"},
		{"past 100 template /24s (10.128.0-99)", 100, 1, 0, 0, "10.128.104.0/21"},
		{"the next slot", 100, 1, 0, 1, "10.128.112.0/21"},
		{"shard 2 of 3, slot 1: the (1×3+2)-th past 300 /24s", 100, 3, 2, 1, "10.129.88.0/21"},
		{"the last /21 of the /9", 0, 1, 0, 4095, "10.255.248.0/21"},
		{"past the /9: none", 0, 1, 0, 4096, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := adoptedPodCIDR(cluster, tc.nodes, tc.count, tc.shard, tc.slot)
			if tc.want == "" {
				if err == nil {
					t.Errorf("adoptedPodCIDR = %s, want an error", got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("adoptedPodCIDR = %s, %v, want %s", got, err, tc.want)
			}
		})
	}
}
