package simulation

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
	"github.com/nodeagent/nodeagent/pkg/pod"
)

// NodeSelector says which Nodes that others create (Karpenter's and the cluster autoscaler's kwok
// providers, a test) the simulation adopts: KWOK's flags of the same names and meaning
// (kwok --manage-all-nodes, --manage-nodes-with-annotation-selector,
// --manage-nodes-with-label-selector, --manage-single-node). The zero NodeSelector adopts none. The
// simulation's own Nodes (LabelSimulated=true, of any simulation) are never adopted.
type NodeSelector struct {
	// AllNodes adopts every Node (--manage-all-nodes).
	AllNodes bool
	// AnnotationSelector adopts the Nodes whose annotations match it, a label selector's syntax
	// applied to annotations (--manage-nodes-with-annotation-selector, e.g. kwok.x-k8s.io/node=fake,
	// what the cluster autoscaler's kwok provider sets). Matched on this side of the watch.
	AnnotationSelector string
	// LabelSelector adopts the Nodes whose labels match it (--manage-nodes-with-label-selector);
	// the watch selects on it. With AnnotationSelector, a Node must match both.
	LabelSelector string
	// SingleNode adopts the one Node of that name (--manage-single-node); the watch selects on it.
	SingleNode string
}

// Enabled reports whether s adopts any Node.
func (s NodeSelector) Enabled() bool {
	return s.AllNodes || s.AnnotationSelector != "" || s.LabelSelector != "" || s.SingleNode != ""
}

// Validate checks s as KWOK does: --manage-all-nodes, --manage-single-node and the selectors are
// mutually exclusive, except that the two selectors may be given together; each selector must
// parse (labels.Parse) and the single Node's name must be a valid Node name. Errors name the flag
// and its value.
func (s NodeSelector) Validate() error {
	selectors := s.AnnotationSelector != "" || s.LabelSelector != ""
	switch {
	case s.AllNodes && (selectors || s.SingleNode != ""):
		return fmt.Errorf("--manage-all-nodes: cannot be combined with --manage-single-node %q, --manage-nodes-with-annotation-selector %q or --manage-nodes-with-label-selector %q",
			s.SingleNode, s.AnnotationSelector, s.LabelSelector)
	case s.SingleNode != "" && selectors:
		return fmt.Errorf("--manage-single-node %q: cannot be combined with --manage-nodes-with-annotation-selector %q or --manage-nodes-with-label-selector %q",
			s.SingleNode, s.AnnotationSelector, s.LabelSelector)
	}
	if s.SingleNode != "" {
		if msgs := validation.IsDNS1123Subdomain(s.SingleNode); len(msgs) > 0 {
			return fmt.Errorf("--manage-single-node %q: not a valid Node name: %s", s.SingleNode, msgs[0])
		}
	}
	if _, err := labels.Parse(s.AnnotationSelector); err != nil {
		return fmt.Errorf("--manage-nodes-with-annotation-selector %q: %w", s.AnnotationSelector, err)
	}
	if _, err := labels.Parse(s.LabelSelector); err != nil {
		return fmt.Errorf("--manage-nodes-with-label-selector %q: %w", s.LabelSelector, err)
	}
	return nil
}

// TweakListOptions narrows the adopted Node informer's list and watch: a field selector on the name
// with SingleNode, else LabelSelector and LabelSimulated!=true (never the simulation's own Nodes). s
// must be valid (Validate).
func (s NodeSelector) TweakListOptions(o *metav1.ListOptions) {
	if s.SingleNode != "" {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.SingleNode).String()
		return
	}
	sel, _ := labels.Parse(s.LabelSelector)
	notOwn, _ := labels.NewRequirement(LabelSimulated, selection.NotEquals, []string{"true"})
	o.LabelSelector = sel.Add(*notOwn).String()
}

// Matches reports whether s adopts n, whatever the watch selected: n is not a simulated Node and
// matches every selector given.
func (s NodeSelector) Matches(n *v1.Node) bool {
	if !s.Enabled() || n.Labels[LabelSimulated] == "true" {
		return false
	}
	if s.SingleNode != "" {
		return n.Name == s.SingleNode
	}
	for _, c := range []struct {
		sel string
		set map[string]string
	}{{s.AnnotationSelector, n.Annotations}, {s.LabelSelector, n.Labels}} {
		sel, err := labels.Parse(c.sel)
		if err != nil || !sel.Matches(labels.Set(c.set)) {
			return false
		}
	}
	return true
}

// AdoptedShard returns the shard (0 to count-1) that runs the adopted Node name: the FNV-1a 64-bit
// hash of the name modulo count. It depends on the name and count only, so that a shard restarted
// with the same --shards finds the very Nodes it ran, and every shard agrees without talking.
func AdoptedShard(name string, count int) int {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int(h.Sum64() % uint64(max(count, 1)))
}

// Adoption is how a Simulator adopts Nodes that others create (Config.Adopt).
type Adoption struct {
	// Selector says which Nodes; it must be Enabled.
	Selector NodeSelector
	// Informer is the adopted Nodes' informer (its list narrowed by Selector.TweakListOptions, objects
	// trimmed by nodecache.TrimNode), already synced when Run starts; Cache is the tracker its events
	// and watch errors feed. The adopted Nodes' controllers read their Node through them, as the
	// simulation's own read theirs through Dependencies.NodeLister and Cache.
	Informer cache.SharedIndexInformer
	Cache    *nodecache.Tracker
}

// adoptedSlots is where adopted Nodes take the index that gives them an InternalIP (when their
// creator set no address) and a fallback pod CIDR: past every template Node of every shard, shard I's
// k-th slot is base + k*count + I, so that no two shards' slots meet.
func (s *Simulator) adoptedIndex(slot int) int {
	count := s.cfg.Shard.count()
	return s.cfg.Nodes*count + slot*count + s.cfg.Shard.Index
}

// AdoptedPodCIDRMaskSize is the size of an adopted Node's fallback pod CIDR: a /21, 2046 pod IPs, since
// its allocatable pods is its creator's and may be past a /24's 253 (Karpenter's kwok instance types
// allow up to 1024 pods).
const AdoptedPodCIDRMaskSize = 21

// adoptedPodCIDR is the fallback pod CIDR of shard's adopted Node in slot (for a Node without
// spec.podCIDRs): the /21s of cluster past every /24 of the template Nodes of all count shards (nodes
// each), shard I's k-th slot taking the (k×count + I)-th of them. It errors, as pod.FallbackPodCIDR,
// past the cluster CIDR: that Node's pods wait for spec.podCIDRs.
func adoptedPodCIDR(cluster netip.Prefix, nodes, count, shard, slot int) (netip.Prefix, error) {
	perBlock := 1 << (pod.DefaultFallbackNodeMaskSize - AdoptedPodCIDRMaskSize) // /24s in a /21: 8
	first := (nodes*count + perBlock - 1) / perBlock
	return pod.FallbackPodCIDR(cluster, AdoptedPodCIDRMaskSize, first+slot*count+shard)
}

// ownsAdopted reports whether this shard runs the adopted Node n.
func (s *Simulator) ownsAdopted(n *v1.Node) bool {
	return s.cfg.Adopt.Selector.Matches(n) && AdoptedShard(n.Name, s.cfg.Shard.count()) == s.cfg.Shard.Index
}

// adoptHandler returns the adopted Node informer's event handler: a Node this shard adopts gets a
// controller (adoptNode); one deleted, or no longer matched, loses it (releaseNode).
func (s *Simulator) adoptHandler(ctx context.Context) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok && s.ownsAdopted(n) {
				s.adoptNode(ctx, n.Name)
			}
		},
		UpdateFunc: func(_, obj any) {
			n, ok := obj.(*v1.Node)
			if !ok {
				return
			}
			if s.ownsAdopted(n) {
				s.adoptNode(ctx, n.Name)
			} else {
				s.releaseNode(ctx, n.Name, "no longer selected")
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if n, ok := obj.(*v1.Node); ok {
				s.releaseNode(ctx, n.Name, "deleted")
			}
		},
	}
}

// adoptNode starts the controller of the adopted Node name unless it runs already.
func (s *Simulator) adoptNode(ctx context.Context, name string) {
	s.adoptedMu.Lock()
	if _, ok := s.adopted[name]; ok {
		s.adoptedMu.Unlock()
		return
	}
	slot := 0
	for s.slotsUsed[slot] {
		slot++
	}
	s.slotsUsed[slot] = true
	n := &simNode{index: s.adoptedIndex(slot), slot: slot, adopted: true, name: name, host: newHost(s.cfg.Template, name),
		runtime: newSimRuntime(s.shared), phase: PhasePending, runtimeReady: true, networkReady: true}
	s.adopted[name] = n
	s.adoptedMu.Unlock()
	if s.cfg.KubeletAPI != nil {
		s.serveAdoptedKubeletAPI(ctx, n)
	}
	klog.FromContext(ctx).Info("Adopting node", "node", name, "kubeletPort", n.kubeletPort)
	s.start(ctx, n, false)
}

// releaseNode stops the controller of the adopted Node name, and its pods' workers with it, then its
// kubelet API (closing its listener and connections, freeing its port): the Node is its creator's, so
// it is never registered again.
func (s *Simulator) releaseNode(ctx context.Context, name, why string) {
	s.adoptedMu.Lock()
	n, ok := s.adopted[name]
	if ok {
		delete(s.adopted, name)
		delete(s.slotsUsed, n.slot)
	}
	s.adoptedMu.Unlock()
	if !ok {
		return
	}
	klog.FromContext(ctx).Info("Releasing adopted node", "node", name, "reason", why)
	n.mu.Lock()
	if n.phase == PhaseRunning {
		n.ctrl.Stop()
	}
	n.phase = PhaseStopped
	n.mu.Unlock()
	if n.stopAPI != nil {
		n.stopAPI()
	}
}

// lookup returns the simulated Node name: one of the template's, or an adopted one.
func (s *Simulator) lookup(name string) (*simNode, bool) {
	if n, ok := s.byName[name]; ok {
		return n, true
	}
	s.adoptedMu.Lock()
	defer s.adoptedMu.Unlock()
	n, ok := s.adopted[name]
	return n, ok
}

// adoptedNodes returns the adopted Nodes, by name.
func (s *Simulator) adoptedNodes() []*simNode {
	s.adoptedMu.Lock()
	defer s.adoptedMu.Unlock()
	out := slices.Collect(maps.Values(s.adopted))
	slices.SortFunc(out, func(a, b *simNode) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return out
}

// keepCreatorStatus is the last setter of an adopted Node: what its creator set stays as it is, read
// from the adopted Node informer (the Node as the API server last had it) after the kubelet's setters
// have filled the status from the template: every status.capacity and status.allocatable entry present
// there (an allocatable entry absent there but whose capacity is there becomes that capacity, as KWOK's
// default allocatable), and status.addresses when any is set. The creator's later changes are followed
// the same way. Labels, taints and spec.providerID are never written by the status setters.
func keepCreatorStatus(get func(string) (*v1.Node, error)) nodestatus.Setter {
	return func(_ context.Context, node *v1.Node) error {
		current, err := get(node.Name)
		if err != nil {
			return fmt.Errorf("reading adopted node %s: %w", node.Name, err)
		}
		st := current.Status
		if node.Status.Capacity == nil {
			node.Status.Capacity = v1.ResourceList{}
		}
		if node.Status.Allocatable == nil {
			node.Status.Allocatable = v1.ResourceList{}
		}
		for k, q := range st.Capacity {
			node.Status.Capacity[k] = q.DeepCopy()
			if _, ok := st.Allocatable[k]; !ok {
				node.Status.Allocatable[k] = q.DeepCopy()
			}
		}
		for k, q := range st.Allocatable {
			node.Status.Allocatable[k] = q.DeepCopy()
		}
		if len(st.Addresses) > 0 {
			node.Status.Addresses = slices.Clone(st.Addresses)
		}
		return nil
	}
}
