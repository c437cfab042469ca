package node

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// TestAllocationShared: pods whose informer copies share one read-only spec (pkg/simulation's pod
// cache shares the spec of a template's pods) share one allocation (about 100 bytes a pod otherwise,
// bench-pods' heap profile: allocationOf); pods with specs of their own, equal or not, get one each;
// each pod's allocation holds its own spec's resources, also past the table's bound.
func TestAllocationShared(t *testing.T) {
	template := testPod("t", "100m", nil)
	podOf := func(name string, spec v1.PodSpec) *v1.Pod {
		p := &v1.Pod{Spec: spec} // a shallow copy: the spec's slices are the template's
		p.Name, p.Namespace, p.UID = name, "default", types.UID("uid-"+name)
		return p
	}
	for _, tc := range []struct {
		name      string
		pods      []*v1.Pod
		wantSame  bool     // every pod holds one allocation
		wantCPUOf []string // the cpu request each pod's allocation holds
	}{
		{"one spec, 3 pods", []*v1.Pod{podOf("a", template.Spec), podOf("b", template.Spec), podOf("c", template.Spec)}, true,
			[]string{"100m", "100m", "100m"}},
		{"equal specs of their own", []*v1.Pod{testPod("a", "100m", nil), testPod("b", "100m", nil)}, false,
			[]string{"100m", "100m"}},
		{"different specs", []*v1.Pod{testPod("a", "100m", nil), testPod("b", "200m", nil)}, false,
			[]string{"100m", "200m"}},
		{"past the table's bound", func() []*v1.Pod {
			var ps []*v1.Pod
			for i := range maxSharedAllocations + 2 {
				ps = append(ps, testPod(fmt.Sprintf("p%d", i), fmt.Sprintf("%dm", i+1), nil))
			}
			return ps
		}(), false, func() []string {
			var cs []string
			for i := range maxSharedAllocations + 2 {
				cs = append(cs, fmt.Sprintf("%dm", i+1))
			}
			return cs
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r podResources
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, p := range tc.pods {
				r.countLocked(p.Namespace+"/"+p.Name, p)
			}
			first := r.byKey["default/"+tc.pods[0].Name].allocated
			for i, p := range tc.pods {
				a := r.byKey[p.Namespace+"/"+p.Name].allocated
				if i > 0 && (a == first) != tc.wantSame {
					t.Errorf("pod %s shares the first pod's allocation: %v, want %v", p.Name, a == first, tc.wantSame)
				}
				if got := a.containers[0].resources.Requests[v1.ResourceCPU]; got.Cmp(resource.MustParse(tc.wantCPUOf[i])) != 0 {
					t.Errorf("pod %s: allocated cpu %s, want %s", p.Name, got.String(), tc.wantCPUOf[i])
				}
				if !a.same(p) {
					t.Errorf("pod %s: its allocation is not its spec's resources", p.Name)
				}
			}
		})
	}
}
