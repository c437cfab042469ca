package simulation

import (
	"encoding/json"
	"os"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/apiequal/apiequaltest"
	"github.com/nodeagent/nodeagent/pkg/node"
)

// TestPodCacheKeepsEveryField: a pod through the cache's transform is its decoded self, field for
// field (reflect.DeepEqual, not only semantically: the status is the status patch's base, the spec what
// admission, the status generation, the simulated runtime and the kubelet API read), but for its
// managedFields; on random pods (apiequaltest.Pairs: values drawn from small sets, so that pods share
// much and differ in a field or two), all through one cache. Every pod is checked again at the end:
// a value shared with a pod compacted later must not have changed under it.
func TestPodCacheKeepsEveryField(t *testing.T) {
	c := newPodCache()
	type kept struct{ got, want *v1.Pod }
	var all []kept
	apiequaltest.Pairs[v1.Pod](1500, 3, func(i int, a, b *v1.Pod) bool {
		for _, p := range []*v1.Pod{a, b} {
			want := p.DeepCopy()
			want.ManagedFields = nil
			want.TypeMeta = metav1.TypeMeta{} // an informer's pods have none (client-go's decoder clears it)
			got := c.compact(p).Pod()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d: compact changed the pod\ngot  %#v\nwant %#v", i, got, want)
			}
			if again := c.compact(got.DeepCopy()).Pod(); !reflect.DeepEqual(again, want) {
				t.Fatalf("case %d: compact is not idempotent\ngot  %#v\nwant %#v", i, again, want)
			}
			all = append(all, kept{got, want})
		}
		return true
	})
	for i, k := range all {
		if !reflect.DeepEqual(k.got, k.want) {
			t.Fatalf("pod %d changed after later pods were compacted\ngot  %#v\nwant %#v", i, k.got, k.want)
		}
	}
}

// TestPodCacheShares: what pods hold alike is held once (the spec of one template on any Node, the
// labels, the owner, the conditions set in the same second, the Node's IPs), what differs is each
// pod's own.
func TestPodCacheShares(t *testing.T) {
	base := fixturePod(t)
	other := func(change func(p *v1.Pod)) func(p *v1.Pod) { return change }
	for _, tc := range []struct {
		name   string
		change func(p *v1.Pod) // applied to the second pod
		// want: whether the second pod shares each value with the first
		spec, labels, owners, conds, hostIPs bool
		// times: the start time and the container's running state; resources: the container's
		// (pointers that the first pod's record would otherwise hold apart from the second's)
		times, resources bool
	}{
		{"same template, another Node", other(func(p *v1.Pod) { p.Spec.NodeName = "sim-node-0002" }),
			true, true, true, true, true, true, true},
		{"another image", other(func(p *v1.Pod) { p.Spec.Containers[0].Image = "registry.example/app:2" }),
			false, true, true, true, true, true, true},
		{"another grace period", other(func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = new(int64) }),
			false, true, true, true, true, true, true},
		{"another template hash", other(func(p *v1.Pod) { p.Labels["pod-template-hash"] = "abc" }),
			true, false, true, true, true, true, true},
		{"Ready a second later", other(func(p *v1.Pod) {
			p.Status.Conditions[2].LastTransitionTime = metav1.NewTime(p.Status.Conditions[2].LastTransitionTime.Add(time.Second))
		}), true, true, true, false, true, true, true},
		{"not Ready", other(func(p *v1.Pod) { p.Status.Conditions[2].Status = v1.ConditionFalse }),
			true, true, true, false, true, true, true},
		{"another host IP", other(func(p *v1.Pod) { p.Status.HostIPs = []v1.HostIP{{IP: "10.0.0.2"}} }),
			true, true, true, true, false, true, true},
		{"started a second later", other(func(p *v1.Pod) {
			start := metav1.NewTime(p.Status.StartTime.Add(time.Second))
			p.Status.StartTime = &start
			p.Status.ContainerStatuses[0].State.Running = &v1.ContainerStateRunning{StartedAt: start}
		}), true, true, true, true, true, false, true},
		{"another container's resources", other(func(p *v1.Pod) {
			p.Status.ContainerStatuses[0].Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
		}), true, true, true, true, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPodCache()
			ra := c.compact(base.DeepCopy())
			a := ra.Pod()
			second := base.DeepCopy()
			second.Name, second.UID = "second", "uid-second"
			tc.change(second)
			want := second.DeepCopy()
			want.ManagedFields = nil
			rb := c.compact(second)
			b := rb.Pod()
			if !reflect.DeepEqual(b, want) {
				t.Fatalf("compact changed the pod\ngot  %#v\nwant %#v", b, want)
			}
			for _, s := range []struct {
				what       string
				got, wantS bool
			}{
				{"spec", ra.Spec == rb.Spec, tc.spec},
				{"spec.containers", &a.Spec.Containers[0] == &b.Spec.Containers[0], tc.spec},
				{"spec.tolerations", &a.Spec.Tolerations[0] == &b.Spec.Tolerations[0], tc.spec},
				{"labels", reflect.ValueOf(a.Labels).UnsafePointer() == reflect.ValueOf(b.Labels).UnsafePointer(), tc.labels},
				{"ownerReferences", &a.OwnerReferences[0] == &b.OwnerReferences[0], tc.owners},
				{"status.conditions", &a.Status.Conditions[0] == &b.Status.Conditions[0], tc.conds},
				{"status.hostIPs", &a.Status.HostIPs[0] == &b.Status.HostIPs[0], tc.hostIPs},
				{"status.startTime", a.Status.StartTime == b.Status.StartTime, tc.times},
				{"status.containerStatuses[0].state.running", a.Status.ContainerStatuses[0].State.Running == b.Status.ContainerStatuses[0].State.Running, tc.times},
				{"status.containerStatuses[0].resources", a.Status.ContainerStatuses[0].Resources == b.Status.ContainerStatuses[0].Resources, tc.resources},
			} {
				if s.got != s.wantS {
					t.Errorf("%s shared: %v, want %v", s.what, s.got, s.wantS)
				}
			}
			if a.Spec.NodeName != base.Spec.NodeName || a.Name != base.Name {
				t.Errorf("the first pod's own fields changed: node %q, name %q", a.Spec.NodeName, a.Name)
			}
		})
	}
}

// TestPodCacheBounded: the tables of shared values stay within their bound whatever the pods (each
// with labels and images of its own); interned strings are unique's, held while a pod refers to them.
func TestPodCacheBounded(t *testing.T) {
	c := newPodCache()
	base := fixturePod(t)
	for i := range 3 * maxShared {
		p := base.DeepCopy()
		p.Labels = map[string]string{"i": NodeName("", i)}
		p.Spec.Containers[0].Image = NodeName("image-", i)
		c.compact(p)
		if c.maps.n > maxShared || c.specs.n > maxShared {
			t.Fatalf("after %d pods: %d maps, %d specs held; bound %d", i+1, c.maps.n, c.specs.n, maxShared)
		}
	}
}

// fixturePod is testdata/deployment-pod.json: a running pod of a Deployment as the API server returns it.
func fixturePod(t testing.TB) *v1.Pod {
	t.Helper()
	data, err := os.ReadFile("testdata/deployment-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	var p v1.Pod
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	p.TypeMeta = metav1.TypeMeta{} // as an informer holds it: client-go's decoder clears it
	return &p
}

// TestTrimPod: the pod informer's transform keeps a pod of the shard's Nodes whole but its
// managedFields (a node.CachedPod), and of a pod of any other Node (another shard's, a real Node's) only what
// node.PodOfOtherNode holds; through node.IndexedPodLister, the latter is a pod with its name,
// namespace, UID, resourceVersion and Node, and is on no Node's list.
func TestTrimPod(t *testing.T) {
	transform := trimPod("sim-node-", Shard{Index: 1, Count: 2}, 1000, false) // the shard of Nodes 1000-1999
	for _, tc := range []struct {
		name, node string
		own        bool
	}{
		{"the shard's first Node", "sim-node-1000", true},
		{"the shard's last Node", "sim-node-1999", true},
		{"another shard's Node", "sim-node-0999", false},
		{"a Node past the shards", "sim-node-2000", false},
		{"a real Node", "worker-1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fixturePod(t)
			p.Spec.NodeName = tc.node
			want := p.DeepCopy()
			obj, err := transform(p)
			if err != nil {
				t.Fatal(err)
			}
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, node.PodIndexers())
			if err := indexer.Add(obj); err != nil {
				t.Fatal(err)
			}
			lister := node.IndexedPodLister{Indexer: indexer}
			got, err := lister.Get(want.Namespace, want.Name)
			if err != nil {
				t.Fatal(err)
			}
			onNode, err := lister.OnNode(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			if tc.own {
				if _, ok := obj.(*node.CachedPod); !ok {
					t.Errorf("own pod kept as %T, want *node.CachedPod", obj)
				}
				want.ManagedFields = nil
				if !reflect.DeepEqual(got, want) || len(onNode) != 1 {
					t.Errorf("own pod: got %#v, %d on its Node; want it whole but its managedFields, on its Node", got, len(onNode))
				}
				return
			}
			if _, ok := obj.(*node.PodOfOtherNode); !ok {
				t.Errorf("another Node's pod kept as %T, want *node.PodOfOtherNode", obj)
			}
			trimmed := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace, UID: want.UID,
				ResourceVersion: want.ResourceVersion}, Spec: v1.PodSpec{NodeName: tc.node}}
			if !reflect.DeepEqual(got, trimmed) || len(onNode) != 0 {
				t.Errorf("another Node's pod: got %#v, %d on its Node; want %#v, on no Node's list", got, len(onNode), trimmed)
			}
		})
	}
}

// TestPodCacheCompactAllocs: a pod whose spec, labels, owners, conditions, times and resources are
// held already (the next event of a pod, or another pod of the template) costs the cache its record
// and what reflect.DeepEqual allocates to compare its spec (its visited set, about 800 bytes for the
// fixture's): no copy of its spec (a v1.PodSpec, about 700 bytes, was copied at every event to be
// compared), no boxing of its owners, whatever the spec's nodeName, which the pod keeps.
func TestPodCacheCompactAllocs(t *testing.T) {
	record := int(unsafe.Sizeof(node.CachedPod{}))
	for _, tc := range []struct {
		name     string
		nodeName string
	}{{"the first pod's Node", ""}, {"another Node", "sim-node-0002"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPodCache()
			base := fixturePod(t)
			c.compact(base.DeepCopy())
			const runs = 200
			pods := make([]*v1.Pod, runs)
			for i := range pods {
				pods[i] = base.DeepCopy()
				if tc.nodeName != "" {
					pods[i].Spec.NodeName = tc.nodeName
				}
			}
			want := pods[0].Spec.NodeName
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var last *node.CachedPod
			for _, p := range pods {
				last = c.compact(p)
			}
			runtime.ReadMemStats(&after)
			perPod := int(after.TotalAlloc-before.TotalAlloc) / runs
			allocs := float64(after.Mallocs-before.Mallocs) / runs
			if perPod > record+1024 || allocs > 5 {
				t.Errorf("compact of a pod whose values are held: %d B in %.1f allocations, want at most %d B (its %d B record and reflect.DeepEqual's 1 KiB) in 5",
					perPod, allocs, record+1024, record)
			}
			if last.NodeName != want || last.Spec.NodeName != "" || pods[runs-1].Spec.NodeName != want {
				t.Errorf("nodeName: the record's %q, its spec's %q, the pod's after %q; want %q, \"\", %q",
					last.NodeName, last.Spec.NodeName, pods[runs-1].Spec.NodeName, want, want)
			}
		})
	}
}

// TestOwnerReferenceEqual: ownerReferenceEqual is reflect.DeepEqual on owner references (random
// pairs that differ in a field or two), and knows each of OwnerReference's fields.
func TestOwnerReferenceEqual(t *testing.T) {
	if n := reflect.TypeFor[metav1.OwnerReference]().NumField(); n != 6 {
		t.Fatalf("metav1.OwnerReference has %d fields, ownerReferenceEqual compares 6: compare the new ones", n)
	}
	apiequaltest.Pairs[metav1.OwnerReference](2000, 2, func(i int, a, b *metav1.OwnerReference) bool {
		if got, want := ownerReferenceEqual(*a, *b), reflect.DeepEqual(*a, *b); got != want {
			t.Fatalf("case %d: ownerReferenceEqual %v, reflect.DeepEqual %v\na %#v\nb %#v", i, got, want, *a, *b)
		}
		return true
	})
}
