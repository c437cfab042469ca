// Package lease renews the node's Lease in kube-node-lease with the component-helpers lease
// controller (k8s.io/component-helpers/apimachinery/lease), as the kubelet does: holder and name are
// the node name, renew interval a quarter of the lease duration with 0.04 jitter, and an owner
// reference to the Node so the Lease goes with it. The controller has no hooks, so the Renewer
// decorates the client's LeaseInterface to observe each renewal (time, duration, errors).
package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclientv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	leasecontroller "k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Namespace is where node Leases live.
const Namespace = v1.NamespaceNodeLease

// Config configures a Renewer.
type Config struct {
	// Client writes the Lease (the heartbeat client); required. The Renewer decorates its Lease
	// interface to observe every renewal.
	Client kubernetes.Interface
	// Lister reads the Node for the owner reference without an API call; may be nil.
	Lister corelisters.NodeLister
	// NodeName is the Lease's name and holder identity; required.
	NodeName string
	// LeaseDurationSeconds is --node-lease-duration-seconds (40); renewal is every quarter of it.
	LeaseDurationSeconds int32
	// OnRepeatedHeartbeatFailure runs when renewals keep failing (close idle connections).
	OnRepeatedHeartbeatFailure func()
	// OnHeartbeatFailure, if set, runs after each failed Lease write or read, with its reason.
	OnHeartbeatFailure func(reason string)
	// OnHeartbeatRecovered, if set, runs after the first successful Lease write that follows a failure.
	OnHeartbeatRecovered func()
	// Observer, if set, is told each renewal's duration and each failure's reason (metrics).
	Observer Observer
	// Serving, if set, is waited on when looking for the Lease fails in transport (the API server
	// cannot be reached): the look is retried as soon as the API server serves again, instead of after
	// the lease controller's backoff (up to 7 s). One probe serves every Renewer of a process.
	Serving *ServingProbe
	// Registered, if set, says whether the Node has been registered: before, the owner reference is
	// looked up only in Lister (no GET for a Node that does not exist yet), as the Lease is written
	// before the Node, as the kubelet's.
	Registered func() bool
	// Clock is injected for tests; default the real clock.
	Clock clock.Clock
}

// Observer is told about Lease writes: ObserveLeaseRenewal after each successful one (its duration),
// ObserveLeaseError after each failed write or read (the API reason, e.g. "Timeout", or "Transport").
type Observer interface {
	ObserveLeaseRenewal(d time.Duration)
	ObserveLeaseError(reason string)
}

// Status is what the Renewer last did, for /debug/nodestatus.
type Status struct {
	// LastRenew is when the Lease was last written successfully; zero before.
	LastRenew time.Time `json:"lastRenew,omitzero"`
	// Holder is the holderIdentity of the Lease last written.
	Holder string `json:"holder,omitempty"`
	// RenewInterval is how often it is renewed.
	RenewInterval time.Duration `json:"renewInterval"`
	// Errors counts failed Lease writes and reads since start; LastError is the last one's text.
	Errors    int64     `json:"errors"`
	LastError string    `json:"lastError,omitempty"`
	ErrorTime time.Time `json:"lastErrorTime,omitzero"`
}

// Renewer keeps the node Lease renewed. Build with New, run with Run.
type Renewer struct {
	cfg        Config
	controller leasecontroller.Controller

	mu      sync.Mutex
	status  Status
	failing bool

	firstAttempt     chan struct{} // closed after the first Lease write, or the first failure
	firstAttemptOnce sync.Once
}

// New validates cfg and builds the component-helpers lease controller over the decorated client. It
// errors when Client or NodeName is missing or LeaseDurationSeconds is not positive.
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
	r := &Renewer{cfg: cfg, firstAttempt: make(chan struct{})}
	r.status.RenewInterval = r.RenewInterval()
	r.controller = leasecontroller.NewController(cfg.Clock, observedClient{Interface: cfg.Client, r: r}, cfg.NodeName,
		cfg.LeaseDurationSeconds, cfg.OnRepeatedHeartbeatFailure, r.RenewInterval(), cfg.NodeName, Namespace, r.setNodeOwner)
	return r, nil
}

// RenewInterval is a quarter of the lease duration: 10 s for 40 s (the kubelet's renewIntervalFraction 0.25).
func (r *Renewer) RenewInterval() time.Duration {
	return time.Duration(float64(r.cfg.LeaseDurationSeconds) * 0.25 * float64(time.Second))
}

// Run renews the Lease until ctx ends; the first renewal (creating the Lease if needed) is immediate.
func (r *Renewer) Run(ctx context.Context) { r.controller.Run(ctx) }

// FirstAttempt is closed once the first Lease write succeeded or a write or read failed: registration
// waits on it (bounded) so that a Node is never Ready without its Lease.
func (r *Renewer) FirstAttempt() <-chan struct{} { return r.firstAttempt }

func (r *Renewer) attempted() { r.firstAttemptOnce.Do(func() { close(r.firstAttempt) }) }

// Status returns a copy of the Renewer's status.
func (r *Renewer) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// LastRenew returns when the Lease was last written successfully; zero before.
func (r *Renewer) LastRenew() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status.LastRenew
}

// renewed records a successful Lease write that took d.
func (r *Renewer) renewed(lease *coordinationv1.Lease, d time.Duration) {
	r.mu.Lock()
	r.status.LastRenew = r.cfg.Clock.Now()
	if lease != nil && lease.Spec.HolderIdentity != nil {
		r.status.Holder = *lease.Spec.HolderIdentity
	}
	recovered := r.failing
	r.failing = false
	r.mu.Unlock()
	r.attempted()
	if r.cfg.Observer != nil {
		r.cfg.Observer.ObserveLeaseRenewal(d)
	}
	if recovered && r.cfg.OnHeartbeatRecovered != nil {
		r.cfg.OnHeartbeatRecovered()
	}
}

// failed records a failed Lease write or read.
func (r *Renewer) failed(err error) {
	reason := string(apierrors.ReasonForError(err))
	if reason == "" || reason == string(metav1.StatusReasonUnknown) {
		if _, ok := err.(apierrors.APIStatus); !ok {
			reason = "Transport"
		} else {
			reason = "Unknown"
		}
	}
	r.mu.Lock()
	r.status.Errors++
	r.status.LastError = err.Error()
	r.status.ErrorTime = r.cfg.Clock.Now()
	r.failing = true
	r.mu.Unlock()
	r.attempted()
	if r.cfg.Observer != nil {
		r.cfg.Observer.ObserveLeaseError(reason)
	}
	if r.cfg.OnHeartbeatFailure != nil {
		r.cfg.OnHeartbeatFailure("lease " + reason + ": " + err.Error())
	}
}

// observedClient is the heartbeat client with its Lease interface decorated (see observedLeases).
type observedClient struct {
	kubernetes.Interface
	r *Renewer
}

func (c observedClient) CoordinationV1() coordinationclientv1.CoordinationV1Interface {
	return observedCoordination{CoordinationV1Interface: c.Interface.CoordinationV1(), r: c.r}
}

type observedCoordination struct {
	coordinationclientv1.CoordinationV1Interface
	r *Renewer
}

func (c observedCoordination) Leases(namespace string) coordinationclientv1.LeaseInterface {
	return observedLeases{LeaseInterface: c.CoordinationV1Interface.Leases(namespace), r: c.r}
}

// observedLeases records the calls the lease controller makes: Create and Update are renewals; Get is
// the controller looking for its Lease (at start, or after failed updates), where NotFound is the
// expected answer. A Get that fails in transport waits for Config.Serving and is retried once.
type observedLeases struct {
	coordinationclientv1.LeaseInterface
	r *Renewer
}

func (l observedLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	lease, err := l.LeaseInterface.Get(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		l.r.failed(err)
		if l.r.cfg.Serving != nil && transportError(err) && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Lease unreachable: waiting for the API server to serve again", "lease", name, "err", err)
			if l.r.cfg.Serving.Wait(ctx) == nil {
				lease, err = l.LeaseInterface.Get(ctx, name, opts)
				if err != nil && !apierrors.IsNotFound(err) {
					l.r.failed(err)
				}
			}
		}
	}
	return lease, err
}

// transportError reports whether err came from the connection rather than from the API server: no
// Status in the answer (refused, reset, timed out on the client).
func transportError(err error) bool {
	_, ok := err.(apierrors.APIStatus)
	return !ok
}

func (l observedLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return l.write(func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Create(ctx, lease, opts) })
}

func (l observedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return l.write(func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Update(ctx, lease, opts) })
}

func (l observedLeases) write(call func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	start := l.r.cfg.Clock.Now()
	lease, err := call()
	if err != nil {
		l.r.failed(err)
	} else {
		l.r.renewed(lease, l.r.cfg.Clock.Since(start))
	}
	return lease, err
}

// setNodeOwner points the Lease's owner reference at the current Node, as the kubelet's
// setNodeOwnerFunc, and also re-points it when the Node was deleted and registered again (new UID).
// The Node comes from the lister when it has it, else from one GET. Without a Node the Lease is
// still written, with no owner, and the reference is added on a later renewal.
func (r *Renewer) setNodeOwner(lease *coordinationv1.Lease) error {
	var node *v1.Node
	if r.cfg.Lister != nil {
		node, _ = r.cfg.Lister.Get(r.cfg.NodeName)
	}
	if node == nil && len(lease.OwnerReferences) == 0 && (r.cfg.Registered == nil || r.cfg.Registered()) {
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
