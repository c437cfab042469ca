// Package lease renews the node's Lease in kube-node-lease as the kubelet does, with a single-shot
// step instead of the component-helpers lease controller's goroutine: Renewer.Step runs the lease
// controller's sync (k8s.io/component-helpers/apimachinery/lease v0.37.2, controller.go) until it
// ends or would sleep, and returns when it wants to run next, so one queue can renew thousands
// of Leases with a few workers. It mirrors that controller call for call (TestParityWithLeaseController
// drives both through the same scenarios): holder and name are the node name; an existing Lease is
// updated from the last one written (no GET); a failed update is tried 5 times at once, a conflict
// fetching the Lease again; the Lease is fetched or created with a backoff of 200 ms doubling to 7 s
// between attempts; onRepeatedHeartbeatFailure after each failed update but the first; the next
// renewal a quarter of the lease duration later with 0.04 jitter. As the kubelet's
// setNodeOwnerFunc, every write carries an owner reference to the Node once it exists.
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	coordinationclientv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// AnnotationInstance is on every Lease a Renewer writes: the identity of the process that wrote it
// (Config.Instance). Another value on a Lease renewed after this process started, and within the
// Lease's duration, means that another agent renews the same Node's Lease (two agents started with
// one node name). A renewal from before the start is an earlier run of this Node's agent (a restart,
// a rollout), which is not a duplicate.
const AnnotationInstance = "nodeagent.io/instance"

// OtherInstance returns the identity of the process that last renewed l (AnnotationInstance) and
// the Lease's renewTime, with ok true, when that identity is set and is not self; ok is false for a
// nil Lease, one without a renewTime or an identity, or one self wrote last.
func OtherInstance(l *coordinationv1.Lease, self string) (other string, renewed time.Time, ok bool) {
	if l == nil || l.Spec.RenewTime == nil {
		return "", time.Time{}, false
	}
	other = l.Annotations[AnnotationInstance]
	if other == "" || other == self {
		return "", time.Time{}, false
	}
	return other, l.Spec.RenewTime.Time, true
}

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
	// OnRepeatedHeartbeatFailure runs after each failed update of a sync but the first, before the
	// next try (close idle connections): the lease controller's onRepeatedHeartbeatFailure.
	OnRepeatedHeartbeatFailure func()
	// Observer, if set, is told each renewal's duration and each failure's reason (metrics).
	Observer Observer
	// Serving, if set, is asked to call Wake when looking for the Lease fails in transport (the API
	// server cannot be reached): the look is retried as soon as the API server serves again, instead
	// of after the lease controller's backoff (up to 7 s). One probe serves every Renewer of a process.
	Serving *ServingProbe
	// Wake, if set, asks for Step to run now: the Renewer calls it when Serving says the API server
	// serves again while it waits in backoff.
	Wake func()
	// Instance identifies this process (host, PID, start time): written to AnnotationInstance, and
	// compared with the one found on the Lease (Result.Duplicate). Empty: neither.
	Instance string
	// NewLeasePostProcess, if set, replaces the owner reference hook (the lease controller's
	// newLeasePostProcessFunc): the parity test gives both the kubelet's setNodeOwnerFunc.
	NewLeasePostProcess func(*coordinationv1.Lease) error
	// Clock is injected for tests; default the real clock. Rand returns a float in [0,1) for the
	// renew interval's jitter; default math/rand (wait.Jitter).
	Clock clock.Clock
	Rand  func() float64
}

// Observer is told about Lease writes: ObserveLeaseRenewal after each successful one (its duration),
// ObserveLeaseError after each failed write or read (the API reason, e.g. "Timeout", or "Transport").
type Observer interface {
	ObserveLeaseRenewal(d time.Duration)
	ObserveLeaseError(reason string)
}

// Result is what one Step did.
type Result struct {
	// Next is when Step wants to run again: the renew interval (jittered) after a sync, the backoff
	// sleep (200 ms doubling to 7 s) while the Lease cannot be fetched or created; 0 when ctx ended.
	Next time.Duration
	// Renewed is true when the step's last Lease call was a successful write.
	Renewed bool
	// Failure is the step's last failed Lease call (write, or read other than NotFound); nil when
	// none failed.
	Failure *Failure
	// Duplicate is the identity of another instance (AnnotationInstance) that renewed this Lease
	// after this Renewer was built (New) and within the Lease's duration, as the Lease read after a
	// conflict or at start showed it: two agents run with one node name. Empty when none.
	Duplicate string
}

// Attempted reports whether the step wrote the Lease or a Lease call failed.
func (r Result) Attempted() bool { return r.Renewed || r.Failure != nil }

// Failure is a failed Lease call: its API reason ("Timeout", "Conflict", ...; "Transport" when the
// API server could not be reached) with the error's text, and when the call started.
type Failure struct {
	Reason string
	Start  time.Time
}

// Status is what the Renewer last did, for /debug/nodestatus.
type Status struct {
	// LastRenew is when the Lease was last written successfully; zero before.
	LastRenew time.Time `json:"lastRenew,omitzero"`
	// Holder is the holderIdentity of the Lease last written.
	Holder string `json:"holder,omitempty"`
	// RenewInterval is how often it is renewed.
	RenewInterval time.Duration `json:"renewInterval"`
	// Duplicate, when set, is the identity of another agent seen renewing this Lease (AnnotationInstance),
	// and DuplicateTime when it was last seen.
	Duplicate     string    `json:"duplicate,omitempty"`
	DuplicateTime time.Time `json:"duplicateTime,omitzero"`
	// Errors counts failed Lease writes and reads since start; LastError is the last one's text.
	Errors    int64     `json:"errors"`
	LastError string    `json:"lastError,omitempty"`
	ErrorTime time.Time `json:"lastErrorTime,omitzero"`
}

// The lease controller's constants (component-helpers apimachinery/lease).
const (
	// maxUpdateRetries is how many updates one sync tries at once before giving up until the next.
	maxUpdateRetries = 5
	// maxBackoff caps the sleep between attempts to get or create the Lease.
	maxBackoff = 7 * time.Second
	// initialBackoff doubles before the first sleep: the first wait is 200 ms.
	initialBackoff = 100 * time.Millisecond
	// jitterFactor is wait.JitterUntil's jitter of the renew interval.
	jitterFactor = 0.04
)

// phase is where a sync interrupted by a backoff sleep resumes.
type phase uint8

const (
	// phaseIdle: no sync in progress; the next Step starts one.
	phaseIdle phase = iota
	// phaseEnsure: backoffEnsureLease, before its next attempt.
	phaseEnsure
)

// Renewer keeps the node Lease renewed, one Step at a time. Build with New. Step is not safe for
// concurrent use (the queue never runs one Node's step twice at once); the accessors are.
type Renewer struct {
	cfg    Config
	leases coordinationclientv1.LeaseInterface

	// The lease controller's state, and where an interrupted sync resumes.
	latest *coordinationv1.Lease // the lease controller's latestLease
	phase  phase
	sleep  time.Duration // backoffEnsureLease's sleep
	// Within phaseEnsure: conflictTry >= 0 when the ensure was started by retryUpdateLease's conflict
	// at that try; secondUpdate says which retryUpdateLease of sync runs after it.
	conflictTry  int
	secondUpdate bool

	// started is when New ran: a renewal by another instance before it is an earlier run of this
	// Node's agent, not a duplicate.
	started time.Time

	// registered and result are the running Step's argument and what it did so far.
	registered bool
	result     Result

	mu     sync.Mutex
	status Status
}

// New validates cfg. It errors when Client or NodeName is missing or LeaseDurationSeconds is not
// positive. It makes no API call.
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
	r := &Renewer{cfg: cfg, conflictTry: -1, started: cfg.Clock.Now()}
	r.leases = observedLeases{LeaseInterface: cfg.Client.CoordinationV1().Leases(Namespace), r: r}
	r.status.RenewInterval = r.RenewInterval()
	return r, nil
}

// RenewInterval is a quarter of the lease duration: 10 s for 40 s (the kubelet's renewIntervalFraction 0.25).
func (r *Renewer) RenewInterval() time.Duration {
	return time.Duration(float64(r.cfg.LeaseDurationSeconds) * 0.25 * float64(time.Second))
}

// nextRenewal is the sliding, jittered period of wait.JitterUntil(sync, renewInterval, 0.04, true).
func (r *Renewer) nextRenewal() time.Duration {
	if r.cfg.Rand != nil {
		return r.RenewInterval() + time.Duration(r.cfg.Rand()*jitterFactor*float64(r.RenewInterval()))
	}
	return wait.Jitter(r.RenewInterval(), jitterFactor)
}

// Step runs the lease controller's sync from where it stopped until the sync ends, and returns the
// renew interval (jittered) as Result.Next; or until backoffEnsureLease would sleep, and returns that
// sleep (200 ms doubling to 7 s), after which the next Step resumes it. Next is 0 when ctx ended.
// registered says whether the Node has been registered: before, the owner reference is looked up
// only in Lister (no GET for a Node that may not exist yet: the first Lease write runs beside the
// Node's registration, as the kubelet's). API errors are recorded in Status, told to the Observer and summed up in the
// Result, never returned.
func (r *Renewer) Step(ctx context.Context, registered bool) Result {
	r.registered, r.result = registered, Result{}
	r.result.Next = r.step(ctx)
	return r.result
}

// step is Step's sync; it returns Result.Next.
func (r *Renewer) step(ctx context.Context) time.Duration {
	logger := klog.FromContext(ctx)
	if r.phase == phaseIdle {
		if r.latest != nil {
			// sync: update from the last Lease written, without a GET.
			if r.retryUpdateLease(ctx, r.latest, 0) {
				return r.nextRenewal()
			}
			if r.phase == phaseEnsure {
				return r.sleep // a conflict's ensure sleeps
			}
			if ctx.Err() != nil {
				return 0
			}
			logger.Info("failed to update lease using latest lease, fallback to ensure lease", "lease", r.cfg.NodeName)
		}
		r.phase, r.sleep, r.conflictTry, r.secondUpdate = phaseEnsure, initialBackoff, -1, false
	}
	for {
		// phaseEnsure: one attempt of backoffEnsureLease.
		lease, created, ok := r.ensureAttempt(ctx)
		if !ok {
			if ctx.Err() != nil {
				return 0
			}
			return r.sleep
		}
		r.phase = phaseIdle
		if try := r.conflictTry; try >= 0 {
			// retryUpdateLease goes on with the Lease just fetched.
			second := r.secondUpdate
			if r.retryUpdateLease(ctx, lease, try+1) {
				return r.nextRenewal()
			}
			if r.phase == phaseEnsure {
				return r.sleep
			}
			if !second {
				if ctx.Err() != nil {
					return 0
				}
				logger.Info("failed to update lease using latest lease, fallback to ensure lease", "lease", r.cfg.NodeName)
				r.phase, r.sleep, r.conflictTry, r.secondUpdate = phaseEnsure, initialBackoff, -1, false
				continue
			}
			if ctx.Err() != nil {
				return 0 // stopped: not a failure to report
			}
			logger.Error(fmt.Errorf("failed %d attempts to update lease", maxUpdateRetries), "Will retry updating lease", "interval", r.RenewInterval())
			return r.nextRenewal()
		}
		// sync, after backoffEnsureLease.
		r.latest = lease
		if !created && lease != nil {
			r.secondUpdate = true
			if r.retryUpdateLease(ctx, lease, 0) {
				return r.nextRenewal()
			}
			if r.phase == phaseEnsure {
				return r.sleep
			}
			if ctx.Err() != nil {
				return 0 // stopped: not a failure to report
			}
			logger.Error(fmt.Errorf("failed %d attempts to update lease", maxUpdateRetries), "Will retry updating lease", "interval", r.RenewInterval())
		}
		return r.nextRenewal()
	}
}

// retryUpdateLease is the lease controller's retryUpdateLease from try on: it reports whether an
// update succeeded. On a conflict it enters phaseEnsure (to fetch the Lease, with backoff) and
// returns false with r.phase == phaseEnsure; the ensure's end resumes it at the next try.
func (r *Renewer) retryUpdateLease(ctx context.Context, base *coordinationv1.Lease, try int) bool {
	logger := klog.FromContext(ctx)
	second := r.secondUpdate
	for i := try; i < maxUpdateRetries; i++ {
		if ctx.Err() != nil {
			return false
		}
		leaseToUpdate, err := r.newLease(ctx, base)
		if err != nil {
			logger.Error(err, "Failed to prepare lease")
		} else {
			lease, err := r.leases.Update(ctx, leaseToUpdate, metav1.UpdateOptions{})
			if err == nil {
				r.latest = lease
				return true
			}
			if ctx.Err() != nil {
				return false // stopped while the update was in flight: not a failure to report
			}
			logger.Error(err, "Failed to update lease")
			if apierrors.IsConflict(err) {
				// OptimisticLockError requires getting the newer version of the lease to proceed.
				r.phase, r.sleep, r.conflictTry, r.secondUpdate = phaseEnsure, initialBackoff, i, second
				lease, _, ok := r.ensureAttempt(ctx)
				if !ok {
					return false
				}
				r.phase, r.conflictTry = phaseIdle, -1
				base = lease
				continue
			}
		}
		if i > 0 && r.cfg.OnRepeatedHeartbeatFailure != nil {
			r.cfg.OnRepeatedHeartbeatFailure()
		}
	}
	return false
}

// ensureAttempt is one attempt of backoffEnsureLease (ensureLease): ok with the Lease; or not ok
// after doubling the sleep (200 ms to 7 s) and logging the error, or, when ctx ended, back to idle
// with nothing logged.
func (r *Renewer) ensureAttempt(ctx context.Context) (lease *coordinationv1.Lease, created, ok bool) {
	lease, created, err := r.ensureLease(ctx)
	if err == nil {
		return lease, created, true
	}
	if ctx.Err() != nil {
		r.phase = phaseIdle
		return nil, false, false
	}
	r.sleep = min(2*r.sleep, maxBackoff)
	klog.FromContext(ctx).Error(err, "Failed to ensure lease exists, will retry", "interval", r.sleep)
	return nil, false, false
}

// ensureLease gets the Lease, or creates it when it does not exist; created says which. Mirrors the
// lease controller's ensureLease: a post-process error skips the create without an error.
func (r *Renewer) ensureLease(ctx context.Context) (*coordinationv1.Lease, bool, error) {
	lease, err := r.leases.Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		leaseToCreate, err := r.newLease(ctx, nil)
		if err != nil {
			return nil, false, nil
		}
		lease, err := r.leases.Create(ctx, leaseToCreate, metav1.CreateOptions{})
		if err != nil {
			return nil, false, err
		}
		return lease, true, nil
	} else if err != nil {
		if r.cfg.Serving != nil && r.cfg.Wake != nil && transportError(err) && ctx.Err() == nil {
			// The API server cannot be reached: try again as soon as it serves, not only after the
			// backoff (up to 7 s). One probe serves every Renewer of the process.
			r.cfg.Serving.OnServing(r.cfg.Wake)
		}
		return nil, false, err
	}
	r.checkInstance(lease)
	return lease, false, nil
}

// checkInstance records another instance's renewal of the Lease (read by ensureLease, after a
// conflict or at start) in Status and the step's Result, when that renewal came after this Renewer started and
// within the Lease's duration. A renewal from before the start is the last one of an earlier run of
// this Node's agent (stopped and started again: systemd, a rollout); if that run were still alive,
// its next renewal would conflict with ours and the Lease read after the conflict would show it.
func (r *Renewer) checkInstance(lease *coordinationv1.Lease) {
	if r.cfg.Instance == "" {
		return
	}
	other, renewed, ok := OtherInstance(lease, r.cfg.Instance)
	if !ok || !renewed.After(r.started) {
		return
	}
	if r.cfg.Clock.Since(renewed) > time.Duration(r.cfg.LeaseDurationSeconds)*time.Second {
		return // gone since
	}
	r.mu.Lock()
	r.status.Duplicate, r.status.DuplicateTime = other, r.cfg.Clock.Now()
	r.mu.Unlock()
	r.result.Duplicate = other
}

// newLease is the lease controller's newLease: a new Lease (holder and name the node name) or a copy
// of base, with the duration and the renew time set, then the post-process hook.
func (r *Renewer) newLease(ctx context.Context, base *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	var lease *coordinationv1.Lease
	if base == nil {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: r.cfg.NodeName, Namespace: Namespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.cfg.NodeName)},
		}
	} else {
		lease = base.DeepCopy()
	}
	lease.Spec.LeaseDurationSeconds = ptr.To(r.cfg.LeaseDurationSeconds)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: r.cfg.Clock.Now()}
	if r.cfg.Instance != "" && lease.Annotations[AnnotationInstance] != r.cfg.Instance {
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[AnnotationInstance] = r.cfg.Instance
	}
	if r.cfg.NewLeasePostProcess != nil {
		return lease, r.cfg.NewLeasePostProcess(lease)
	}
	return lease, r.setNodeOwner(ctx, lease)
}

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
	r.mu.Unlock()
	r.result.Renewed = true
	if r.cfg.Observer != nil {
		r.cfg.Observer.ObserveLeaseRenewal(d)
	}
}

// failed records a failed Lease write or read, started at start.
func (r *Renewer) failed(err error, start time.Time) {
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
	r.mu.Unlock()
	r.result.Renewed = false
	r.result.Failure = &Failure{Reason: "lease " + reason + ": " + err.Error(), Start: start}
	if r.cfg.Observer != nil {
		r.cfg.Observer.ObserveLeaseError(reason)
	}
}

// observedLeases records the calls the Renewer makes: Create and Update are renewals; Get is the
// controller looking for its Lease (at start, or after failed updates), where NotFound is the
// expected answer.
type observedLeases struct {
	coordinationclientv1.LeaseInterface
	r *Renewer
}

func (l observedLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	start := l.r.cfg.Clock.Now()
	lease, err := l.LeaseInterface.Get(ctx, name, opts)
	if lease != nil {
		lease.ManagedFields = nil // as in write
	}
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		l.r.failed(err, start)
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
	return l.write(ctx, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Create(ctx, lease, opts) })
}

func (l observedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return l.write(ctx, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Update(ctx, lease, opts) })
}

func (l observedLeases) write(ctx context.Context, call func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	start := l.r.cfg.Clock.Now()
	lease, err := call()
	if lease != nil {
		// The Renewer keeps the Lease until the next renewal, which updates from it: without its
		// managedFields, which an update without them leaves as they are on the server (thousands of
		// simulated Nodes each keep one).
		lease.ManagedFields = nil
	}
	if err != nil {
		if ctx.Err() == nil {
			l.r.failed(err, start)
		}
	} else {
		l.r.renewed(lease, l.r.cfg.Clock.Since(start))
	}
	return lease, err
}

// setNodeOwner points the Lease's owner reference at the current Node, as the kubelet's
// setNodeOwnerFunc, and also re-points it when the Node was deleted and registered again (new UID).
// The Node comes from the lister when it has it, else from one GET once the Node is registered.
// Without a Node the Lease is still written, with no owner, and the reference is added on a later
// renewal.
func (r *Renewer) setNodeOwner(ctx context.Context, lease *coordinationv1.Lease) error {
	var node *v1.Node
	if r.cfg.Lister != nil {
		node, _ = r.cfg.Lister.Get(r.cfg.NodeName)
	}
	if node == nil && len(lease.OwnerReferences) == 0 && r.registered {
		n, err := r.cfg.Client.CoreV1().Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Lease owner reference not set: node not available yet", "node", r.cfg.NodeName, "err", err)
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
