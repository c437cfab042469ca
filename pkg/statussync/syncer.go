// Package statussync keeps the Node's status true: a Syncer registers the Node if needed, runs the
// ordered setters on a copy of it, and patches nodes/status when something changed or the report
// period has passed (the kubelet's syncNodeStatus / updateNodeStatus / tryUpdateNodeStatus in
// pkg/kubelet/kubelet_node_status.go); FastStatusUpdateOnce gets a new node Ready within one 100 ms
// tick of the runtime being ready (the kubelet's fastStatusUpdateOnce, kubernetes#112618).
package statussync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// NodeStatusUpdateRetry is how many tries one sync makes, as the kubelet's nodeStatusUpdateRetry.
const NodeStatusUpdateRetry = 5

// Config configures a Syncer.
type Config struct {
	// Client GETs and PATCHes the Node (the kubelet's heartbeat client); required.
	Client kubernetes.Interface
	// Lister reads the Node from an informer cache for the first try of each sync; required.
	Lister corelisters.NodeLister
	// NodeName is the Node's name; required.
	NodeName string
	// Setters compute the status, in order.
	Setters []nodestatus.Setter
	// Register registers the Node; nil when --register-node=false. It should block until registered or ctx ends.
	Register func(ctx context.Context) error
	// UpdateRuntimeUp refreshes the runtime state; called by FastStatusUpdateOnce on each tick.
	UpdateRuntimeUp func(ctx context.Context)
	// UpdateFrequency is --node-status-update-frequency (10 s); ReportFrequency is
	// --node-status-report-frequency (5 m).
	UpdateFrequency, ReportFrequency time.Duration
	// OnRepeatedHeartbeatFailure runs after each failed try but the first (close idle connections).
	OnRepeatedHeartbeatFailure func()
	// CacheLive, if set, reports whether the Lister's informer is connected (its watch open now). A
	// GET that finds the cache at the API server's resourceVersion clears the stale flag (see
	// ListerMayBeStale) only while it is: a cache that matches while its watch is down misses the
	// next change. Nil counts the informer as always connected.
	CacheLive func() bool
	// OnPatched is called with the Node the API server returned after each successful status patch.
	OnPatched func(node *v1.Node)
	// OnUnchanged is called after each sync that found the status unchanged and patched nothing, with
	// the Node as read: its status is what the API server already has. Together with OnPatched it
	// tells a caller the posted status after every successful sync (e.g. for a Ready gauge), also
	// when the Node was created Ready at registration and nothing has changed since.
	OnUnchanged func(node *v1.Node)
	// OnSync is called after each sync with "patched", "unchanged" or "error".
	OnSync func(result string)
	// ObservePatch is called after each PATCH with its duration and, on error, the API reason.
	ObservePatch func(d time.Duration, reason string)
	// Clock is injected for tests; default the real clock. Rand returns a float in [0,1); default math/rand.
	Clock clock.WithTicker
	Rand  func() float64
}

// Syncer posts the Node's status. Build with New; run with Run; safe for concurrent use.
type Syncer struct {
	cfg Config

	mu                         sync.Mutex // the kubelet's syncNodeStatusMux; held for a whole sync
	lastStatusReportTime       time.Time
	delayAfterNodeStatusChange time.Duration
	trigger                    chan struct{}

	// registered and lastSync (unix nanos) are read by health checks while a sync may be blocked in
	// registration, so they are atomics rather than fields behind mu.
	registered atomic.Bool
	lastSync   atomic.Int64
	// listerStale is set while the informer may have missed changes to the Node (see
	// ListerMayBeStale); syncs then read the Node from the API server on their first try too.
	listerStale atomic.Bool
}

// New validates cfg and fills defaults. It errors when Client, Lister or NodeName is missing or a
// frequency is not positive.
func New(cfg Config) (*Syncer, error) {
	if cfg.Client == nil || cfg.Lister == nil || cfg.NodeName == "" {
		return nil, fmt.Errorf("statussync: Config needs Client, Lister and NodeName")
	}
	if cfg.UpdateFrequency <= 0 || cfg.ReportFrequency <= 0 {
		return nil, fmt.Errorf("statussync: UpdateFrequency %v and ReportFrequency %v must be positive", cfg.UpdateFrequency, cfg.ReportFrequency)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.UpdateRuntimeUp == nil {
		cfg.UpdateRuntimeUp = func(context.Context) {}
	}
	s := &Syncer{cfg: cfg, trigger: make(chan struct{}, 1)}
	s.registered.Store(cfg.Register == nil)
	return s, nil
}

// Run calls SyncNodeStatus every UpdateFrequency with 0.04 jitter, sliding (the period starts when a
// sync ends), until ctx ends. A Trigger starts the next sync at once.
func (s *Syncer) Run(ctx context.Context) {
	for {
		s.SyncNodeStatus(ctx)
		t := s.cfg.Clock.NewTimer(wait.Jitter(s.cfg.UpdateFrequency, 0.04))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-s.trigger:
			t.Stop()
		}
	}
}

// Trigger asks Run to sync now rather than at the end of the period, e.g. when the runtime's
// readiness changed, so a runtime that comes back shows Ready within one poll instead of one period.
// It never blocks; triggers while a sync is pending coalesce.
func (s *Syncer) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// ListerMayBeStale tells the syncer that the informer may have missed changes to the Node because
// the API server could not be reached (a heartbeat failed): its watch reconnects with a backoff of up
// to a minute, during which the cached Node can be older than, say, the node lifecycle controller's
// Ready=Unknown. Until ListerUpdated, every try reads the Node from the API server. A failed try of a
// sync calls it too.
func (s *Syncer) ListerMayBeStale() { s.listerStale.Store(true) }

// ListerUpdated tells the syncer that the informer delivered an event for the Node, so its cache is
// current again; wire it to the Node informer's event handler.
func (s *Syncer) ListerUpdated() { s.listerStale.Store(false) }

// LastSync returns when the status was last synced successfully (patched or found unchanged); zero before.
func (s *Syncer) LastSync() time.Time {
	n := s.lastSync.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Registered reports whether the Node is registered (always true with registration disabled).
func (s *Syncer) Registered() bool { return s.registered.Load() }

// SyncNodeStatus registers the Node if needed, then updates its status with retries; errors are
// logged. Mirrors syncNodeStatus.
func (s *Syncer) SyncNodeStatus(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked(ctx)
}

func (s *Syncer) syncLocked(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if !s.registered.Load() {
		if err := s.cfg.Register(ctx); err != nil {
			logger.Error(err, "Unable to register node", "node", s.cfg.NodeName)
			s.onSync("error")
			return
		}
		s.registered.Store(true)
	}
	if err := s.updateNodeStatus(ctx); err != nil {
		if ctx.Err() != nil {
			return // shutting down: nothing was posted, nothing to report
		}
		logger.Error(err, "Unable to update node status", "node", s.cfg.NodeName)
		s.onSync("error")
	}
}

// updateNodeStatus makes up to NodeStatusUpdateRetry tries. A Node the API server says is gone
// (deleted by an admin) is registered again and the tries go on: the kubelet leaves it deleted; we
// restore it. It returns an error wrapping the last try's error when every try failed.
func (s *Syncer) updateNodeStatus(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var err error
	for i := 0; i < NodeStatusUpdateRetry; i++ {
		if err = s.tryUpdateNodeStatus(ctx, i); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("update node status: %w", err)
		}
		if i > 0 && s.cfg.OnRepeatedHeartbeatFailure != nil {
			s.cfg.OnRepeatedHeartbeatFailure()
		}
		if i == 0 && apierrors.IsNotFound(err) {
			// The informer has not seen the Node yet (just registered): the next try GETs it.
			logger.V(2).Info("Node not in the informer cache yet, will get it from the API server", "err", err)
		} else {
			logger.Error(err, "Error updating node status, will retry", "try", i+1)
			s.ListerMayBeStale()
		}
		if errors.Is(err, errNodeGone) && s.cfg.Register != nil {
			logger.Info("Node object was deleted; registering it again", "node", s.cfg.NodeName)
			s.registered.Store(false)
			if rerr := s.cfg.Register(ctx); rerr != nil {
				return fmt.Errorf("registering deleted node again: %w", rerr)
			}
			s.registered.Store(true)
		}
	}
	return fmt.Errorf("update node status exceeds retry count: %w", err)
}

var errNodeGone = errors.New("node not found on the API server")

// tryUpdateNodeStatus reads the Node (try 0 from the lister unless it may be stale, later tries from
// the API server), runs the setters, and patches if the status changed or the report period expired.
// Mirrors tryUpdateNodeStatus.
func (s *Syncer) tryUpdateNodeStatus(ctx context.Context, try int) error {
	var original *v1.Node
	var err error
	if try == 0 && !s.listerStale.Load() {
		original, err = s.cfg.Lister.Get(s.cfg.NodeName)
	} else {
		original, err = s.cfg.Client.CoreV1().Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("getting node %q: %w: %w", s.cfg.NodeName, errNodeGone, err)
		}
		if err == nil && s.listerStale.Load() && (s.cfg.CacheLive == nil || s.cfg.CacheLive()) {
			// The cache holds what the API server holds: it is current again, even if no event comes
			// (an unchanged Node sends none), so later syncs read it and make no periodic GETs.
			if cached, cerr := s.cfg.Lister.Get(s.cfg.NodeName); cerr == nil && original.ResourceVersion != "" && cached.ResourceVersion == original.ResourceVersion {
				s.ListerUpdated()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("getting node %q: %w", s.cfg.NodeName, err)
	}
	if s.lastStatusReportTime.IsZero() {
		// No report of our own yet: the Node's Ready heartbeat is when its status was last posted (by
		// the Create at registration, or by an earlier run of this agent). Counting it avoids an
		// empty patch right after registration; the first report interval is still offset randomly.
		if _, ready := nodeutil.GetNodeCondition(&original.Status, v1.NodeReady); ready != nil && !ready.LastHeartbeatTime.IsZero() {
			s.lastStatusReportTime = ready.LastHeartbeatTime.Time
			s.delayAfterNodeStatusChange = s.calculateDelay()
		}
	}
	node, changed := s.updateNode(ctx, original)
	if err := ctx.Err(); err != nil {
		// Shutting down: the setters' CRI calls failed on the cancelled context, so node would say
		// "containerd://Unknown" and list no images. Post nothing rather than that.
		return fmt.Errorf("node status not patched: %w", err)
	}
	if !changed && !s.isUpdateStatusPeriodExpired() {
		s.lastSync.Store(s.cfg.Clock.Now().UnixNano())
		if s.cfg.OnUnchanged != nil {
			s.cfg.OnUnchanged(original)
		}
		s.onSync("unchanged")
		return nil
	}
	if changed || s.lastStatusReportTime.IsZero() {
		s.delayAfterNodeStatusChange = s.calculateDelay()
	} else {
		s.delayAfterNodeStatusChange = 0
	}
	if _, err := s.patchNodeStatus(ctx, original, node); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("patching node %q status: %w: %w", s.cfg.NodeName, errNodeGone, err)
		}
		return fmt.Errorf("patching node %q status: %w", s.cfg.NodeName, err)
	}
	s.onSync("patched")
	return nil
}

func (s *Syncer) isUpdateStatusPeriodExpired() bool {
	return s.cfg.Clock.Since(s.lastStatusReportTime) >= s.cfg.ReportFrequency+s.delayAfterNodeStatusChange
}

// calculateDelay returns a random offset in [-50%, +50%) of the report frequency (kubernetes#128640).
func (s *Syncer) calculateDelay() time.Duration {
	return time.Duration(float64(s.cfg.ReportFrequency) * (-0.5 + s.cfg.Rand()))
}

// updateNode returns a copy of original with the kubernetes.io/os and arch labels restored and the
// setters applied, and whether its status (heartbeat times ignored) or those labels changed.
// Mirrors updateNode; the status patch carries the label change.
func (s *Syncer) updateNode(ctx context.Context, original *v1.Node) (*v1.Node, bool) {
	node := original.DeepCopy()
	labelsChanged := false
	for k, v := range map[string]string{v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH} {
		if node.Labels[k] != v {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = v
			labelsChanged = true
		}
	}
	s.SetNodeStatus(ctx, node)
	return node, labelsChanged || NodeStatusHasChanged(&original.Status, &node.Status)
}

// SetNodeStatus runs the setters in order on node, in place; an error is logged and the rest still
// run (the kubelet's setNodeStatus). The registrar uses it for the initial Node's first status.
func (s *Syncer) SetNodeStatus(ctx context.Context, node *v1.Node) {
	logger := klog.FromContext(ctx)
	for i, f := range s.cfg.Setters {
		if err := f(ctx, node); err != nil {
			logger.Error(err, "Failed to set some node status fields", "node", klog.KObj(node), "setter", i)
		}
	}
}

// patchNodeStatus sends a two-way strategic merge patch of original→node to nodes/status
// (component-helpers PatchNodeStatus, with $patch: replace for addresses) and records the report time.
// A failed patch returns an error wrapping the API error, so that its reason (Conflict, NotFound, ...)
// reaches ObservePatch and the node-gone check.
func (s *Syncer) patchNodeStatus(ctx context.Context, original, node *v1.Node) (*v1.Node, error) {
	start := s.cfg.Clock.Now()
	nodes := &errorKeepingNodes{NodeInterface: s.cfg.Client.CoreV1().Nodes()}
	updated, patch, err := nodeutil.PatchNodeStatus(nodesClient{s.cfg.Client.CoreV1(), nodes}, types.NodeName(s.cfg.NodeName), original, node)
	if err != nil && nodes.err != nil {
		// PatchNodeStatus formats the API error with %v, which drops its type: wrap it again.
		err = fmt.Errorf("failed to patch status %q for node %q: %w", nodes.data, s.cfg.NodeName, nodes.err)
	}
	if s.cfg.ObservePatch != nil {
		reason := ""
		if err != nil {
			reason = string(apierrors.ReasonForError(err))
			if reason == "" {
				reason = "Unknown"
			}
		}
		s.cfg.ObservePatch(s.cfg.Clock.Since(start), reason)
	}
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Patched node status", "node", s.cfg.NodeName, "patchBytes", len(patch))
	s.lastStatusReportTime = s.cfg.Clock.Now()
	s.lastSync.Store(s.lastStatusReportTime.UnixNano())
	if s.cfg.OnPatched != nil {
		s.cfg.OnPatched(updated)
	}
	return updated, nil
}

// nodesClient is a CoreV1Interface whose Nodes() is nodes.
type nodesClient struct {
	typedcorev1.CoreV1Interface
	nodes typedcorev1.NodeInterface
}

func (c nodesClient) Nodes() typedcorev1.NodeInterface { return c.nodes }

// errorKeepingNodes remembers the data and the error of its last Patch.
type errorKeepingNodes struct {
	typedcorev1.NodeInterface
	data []byte
	err  error
}

func (n *errorKeepingNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1.Node, error) {
	updated, err := n.NodeInterface.Patch(ctx, name, pt, data, opts, subresources...)
	n.data, n.err = data, err
	return updated, err
}

func (s *Syncer) onSync(result string) {
	if s.cfg.OnSync != nil {
		s.cfg.OnSync(result)
	}
}

// FastStatusUpdateOnce checks every 100 ms until the Node is Ready or NodeReadyGracePeriod (120 s)
// has passed: it reads the Node from the lister, refreshes the runtime state, runs the setters and, once
// Ready is no longer False, patches once (falling back to a full SyncNodeStatus if that patch fails).
// It returns when done or when ctx ends. Mirrors fastStatusUpdateOnce / fastNodeStatusUpdate.
func (s *Syncer) FastStatusUpdateOnce(ctx context.Context) {
	const tick, grace = 100 * time.Millisecond, 120 * time.Second
	deadline := s.cfg.Clock.Now().Add(grace)
	t := s.cfg.Clock.NewTicker(tick)
	defer t.Stop()
	for {
		if s.fastNodeStatusUpdate(ctx, !s.cfg.Clock.Now().Before(deadline)) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// fastNodeStatusUpdate makes one fast-path attempt and reports whether the fast path is finished.
func (s *Syncer) fastNodeStatusUpdate(ctx context.Context, timeout bool) bool {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if timeout {
		logger.Error(nil, "Node not becoming ready in time after startup")
		return true
	}
	original, err := s.cfg.Lister.Get(s.cfg.NodeName)
	if err != nil {
		logger.V(4).Info("Fast status update: node not in the informer cache yet", "err", err)
		return false
	}
	if _, ready := nodeutil.GetNodeCondition(&original.Status, v1.NodeReady); ready != nil && ready.Status == v1.ConditionTrue {
		return true
	} else if ready == nil {
		return false
	}
	s.cfg.UpdateRuntimeUp(ctx)
	node, changed := s.updateNode(ctx, original)
	if ctx.Err() != nil {
		return true // shutting down: the setters saw a cancelled context; post nothing
	}
	if !changed {
		return false
	}
	if _, ready := nodeutil.GetNodeCondition(&node.Status, v1.NodeReady); ready == nil || ready.Status == v1.ConditionFalse {
		return false
	}
	logger.Info("Fast updating node status as it just became ready")
	s.delayAfterNodeStatusChange = s.calculateDelay()
	if _, err := s.patchNodeStatus(ctx, original, node); err != nil {
		logger.Error(err, "Error updating node status, will retry with syncNodeStatus")
		s.syncLocked(ctx)
	} else {
		s.onSync("patched")
	}
	return true
}

// NodeStatusHasChanged reports whether status differs from original, ignoring condition heartbeat
// times and condition order. Mirrors nodeStatusHasChanged.
func NodeStatusHasChanged(original, status *v1.NodeStatus) bool {
	if original == nil || status == nil {
		return original != status
	}
	if conditionsChanged(original.Conditions, status.Conditions) {
		return true
	}
	a, b := original.DeepCopy(), status.DeepCopy()
	a.Conditions, b.Conditions = nil, nil
	return !apiequality.Semantic.DeepEqual(a, b)
}

func conditionsChanged(original, current []v1.NodeCondition) bool {
	if len(original) != len(current) {
		return true
	}
	a := append([]v1.NodeCondition(nil), original...)
	b := append([]v1.NodeCondition(nil), current...)
	sort.SliceStable(a, func(i, j int) bool { return a[i].Type < a[j].Type })
	sort.SliceStable(b, func(i, j int) bool { return b[i].Type < b[j].Type })
	for i := range a {
		a[i].LastHeartbeatTime, b[i].LastHeartbeatTime = metav1.Time{}, metav1.Time{}
		if !apiequality.Semantic.DeepEqual(a[i], b[i]) {
			return true
		}
	}
	return false
}
