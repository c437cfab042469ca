package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/pod"
)

// PodWorkerState is where a pod is in its lifecycle on its Node: the kubelet's PodWorkerState
// (pkg/kubelet/pod_workers.go), with the admission before it and its two ends made states of their
// own (the kubelet keeps them in podSyncStatus's fields: a rejected pod, a finished one). A pod moves
// only forward, along podWorkerTransitions: AdmitPod → SyncPod → TerminatingPod → TerminatedPod →
// FinishedPod, with AdmitPod → RejectedPod, AdmitPod → TerminatedPod and SyncPod → TerminatedPod.
// podSyncStatus.setState is the one place a state is written.
type PodWorkerState uint8

const (
	// AdmitPod: the pod is new to its worker and not yet admitted (the kubelet's HandlePodAdditions):
	// admitted, it moves to SyncPod; rejected, to RejectedPod; terminal or being deleted before it was
	// ever admitted here, to TerminatedPod.
	AdmitPod PodWorkerState = iota
	// SyncPod: the pod is running, or should be: its containers are started, kept as its spec says,
	// and its status written (the kubelet's SyncPod). A deletion moves it to TerminatingPod, a
	// terminal phase (every container exited for good) to TerminatedPod.
	SyncPod
	// TerminatingPod: the pod is being deleted; its containers are stopped within the grace period
	// (PodProvider.DeletePod) and its status written until none runs (SyncTerminatingPod).
	TerminatingPod
	// TerminatedPod: no container of the pod runs nor will again; what it held of the Node (addresses,
	// its part in admission) is released, and a pod being deleted is deleted from the API once its
	// final status is written (SyncTerminatedPod and the status manager's deletion): then FinishedPod.
	TerminatedPod
	// FinishedPod: the pod has been deleted from the API; nothing more is done for its UID (the
	// kubelet's podSyncStatus.finished).
	FinishedPod
	// RejectedPod: admission rejected the pod and its rejection (phase Failed) is written; nothing more
	// is done for its UID (the kubelet's rejectPod, after which no pod worker runs the pod).
	RejectedPod
)

var podWorkerStateNames = [...]string{"AdmitPod", "SyncPod", "TerminatingPod", "TerminatedPod", "FinishedPod", "RejectedPod"}

// String returns the state's name as the kubelet names it.
func (s PodWorkerState) String() string {
	if int(s) < len(podWorkerStateNames) {
		return podWorkerStateNames[s]
	}
	return fmt.Sprintf("PodWorkerState(%d)", uint8(s))
}

// podWorkerTransitions are the state changes a pod's worker may make, from each state: every other
// is refused (setState).
var podWorkerTransitions = [...][]PodWorkerState{
	AdmitPod:       {SyncPod, TerminatedPod, RejectedPod},
	SyncPod:        {TerminatingPod, TerminatedPod},
	TerminatingPod: {TerminatedPod},
	TerminatedPod:  {FinishedPod},
	FinishedPod:    nil,
	RejectedPod:    nil,
}

// done reports whether nothing more is done for the pod's UID in state s (FinishedPod, RejectedPod).
func (s PodWorkerState) done() bool { return s == FinishedPod || s == RejectedPod }

// setState moves the pod's worker to state to: the one place its state is written. It returns an
// error naming both states, and leaves the state, when podWorkerTransitions does not allow the move.
func (st *podSyncStatus) setState(to PodWorkerState) error {
	if int(st.state) >= len(podWorkerTransitions) || !slices.Contains(podWorkerTransitions[st.state], to) {
		return fmt.Errorf("pod worker state %s cannot become %s", st.state, to)
	}
	st.state = to
	return nil
}

// podWorkers is the kubelet's podWorkers for the pods of one Node whose Config has a PodProvider:
// what it keeps of each pod (podSyncStatus, by namespace/name), the syncs in flight (each one's
// context, cancelled when its Node stops or when a deletion arrives during a SyncPod) and what the
// pods hold of the Node (resources); and the pod's sync itself, the kubelet's SyncPod,
// SyncTerminatingPod and SyncTerminatedPod (podStep and what it calls: admission, the status writes,
// the deletion). The work queue runs one pod's sync at a time, so each podSyncStatus is its pod's
// worker's alone; mu guards only the maps and the in-flight bookkeeping.
type podWorkers struct {
	// node is the Node whose pods these are: its Config and Dependencies, and what of the Node's own
	// the syncs read (its pod CIDRs, pressure conditions, host IPs, registration) or start (the eviction
	// manager, queueing a pod). The Controller hands its pods to podStep, as the kubelet's podWorkers
	// are handed pods by the Kubelet's sync loop.
	node *Controller

	resources podResources

	mu sync.Mutex
	// statuses are the pods bound to the Node that its pod workers know, by namespace/name.
	statuses map[string]*podSyncStatus
	// inFlight are the syncs running now, by namespace/name (one at most per pod).
	inFlight map[string]*podSync
	// evictions are the pods the eviction manager evicts, by namespace/name, until their worker
	// takes them (evictionStep, then the pod's sync).
	evictions map[string]*evictResponse
	// lastEviction is when the eviction manager last evicted a pod of the Node.
	lastEviction time.Time
	// stopped is set when the Node stops: no sync starts, every running one is cancelled.
	stopped bool
	// volumesForbidden: the identity may not read ConfigMaps or Secrets (missingVolume).
	volumesForbidden atomic.Bool
	logger           *klog.Logger // the workers' logger with the node's name, made at the first sync
}

// podSync is one sync in flight.
type podSync struct {
	cancel context.CancelFunc
	// syncing says it is a SyncPod, which a deletion arriving cancels (the kubelet's UpdatePod
	// cancels an in-flight SyncPod when the pod becomes terminating).
	syncing bool
}

// podSyncStatus is what a pod's worker keeps of its pod: the kubelet's podSyncStatus. Only the pod's
// own sync reads or writes it.
type podSyncStatus struct {
	uid types.UID
	// state is where the pod is in its lifecycle; written by setState only.
	state   PodWorkerState
	created bool // the provider's CreatePod succeeded
	killed  bool // the provider's DeletePod succeeded
	// generation is the pod's metadata.generation the provider was last told of.
	generation int64
	// writtenRV is the resourceVersion of the pod after this process's last status write: a copy
	// older than it (the informer has not delivered that write yet) is not written against. Read by
	// the informer's event handler too (ownWrite).
	writtenRV atomic.Uint64
	// awaitingWrite: a pass found the informer's copy older than writtenRV and left the pod to the
	// event of that write (which ownWrite must then not drop).
	awaitingWrite atomic.Bool
	// annotations are those of the last copy seen: UpdatePod is told when they change. The worker
	// keeps no copy of the pod itself (held for every pod, a copy older than the informer's, e.g. the
	// one before the worker's own status write, would double what the pods cost).
	annotations map[string]string
	// final is the informer's last copy of the pod once it has left the API (its deletion event's
	// object), for DeletePod; nil until then. Set by the event handler, under podWorkers.mu.
	final metav1.Object
	// evict is why the kubelet fails the pod while it runs (a pod sync handler's ShouldEvict: its
	// active deadline, the eviction manager): its status is Failed with this reason and message once its
	// containers stopped; nil otherwise.
	evict *evictResponse
	// resizePending is the message of a resize the allocation manager deferred ("" for none), and
	// resizeToldGen the generation whose deferral an Event told.
	resizePending string
	resizeToldGen int64
	// killedAt and killGrace are when a pod failed while running (evict) was killed, and the grace
	// period it was given (its terminationGracePeriodSeconds): the provider stops its containers as for
	// a deletion at killedAt (killedPod).
	killedAt  time.Time
	killGrace int64
}

// evictResponse is the kubelet's lifecycle.ShouldEvictResponse: the reason and message of the pod's
// Failed status; for the eviction manager's evictions, the grace period it kills with and its
// DisruptionTarget condition.
type evictResponse struct {
	reason, message string
	// gracePeriod overrides the pod's terminationGracePeriodSeconds; nil: the pod's.
	gracePeriod *int64
	// disruptionTarget adds the DisruptionTarget condition (TerminationByKubelet) once the pod is
	// terminal and none of its containers runs.
	disruptionTarget bool
}

// begin starts a sync of pod key: false when the Node is stopped (the item is a no-op). Its context
// ends with the timeout, when the Node stops, or when a deletion of the pod arrives while it syncs.
func (w *podWorkers) begin(ctx context.Context, nodeName, key string, timeout time.Duration) (context.Context, func(), bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil, nil, false
	}
	if w.logger == nil {
		l := klog.FromContext(ctx).WithValues("node", nodeName)
		w.logger = &l
	}
	if w.inFlight == nil {
		w.inFlight = map[string]*podSync{}
	}
	syncCtx, cancel := context.WithTimeout(klog.NewContext(ctx, *w.logger), timeout)
	w.inFlight[key] = &podSync{cancel: cancel}
	return syncCtx, func() {
		cancel()
		w.mu.Lock()
		delete(w.inFlight, key)
		w.mu.Unlock()
	}, true
}

// syncing marks the sync of key in flight as a SyncPod: a deletion arriving cancels it.
func (w *podWorkers) syncing(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.inFlight[key]; s != nil {
		s.syncing = true
	}
}

// terminationArrived cancels the SyncPod of key in flight, if any: the pod is being deleted, and the
// sync starts again as a SyncTerminatingPod (the work queue runs the key again once this run ends).
func (w *podWorkers) terminationArrived(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.inFlight[key]; s != nil && s.syncing {
		s.cancel()
		s.syncing = false
	}
}

// requestEviction records the eviction manager's eviction of pod key, for its worker.
func (w *podWorkers) requestEviction(key string, e *evictResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.evictions == nil {
		w.evictions = map[string]*evictResponse{}
	}
	w.evictions[key] = e
}

// nextEviction returns how long after now the eviction manager may evict again: 0 when a monitoring
// period has passed since its last eviction.
func (w *podWorkers) nextEviction(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastEviction.IsZero() {
		return 0
	}
	return max(0, w.lastEviction.Add(EvictionMonitoringPeriod).Sub(now))
}

// evicted records an eviction at now.
func (w *podWorkers) evicted(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastEviction = now
}

// takeEviction returns the eviction of pod key requested, if any, and forgets it.
func (w *podWorkers) takeEviction(key string) *evictResponse {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.evictions[key]
	delete(w.evictions, key)
	return e
}

// evicting reports whether an eviction of pod key waits for its worker.
func (w *podWorkers) evicting(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.evictions[key]
	return ok
}

// stop stops every sync and reports whether one is still running (Done waits for them).
func (w *podWorkers) stop() (running bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, s := range w.inFlight {
		s.cancel()
	}
	return len(w.inFlight) > 0
}

// idle reports whether no sync runs.
func (w *podWorkers) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inFlight) == 0
}

// statusFor returns the worker's record of pod key with uid, made when new; old is the record of an
// older pod under the same name (deleted and created again), taken out, for cleanup.
func (w *podWorkers) statusFor(key string, uid types.UID) (st, old *podSyncStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st = w.statuses[key]
	if st != nil && st.uid == uid {
		return st, nil
	}
	old = st
	st = &podSyncStatus{uid: uid}
	if w.statuses == nil {
		w.statuses = map[string]*podSyncStatus{}
	}
	w.statuses[key] = st
	return st, old
}

// remove forgets pod key and returns its record (nil when unknown).
func (w *podWorkers) remove(key string) *podSyncStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.statuses[key]
	delete(w.statuses, key)
	return st
}

// deleted records final, the informer's last copy of pod key (uid) as its deletion event gave it, in
// the pod's status if a worker knows the pod: DeletePod is given it once the pod has left the API.
func (w *podWorkers) deleted(key string, uid types.UID, final metav1.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.statuses[key]; st != nil && st.uid == uid {
		st.final = final
	}
}

// lastCopy returns the last copy of pod key that st's worker knows of, once the pod has left the API:
// the deletion event's (deleted), else a pod with its namespace, name, UID and Node only (a pod that
// left while the informer was relisting, or replaced under its name).
func (w *podWorkers) lastCopy(key string, st *podSyncStatus) *v1.Pod {
	w.mu.Lock()
	final := st.final
	w.mu.Unlock()
	if p := toPod(final); p != nil {
		return p
	}
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: st.uid},
		Spec: v1.PodSpec{NodeName: w.node.cfg.NodeName}}
}

// knows reports whether a worker knows pod key with uid.
func (w *podWorkers) knows(key string, uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.statuses[key]
	return st != nil && st.uid == uid
}

// ownWrite reports whether rv, of an update of pod key (uid) the informer tells of, is this
// process's last status write of it, and no pass waits for that write's event: the update is only
// what a pass wrote, so a pass over it would compute and write nothing new (the kubelet does not sync
// a pod for an update of its status alone either: config.checkAndUpdatePod).
func (w *podWorkers) ownWrite(key string, uid types.UID, rv uint64) bool {
	w.mu.Lock()
	st := w.statuses[key]
	w.mu.Unlock()
	return st != nil && st.uid == uid && rv != 0 && st.writtenRV.Load() == rv && !st.awaitingWrite.Load()
}

// len returns how many pods the workers know.
func (w *podWorkers) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.statuses)
}

// podStep is one pass of the pod's worker over pod key (namespace/name) of this Node, as the kubelet
// runs it: a pod gone from the API is cleaned up (its containers stopped, what it held released);
// a pod new to the worker goes through admission (HandlePodAdditions); then the sync of its state:
// SyncPod, SyncTerminatingPod or SyncTerminatedPod, each writing the status the kubelet's status
// manager would. It returns when to look again.
func (w *podWorkers) podStep(ctx context.Context, key string) result {
	switch key {
	case evictionManagerKey:
		return w.node.evictionStep(ctx)
	case danglingPodsKey:
		return w.deleteDanglingPods(ctx)
	}
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	p, err := w.node.deps.Pods.Get(namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return w.forgetPod(ctx, key)
	case err != nil:
		return result{after: never, err: err}
	case p.Spec.NodeName != w.node.cfg.NodeName:
		return result{after: never}
	case !w.node.registered.Load():
		return result{after: never} // registration queues every pod once done
	}
	st, old := w.statusFor(key, p.UID)
	if old != nil { // deleted and created again under the same name
		w.cleanupPod(ctx, key, old)
	}
	prevAnnotations := st.annotations
	st.annotations = p.Annotations
	if st.state.done() {
		return result{after: never}
	}
	if st.state == AdmitPod {
		if r, done := w.handlePodAddition(ctx, key, p, st); done {
			return r
		}
	}
	// The kubelet's UpdatePod: a deletion, or the eviction manager's kill, moves a running pod on to
	// terminating.
	if evict := w.takeEviction(key); evict != nil && st.state == SyncPod && st.evict == nil {
		st.evict = evict
		if err := st.setState(TerminatingPod); err != nil {
			return result{after: never, err: err}
		}
	}
	if p.DeletionTimestamp != nil && st.state == SyncPod {
		if err := st.setState(TerminatingPod); err != nil {
			return result{after: never, err: err}
		}
	}
	switch st.state {
	case SyncPod:
		w.syncing(key)
		return w.syncPod(ctx, key, p, prevAnnotations, st)
	case TerminatingPod:
		return w.syncTerminatingPod(ctx, key, p, st)
	default:
		return w.syncTerminatedPod(ctx, key, p, st)
	}
}

// handlePodAddition is the kubelet's HandlePodAdditions for a pod its worker has not seen: a pod
// terminal before this process saw it run is terminated at once (nothing of it runs here); one that
// an earlier run admitted (status.startTime) is admitted again; one being deleted before it was ever
// admitted is deleted; any other goes through admission, and a rejected one gets the kubelet's
// rejection. done: the step is over, with r.
func (w *podWorkers) handlePodAddition(ctx context.Context, key string, p *v1.Pod, st *podSyncStatus) (r result, done bool) {
	to := SyncPod
	switch {
	case isTerminalPhase(p.Status.Phase):
		to = TerminatedPod
	case p.Status.StartTime != nil:
		w.resources.countAdmitted(key, p)
	case p.DeletionTimestamp != nil:
		to = TerminatedPod // never started: nothing to stop
	default:
		res, err := w.admit(key, p)
		if err != nil {
			// The Node left the informer for a moment (deleted, registered again): decided once it is
			// back (registration queues every pod of the Node).
			return result{after: PodSyncBackOff}, true
		}
		if !res.Admit {
			return w.rejectPod(ctx, p, st, res), true
		}
	}
	if err := st.setState(to); err != nil {
		return result{after: never, err: err}, true
	}
	return result{}, false
}

// syncPod is the kubelet's SyncPod for a pod its Node runs: a pod past its active deadline moves on to
// TerminatingPod, failed; otherwise start its containers (with the addresses it is given), tell the
// provider of a change of its spec or annotations, and write the status of what runs. A pod whose
// phase turns terminal moves on to TerminatedPod.
func (w *podWorkers) syncPod(ctx context.Context, key string, p *v1.Pod, prevAnnotations map[string]string, st *podSyncStatus) (r result) {
	evict, deadline := w.activeDeadline(p, p.Status.StartTime)
	if evict != nil {
		// The kubelet's activeDeadlineHandler: Failed, DeadlineExceeded; the pod worker kills it.
		w.node.deps.Recorder.Event(p, v1.EventTypeNormal, evict.reason, evict.message)
		st.evict = evict
		if err := st.setState(TerminatingPod); err != nil {
			return result{after: never, err: err}
		}
		return w.syncTerminatingPod(ctx, key, p, st)
	}
	defer func() { // synced again at the deadline (the kubelet's sync loop asks its activeDeadlineHandler every second); at once when past
		if !deadline.IsZero() && r.err == nil && r.after != never {
			r.after = min(r.after, max(deadline.Sub(w.node.deps.Clock.Now()), time.Millisecond))
		}
	}()
	if !st.created && !isTerminalPhase(p.Status.Phase) {
		if vol, msg := w.missingVolume(ctx, p); vol != "" {
			// The kubelet's volume manager: the pod waits ContainerCreating until its volumes mount.
			return w.notStarted(ctx, key, p, st, ReasonFailedMount, msg)
		}
		if r, ok := w.prepareDynamicResources(ctx, key, p, st); !ok {
			return r
		}
		ips, err := w.ensurePodIPs(key, p)
		if err != nil {
			return w.sandboxFailed(ctx, key, p, st, err)
		}
		withIPs := *p // shallow: the provider reads it, as every pod it is given (PodProvider)
		withIPs.Status.PodIPs = toPodIPs(ips)
		if len(withIPs.Status.HostIPs) == 0 {
			// The Node's addresses, as the kubelet gives the downward API's status.hostIP(s) before the
			// pod's status has them (podFieldSelectorRuntimeValue, getHostIPsAnyWay).
			withIPs.Status.HostIPs = toHostIPs(w.node.hostIPs())
		}
		if err := w.node.cfg.Pods.CreatePod(ctx, &withIPs); err != nil {
			return result{after: never, err: fmt.Errorf("creating pod %s: %w", key, err)}
		}
		st.created = true
	} else if st.created {
		allocated, resized := w.resizePod(key, p, st)
		if resized || p.Generation != st.generation || !maps.Equal(prevAnnotations, p.Annotations) {
			if err := w.node.cfg.Pods.UpdatePod(ctx, allocated); err != nil {
				return result{after: never, err: fmt.Errorf("updating pod %s: %w", key, err)}
			}
		}
		p = allocated
	}
	st.generation = p.Generation
	if st.resizePending != "" {
		defer func() { // a deferred resize is tried again
			if r.err == nil && (r.after == never || r.after > PodSyncBackOff) {
				r.after = PodSyncBackOff
			}
		}()
	}
	status, recheck, res, ok := w.syncPodStatus(ctx, key, p, p, st, false)
	if !ok {
		return res
	}
	if isTerminalPhase(status.Phase) {
		if err := st.setState(TerminatedPod); err != nil {
			return result{after: never, err: err}
		}
		return w.syncTerminatedPod(ctx, key, p, st)
	}
	if deadline.IsZero() {
		// The pod's first start: its startTime is this pass's own write, whose update brings no pass
		// (ownWrite). The kubelet's activeDeadlineHandler reads the status manager's copy, not the
		// API's: the deadline counts from the startTime just written.
		_, deadline = w.activeDeadline(p, status.StartTime)
	}
	return result{after: recheck}
}

// PodSyncBackOff is when the kubelet's pod worker syncs a pod again after a sync that failed, e.g. its
// sandbox could not be created (pod_workers.go's backOffPeriod, 10 s).
const PodSyncBackOff = 10 * time.Second

// ReasonFailedCreatePodSandBox is the kubelet's Event reason for a sandbox that could not be created.
const ReasonFailedCreatePodSandBox = "FailedCreatePodSandBox"

// sandboxFailed is a SyncPod whose sandbox could not be created, here for want of an address (the pod
// CIDR exhausted, no pod CIDR): as the kubelet's, a Warning FailedCreatePodSandBox Event "Failed to
// create pod sandbox: ..." and the status of a pod whose sandbox is not ready (ContainerCreating, its
// startTime and host IPs, no pod IP); tried again after PodSyncBackOff, and at once when a pod of the
// Node gives its addresses back.
func (w *podWorkers) sandboxFailed(ctx context.Context, key string, p *v1.Pod, st *podSyncStatus, cause error) result {
	w.resources.waitForIPs(key)
	return w.notStarted(ctx, key, p, st, ReasonFailedCreatePodSandBox, fmt.Sprintf("Failed to create pod sandbox: %v", cause))
}

// notStarted is a SyncPod that could not start the pod yet: a Warning Event (reason, message) and the
// status of a pod whose sandbox is not ready (ContainerCreating, its startTime and host IPs, no pod
// IP); tried again after PodSyncBackOff.
func (w *podWorkers) notStarted(ctx context.Context, key string, p *v1.Pod, st *podSyncStatus, reason, message string) result {
	w.node.deps.Recorder.Event(p, v1.EventTypeWarning, reason, message)
	rt := w.completeRuntimeStatus(&pod.RuntimeStatus{Sandbox: pod.SandboxNotReady}, key, st.uid)
	status, err := w.generatePodStatus(p, rt, nil)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Pod status not written", "pod", klog.KObj(p))
		return result{after: PodSyncBackOff}
	}
	if !w.staleCopy(p, st) {
		if err := w.patchPodStatus(ctx, p, st, &status); err != nil {
			return patchFailed(err)
		}
	}
	return result{after: PodSyncBackOff}
}

// activeDeadline is the kubelet's activeDeadlineHandler (active_deadline.go, pastActiveDeadline): a
// pod with spec.activeDeadlineSeconds that has been active that long since startTime (its
// status.startTime, or the one this process just wrote: the kubelet reads its status manager's copy)
// is to be failed, DeadlineExceeded "Pod was active on the node longer than the specified deadline";
// and the deadline (zero: none, or not started: startTime nil).
func (w *podWorkers) activeDeadline(p *v1.Pod, startTime *metav1.Time) (*evictResponse, time.Time) {
	if p.Spec.ActiveDeadlineSeconds == nil || startTime == nil || startTime.IsZero() {
		return nil, time.Time{}
	}
	deadline := startTime.Add(time.Duration(*p.Spec.ActiveDeadlineSeconds) * time.Second)
	if w.node.deps.Clock.Now().Before(deadline) {
		return nil, deadline
	}
	return &evictResponse{reason: ReasonDeadlineExceeded, message: MessageDeadlineExceeded}, deadline
}

// The kubelet's active deadline reason and message (active_deadline.go).
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	MessageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// syncTerminatingPod is the kubelet's SyncTerminatingPod: stop the pod's containers within its grace
// period (PodProvider.DeletePod, once) and write the status until none runs; then TerminatedPod.
func (w *podWorkers) syncTerminatingPod(ctx context.Context, key string, p *v1.Pod, st *podSyncStatus) result {
	killed := w.killedPod(p, st)
	if !st.killed {
		if err := w.node.cfg.Pods.DeletePod(ctx, killed); err != nil {
			return result{after: never, err: fmt.Errorf("stopping pod %s: %w", key, err)}
		}
		st.killed = true
	}
	st.generation = p.Generation
	status, recheck, r, ok := w.syncPodStatus(ctx, key, p, killed, st, true)
	if !ok {
		return r
	}
	if isTerminalPhase(status.Phase) && (st.evict == nil || !anyRunningStatus(&status)) {
		if err := st.setState(TerminatedPod); err != nil {
			return result{after: never, err: err}
		}
		return w.syncTerminatedPod(ctx, key, p, st)
	}
	return result{after: recheck}
}

// killedPod returns the pod as the provider is to stop it: p itself when it is being deleted; for a
// pod the kubelet fails while it runs (evict), a copy with deletionTimestamp and
// deletionGracePeriodSeconds set as for a deletion when it was killed, with its
// terminationGracePeriodSeconds (the kubelet's killPod without a grace period override).
func (w *podWorkers) killedPod(p *v1.Pod, st *podSyncStatus) *v1.Pod {
	if st.evict == nil || (p.DeletionTimestamp != nil && st.killedAt.IsZero()) {
		return p
	}
	if st.killedAt.IsZero() {
		st.killedAt, st.killGrace = w.node.deps.Clock.Now(), v1.DefaultTerminationGracePeriodSeconds
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
			st.killGrace = *g
		}
		if g := st.evict.gracePeriod; g != nil {
			st.killGrace = *g
		}
	}
	k := p.DeepCopy()
	k.DeletionTimestamp = &metav1.Time{Time: st.killedAt.Add(time.Duration(st.killGrace) * time.Second)}
	k.DeletionGracePeriodSeconds = &st.killGrace
	return k
}

// syncTerminatedPod is the kubelet's SyncTerminatedPod and the status manager's deletion: what the pod
// held of the Node is released (its sandbox is gone) and, once it is being deleted, the pod is deleted
// from the API (a pod the provider ran is first told to the provider, and its final status written).
func (w *podWorkers) syncTerminatedPod(ctx context.Context, key string, p *v1.Pod, st *podSyncStatus) result {
	if r, ok := w.unprepareDynamicResources(ctx, key, p); !ok {
		return r
	}
	w.releasePod(key, st.uid)
	if p.DeletionTimestamp == nil {
		return result{after: never}
	}
	if st.created && !st.killed {
		if err := w.node.cfg.Pods.DeletePod(ctx, p); err != nil {
			return result{after: never, err: fmt.Errorf("stopping pod %s: %w", key, err)}
		}
		st.killed = true
		if _, _, r, ok := w.syncPodStatus(ctx, key, p, p, st, true); !ok {
			return r
		}
	}
	return w.deletePod(ctx, p, st)
}

// syncPodStatus writes the status of p (the informer's copy) from the provider's view of runtimePod (p,
// or the copy killedPod gives) (the kubelet's generateAPIPodStatus and the status manager's write).
// terminating: the pod is being deleted, and
// its containers have stopped for good once none runs. It returns the status and when to look again;
// ok false: nothing more this step, with r (the write failed, or waits for the informer's copy).
func (w *podWorkers) syncPodStatus(ctx context.Context, key string, p, runtimePod *v1.Pod, st *podSyncStatus, terminating bool) (status v1.PodStatus, recheck time.Duration, r result, ok bool) {
	rs, err := w.node.cfg.Pods.GetPodStatus(ctx, runtimePod)
	if err != nil {
		return status, 0, result{after: never, err: fmt.Errorf("pod %s status: %w", key, err)}, false
	}
	rt := w.completeRuntimeStatus(rs.Status, key, st.uid)
	running := anyRunning(rt)
	rt.Terminal = rt.Terminal || (terminating && !running)
	status, err = w.generatePodStatus(p, rt, st.evict)
	if err == nil && st.resizePending != "" && !isTerminalPhase(status.Phase) {
		setResizePending(p, &status, st.resizePending, metav1.NewTime(w.node.deps.Clock.Now()).Rfc3339Copy())
	}
	if err == nil && isTerminalPhase(status.Phase) && !running && rt.Sandbox == pod.SandboxReady {
		// The kubelet's pod worker kills a pod whose phase turned terminal (syncTerminatingPod: killPod
		// stops its sandbox) and writes the status it generates afterwards, PodReadyToStartContainers
		// False "pod sandbox is not ready"; its sandbox is gone whatever the provider still says. One
		// write here where the kubelet makes two (the terminal phase, then the stopped sandbox).
		rt.Sandbox = pod.SandboxNotReady
		status, err = w.generatePodStatus(p, rt, st.evict)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Pod status not written", "pod", klog.KObj(p))
		return status, 0, result{after: PodReconcilePeriod}, false
	}
	if w.staleCopy(p, st) {
		// The informer has not delivered this process's last write yet: its event queues the pod
		// again, and the status is computed against it then (no write of what is written already).
		// Said before the informer is read again: an event it told before this (and that ownWrite
		// dropped) left its copy in the informer already, found here, and the pod is synced again now.
		st.awaitingWrite.Store(true)
		if cur, err := w.node.deps.Pods.Get(p.Namespace, p.Name); err == nil && cur.UID == p.UID && !w.staleCopy(cur, st) {
			return status, 0, result{after: 0}, false
		}
		return status, 0, result{after: never}, false
	}
	st.awaitingWrite.Store(false)
	if err := w.patchPodStatus(ctx, p, st, &status); err != nil {
		return status, 0, patchFailed(err), false
	}
	recheck = PodReconcilePeriod
	if rs.RecheckAfter > 0 && rs.RecheckAfter < recheck {
		recheck = rs.RecheckAfter
	}
	return status, recheck, result{}, true
}

// forgetPod forgets the pod known under key, which left the API: its containers are stopped and what
// it held released. It returns a result that does not queue the key again.
func (w *podWorkers) forgetPod(ctx context.Context, key string) result {
	if st := w.remove(key); st != nil {
		w.cleanupPod(ctx, key, st)
	}
	return result{after: never}
}

// cleanupPod stops the containers of a pod the worker no longer has (gone from the API, or whose
// name a new pod took) and releases what it held: the kubelet's HandlePodCleanups.
func (w *podWorkers) cleanupPod(ctx context.Context, key string, st *podSyncStatus) {
	if st.created {
		if err := w.node.cfg.Pods.DeletePod(ctx, w.lastCopy(key, st)); err != nil {
			klog.FromContext(ctx).Error(err, "Stopping a pod that left the API", "pod", key)
		}
	}
	w.releasePod(key, st.uid)
}

// releasePod gives back what pod key held of the Node, and queues the pods that wait for an address
// when it gave addresses back.
func (w *podWorkers) releasePod(key string, uid types.UID) {
	for _, waiting := range w.resources.release(key, uid) {
		w.node.addPod(waiting)
	}
}

// patchFailed is the result of a step whose status write failed: again after PodStatusRetryPeriod when
// the API server refused it (told already: podStatusRefused), else after the work queue's backoff.
func patchFailed(err error) result {
	if _, ok := errors.AsType[*refusedError](err); ok {
		return result{after: PodStatusRetryPeriod}
	}
	return result{after: never, err: err}
}

// anyRunningStatus reports whether a container of the status runs.
func anyRunningStatus(s *v1.PodStatus) bool {
	for _, l := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for _, cs := range l {
			if cs.State.Running != nil {
				return true
			}
		}
	}
	return false
}

func isTerminalPhase(phase v1.PodPhase) bool {
	return phase == v1.PodSucceeded || phase == v1.PodFailed
}
