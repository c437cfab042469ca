package node

import (
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/pod"
)

// The kubelet's resize Event reasons (pkg/kubelet/events).
const (
	ReasonResizeDeferred  = "ResizeDeferred"
	ReasonResizeStarted   = "ResizeStarted"
	ReasonResizeCompleted = "ResizeCompleted"
)

// resizeOutcome is what the allocation manager made of a pod's resources at one sync.
type resizeOutcome struct {
	// allocated is the pod with the resources allocated to it: p itself unless a resize is deferred.
	allocated *v1.Pod
	// started: a resize was admitted now; deferred: the predicate admission's message of a resize
	// that does not fit ("" when none is pending).
	started  bool
	deferred string
}

// resize is the kubelet's allocation manager (handlePodResourcesResize) for an admitted pod whose
// containers' resources may have changed in place: a change that fits beside the other pods' allocations
// is allocated (its part of the admission's usage changes); one that does not is Deferred with the
// predicate admission's message, the pod keeping its allocation; tried again at every sync.
func (r *podResources) resize(key string, node *v1.Node, p *v1.Pod) resizeOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.byKey[key]
	if h == nil || h.uid != p.UID || !h.counted {
		return resizeOutcome{allocated: p}
	}
	if h.allocated.same(p) { // counted: allocated is set (countLocked)
		return resizeOutcome{allocated: p}
	}
	if node == nil {
		return resizeOutcome{allocated: withResources(p, h.allocated), deferred: "the Node is not known"}
	}
	r.usage.Remove(h.usage)
	res := pod.AdmitWith(node, p, &r.usage)
	if res.Admit {
		h.usage, h.allocated = r.usage.Add(p), r.allocationOf(p)
		return resizeOutcome{allocated: p, started: true}
	}
	kept := withResources(p, h.allocated)
	h.usage = r.usage.Add(kept)
	return resizeOutcome{allocated: kept, deferred: res.Message}
}

// allocatedResources are the resources allocated to a pod (the allocation manager's checkpoint): its
// spec.resources and its init containers' then its containers' resources, the pod's own values
// (read-only, shared with the informer's pod, not copied). About a hundred bytes for a pod of one
// container (its layout: 48 and 64), where a v1.Pod is 1280: a Node's pods hold them for as long as
// they run.
type allocatedResources struct {
	pod        *v1.ResourceRequirements
	containers []containerResources
	inits      int // how many of containers are init containers
}

// containerResources are one container's resources, by its name.
type containerResources struct {
	name      string
	resources v1.ResourceRequirements
}

// specKey names the spec an allocation was made of by what it refers to: the arrays of its
// containers and init containers and its pod-level resources. Pods whose informer copies share one
// read-only spec (pkg/simulation's cache shares the spec of the pods of one template) have one key.
type specKey struct {
	containers, inits *v1.Container
	nc, ni            int
	pod               *v1.ResourceRequirements
}

func specKeyOf(s *v1.PodSpec) specKey {
	k := specKey{nc: len(s.Containers), ni: len(s.InitContainers), pod: s.Resources}
	if k.nc > 0 {
		k.containers = &s.Containers[0]
	}
	if k.ni > 0 {
		k.inits = &s.InitContainers[0]
	}
	return k
}

// maxSharedAllocations bounds podResources.allocations: beyond, the table is emptied (the
// allocations already shared stay with the pods that hold them).
const maxSharedAllocations = 64

// allocationOf returns p's resources as allocated: the allocation made for an earlier pod of the
// same spec (specKey: the informer's pods share it, read-only, and so do their allocations, which
// are read-only too), else a new one (allocationOf), kept for the next. mu held.
func (r *podResources) allocationOf(p *v1.Pod) *allocatedResources {
	k := specKeyOf(&p.Spec)
	if a := r.allocations[k]; a != nil {
		return a
	}
	if r.allocations == nil || len(r.allocations) >= maxSharedAllocations {
		r.allocations = make(map[specKey]*allocatedResources, maxSharedAllocations)
	}
	a := allocationOf(p)
	r.allocations[k] = a
	return a
}

// allocationOf returns p's resources as allocated.
func allocationOf(p *v1.Pod) *allocatedResources {
	a := &allocatedResources{pod: p.Spec.Resources, inits: len(p.Spec.InitContainers),
		containers: make([]containerResources, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))}
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			a.containers = append(a.containers, containerResources{name: l[i].Name, resources: l[i].Resources})
		}
	}
	return a
}

// same reports whether p asks the resources a holds, of every container and of the pod.
func (a *allocatedResources) same(p *v1.Pod) bool {
	if !apiequality.Semantic.DeepEqual(a.pod, p.Spec.Resources) ||
		a.inits != len(p.Spec.InitContainers) || len(a.containers)-a.inits != len(p.Spec.Containers) {
		return false
	}
	for i := range p.Spec.InitContainers {
		if !apiequality.Semantic.DeepEqual(a.containers[i].resources, p.Spec.InitContainers[i].Resources) {
			return false
		}
	}
	for i := range p.Spec.Containers {
		if !apiequality.Semantic.DeepEqual(a.containers[a.inits+i].resources, p.Spec.Containers[i].Resources) {
			return false
		}
	}
	return true
}

// withResources returns a copy of p with the resources of allocated (the allocation manager's
// UpdatePodFromAllocation).
func withResources(p *v1.Pod, allocated *allocatedResources) *v1.Pod {
	out := p.DeepCopy()
	out.Spec.Resources = allocated.pod.DeepCopy()
	byName := make(map[string]v1.ResourceRequirements, len(allocated.containers))
	for _, c := range allocated.containers {
		byName[c.name] = c.resources
	}
	for _, l := range [][]v1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range l {
			if r, ok := byName[l[i].Name]; ok {
				l[i].Resources = *r.DeepCopy()
			}
		}
	}
	return out
}

// resizeMessage is the kubelet's podResizeMessage (events/resize.go): prefix, then the spec's resources
// as JSON, with the generation and the error.
func resizeMessage(p *v1.Pod, prefix, errMsg string) string {
	type containerAllocation struct {
		Name      string                  `json:"name"`
		Resources v1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		InitContainers []containerAllocation `json:"initContainers,omitempty"`
		Containers     []containerAllocation `json:"containers,omitempty"`
		Generation     int64                 `json:"generation"`
		Error          string                `json:"error,omitempty"`
	}{Generation: p.Generation, Error: errMsg}
	for _, c := range p.Spec.InitContainers {
		summary.InitContainers = append(summary.InitContainers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range p.Spec.Containers {
		summary.Containers = append(summary.Containers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return prefix
	}
	return fmt.Sprintf("%s: %s", prefix, b)
}

// setResizePending sets the PodResizePending condition of a deferred resize on status (Deferred, the
// message, the pod's generation), keeping its transition time when it is unchanged in p's status, where
// generateAPIPodStatus (kubelet_pods.go) puts the status manager's resize conditions: after the conditions
// of other writers, before the kubelet's own (PodReadyToStartContainers, Initialized, Ready, ...). Its
// lastProbeTime is when it was deferred: the kubelet's status manager (updatedPodResizeCondition) sets it
// at each retry of the allocation manager (every 3 min, and when pods come and go), where this one keeps
// it, so that the retries every PodSyncBackOff write nothing new.
func setResizePending(p *v1.Pod, status *v1.PodStatus, message string, now metav1.Time) {
	cond := v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred,
		Message: message, ObservedGeneration: p.Generation, LastTransitionTime: now, LastProbeTime: now}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodResizePending && c.Status == cond.Status && c.Reason == cond.Reason {
			cond.LastTransitionTime = c.LastTransitionTime
			if !c.LastProbeTime.IsZero() {
				cond.LastProbeTime = c.LastProbeTime
			}
		}
	}
	conds := make([]v1.PodCondition, 0, len(status.Conditions)+1)
	at := -1
	for _, c := range status.Conditions {
		switch c.Type {
		case v1.PodResizePending:
			continue
		case v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled:
			if at < 0 {
				at = len(conds)
			}
		}
		conds = append(conds, c)
	}
	if at < 0 {
		at = len(conds)
	}
	status.Conditions = slices.Insert(conds, at, cond)
}

// resizePod runs the allocation manager on a running pod (podResources.resize) and tells what it did
// in the kubelet's Events: ResizeStarted then ResizeCompleted for a resize admitted (the provider is told
// at once, UpdatePod), a Warning ResizeDeferred once per generation for one deferred. It returns the pod
// with its allocated resources (p itself unless a resize is deferred), and whether the allocation changed.
func (w *podWorkers) resizePod(key string, p *v1.Pod, st *podSyncStatus) (*v1.Pod, bool) {
	node, _ := w.node.deps.NodeLister.Get(w.node.cfg.NodeName)
	out := w.resources.resize(key, node, p)
	st.resizePending = out.deferred
	switch {
	case out.started:
		w.node.deps.Recorder.Event(p, v1.EventTypeNormal, ReasonResizeStarted, resizeMessage(p, "Pod resize started", ""))
		w.node.deps.Recorder.Event(p, v1.EventTypeNormal, ReasonResizeCompleted, resizeMessage(p, "Pod resize completed", ""))
	case out.deferred != "" && st.resizeToldGen != p.Generation:
		st.resizeToldGen = p.Generation
		w.node.deps.Recorder.Event(p, v1.EventTypeWarning, ReasonResizeDeferred, resizeMessage(p, "Pod resize "+v1.PodReasonDeferred, out.deferred))
	}
	return out.allocated, out.started
}
