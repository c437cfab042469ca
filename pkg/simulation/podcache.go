package simulation

import (
	"hash/maphash"
	"maps"
	"reflect"
	"slices"
	"sync"
	"unique"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// podCache is the pod informer's transform of a shard's own pods (trimPod): each pod is kept with
// every field but its managedFields (the kubelet's status generation, admission, the simulated
// runtime and sandbox, and the kubelet API's /pods read the spec and the status widely, and the
// status is the base of the status patch, so it must be the API's, field for field), and what pods
// hold alike is held once for all of them: the spec of pods made from one template (every field but
// spec.nodeName, shared when deeply equal), the labels, annotations and owner references, the
// conditions of pods that changed in the same second, the Node's IPs, and the strings that repeat
// (namespace, phase, images, reasons), and the status's pointers to values that repeat: the start
// times of pods started in the same second, the containers' running states and their resources. It keeps each pod as a node.CachedPod (the v1.Pod struct
// alone is 1280 bytes; the record 640, its spec a pointer to the shared one). A pod decoded from the
// watch is thus about 1.3 KiB in the cache, not 5.1 (BenchmarkPodCacheHeap).
//
// What is shared is read-only, as everything an informer holds (client-go's contract): a reader that
// changes a pod copies it first (DeepCopy), as pkg/pod and pkg/node do. Each table is bounded
// (maxShared values) and emptied when full: the values already shared stay with the pods that hold
// them, and new pods start sharing again. Strings are interned with the standard library's unique
// package, which holds each canonical string only while something refers to it.
type podCache struct {
	mu                sync.Mutex
	seed              maphash.Seed
	specs             sharedTable[*v1.PodSpec]
	maps              sharedTable[map[string]string]
	owners            sharedTable[[]metav1.OwnerReference]
	conds             sharedTable[[]v1.PodCondition]
	hostIPs           sharedTable[[]v1.HostIP]
	resources         sharedTable[*v1.ResourceRequirements]
	times             sharedTable[*metav1.Time]
	running           sharedTable[*v1.ContainerStateRunning]
	falsePtr, truePtr *bool
}

// maxShared bounds each table of shared values: beyond, the table is emptied.
const maxShared = 1024

func newPodCache() *podCache {
	f, t := false, true
	return &podCache{seed: maphash.MakeSeed(), falsePtr: &f, truePtr: &t}
}

// sharedTable holds values by a hash of their content, each compared by an equality when found.
type sharedTable[V any] struct {
	m map[uint64][]V
	n int
}

// get returns the value held equal to v (eq), else holds v and returns it.
func (t *sharedTable[V]) get(h uint64, v V, eq func(a, b V) bool) V {
	for _, c := range t.m[h] {
		if eq(c, v) {
			return c
		}
	}
	t.put(h, v)
	return v
}

// find returns the value held under h that is (eq), if any.
func (t *sharedTable[V]) find(h uint64, is func(held V) bool) (V, bool) {
	for _, c := range t.m[h] {
		if is(c) {
			return c, true
		}
	}
	var zero V
	return zero, false
}

// put holds v under h.
func (t *sharedTable[V]) put(h uint64, v V) {
	if t.m == nil || t.n >= maxShared {
		t.m, t.n = map[uint64][]V{}, 0
	}
	t.m[h] = append(t.m[h], v)
	t.n++
}

// compact returns the record the cache keeps of p, a pod just decoded (the transform's own, changed in
// place): a node.CachedPod sharing what it holds alike with the pods before it, the spec by pointer.
// Idempotent: the Pod of a record compacted again is unchanged.
func (c *podCache) compact(p *v1.Pod) *node.CachedPod {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.ManagedFields = nil
	p.Namespace = c.intern(p.Namespace)
	p.GenerateName = c.intern(p.GenerateName)
	p.Labels = c.stringMap(p.Labels)
	p.Annotations = c.stringMap(p.Annotations)
	p.OwnerReferences = c.ownerReferences(p.OwnerReferences)
	spec := c.spec(&p.Spec)
	c.status(&p.Status)
	return &node.CachedPod{ObjectMeta: p.ObjectMeta, Spec: spec, NodeName: c.intern(p.Spec.NodeName), Status: p.Status}
}

// intern returns the canonical string equal to s (unique.Make's).
func (c *podCache) intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func (c *podCache) stringMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	var h uint64
	for k, v := range m { // order-independent: the sum of each pair's hash
		var hh maphash.Hash
		hh.SetSeed(c.seed)
		hh.WriteString(k)
		hh.WriteByte(0)
		hh.WriteString(v)
		h += hh.Sum64()
	}
	return c.maps.get(h, m, maps.Equal[map[string]string])
}

func (c *podCache) ownerReferences(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return refs
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	for i := range refs {
		h.WriteString(string(refs[i].UID))
		h.WriteString(refs[i].Name)
	}
	return c.owners.get(h.Sum64(), refs, func(a, b []metav1.OwnerReference) bool { return slices.EqualFunc(a, b, ownerReferenceEqual) })
}

// ownerReferenceEqual is reflect.DeepEqual of two owner references, without its allocations.
func ownerReferenceEqual(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		boolPtrEqual(a.Controller, b.Controller) && boolPtrEqual(a.BlockOwnerDeletion, b.BlockOwnerDeletion)
}

func boolPtrEqual(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// spec returns the spec held deeply equal to s but for nodeName (pods made from one template), else
// holds a copy of s with nodeName empty and returns it; its strings interned. Read-only. s (the
// transform's own) is compared in place, its nodeName emptied for the comparison and restored: a spec
// found held, most pods' case, costs no copy (a v1.PodSpec is about 700 bytes).
func (c *podCache) spec(s *v1.PodSpec) *v1.PodSpec {
	nodeName := s.NodeName
	s.NodeName = ""
	defer func() { s.NodeName = nodeName }()
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, l := range [][]v1.Container{s.InitContainers, s.Containers} {
		for i := range l {
			h.WriteString(l[i].Name)
			h.WriteString(l[i].Image)
		}
		h.WriteByte(0)
	}
	h.WriteString(s.ServiceAccountName)
	h.WriteString(s.Hostname)
	h.WriteString(s.Subdomain)
	for i := range s.Volumes {
		h.WriteString(s.Volumes[i].Name)
	}
	if canon, ok := c.specs.find(h.Sum64(), func(held *v1.PodSpec) bool { return reflect.DeepEqual(held, s) }); ok {
		return canon
	}
	held := new(v1.PodSpec)
	*held = *s
	c.specs.put(h.Sum64(), held)
	// a new one: its strings interned
	for _, l := range [][]v1.Container{held.InitContainers, held.Containers} {
		for i := range l {
			l[i].Name, l[i].Image = c.intern(l[i].Name), c.intern(l[i].Image)
			l[i].TerminationMessagePath = c.intern(l[i].TerminationMessagePath)
			l[i].TerminationMessagePolicy = v1.TerminationMessagePolicy(c.intern(string(l[i].TerminationMessagePolicy)))
			l[i].ImagePullPolicy = v1.PullPolicy(c.intern(string(l[i].ImagePullPolicy)))
		}
	}
	held.SchedulerName = c.intern(held.SchedulerName)
	held.ServiceAccountName = c.intern(held.ServiceAccountName)
	held.DeprecatedServiceAccount = c.intern(held.DeprecatedServiceAccount)
	held.RestartPolicy = v1.RestartPolicy(c.intern(string(held.RestartPolicy)))
	held.DNSPolicy = v1.DNSPolicy(c.intern(string(held.DNSPolicy)))
	return held
}

// status interns the status's repeating strings and shares its conditions and host IPs.
func (c *podCache) status(s *v1.PodStatus) {
	s.Phase = v1.PodPhase(c.intern(string(s.Phase)))
	s.QOSClass = v1.PodQOSClass(c.intern(string(s.QOSClass)))
	s.HostIP = c.intern(s.HostIP)
	s.Reason = c.intern(s.Reason)
	if len(s.PodIPs) > 0 && s.PodIPs[0].IP == s.PodIP {
		s.PodIPs[0].IP = s.PodIP
	}
	if len(s.HostIPs) > 0 {
		var h maphash.Hash
		h.SetSeed(c.seed)
		for i := range s.HostIPs {
			h.WriteString(s.HostIPs[i].IP)
		}
		s.HostIPs = c.hostIPs.get(h.Sum64(), s.HostIPs, slices.Equal[[]v1.HostIP])
	}
	if len(s.Conditions) > 0 {
		var h maphash.Hash
		h.SetSeed(c.seed)
		for i := range s.Conditions {
			cd := &s.Conditions[i]
			h.WriteString(string(cd.Type))
			h.WriteString(string(cd.Status))
			maphash.WriteComparable(&h, cd.LastTransitionTime.Unix())
			maphash.WriteComparable(&h, cd.ObservedGeneration)
		}
		conds := c.conds.get(h.Sum64(), s.Conditions, slices.Equal[[]v1.PodCondition])
		if &conds[0] == &s.Conditions[0] { // a new one: its strings interned
			for i := range conds {
				cd := &conds[i]
				cd.Type = v1.PodConditionType(c.intern(string(cd.Type)))
				cd.Status = v1.ConditionStatus(c.intern(string(cd.Status)))
				cd.Reason, cd.Message = c.intern(cd.Reason), c.intern(cd.Message)
			}
		}
		s.Conditions = conds
	}
	if s.StartTime != nil {
		s.StartTime = c.time(s.StartTime)
	}
	for _, l := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range l {
			cs := &l[i]
			cs.Name, cs.Image, cs.ImageID = c.intern(cs.Name), c.intern(cs.Image), c.intern(cs.ImageID)
			if r := cs.State.Running; r != nil {
				cs.State.Running = c.running.get(uint64(r.StartedAt.UnixNano()), r, func(a, b *v1.ContainerStateRunning) bool { return *a == *b })
			}
			if cs.Resources != nil {
				cs.Resources = c.containerResources(cs.Resources)
			}
			if cs.Started != nil {
				cs.Started = c.boolPtr(*cs.Started)
			}
			if w := cs.State.Waiting; w != nil {
				w.Reason = c.intern(w.Reason)
			}
			if t := cs.State.Terminated; t != nil {
				t.Reason = c.intern(t.Reason)
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				t.Reason = c.intern(t.Reason)
			}
		}
	}
}

// time returns the time held equal to t (metav1.Time's own ==: the same instant and location), else
// holds t.
func (c *podCache) time(t *metav1.Time) *metav1.Time {
	return c.times.get(uint64(t.UnixNano()), t, func(a, b *metav1.Time) bool { return *a == *b })
}

// containerResources returns the resources held deeply equal to r (those of the containers of one
// template), else holds r.
func (c *podCache) containerResources(r *v1.ResourceRequirements) *v1.ResourceRequirements {
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, l := range []v1.ResourceList{r.Limits, r.Requests} {
		var sum uint64 // order-independent
		for name, q := range l {
			var hh maphash.Hash
			hh.SetSeed(c.seed)
			hh.WriteString(string(name))
			maphash.WriteComparable(&hh, q.MilliValue())
			sum += hh.Sum64()
		}
		maphash.WriteComparable(&h, sum)
	}
	maphash.WriteComparable(&h, len(r.Claims))
	return c.resources.get(h.Sum64(), r, func(a, b *v1.ResourceRequirements) bool { return reflect.DeepEqual(a, b) })
}

func (c *podCache) boolPtr(b bool) *bool {
	if b {
		return c.truePtr
	}
	return c.falsePtr
}

// otherNode returns what the cache keeps of p, a pod of a Node of another shard or a real Node: its
// name, namespace, UID and resourceVersion and its Node (node.PodOfOtherNode), namespace and Node
// interned.
func (c *podCache) otherNode(p *v1.Pod) *node.PodOfOtherNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &node.PodOfOtherNode{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: c.intern(p.Namespace), UID: p.UID, ResourceVersion: p.ResourceVersion},
		NodeName:   c.intern(p.Spec.NodeName),
	}
}
