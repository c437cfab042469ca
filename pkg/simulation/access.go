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
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Access is what the simulation's identity must be allowed to do, as SelfSubjectAccessReview
// attributes: register, read and watch Nodes, patch their status, and write their Leases.
var Access = []authorizationv1.ResourceAttributes{
	{Verb: "create", Resource: "nodes"},
	{Verb: "get", Resource: "nodes"},
	{Verb: "list", Resource: "nodes"},
	{Verb: "watch", Resource: "nodes"},
	{Verb: "patch", Resource: "nodes", Subresource: "status"},
	{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
	{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
	{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
}

// EventAccess is what it should be allowed for Events; without it events are lost, nothing else.
var EventAccess = []authorizationv1.ResourceAttributes{
	{Verb: "create", Resource: "events", Namespace: metav1.NamespaceDefault},
	{Verb: "patch", Resource: "events", Namespace: metav1.NamespaceDefault},
}

// CheckAccess asks the API server whether the identity may do what the simulation does
// (SelfSubjectAccessReview) and refuses, naming what is missing, before any Node is created. A node
// identity (group system:nodes) is refused too: NodeRestriction lets it register only its own Node.
func CheckAccess(ctx context.Context, client kubernetes.Interface, kubeconfig string) error {
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
	for _, a := range Access {
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
// registration would otherwise adopt a real Node. Simulated Nodes of an earlier run are reused.
func CheckNamesFree(ctx context.Context, client kubernetes.Interface, prefix string, nodes int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelSimulated + "!=true"})
	if err != nil {
		return fmt.Errorf("listing nodes that are not simulated: %w", err)
	}
	for _, n := range list.Items {
		index, err := strconv.Atoi(strings.TrimPrefix(n.Name, prefix))
		if strings.HasPrefix(n.Name, prefix) && err == nil && index < nodes && n.Name == NodeName(prefix, index) {
			return fmt.Errorf("--node-name-prefix %q: node %s exists and is not simulated (no label %s=true); choose another prefix",
				prefix, n.Name, LabelSimulated)
		}
	}
	return nil
}
