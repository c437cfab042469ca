package simulation

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Access is what the simulation's identity must be allowed to do, as SelfSubjectAccessReview
// attributes: register, read, watch and label (adopt) Nodes, patch their status, write their Leases,
// and run the pods bound to them (watch, patch pods/status, delete).
var Access = []authorizationv1.ResourceAttributes{
	{Verb: "create", Resource: "nodes"},
	{Verb: "get", Resource: "nodes"},
	{Verb: "list", Resource: "nodes"},
	{Verb: "watch", Resource: "nodes"},
	{Verb: "patch", Resource: "nodes"},
	{Verb: "patch", Resource: "nodes", Subresource: "status"},
	{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
	{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
	{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
	{Verb: "list", Resource: "pods"},
	{Verb: "watch", Resource: "pods"},
	{Verb: "patch", Resource: "pods", Subresource: "status"},
	{Verb: "delete", Resource: "pods"},
}

// DeleteAccess is what --delete-nodes-on-exit needs besides Access.
var DeleteAccess = []authorizationv1.ResourceAttributes{{Verb: "delete", Resource: "nodes"}}

// EventAccess is what it should be allowed for Events; without it events are lost, nothing else.
var EventAccess = []authorizationv1.ResourceAttributes{
	{Verb: "create", Resource: "events", Namespace: metav1.NamespaceDefault},
	{Verb: "patch", Resource: "events", Namespace: metav1.NamespaceDefault},
}

// CheckAccess asks the API server whether the identity may do what the simulation does
// (SelfSubjectAccessReview) and refuses, naming what is missing, before any Node is created. A node
// identity (group system:nodes) is refused too: NodeRestriction lets it register only its own Node.
// extra are required too (DeleteAccess with --delete-nodes-on-exit).
func CheckAccess(ctx context.Context, client kubernetes.Interface, kubeconfig string, extra ...authorizationv1.ResourceAttributes) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	user := "the identity of --kubeconfig"
	if r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		user = fmt.Sprintf("user %q", r.Status.UserInfo.Username)
		if slices.Contains(r.Status.UserInfo.Groups, "system:nodes") {
			return fmt.Errorf("--kubeconfig %q: %s is a node identity (group system:nodes), which may register only its own Node; "+
				"the simulation needs an identity with the RBAC in docs/simulation.md", kubeconfig, r.Status.UserInfo.Username)
		}
	}
	allowed := func(attrs authorizationv1.ResourceAttributes) (bool, error) {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("--kubeconfig %q: checking access (SelfSubjectAccessReview): %w", kubeconfig, err)
		}
		return r.Status.Allowed, nil
	}
	var missing []string
	for _, a := range append(slices.Clone(Access), extra...) {
		ok, err := allowed(a)
		if err != nil {
			return err
		}
		if !ok {
			missing = append(missing, accessText(a))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("--kubeconfig %q: %s may not %s; the simulation needs the RBAC in docs/simulation.md",
			kubeconfig, user, strings.Join(missing, ", "))
	}
	for _, a := range EventAccess {
		if ok, err := allowed(a); err == nil && !ok {
			klog.FromContext(ctx).Info("Warning: events will not be recorded", "user", user, "missing", accessText(a))
		}
	}
	return nil
}

func accessText(a authorizationv1.ResourceAttributes) string {
	s := a.Verb + " " + a.Resource
	if a.Subresource != "" {
		s += "/" + a.Subresource
	}
	if a.Group != "" {
		s += "." + a.Group
	}
	if a.Namespace != "" {
		s += " in " + a.Namespace
	}
	return s
}

// CheckNamesFree refuses names already taken by Nodes that are not simulated (no LabelSimulated=true):
// registration would otherwise adopt a real Node. Simulated Nodes of an earlier run are reused. It
// checks the unsharded names [0, nodes); CheckOwnership checks a shard's.
func CheckNamesFree(ctx context.Context, client kubernetes.Interface, prefix string, nodes int) error {
	_, err := CheckOwnership(ctx, client, Ownership{NamePrefix: prefix, Nodes: nodes})
	return err
}

// Ownership is what CheckOwnership checks: the shard's Nodes (NamePrefix, Nodes per shard, Shard).
type Ownership struct {
	NamePrefix string
	Nodes      int
	Shard      Shard
}

// CheckOwnership checks, before anything is written, that the shard may own its Nodes:
//   - a Node with one of its names that is not simulated (no LabelSimulated=true) is refused: registration
//     would adopt a real Node (error naming --node-name-prefix and the Node);
//   - a simulated Node with one of its names labelled with another simulation (LabelSimulation: another
//     prefix that makes the same name, "sim-" and "sim-1" both make sim-10000) is refused (error naming
//     --node-name-prefix and the Node);
//   - a simulated Node with one of its names labelled with another shard (LabelShard) is refused (error
//     naming --shard-index and the Node);
//   - a simulated Node of this simulation labelled with a shard index at or above Shard.Count is
//     refused: --shards was lowered while the departed shards' Nodes exist (error naming --shards and
//     the Node);
//   - a simulated Node of the prefix named with the zero-padded width of a nodeagent before issue 27
//     (IsZeroPaddedName: sim-00042, where NodeName makes sim-0042) is refused: this version would
//     register the same Node again under another name and leave that one stranded (error naming
//     --node-name-prefix and the Node).
//
// It returns the names of the shard's simulated Nodes that lack LabelShard or LabelSimulation (from a
// run before sharding or before issue 27): the caller labels them (AdoptNodes) so that the shard's
// informer sees them. Errors of the API are wrapped.
func CheckOwnership(ctx context.Context, client kubernetes.Interface, o Ownership) (unlabelled []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	count := o.Shard.count()
	id := SimulationID(o.NamePrefix)
	first, last := o.Shard.First(o.Nodes), o.Shard.First(o.Nodes)+o.Nodes // [first, last)
	mine := func(name string) (int, bool) {
		i, ok := ParseNodeName(name, o.NamePrefix)
		return i, ok && i >= first && i < last
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelSimulated + "!=true"})
	if err != nil {
		return nil, fmt.Errorf("listing nodes that are not simulated: %w", err)
	}
	for _, n := range list.Items {
		if _, ok := mine(n.Name); ok {
			return nil, fmt.Errorf("--node-name-prefix %q: node %s exists and is not simulated (no label %s=true); choose another prefix",
				o.NamePrefix, n.Name, LabelSimulated)
		}
	}
	list, err = client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelSimulated + "=true", ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing simulated nodes: %w", err)
	}
	for _, n := range list.Items {
		label, labelled := n.Labels[LabelShard]
		sim, identified := n.Labels[LabelSimulation]
		if identified && sim != id {
			if _, ok := mine(n.Name); ok {
				return nil, fmt.Errorf("--node-name-prefix %q: node %s is labelled %s=%s: it belongs to another simulation, whose prefix makes the same name (this one is %s); choose another prefix",
					o.NamePrefix, n.Name, LabelSimulation, sim, id)
			}
			continue // another simulation's
		}
		if IsZeroPaddedName(n.Name, o.NamePrefix) {
			index, _ := strconv.Atoi(strings.TrimPrefix(n.Name, o.NamePrefix))
			return nil, fmt.Errorf("--node-name-prefix %q: node %s is named with the zero-padded width of a nodeagent before issue 27 (this one names index %d %s, whatever --shards): it would stay beside the renamed Node; delete that run's Nodes first (kubectl delete nodes -l %s=true,%s=%s), or choose another prefix",
				o.NamePrefix, n.Name, index, NodeName(o.NamePrefix, index), LabelSimulated, LabelShard, label)
		}
		if _, ok := mine(n.Name); ok {
			switch {
			case labelled && label != o.Shard.Label():
				return nil, fmt.Errorf("--shard-index %d: node %s is labelled %s=%s: it belongs to another shard (the names map to shards by --nodes per shard: is --nodes the same in every shard?)",
					o.Shard.Index, n.Name, LabelShard, label)
			case !labelled || !identified:
				unlabelled = append(unlabelled, n.Name)
			}
			continue
		}
		if _, ok := ParseNodeName(n.Name, o.NamePrefix); !ok || !labelled {
			continue // another simulation's
		}
		if shard, err := strconv.Atoi(label); err == nil && shard >= count {
			return nil, fmt.Errorf("--shards %d: node %s is labelled %s=%d, a shard that --shards %d does not have: delete the departed shards' Nodes first (kubectl delete nodes -l %s=%s,%s=%d), or run them with --delete-nodes-on-exit",
				count, n.Name, LabelShard, shard, count, LabelSimulation, id, LabelShard, shard)
		}
	}
	slices.Sort(unlabelled)
	return unlabelled, nil
}

// AdoptNodes labels the named simulated Nodes with the shard (LabelShard) and the simulation of prefix
// (LabelSimulation), so that the shard's informer, which selects on both, sees them. It returns the
// first error, wrapped with the Node's name.
func AdoptNodes(ctx context.Context, client kubernetes.Interface, shard Shard, prefix string, names []string) error {
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q,%q:%q}}}`, LabelShard, shard.Label(), LabelSimulation, SimulationID(prefix)))
	for _, name := range names {
		if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("labelling node %s with %s=%s, %s=%s: %w", name, LabelShard, shard.Label(), LabelSimulation, SimulationID(prefix), err)
		}
	}
	return nil
}
