package node

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/pod"
)

// podResources is what the active pods of one Node hold, for the Node as a whole: their addresses
// (the pod IP allocator, CNI host-local's part in a kubelet) and their part in the admission's usage
// (the kubelet's admit handlers count the active pods). It has its own lock and is the one owner of
// both: a pod's worker asks it for its addresses and gives them back, never writes another pod's.
type podResources struct {
	mu sync.Mutex
	// ipam hands out addresses from the Node's pod CIDRs (made at the first pod that needs one, made
	// again when those CIDRs change).
	ipam *pod.IPAllocator
	// byKey is what each pod (namespace/name) holds: its addresses (those ipam gave it, those its
	// status showed when they were restored, or addresses of an older pod CIDR it keeps) and its
	// part in usage.
	byKey map[string]*podHeld
	// usage is what the active pods hold, for admission, kept as they are admitted and stop;
	// usageInit says it was first filled from the pods the informer has (pods admitted by an earlier
	// run of the process are active too).
	usage     pod.Usage
	usageInit bool
	// allocations are the allocations last made, by the spec they were made of (allocationOf).
	allocations map[specKey]*allocatedResources
	// waitingForIPs are the pods whose sandbox could not be made for want of an address, by
	// namespace/name: queued again when an address is given back.
	waitingForIPs map[string]struct{}
}

// podHeld is what one pod holds of its Node.
type podHeld struct {
	uid     types.UID
	ips     []netip.Addr
	usage   pod.UsageEntry
	counted bool
	// allocated are the resources allocated to the pod: those admitted, or of the last resize
	// admitted (resize.go); nil until counted.
	allocated *allocatedResources
}

// held returns the entry of key for uid, made when absent or another pod's (a name reused). mu held.
func (r *podResources) held(key string, uid types.UID) *podHeld {
	h := r.byKey[key]
	if h != nil && h.uid == uid {
		return h
	}
	if h != nil {
		r.releaseLocked(key)
	}
	if r.byKey == nil {
		r.byKey = map[string]*podHeld{}
	}
	h = &podHeld{uid: uid}
	r.byKey[key] = h
	return h
}

// admit runs the kubelet's predicate admission of p on node against the usage, counting p when
// admitted. onNode lists the informer's pods of the Node, called once, at the first admission: the
// usage is first filled from those a run of this process admitted before (status.startTime set), not
// terminal; after, it is kept as pods are admitted and released, and the pods are not listed again
// (a list of 10 000 pods at each admission was 44 % of the CPU of bench-pods' scenario 1).
func (r *podResources) admit(key string, node *v1.Node, p *v1.Pod, onNode func() []*v1.Pod) pod.AdmitResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.usageInit {
		for _, o := range onNode() {
			if o.UID == p.UID || o.Status.Phase == v1.PodSucceeded || o.Status.Phase == v1.PodFailed || o.Status.StartTime == nil {
				continue
			}
			r.countLocked(o.Namespace+"/"+o.Name, o)
		}
		r.usageInit = true
	}
	res := pod.AdmitWith(node, p, &r.usage)
	if res.Admit {
		r.countLocked(key, p)
	}
	return res
}

// countAdmitted counts p, admitted by an earlier run of the process, among the active pods, once
// the usage is kept (else its first filling finds p).
func (r *podResources) countAdmitted(key string, p *v1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.usageInit {
		r.countLocked(key, p)
	}
}

// countLocked adds p to the usage unless counted. mu held.
func (r *podResources) countLocked(key string, p *v1.Pod) {
	if h := r.held(key, p.UID); !h.counted {
		h.usage, h.counted, h.allocated = r.usage.Add(p), true, r.allocationOf(p)
	}
}

// ips returns the addresses pod key (uid) holds; nil for none.
func (r *podResources) ips(key string, uid types.UID) []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.byKey[key]; h != nil && h.uid == uid {
		return h.ips
	}
	return nil
}

// allocateIPs gives pod key (uid) its addresses from cidrs (the Node's current pod CIDRs), unless it
// holds some. The allocator is made when there is none or when cidrs changed, restored from what the
// pods hold (those of onNode, the informer's pods of the Node, that show addresses in their status,
// not terminal, and those this Node gave addresses to), so that no address is given twice, across a
// restart of the process or a change of CIDR; a pod whose addresses lie outside cidrs keeps them, as
// a kubelet's CNI leaves a sandbox's address, and no new pod gets one of the old CIDR. Errors: the
// allocator's (ErrPodCIDRExhausted when no address is free).
func (r *podResources) allocateIPs(key string, uid types.UID, cidrs []netip.Prefix, onNode func() []*v1.Pod) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.byKey[key]; h != nil && h.uid == uid && len(h.ips) > 0 {
		return h.ips, nil
	}
	if r.ipam == nil || !slices.Equal(r.ipam.CIDRs(), cidrs) {
		ipam, err := pod.NewIPAllocator(cidrs...)
		if err != nil {
			return nil, err
		}
		for _, p := range onNode() {
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
				r.held(p.Namespace+"/"+p.Name, p.UID).ips = ips
			}
		}
		// Pods given addresses before whose status does not show them yet keep them too (those outside
		// the new CIDRs unrecorded).
		for _, h := range r.byKey {
			if len(h.ips) > 0 {
				_ = ipam.Restore(h.uid, h.ips)
			}
		}
		r.ipam = ipam
	}
	ips, err := r.ipam.Allocate(uid)
	if err != nil {
		return nil, fmt.Errorf("pod IPs: %w", err)
	}
	r.held(key, uid).ips = ips
	delete(r.waitingForIPs, key)
	return ips, nil
}

// release takes pod key out of what the Node's active pods hold: its addresses go back to the pool
// and its part out of the admission's usage. A pod holding nothing is a no-op. It returns the pods
// waiting for an address, when addresses went back (they are no longer waiting then).
func (r *podResources) release(key string, uid types.UID) (waiting []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waitingForIPs, key)
	h := r.byKey[key]
	if h == nil || h.uid != uid {
		return nil
	}
	freed := len(h.ips) > 0
	r.releaseLocked(key)
	if !freed || len(r.waitingForIPs) == 0 {
		return nil
	}
	for k := range r.waitingForIPs {
		waiting = append(waiting, k)
	}
	clear(r.waitingForIPs)
	return waiting
}

// waitForIPs records that pod key waits for an address.
func (r *podResources) waitForIPs(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waitingForIPs == nil {
		r.waitingForIPs = map[string]struct{}{}
	}
	r.waitingForIPs[key] = struct{}{}
}

// releaseLocked releases whatever pod key holds. mu held.
func (r *podResources) releaseLocked(key string) {
	h := r.byKey[key]
	if h == nil {
		return
	}
	if h.counted {
		r.usage.Remove(h.usage)
	}
	if r.ipam != nil && len(h.ips) > 0 {
		r.ipam.Release(h.uid)
	}
	delete(r.byKey, key)
}

// allocatedIPs returns how many addresses are given out and not yet back.
func (r *podResources) allocatedIPs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ipam == nil {
		return 0
	}
	return r.ipam.Allocated()
}

// admit runs the kubelet's admit handlers on p: the eviction manager's (no BestEffort pod under memory
// pressure, no pod under another pressure: pod.EvictionAdmit), then the predicate admission against the
// Node as the informer has it and what the pods this Node has admitted hold (podResources.admit). It
// errs (errNodeUnknown), deciding nothing, while the informer has no Node: the kubelet admits against
// its own Node object (getNodeAnyWay) and never rejects a pod for want of one.
func (w *podWorkers) admit(key string, p *v1.Pod) (pod.AdmitResult, error) {
	if r := pod.EvictionAdmit(p, w.node.pressureConditions()); !r.Admit {
		return r, nil // the eviction manager's admit handler comes first
	}
	node, err := w.node.deps.NodeLister.Get(w.node.cfg.NodeName)
	if err != nil {
		return pod.AdmitResult{}, errNodeUnknown
	}
	return w.resources.admit(key, node, p, func() []*v1.Pod {
		onNode, _ := w.node.deps.Pods.OnNode(w.node.cfg.NodeName)
		return onNode
	}), nil
}

// errNodeUnknown: the informer does not have the Node (deleted, and not registered again yet).
var errNodeUnknown = errors.New("the Node is not in the informer")

// ensurePodIPs returns the pod's addresses: those it holds, else those its status shows (a pod
// started by an earlier run of this process: restored when the allocator is made), else new ones
// from the Node's current spec.podCIDRs (kube-controller-manager's nodeipam; without one,
// Config.FallbackPodCIDR). None for a hostNetwork pod.
func (w *podWorkers) ensurePodIPs(key string, p *v1.Pod) ([]netip.Addr, error) {
	if p.Spec.HostNetwork {
		return w.resources.ips(key, p.UID), nil
	}
	node, err := w.node.deps.NodeLister.Get(w.node.cfg.NodeName)
	if err != nil {
		return nil, fmt.Errorf("pod IPs of node %q: %w", w.node.cfg.NodeName, err)
	}
	cidrs, err := pod.NodePodCIDRs(node)
	if err != nil {
		return nil, err
	}
	if len(cidrs) == 0 {
		if !w.node.cfg.FallbackPodCIDR.IsValid() {
			return nil, fmt.Errorf("node %q has no spec.podCIDRs and no fallback pod CIDR is configured", w.node.cfg.NodeName)
		}
		cidrs = []netip.Prefix{w.node.cfg.FallbackPodCIDR}
	}
	return w.resources.allocateIPs(key, p.UID, cidrs, func() []*v1.Pod {
		pods, _ := w.node.deps.Pods.OnNode(w.node.cfg.NodeName)
		return pods
	})
}
