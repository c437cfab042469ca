package node

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
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
// one Node are worked on by several workers at once, one pod by one at a time.
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

// PodIndexers are the indexers the process's pod informer needs: by spec.nodeName.
func PodIndexers() cache.Indexers {
	return cache.Indexers{PodNodeNameIndex: func(obj any) ([]string, error) {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{p.Spec.NodeName}, nil
	}}
}

// IndexedPodLister is a PodLister over an informer's indexer with PodIndexers.
type IndexedPodLister struct{ Indexer cache.Indexer }

// Get implements PodLister.
func (l IndexedPodLister) Get(namespace, name string) (*v1.Pod, error) {
	obj, ok, err := l.Indexer.GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
	}
	return obj.(*v1.Pod), nil
}

// OnNode implements PodLister.
func (l IndexedPodLister) OnNode(nodeName string) ([]*v1.Pod, error) {
	objs, err := l.Indexer.ByIndex(PodNodeNameIndex, nodeName)
	if err != nil {
		return nil, err
	}
	pods := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		pods = append(pods, o.(*v1.Pod))
	}
	return pods, nil
}

// PodReconcilePeriod is how often a pod's status is computed again when nothing told of a change: a
// net under the informer's events (a change by another writer queues the pod at once) and the
// provider's RecheckAfter.
const PodReconcilePeriod = time.Minute

// podRuntimeName is the scheme of the container IDs of pods whose provider names none.
const podRuntimeName = "containerd"

// podState is what a Controller keeps of one pod bound to its Node, by namespace/name. The pod's own
// step (one at a time per pod: the work queue never runs one key twice at once) owns it; other pods'
// steps read admitted (admission counts the admitted pods) and the IP allocator's rebuild writes ips,
// so those two are atomic or under nodePods.mu. uid never changes.
type podState struct {
	uid        types.UID
	generation int64
	admitted   atomic.Bool // admitted by this process, or found admitted by an earlier one (status.startTime)
	rejected   bool
	created    bool // the provider's CreatePod succeeded
	killed     bool // the provider's DeletePod succeeded
	deleted    bool // deleted from the API (grace 0): nothing more to do until the informer tells
	// writtenRV is the resourceVersion of the pod after this process's last status write: a copy
	// older than it (the informer has not delivered that write yet) is not written against.
	writtenRV uint64
	ips       []netip.Addr // guarded by nodePods.mu
	pod       *v1.Pod      // the last copy seen, for DeletePod once the pod has left the API
}

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

// PodCounts returns how many pods the Node's pod steps know (bound to it and not yet forgotten) and how
// many pod IPs are given out and not yet back (a pod's go back once it is terminal or gone).
func (c *Controller) PodCounts() (pods, ips int) {
	if c.pods == nil {
		return 0, 0
	}
	c.pods.mu.Lock()
	defer c.pods.mu.Unlock()
	if c.pods.ipam != nil {
		ips = c.pods.ipam.Allocated()
	}
	return len(c.pods.states), ips
}

// PodEventHandler returns a handler for a pod informer (with PodIndexers) that queues this Node's pods:
// what a library program with one Node adds to its informer. A process with many Nodes on one Queue
// uses Queue.PodEventHandler instead.
func (c *Controller) PodEventHandler() cache.ResourceEventHandler {
	queue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName == c.cfg.NodeName {
			c.addPod(p.Namespace + "/" + p.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: queue, UpdateFunc: func(_, obj any) { queue(obj) }, DeleteFunc: queue}
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
}

// podStep is one pass over one pod of this Node, in the kubelet's order (HandlePodAdditions, then
// SyncPod / SyncTerminatingPod / SyncTerminatedPod, and the status manager's write): forget a pod
// gone from the API (stopping its containers, freeing its IPs); admit a new one or reject it; start
// its containers (and tell the provider of a change of its spec or annotations); stop them once it is
// being deleted; compute its status from the provider's view
// and patch what changed; delete it with grace 0 once it is terminal and being deleted. It returns
// when to look again.
func (c *Controller) podStep(ctx context.Context, key string) result {
	logger := klog.FromContext(ctx)
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	p, err := c.deps.Pods.Get(namespace, name)
	if apierrors.IsNotFound(err) {
		return c.forgetPod(ctx, key)
	}
	if err != nil {
		return result{after: never, err: err}
	}
	if p.Spec.NodeName != c.cfg.NodeName {
		return result{after: never}
	}
	if !c.registered.Load() {
		return result{after: never} // registration queues every pod once done
	}
	st := c.podState(key)
	if st != nil && st.uid != p.UID { // deleted and created again under the same name
		c.forgetPod(ctx, key)
		st = nil
	}
	if st == nil {
		st = &podState{uid: p.UID, generation: p.Generation}
		c.setPodState(key, st)
	}
	prev := st.pod
	st.pod = p
	if st.rejected || st.deleted {
		return result{after: never}
	}
	terminal := p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	deleting := p.DeletionTimestamp != nil
	if !st.admitted.Load() {
		switch {
		case terminal && !st.created:
			// Terminal before this process saw it run: nothing of it runs here.
			return c.deleteIfDeleting(ctx, p, st)
		case p.Status.StartTime != nil:
			st.admitted.Store(true) // admitted before (an earlier run of this process)
			c.countPod(p)
		case deleting:
			return c.deletePod(ctx, p, st) // never admitted: nothing to stop
		default:
			if r := c.admit(p); !r.Admit {
				return c.rejectPod(ctx, p, st, r)
			}
			st.admitted.Store(true)
		}
	}
	if !st.created && !deleting && !terminal {
		if err := c.ensurePodIPs(p, st); err != nil {
			logger.Error(err, "No pod IP", "pod", klog.KObj(p))
			return result{after: never, err: err}
		}
		withIPs := p.DeepCopy()
		withIPs.Status.PodIPs = toPodIPs(c.podIPs(st))
		if err := c.cfg.Pods.CreatePod(ctx, withIPs); err != nil {
			return result{after: never, err: fmt.Errorf("creating pod %s: %w", key, err)}
		}
		st.created = true
	} else if st.created && !deleting && (p.Generation != st.generation || (prev != nil && !maps.Equal(prev.Annotations, p.Annotations))) {
		if err := c.cfg.Pods.UpdatePod(ctx, p); err != nil {
			return result{after: never, err: fmt.Errorf("updating pod %s: %w", key, err)}
		}
	}
	st.generation = p.Generation
	if deleting && !st.killed {
		if err := c.cfg.Pods.DeletePod(ctx, p); err != nil {
			return result{after: never, err: fmt.Errorf("stopping pod %s: %w", key, err)}
		}
		st.killed = true
	}
	rs, err := c.cfg.Pods.GetPodStatus(ctx, p)
	if err != nil {
		return result{after: never, err: fmt.Errorf("pod %s status: %w", key, err)}
	}
	rt := c.completeRuntimeStatus(rs.Status, st)
	rt.Terminal = rt.Terminal || (deleting && !anyRunning(rt))
	status, err := c.generatePodStatus(p, rt)
	if err == nil && (status.Phase == v1.PodSucceeded || status.Phase == v1.PodFailed) && rt.Sandbox == pod.SandboxReady {
		// The kubelet's pod worker kills a pod whose phase turned terminal (syncTerminatingPod: killPod
		// stops its sandbox) and writes the status it generates afterwards, PodReadyToStartContainers
		// False "pod sandbox is not ready"; its sandbox is gone whatever the provider still says. One
		// write here where the kubelet makes two (the terminal phase, then the stopped sandbox).
		rt.Sandbox = pod.SandboxNotReady
		status, err = c.generatePodStatus(p, rt)
	}
	if err != nil {
		logger.Error(err, "Pod status not written", "pod", klog.KObj(p))
		return result{after: PodReconcilePeriod}
	}
	if c.staleCopy(p, st) {
		// The informer has not delivered this process's last write yet: its event queues the pod
		// again, and the status is computed against it then (no write of what is written already).
		return result{after: never}
	}
	if err := c.patchPodStatus(ctx, p, st, &status); err != nil {
		return result{after: never, err: err}
	}
	if status.Phase == v1.PodSucceeded || status.Phase == v1.PodFailed {
		c.podStopped(st) // the sandbox is gone: its addresses go back to the pool
		if deleting {
			return c.deletePod(ctx, p, st)
		}
		return result{after: never}
	}
	after := PodReconcilePeriod
	if rs.RecheckAfter > 0 && rs.RecheckAfter < after {
		after = rs.RecheckAfter
	}
	return result{after: after}
}

// admit runs the kubelet's predicate admission against the Node as the informer has it and what the
// pods this Node has admitted hold (its active pods: nodePods.usage, filled at the first admission from
// the pods the informer has, then kept as pods are admitted and stop), and counts p when admitted.
func (c *Controller) admit(p *v1.Pod) pod.AdmitResult {
	node, err := c.deps.NodeLister.Get(c.cfg.NodeName)
	if err != nil {
		return pod.AdmitResult{Admit: false, Reason: "NodeNotFound", Message: fmt.Sprintf("node %q not found: %v", c.cfg.NodeName, err)}
	}
	c.pods.mu.Lock()
	defer c.pods.mu.Unlock()
	if !c.pods.usageInit {
		all, _ := c.deps.Pods.OnNode(c.cfg.NodeName)
		for _, o := range all {
			if o.UID == p.UID || o.Status.Phase == v1.PodSucceeded || o.Status.Phase == v1.PodFailed {
				continue
			}
			if st := c.pods.states[o.Namespace+"/"+o.Name]; (st != nil && st.admitted.Load() && st.uid == o.UID) || o.Status.StartTime != nil {
				c.pods.count(o)
			}
		}
		c.pods.usageInit = true
	}
	r := pod.AdmitWith(node, p, &c.pods.usage)
	if r.Admit {
		c.pods.count(p)
	}
	return r
}

// countPod counts p among the Node's active pods (once per UID), if the usage is kept yet (else its
// first filling finds p).
func (c *Controller) countPod(p *v1.Pod) {
	c.pods.mu.Lock()
	defer c.pods.mu.Unlock()
	if c.pods.usageInit {
		c.pods.count(p)
	}
}

// count adds p to usage unless counted; mu held.
func (p *nodePods) count(o *v1.Pod) {
	if _, ok := p.counted[o.UID]; ok {
		return
	}
	if p.counted == nil {
		p.counted = map[types.UID]pod.UsageEntry{}
	}
	p.counted[o.UID] = p.usage.Add(o)
}

// rejectPod writes the kubelet's rejection (phase Failed, "Pod was rejected: ...") and its Event.
func (c *Controller) rejectPod(ctx context.Context, p *v1.Pod, st *podState, r pod.AdmitResult) result {
	c.deps.Recorder.Event(p, v1.EventTypeWarning, r.Reason, r.Message)
	status := pod.RejectedStatus(p, r)
	if err := c.patchPodStatus(ctx, p, st, &status); err != nil {
		return result{after: never, err: err}
	}
	st.rejected = true
	return result{after: never}
}

// patchPodStatus writes status as the kubelet's status manager does: a strategic-merge patch against
// the informer's copy with the pod's UID as a precondition, none when nothing changed (pod.StatusPatch
// finds that out with one comparison, pod.StatusEqual, building nothing). It records the written pod's
// resourceVersion in st (staleCopy). It returns the write's error, none for a pod gone or replaced
// meanwhile (the informer tells).
func (c *Controller) patchPodStatus(ctx context.Context, p *v1.Pod, st *podState, status *v1.PodStatus) error {
	patch, err := pod.StatusPatch(p.UID, &p.Status, status)
	if err != nil || patch == nil {
		return err
	}
	written, err := c.podClient().CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod under its name now: the informer tells
	}
	if err != nil {
		return fmt.Errorf("patching status of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	if rv, ok := parseRV(written.ResourceVersion); ok {
		st.writtenRV = rv
	}
	return nil
}

// staleCopy reports whether p, the informer's copy, is older than this process's last status write of
// it: a pass run before the informer delivered that write (a recheck, another event) would write
// against a status that is no longer the API's, the same again. resourceVersions are compared as
// etcd's revisions (kube-apiserver's are); one that is not a number is never stale.
func (c *Controller) staleCopy(p *v1.Pod, st *podState) bool {
	rv, ok := parseRV(p.ResourceVersion)
	return ok && st.writtenRV != 0 && rv < st.writtenRV
}

func parseRV(s string) (uint64, bool) {
	rv, err := strconv.ParseUint(s, 10, 64)
	return rv, err == nil
}

// generatePodStatus is pod.GenerateStatus at the Controller's now, then, for a pod whose containers
// have stopped for good (rt.Terminal), pod.TerminatedStatus: the kubelet's SyncTerminatedPod, which
// generates the status and hands it to the status manager's TerminatePod.
func (c *Controller) generatePodStatus(p *v1.Pod, rt *pod.RuntimeStatus) (v1.PodStatus, error) {
	status, err := pod.GenerateStatus(p, rt, c.deps.Clock.Now())
	if err != nil || !rt.Terminal {
		return status, err
	}
	return pod.TerminatedStatus(p, status), nil
}

// deleteIfDeleting deletes a terminal pod that is being deleted; otherwise nothing is to be done.
func (c *Controller) deleteIfDeleting(ctx context.Context, p *v1.Pod, st *podState) result {
	c.podStopped(st)
	if p.DeletionTimestamp != nil {
		return c.deletePod(ctx, p, st)
	}
	return result{after: never}
}

// deletePod deletes a pod whose containers have stopped, with grace 0 and its UID as a precondition,
// as the kubelet's status manager once the pod can be deleted (once: st.deleted); its finalizers are
// left to their owners.
func (c *Controller) deletePod(ctx context.Context, p *v1.Pod, st *podState) result {
	zero := int64(0)
	err := c.podClient().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return result{after: never, err: fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)}
	}
	st.deleted = true
	return result{after: never}
}

// forgetPod forgets the pod known under key, which left the API (or whose name a new pod took): its
// containers are stopped and its IPs freed. It returns a result that does not queue the key again.
func (c *Controller) forgetPod(ctx context.Context, key string) result {
	c.pods.mu.Lock()
	st := c.pods.states[key]
	delete(c.pods.states, key)
	c.pods.mu.Unlock()
	if st == nil {
		return result{after: never}
	}
	if st.created && st.pod != nil {
		if err := c.cfg.Pods.DeletePod(ctx, st.pod); err != nil {
			klog.FromContext(ctx).Error(err, "Stopping a pod that left the API", "pod", key)
		}
	}
	c.podStopped(st)
	return result{after: never}
}

func (c *Controller) podState(key string) *podState {
	c.pods.mu.Lock()
	defer c.pods.mu.Unlock()
	return c.pods.states[key]
}

func (c *Controller) setPodState(key string, st *podState) {
	c.pods.mu.Lock()
	defer c.pods.mu.Unlock()
	c.pods.setState(key, st)
}

// setState records st under key; mu held.
func (p *nodePods) setState(key string, st *podState) {
	if p.states == nil {
		p.states = map[string]*podState{}
	}
	p.states[key] = st
}

// ensurePodIPs gives the pod its addresses: those its status has already (a pod started by an
// earlier run of this process), else new ones from the Node's pod CIDRs.
func (c *Controller) ensurePodIPs(p *v1.Pod, st *podState) error {
	if len(c.podIPs(st)) > 0 || p.Spec.HostNetwork {
		return nil
	}
	ipam, err := c.podIPAM()
	if err != nil {
		return err
	}
	ips, err := ipam.Allocate(p.UID)
	if err != nil {
		return err
	}
	c.pods.mu.Lock()
	st.ips = ips
	c.pods.mu.Unlock()
	return nil
}

// podIPs returns the pod's addresses.
func (c *Controller) podIPs(st *podState) []netip.Addr {
	c.pods.mu.Lock()
	defer c.pods.mu.Unlock()
	return st.ips
}

// podIPAM returns the Node's pod IP allocator over the Node's current spec.podCIDRs
// (kube-controller-manager's nodeipam; without one, Config.FallbackPodCIDR), made at the first pod and
// made again whenever those CIDRs changed (a Node deleted and registered again gets a new one from
// nodeipam, and its old one may go to another Node). Each one made is restored from the addresses of
// the pods the informer has on the Node that lie in its CIDRs, so that no address is given twice across
// a restart of the process; a running pod whose address lies outside them keeps it, as a kubelet's CNI
// leaves a sandbox's address, and no new pod gets one of the old CIDR.
func (c *Controller) podIPAM() (*pod.IPAllocator, error) {
	node, err := c.deps.NodeLister.Get(c.cfg.NodeName)
	if err != nil {
		return nil, fmt.Errorf("pod IPs of node %q: %w", c.cfg.NodeName, err)
	}
	cidrs, err := pod.NodePodCIDRs(node)
	if err != nil {
		return nil, err
	}
	if len(cidrs) == 0 {
		if !c.cfg.FallbackPodCIDR.IsValid() {
			return nil, fmt.Errorf("node %q has no spec.podCIDRs and no fallback pod CIDR is configured", c.cfg.NodeName)
		}
		cidrs = []netip.Prefix{c.cfg.FallbackPodCIDR}
	}
	c.pods.mu.Lock()
	defer c.pods.mu.Unlock()
	if c.pods.ipam != nil && slices.Equal(c.pods.ipam.CIDRs(), cidrs) {
		return c.pods.ipam, nil
	}
	ipam, err := pod.NewIPAllocator(cidrs...)
	if err != nil {
		return nil, err
	}
	pods, _ := c.deps.Pods.OnNode(c.cfg.NodeName)
	for _, p := range pods {
		if p.Spec.HostNetwork || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed || len(p.Status.PodIPs) == 0 {
			continue
		}
		var ips []netip.Addr
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				ips = append(ips, a)
			}
		}
		if err := ipam.Restore(p.UID, ips); err == nil {
			if st := c.pods.states[p.Namespace+"/"+p.Name]; st != nil && st.uid == p.UID {
				st.ips = ips
			} else {
				c.pods.setState(p.Namespace+"/"+p.Name, &podState{uid: p.UID, generation: p.Generation, ips: ips})
			}
		}
	}
	// Pods given addresses before whose status does not show them yet keep them too (those outside the
	// new CIDRs unrecorded).
	for _, st := range c.pods.states {
		if len(st.ips) > 0 {
			_ = ipam.Restore(st.uid, st.ips)
		}
	}
	c.pods.ipam = ipam
	return ipam, nil
}

// podStopped takes a pod out of what the Node's active pods hold: its addresses go back to the pool
// and its requests and host ports out of the admission's usage.
func (c *Controller) podStopped(st *podState) {
	if st == nil {
		return
	}
	c.pods.mu.Lock()
	ipam := c.pods.ipam
	if e, ok := c.pods.counted[st.uid]; ok {
		c.pods.usage.Remove(e)
		delete(c.pods.counted, st.uid)
	}
	c.pods.mu.Unlock()
	if ipam != nil && len(c.podIPs(st)) > 0 {
		ipam.Release(st.uid)
	}
}

// completeRuntimeStatus fills in what nodeagent owns of a provider's answer: the pod's IPs, the Node's
// IPs and the runtime's name.
func (c *Controller) completeRuntimeStatus(rt *pod.RuntimeStatus, st *podState) *pod.RuntimeStatus {
	var out pod.RuntimeStatus
	if rt != nil {
		out = *rt
	}
	if out.RuntimeName == "" {
		out.RuntimeName = podRuntimeName
	}
	if len(out.PodIPs) == 0 {
		out.PodIPs = c.podIPs(st)
	}
	if len(out.HostIPs) == 0 {
		out.HostIPs = c.hostIPs()
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

func toPodIPs(ips []netip.Addr) []v1.PodIP {
	out := make([]v1.PodIP, 0, len(ips))
	for _, ip := range ips {
		out = append(out, v1.PodIP{IP: ip.String()})
	}
	return out
}

// podClient is the client of the pod writes: Dependencies.PodClient, or Client.
func (c *Controller) podClient() kubernetes.Interface {
	if c.deps.PodClient != nil {
		return c.deps.PodClient
	}
	return c.deps.Client
}
