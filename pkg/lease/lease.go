// Package lease renews the node's Lease in kube-node-lease with the component-helpers lease
// controller (k8s.io/component-helpers/apimachinery/lease), as the kubelet does: holder and name are
// the node name, renew interval a quarter of the lease duration with 0.04 jitter, and an owner
// reference to the Node so the Lease goes with it.
package lease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	leasecontroller "k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Namespace is where node Leases live.
const Namespace = v1.NamespaceNodeLease

// Config configures a Renewer.
type Config struct {
	// Client writes the Lease (the heartbeat client); required.
	Client kubernetes.Interface
	// Lister reads the Node for the owner reference without an API call; may be nil.
	Lister corelisters.NodeLister
	// NodeName is the Lease's name and holder identity; required.
	NodeName string
	// LeaseDurationSeconds is --node-lease-duration-seconds (40); renewal is every quarter of it.
	LeaseDurationSeconds int32
	// OnRepeatedHeartbeatFailure runs when renewals keep failing (close idle connections).
	OnRepeatedHeartbeatFailure func()
	// Clock is injected for tests; default the real clock.
	Clock clock.Clock
}

// Renewer keeps the node Lease renewed. Build with New, run with Run.
type Renewer struct {
	cfg        Config
	controller leasecontroller.Controller
}

// New validates cfg and builds the component-helpers lease controller. It errors when Client or
// NodeName is missing or LeaseDurationSeconds is not positive.
func New(cfg Config) (*Renewer, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, fmt.Errorf("lease: Config needs Client and NodeName")
	}
	if cfg.LeaseDurationSeconds <= 0 {
		return nil, fmt.Errorf("lease: LeaseDurationSeconds %d must be positive", cfg.LeaseDurationSeconds)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	r := &Renewer{cfg: cfg}
	r.controller = leasecontroller.NewController(cfg.Clock, cfg.Client, cfg.NodeName, cfg.LeaseDurationSeconds,
		cfg.OnRepeatedHeartbeatFailure, r.RenewInterval(), cfg.NodeName, Namespace, r.setNodeOwner)
	return r, nil
}

// RenewInterval is a quarter of the lease duration: 10 s for 40 s (the kubelet's renewIntervalFraction 0.25).
func (r *Renewer) RenewInterval() time.Duration {
	return time.Duration(float64(r.cfg.LeaseDurationSeconds) * 0.25 * float64(time.Second))
}

// Run renews the Lease until ctx ends.
func (r *Renewer) Run(ctx context.Context) { r.controller.Run(ctx) }

// setNodeOwner points the Lease's owner reference at the current Node, as the kubelet's
// setNodeOwnerFunc, and also re-points it when the Node was deleted and registered again (new UID).
// The Node comes from the lister when it has it, else from one GET. Without a Node the Lease is
// still written, with no owner, and the reference is added on a later renewal.
func (r *Renewer) setNodeOwner(lease *coordinationv1.Lease) error {
	var node *v1.Node
	if r.cfg.Lister != nil {
		node, _ = r.cfg.Lister.Get(r.cfg.NodeName)
	}
	if node == nil && len(lease.OwnerReferences) == 0 {
		// The lease controller's hook takes no context; bound the GET by the renew interval instead.
		ctx, cancel := context.WithTimeout(context.Background(), r.RenewInterval())
		defer cancel()
		n, err := r.cfg.Client.CoreV1().Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			klog.Background().V(2).Info("Lease owner reference not set: node not available yet", "node", r.cfg.NodeName, "err", err)
			return nil
		}
		node = n
	}
	if node == nil {
		return nil
	}
	if len(lease.OwnerReferences) == 1 && lease.OwnerReferences[0].UID == node.UID {
		return nil
	}
	lease.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1",
		Kind:       "Node",
		Name:       r.cfg.NodeName,
		UID:        node.UID,
	}}
	return nil
}
