package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/pod"
)

// PodProvider runs the containers of the pods bound to one Node: Virtual Kubelet's
// PodLifecycleHandler (node/podcontroller.go) without its status half, which nodeagent does itself
// as the kubelet does (admission, pod status, the status writes, deletion). The simulator's pods are
// one provider; a library user implements it over whatever runs its pods. Each method must honour
// ctx (a pod step is bounded by the Queue's StepTimeout) and be safe for concurrent use; the pods of
// one Node are worked on by several workers at once, one pod by one at a time. The pods it is given
// are read-only: the pod informer's copies, or shallow copies of them (copy one before changing it).
type PodProvider interface {
	// CreatePod starts the containers of an admitted pod; pod.Status.PodIPs are the addresses
	// nodeagent gave it. Called once per pod UID (again only after a process restart, for a pod not
	// terminal). An error is retried with the queue's backoff.
	CreatePod(ctx context.Context, pod *v1.Pod) error
	// UpdatePod is told of a change of a created pod: of its spec (metadata.generation grew), or of
	// its annotations (where a provider may read per-pod settings, as the simulator reads its
	// pods' behaviour). Virtual Kubelet's is called on any change but the status.
	UpdatePod(ctx context.Context, pod *v1.Pod) error
	// DeletePod is called once the pod has a deletionTimestamp: stop its containers within the grace
	// period (pod.DeletionGracePeriodSeconds); its runtime status must show them terminated once they
	// have stopped. It is called again once the pod has left the API server, to forget it (a pod
	// removed without a deletionTimestamp seen gets only that call).
	DeletePod(ctx context.Context, pod *v1.Pod) error
	// GetPodStatus returns what the runtime says of the pod's containers now (pkg/pod.RuntimeStatus;
	// PodIPs, HostIPs and RuntimeName may be left empty: nodeagent fills them in), and when it should
	// be asked again (RecheckAfter, 0: only when told through Controller.NotifyPod, or at the
	// periodic reconcile).
	GetPodStatus(ctx context.Context, pod *v1.Pod) (PodRuntimeStatus, error)
	// GetPods returns the pods the provider runs, at least their namespace, name, UID and
	// spec.nodeName (Virtual Kubelet's GetPods). When a Node starts, the pods of that Node it returns
	// that the API server no longer has (by namespace, name and UID), e.g. deleted while the process was
	// down, get DeletePod as pods that left the API, without a deletionTimestamp (Virtual Kubelet's
	// deleteDanglingPods). An error is retried with the queue's backoff.
	GetPods(ctx context.Context) ([]*v1.Pod, error)
}

// PodRuntimeStatus is a PodProvider's answer for one pod.
type PodRuntimeStatus struct {
	Status *pod.RuntimeStatus
	// RecheckAfter is when the status changes next as far as the provider knows (a simulated
	// container starting, turning ready, exiting); 0 for no known time.
	RecheckAfter time.Duration
}

// PodLister is what a Controller reads of the process's pod informer: the pods bound to its Node.
// IndexedPodLister implements it over an informer with PodIndexers.
type PodLister interface {
	// Get returns a pod by namespace and name (a NotFound error when absent); read-only.
	Get(namespace, name string) (*v1.Pod, error)
	// OnNode returns the pods whose spec.nodeName is nodeName; read-only.
	OnNode(nodeName string) ([]*v1.Pod, error)
}

// PodNodeNameIndex is the pod informer's index by spec.nodeName (PodIndexers).
const PodNodeNameIndex = "spec.nodeName"

// PodIndexers are the indexers the process's pod informer needs: by spec.nodeName (of a *v1.Pod or a
// *CachedPod; a PodOfOtherNode is not indexed).
func PodIndexers() cache.Indexers {
	return cache.Indexers{PodNodeNameIndex: func(obj any) ([]string, error) {
		var nodeName string
		switch p := obj.(type) {
		case *v1.Pod:
			nodeName = p.Spec.NodeName
		case *CachedPod:
			nodeName = p.NodeName
		}
		if nodeName == "" {
			return nil, nil
		}
		return []string{nodeName}, nil
	}}
}

// IndexedPodLister is a PodLister over an informer's indexer with PodIndexers.
type IndexedPodLister struct{ Indexer cache.Indexer }

// Get implements PodLister. A CachedPod is returned as its Pod (a new v1.Pod each call); a
// PodOfOtherNode as a pod with its fields only.
func (l IndexedPodLister) Get(namespace, name string) (*v1.Pod, error) {
	obj, ok, err := l.Indexer.GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
	}
	switch p := obj.(type) {
	case *v1.Pod:
		return p, nil
	case *CachedPod:
		return p.Pod(), nil
	case *PodOfOtherNode:
		return &v1.Pod{ObjectMeta: p.ObjectMeta, Spec: v1.PodSpec{NodeName: p.NodeName}}, nil
	}
	return nil, fmt.Errorf("pod %s/%s: the informer holds a %T", namespace, name, obj)
}

// CachedPod is what a pod informer's transform may keep, instead of the *v1.Pod the watch decoded, of a
// pod bound to a Node the process runs (as the simulator keeps its shard's pods): every field of the pod
// but its TypeMeta (empty in an informer's pods) and spec.nodeName, which is NodeName here, with the
// spec held by pointer, so that the pods made from one template can share one read-only spec. It is 640
// bytes, half of a v1.Pod struct (1280), which is the floor of a cache of *v1.Pod. IndexedPodLister
// gives it as a v1.Pod (Pod), PodIndexers indexes it by NodeName, and the Controllers' event handlers
// read it as they read a pod. Read-only, as everything an informer holds.
type CachedPod struct {
	metav1.ObjectMeta
	// Spec is the pod's spec with NodeName empty; never nil, read-only, maybe shared with other pods.
	Spec *v1.PodSpec
	// NodeName is the pod's spec.nodeName.
	NodeName string
	Status   v1.PodStatus
}

// Pod returns the pod r keeps, as the informer would have held it: a new v1.Pod whose ObjectMeta and
// Status are r's, and whose spec is a copy of r.Spec with r.NodeName; what they refer to (slices, maps,
// pointers) is r's, read-only (DeepCopy it to change it).
func (r *CachedPod) Pod() *v1.Pod {
	p := &v1.Pod{ObjectMeta: r.ObjectMeta, Spec: *r.Spec, Status: r.Status}
	p.Spec.NodeName = r.NodeName
	return p
}

// toPod returns an informer's object of a pod bound to a Node the process runs (a *v1.Pod or a
// *CachedPod, PodIndexers' two kinds) as a pod: itself, or the CachedPod's Pod; nil for anything else.
func toPod(o metav1.Object) *v1.Pod {
	switch p := o.(type) {
	case *v1.Pod:
		return p
	case *CachedPod:
		return p.Pod()
	}
	return nil
}

// podMeta returns a pod informer's object (a deletion's DeletedFinalStateUnknown unwrapped) and its
// spec.nodeName: of a *v1.Pod or a *CachedPod; ok false for any other (a PodOfOtherNode included: the
// Controllers ignore it).
func podMeta(obj any) (po metav1.Object, nodeName string, ok bool) {
	if d, isD := obj.(cache.DeletedFinalStateUnknown); isD {
		obj = d.Obj
	}
	switch p := obj.(type) {
	case *v1.Pod:
		return p, p.Spec.NodeName, true
	case *CachedPod:
		return p, p.NodeName, true
	}
	return nil, "", false
}

// PodOfOtherNode is what a pod informer's transform may keep, instead of the pod, of a pod bound to a
// Node the process does not run (as the simulator's shards keep the other shards' pods): its name,
// namespace, UID and resourceVersion (ObjectMeta, nothing else set) and its spec.nodeName, about a
// third of the smallest v1.Pod. IndexedPodLister.Get gives it as a v1.Pod with these fields only;
// PodIndexers does not index it and the Controllers' event handlers ignore it.
type PodOfOtherNode struct {
	metav1.ObjectMeta
	NodeName string
}

// OnNode implements PodLister; a CachedPod is given as its Pod (a new v1.Pod each call).
func (l IndexedPodLister) OnNode(nodeName string) ([]*v1.Pod, error) {
	objs, err := l.Indexer.ByIndex(PodNodeNameIndex, nodeName)
	if err != nil {
		return nil, err
	}
	pods := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		switch p := o.(type) {
		case *v1.Pod:
			pods = append(pods, p)
		case *CachedPod:
			pods = append(pods, p.Pod())
		}
	}
	return pods, nil
}

// PodReconcilePeriod is how often a pod's status is computed again when nothing told of a change: a
// net under the informer's events (a change by another writer queues the pod at once) and the
// provider's RecheckAfter.
const PodReconcilePeriod = time.Minute

// podRuntimeName is the scheme of the container IDs of pods whose provider names none.
const podRuntimeName = "containerd"

// podKey is a pod work queue item: one pod of one Node's controller.
type podKey struct {
	c   *Controller
	key string // namespace/name
}

// NotifyPod queues the pod namespace/name of this Node for a status computation now: the provider's
// PodNotifier (Virtual Kubelet's NotifyPods), e.g. when a container exited.
func (c *Controller) NotifyPod(namespace, name string) { c.addPod(namespace + "/" + name) }

// addPod queues a pod of this Node, unless the Node runs no pods, is not started or is stopped.
func (c *Controller) addPod(key string) {
	if c.pods == nil {
		return
	}
	c.mu.Lock()
	s, stopped := c.queue, c.stopped
	c.mu.Unlock()
	if s != nil && !stopped {
		s.pods.Add(podKey{c, key})
	}
}

// podEvent is what the pod informer told of a pod: added, changed or deleted.
type podEvent int

const (
	podAdded podEvent = iota
	podChanged
	podDeleted
)

// podUpdated is the informer's news ev of pod p of this Node (a *v1.Pod or a *CachedPod): the
// kubelet's UpdatePod. A deletion timestamp cancels the SyncPod in flight; a deletion event leaves the
// pod's last copy for DeletePod (podWorkers.deleted); the pod is queued, unless the event is a change
// that is only this process's last status write of it (podWorkers.ownWrite).
func (c *Controller) podUpdated(p metav1.Object, ev podEvent) {
	if c.pods == nil {
		return
	}
	key := p.GetNamespace() + "/" + p.GetName()
	if c.onlyOwnWrite(key, p, ev == podChanged) {
		return
	}
	if ev == podDeleted {
		c.pods.deleted(key, p.GetUID(), p)
	}
	if p.GetDeletionTimestamp() != nil {
		c.pods.terminationArrived(key)
	}
	c.addPod(key)
}

// onlyOwnWrite reports whether the informer's news of pod key, p, is an update that is only this
// process's last status write of it (podWorkers.ownWrite): no deletion timestamp, its resourceVersion
// the write's.
func (c *Controller) onlyOwnWrite(key string, p metav1.Object, update bool) bool {
	if !update || p.GetDeletionTimestamp() != nil {
		return false
	}
	rv, ok := parseRV(p.GetResourceVersion())
	return ok && c.pods.ownWrite(key, p.GetUID(), rv)
}

// PodCounts returns how many pods the Node's pod workers know (bound to it and not yet forgotten) and
// how many pod IPs are given out and not yet back (a pod's go back once it is terminal or gone).
func (c *Controller) PodCounts() (pods, ips int) {
	if c.pods == nil {
		return 0, 0
	}
	return c.pods.len(), c.pods.resources.allocatedIPs()
}

// PodEventHandler returns a handler for a pod informer (with PodIndexers) that queues this Node's pods:
// what a library program with one Node adds to its informer. A process with many Nodes on one Queue
// uses Queue.PodEventHandler instead. It is the Queue's router (podRouter) with this one Node.
func (c *Controller) PodEventHandler() cache.ResourceEventHandler {
	r := &podRouter{}
	r.add(c)
	return r.handler()
}

// queueAllPods queues every pod bound to the Node (once registered: pods bound before the controller
// started, or while it was stopped).
func (c *Controller) queueAllPods() {
	if c.pods == nil {
		return
	}
	pods, err := c.deps.Pods.OnNode(c.cfg.NodeName)
	if err != nil {
		return
	}
	for _, p := range pods {
		c.addPod(p.Namespace + "/" + p.Name)
	}
	c.addPod(danglingPodsKey)
}

// danglingPodsKey is the pod work queue's item of a Node's cleanup of the pods its provider runs that
// the API server no longer has (deleteDanglingPods).
const danglingPodsKey = "dangling-pods"

// deleteDanglingPods is Virtual Kubelet's deleteDanglingPods for this Node: the provider's pods bound to
// it (GetPods) that the API server no longer has, or has under another UID, and that no pod worker
// knows, are told to the provider as pods that left the API (DeletePod without a deletionTimestamp).
func (w *podWorkers) deleteDanglingPods(ctx context.Context) result {
	pods, err := w.node.cfg.Pods.GetPods(ctx)
	if err != nil {
		return result{after: never, err: fmt.Errorf("listing the provider's pods: %w", err)}
	}
	for _, p := range pods {
		if p.Spec.NodeName != w.node.cfg.NodeName {
			continue
		}
		key := p.Namespace + "/" + p.Name
		if cur, err := w.node.deps.Pods.Get(p.Namespace, p.Name); err == nil && cur.UID == p.UID || err != nil && !apierrors.IsNotFound(err) {
			continue
		}
		if w.knows(key, p.UID) {
			continue
		}
		gone := p.DeepCopy()
		gone.DeletionTimestamp, gone.DeletionGracePeriodSeconds = nil, nil
		klog.FromContext(ctx).Info("Deleting a pod the API server no longer has", "pod", klog.KObj(p), "podUID", p.UID)
		if err := w.node.cfg.Pods.DeletePod(ctx, gone); err != nil {
			return result{after: never, err: fmt.Errorf("deleting dangling pod %s: %w", key, err)}
		}
	}
	return result{after: never}
}

// rejectPod writes the kubelet's rejection (phase Failed, "Pod was rejected: ...") and its Event.
func (w *podWorkers) rejectPod(ctx context.Context, p *v1.Pod, st *podSyncStatus, r pod.AdmitResult) result {
	w.node.deps.Recorder.Event(p, v1.EventTypeWarning, r.Reason, r.Message)
	status := pod.RejectedStatus(p, r)
	if err := w.patchPodStatus(ctx, p, st, &status); err != nil {
		return patchFailed(err)
	}
	if err := st.setState(RejectedPod); err != nil {
		return result{after: never, err: err}
	}
	return result{after: never}
}

// patchPodStatus writes status as the kubelet's status manager does: a strategic-merge patch against
// the informer's copy with the pod's UID as a precondition, none when nothing changed (pod.StatusPatch
// finds that out with one comparison, pod.StatusEqual, building nothing). It records the written pod's
// resourceVersion in st (staleCopy), read from the answer's metadata alone with a PodMetadataClient. It
// returns the write's error, none for a pod gone or replaced meanwhile (the informer tells).
func (w *podWorkers) patchPodStatus(ctx context.Context, p *v1.Pod, st *podSyncStatus, status *v1.PodStatus) error {
	patch, err := pod.StatusPatch(p.UID, &p.Status, status)
	if err != nil || patch == nil {
		return err
	}
	var writtenRV string
	if m := w.node.deps.PodMetadataClient; m != nil {
		var written *metav1.PartialObjectMetadata
		if written, err = m.Resource(podsResource).Namespace(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType,
			patch, metav1.PatchOptions{}, "status"); err == nil {
			writtenRV = written.ResourceVersion
		}
	} else {
		var written *v1.Pod
		if written, err = w.podClient().CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{}, "status"); err == nil {
			writtenRV = written.ResourceVersion
		}
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod under its name now: the informer tells
	}
	if err != nil {
		err = fmt.Errorf("patching status of pod %s/%s: %w", p.Namespace, p.Name, err)
		if refused(err) {
			w.podStatusRefused(p, err)
			return &refusedError{err: err}
		}
		return err
	}
	if rv, ok := parseRV(writtenRV); ok {
		st.writtenRV.Store(rv)
	}
	return nil
}

// podsResource is the pods resource, for PodMetadataClient.
var podsResource = v1.SchemeGroupVersion.WithResource("pods")

// PodStatusRetryPeriod is when a pod status write the API server refused is tried again: the kubelet's
// status manager's sync period (syncPeriod, 10 s), which retries what it could not write in its next
// batch, not sooner.
const PodStatusRetryPeriod = 10 * time.Second

// maxEventMessageBytes bounds the message of an Event that carries an API error (an answer may be
// long: a 413 quotes nothing, an Invalid names every field).
const maxEventMessageBytes = 1024

// refusedError is a pod status write the API server refused: tried again after PodStatusRetryPeriod,
// not on the work queue's backoff (a 4xx is not transient, and is told in an Event and a metric).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// refused reports whether err is the API server's refusal of a write: a 4xx answer but 429 (throttled,
// transient), NotFound and Conflict (the informer tells of the pod gone or replaced).
func refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != 429 && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err)
}

// podStatusRefused tells of a refused pod status write: a Warning Event on the pod (the kubelet's pod
// worker's FailedSync, its message bounded), the Observer's ObservePodStatusRefused.
func (w *podWorkers) podStatusRefused(p *v1.Pod, err error) {
	msg := "Error updating pod status: " + err.Error()
	if len(msg) > maxEventMessageBytes {
		msg = msg[:maxEventMessageBytes]
	}
	w.node.deps.Recorder.Event(p, v1.EventTypeWarning, ReasonFailedSync, msg)
	if o, ok := w.node.deps.Observer.(PodObserver); ok {
		o.ObservePodStatusRefused(string(apierrors.ReasonForError(err)))
	}
}

// ReasonFailedSync is the kubelet's pod worker Event reason for a sync that failed (pkg/kubelet/events).
const ReasonFailedSync = "FailedSync"

// staleCopy reports whether p, the informer's copy, is older than this process's last status write of
// it: a pass run before the informer delivered that write (a recheck, another event) would write
// against a status that is no longer the API's, the same again. resourceVersions are compared as
// etcd's revisions (kube-apiserver's are); one that is not a number is never stale.
func (w *podWorkers) staleCopy(p *v1.Pod, st *podSyncStatus) bool {
	rv, ok := parseRV(p.ResourceVersion)
	written := st.writtenRV.Load()
	return ok && written != 0 && rv < written
}

func parseRV(s string) (uint64, bool) {
	rv, err := strconv.ParseUint(s, 10, 64)
	return rv, err == nil
}

// generatePodStatus is pod.GenerateStatus at the Controller's now, then, for a pod whose containers
// have stopped for good (rt.Terminal), pod.TerminatedStatus: the kubelet's SyncTerminatedPod, which
// generates the status and hands it to the status manager's TerminatePod. A pod the kubelet fails
// (evict: its active deadline, the eviction manager) is Failed with evict's reason and message, as
// generateAPIPodStatus overrides them, merged as the status manager does (its phase stays while a
// container may run).
func (w *podWorkers) generatePodStatus(p *v1.Pod, rt *pod.RuntimeStatus, evict *evictResponse) (v1.PodStatus, error) {
	now := w.node.deps.Clock.Now()
	var status v1.PodStatus
	var err error
	if evict != nil {
		status, err = pod.GenerateEvictedStatus(p, rt, now, pod.Evict{Reason: evict.reason, Message: evict.message})
	} else {
		status, err = pod.GenerateStatus(p, rt, now)
	}
	if err != nil {
		return status, err
	}
	if rt.Terminal {
		status = pod.TerminatedStatus(p, status)
	}
	if evict != nil && evict.disruptionTarget && status.Phase == v1.PodFailed && !anyRunning(rt) {
		// mergePodStatus sends the DisruptionTarget condition once the pod is terminal and none of
		// its containers runs.
		cond := v1.PodCondition{Type: v1.DisruptionTarget, ObservedGeneration: p.Generation, Status: v1.ConditionTrue,
			Reason: pod.ReasonTerminationByKubelet, Message: evict.message, LastTransitionTime: metav1.NewTime(now).Rfc3339Copy()}
		status.Conditions = slices.DeleteFunc(slices.Clone(status.Conditions), func(c v1.PodCondition) bool { return c.Type == v1.DisruptionTarget })
		status.Conditions = append(status.Conditions, cond)
	}
	return status, nil
}

// deletePod deletes a pod whose containers have stopped, with grace 0 and its UID as a precondition,
// as the kubelet's status manager once the pod can be deleted (once: then FinishedPod); its finalizers are
// left to their owners.
func (w *podWorkers) deletePod(ctx context.Context, p *v1.Pod, st *podSyncStatus) result {
	zero := int64(0)
	err := w.podClient().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return result{after: never, err: fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)}
	}
	if err := st.setState(FinishedPod); err != nil {
		return result{after: never, err: err}
	}
	return result{after: never}
}

// completeRuntimeStatus fills in what nodeagent owns of a provider's answer: the pod's IPs, the Node's
// IPs and the runtime's name.
func (w *podWorkers) completeRuntimeStatus(rt *pod.RuntimeStatus, key string, uid types.UID) *pod.RuntimeStatus {
	var out pod.RuntimeStatus
	if rt != nil {
		out = *rt
	}
	if out.RuntimeName == "" {
		out.RuntimeName = podRuntimeName
	}
	if len(out.PodIPs) == 0 {
		out.PodIPs = w.resources.ips(key, uid)
	}
	if len(out.HostIPs) == 0 {
		out.HostIPs = w.node.hostIPs()
	}
	return &out
}

// hostIPs returns the Node's InternalIP addresses as the informer has them, else its NodeIPs.
func (c *Controller) hostIPs() []netip.Addr {
	var ips []netip.Addr
	if node, err := c.deps.NodeLister.Get(c.cfg.NodeName); err == nil {
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				if ip, err := netip.ParseAddr(a.Address); err == nil {
					ips = append(ips, ip)
				}
			}
		}
	}
	if len(ips) == 0 {
		for _, ip := range c.cfg.NodeIPs {
			if a, ok := netip.AddrFromSlice(ip); ok {
				ips = append(ips, a.Unmap())
			}
		}
	}
	return ips
}

// anyRunning reports whether the runtime says a container of the pod runs.
func anyRunning(rt *pod.RuntimeStatus) bool {
	for _, l := range [][]pod.ContainerStatus{rt.InitContainers, rt.Containers, rt.EphemeralContainers} {
		for _, cs := range l {
			if cs.State.Running != nil && cs.State.Waiting == nil {
				return true
			}
		}
	}
	return false
}

// toHostIPs converts the Node's addresses to the pod status's hostIPs.
func toHostIPs(ips []netip.Addr) []v1.HostIP {
	out := make([]v1.HostIP, 0, len(ips))
	for _, ip := range ips {
		out = append(out, v1.HostIP{IP: ip.String()})
	}
	return out
}

func toPodIPs(ips []netip.Addr) []v1.PodIP {
	out := make([]v1.PodIP, 0, len(ips))
	for _, ip := range ips {
		out = append(out, v1.PodIP{IP: ip.String()})
	}
	return out
}

// podClient is the client of the pod writes: Dependencies.PodClient, or Client.
func (w *podWorkers) podClient() kubernetes.Interface {
	if w.node.deps.PodClient != nil {
		return w.node.deps.PodClient
	}
	return w.node.deps.Client
}
