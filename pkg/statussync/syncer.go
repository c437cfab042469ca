// Package statussync keeps the Node's status true: a Syncer registers the Node if needed, runs the
// ordered setters on a copy of it, and patches nodes/status when something changed or the report
// period has passed (the kubelet's syncNodeStatus / updateNodeStatus / tryUpdateNodeStatus in
// pkg/kubelet/kubelet_node_status.go); FastStatusUpdateOnce gets a new node Ready within one 100 ms
// tick of the runtime being ready (the kubelet's fastStatusUpdateOnce, kubernetes#112618).
package statussync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// NodeStatusUpdateRetry is how many tries one sync makes, as the kubelet's nodeStatusUpdateRetry.
const NodeStatusUpdateRetry = 5

// Result is the outcome of one status sync.
type Result string

// The results of a sync.
const (
	// ResultPatched: the status changed, or the report period expired, and was patched.
	ResultPatched Result = "patched"
	// ResultUnchanged: nothing changed; nothing was written.
	ResultUnchanged Result = "unchanged"
	// ResultError: registration or every try failed.
	ResultError Result = "error"
)

// SyncResult describes one finished sync, for the OnSync hook (metrics, /debug/nodestatus).
type SyncResult struct {
	// Time is when the sync ended; Duration how long it took (registration included).
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"duration"`
	// Result is patched, unchanged or error.
	Result Result `json:"result"`
	// Try is the 1-based try that ended the sync (1 to NodeStatusUpdateRetry); 0 when registration failed.
	Try int `json:"try"`
	// Fast is true for the fast start-up update.
	Fast bool `json:"fast,omitempty"`
	// Patched is true when a PATCH was sent (successfully or not); PatchDuration is how long the last
	// one took, Patch its body, PatchError its error's API reason ("" on success or when none was sent).
	Patched       bool          `json:"patched"`
	PatchDuration time.Duration `json:"patchDuration,omitempty"`
	Patch         string        `json:"patch,omitempty"`
	PatchReason   string        `json:"patchReason,omitempty"`
	// Patches are every PATCH the sync sent, in order (one per try that got that far).
	Patches []PatchAttempt `json:"patches,omitempty"`
	// Err is why the sync failed; nil unless Result is ResultError.
	Err error `json:"-"`
	// Error is Err's text, for JSON.
	Error string `json:"error,omitempty"`
	// Node is the Node as the API server has it after a successful sync (the patch's answer, or the
	// Node read when unchanged); nil on error. Not serialised.
	Node *v1.Node `json:"-"`
}

// PatchAttempt is one PATCH of nodes/status: how long it took and, if it failed, the API reason
// ("Conflict", "Timeout", ...; "Unknown" for an error without one).
type PatchAttempt struct {
	Duration time.Duration `json:"duration"`
	Reason   string        `json:"reason,omitempty"`
}

// Cache is what the syncer needs to know about the Node informer's cache (nodecache.Node): whether
// it is stale, to tell it so, and at which resourceVersion the Node was read from the API server.
type Cache interface {
	Stale() *nodecache.Staleness
	MarkStale(reason string)
	MarkFresh()
	ReadAt(rv string)
}

// Config configures a Syncer.
type Config struct {
	// Client GETs and PATCHes the Node (the kubelet's heartbeat client); required.
	Client kubernetes.Interface
	// Lister reads the Node from an informer cache for the first try of each sync; required.
	Lister corelisters.NodeLister
	// Cache says whether Lister can be trusted; required.
	Cache Cache
	// NodeName is the Node's name; required.
	NodeName string
	// Funcs computes the status: the node's ordered setter list; required.
	Funcs *nodestatus.Funcs
	// Register makes one registration attempt; nil when --register-node=false. A sync of a Node not
	// registered (or deleted) calls it once and fails when it fails.
	Register func(ctx context.Context) error
	// UpdateRuntimeUp refreshes the runtime state; the fast start-up update calls it on each tick,
	// holding no lock. It must bound its own CRI call.
	UpdateRuntimeUp func(ctx context.Context)
	// UpdateFrequency is --node-status-update-frequency (10 s); ReportFrequency is
	// --node-status-report-frequency (5 m).
	UpdateFrequency, ReportFrequency time.Duration
	// OnRepeatedHeartbeatFailure runs after each failed try but the first (close idle connections).
	OnRepeatedHeartbeatFailure func()
	// OnSync, if set, is called after every sync (periodic, triggered or fast) with its result.
	OnSync func(SyncResult)
	// Clock is injected for tests; default the real clock. Rand returns a float in [0,1); default math/rand.
	Clock clock.WithTicker
	Rand  func() float64
}

// Syncer posts the Node's status. Build with New; run with Run; safe for concurrent use.
type Syncer struct {
	cfg Config

	mu                         sync.Mutex // the kubelet's syncNodeStatusMux; held for a whole sync, never during a fast-path CRI call
	lastStatusReportTime       time.Time
	delayAfterNodeStatusChange time.Duration
	// unkeptSent and unkeptKept are, after a patch the API server did not keep in full, the status sent
	// and the status it kept: while the setters compute the same again and the Node still holds what was
	// kept, there is nothing new to say (see unkept). Nil after a patch kept in full.
	unkeptSent, unkeptKept *v1.NodeStatus
	unkeptLogged           string // the last difference logged

	// registeredCh is closed once the Node is first registered; registered says whether it is now
	// (a deleted Node is registered again). Read by health checks while a sync may be blocked.
	registeredCh   chan struct{}
	registeredOnce sync.Once
	registered     atomic.Bool

	last atomic.Pointer[SyncResult] // the last finished sync
	ok   atomic.Int64               // unix nanos of the last successful sync

	// known is the newest Node this syncer had from the API server itself (a patch's response or a
	// GET); the informer's copy may still be older (see cachedNode).
	known atomic.Pointer[v1.Node]
}

// New validates cfg and fills defaults. It errors when Client, Lister, Cache, Funcs or NodeName is
// missing or a frequency is not positive.
func New(cfg Config) (*Syncer, error) {
	if cfg.Client == nil || cfg.Lister == nil || cfg.Cache == nil || cfg.Funcs == nil || cfg.NodeName == "" {
		return nil, fmt.Errorf("statussync: Config needs Client, Lister, Cache, Funcs and NodeName")
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
	s := &Syncer{cfg: cfg, registeredCh: make(chan struct{})}
	if cfg.Register == nil {
		s.setRegistered(true)
	}
	return s, nil
}

// Registered returns a channel closed once the Node has been registered (at once with registration
// disabled): the Lease renewer starts on it.
func (s *Syncer) Registered() <-chan struct{} { return s.registeredCh }

// IsRegistered reports whether the Node is registered now.
func (s *Syncer) IsRegistered() bool { return s.registered.Load() }

func (s *Syncer) setRegistered(v bool) {
	s.registered.Store(v)
	if v {
		s.registeredOnce.Do(func() { close(s.registeredCh) })
	}
}

// LastSync returns when the status was last synced successfully (patched or found unchanged); zero before.
func (s *Syncer) LastSync() time.Time {
	n := s.ok.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// LastResult returns the last finished sync, or nil before the first.
func (s *Syncer) LastResult() *SyncResult { return s.last.Load() }

// SyncNodeStatus registers the Node if needed (one attempt), then updates its status with up to
// NodeStatusUpdateRetry tries; it returns the result, also reported through OnSync (except when ctx
// ended: then nothing was posted and the result's Err is ctx's error, wrapped). Errors are logged.
// Mirrors syncNodeStatus.
func (s *Syncer) SyncNodeStatus(ctx context.Context) SyncResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(ctx, s.cfg.Clock.Now())
}

// SetRegistered records that the Node was registered by the caller (the first registration runs
// in the controller's status step, which orders it after the Lease).
func (s *Syncer) SetRegistered() { s.setRegistered(true) }

// syncLocked registers if needed and updates the status; earlier are PATCHes already sent for this
// sync (by a failed fast update) and are reported with it.
func (s *Syncer) syncLocked(ctx context.Context, start time.Time, earlier ...PatchAttempt) SyncResult {
	logger := klog.FromContext(ctx)
	if !s.registered.Load() {
		if err := s.cfg.Register(ctx); err != nil {
			if ctx.Err() != nil {
				return SyncResult{Result: ResultError, Err: fmt.Errorf("registering node: %w", ctx.Err())}
			}
			logger.Error(err, "Unable to register node", "node", s.cfg.NodeName)
			return s.finish(start, SyncResult{Result: ResultError, Err: err, Patches: earlier})
		}
		s.setRegistered(true)
	}
	r := s.updateNodeStatus(ctx)
	r.Patches = append(earlier, r.Patches...)
	if r.Err != nil {
		if ctx.Err() != nil {
			r.Result = ResultError
			return r // shutting down: nothing was posted, nothing to report
		}
		logger.Error(r.Err, "Unable to update node status", "node", s.cfg.NodeName)
	}
	return s.finish(start, r)
}

// finish stamps r, reports it and returns it.
func (s *Syncer) finish(start time.Time, r SyncResult) SyncResult {
	r.Time = s.cfg.Clock.Now()
	r.Duration = r.Time.Sub(start)
	if r.Err != nil {
		r.Result, r.Error = ResultError, r.Err.Error()
	} else {
		s.ok.Store(r.Time.UnixNano())
	}
	s.last.Store(&r)
	if s.cfg.OnSync != nil {
		s.cfg.OnSync(r)
	}
	return r
}

// updateNodeStatus makes up to NodeStatusUpdateRetry tries. A Node the API server says is gone
// (deleted by an admin) is registered again and the tries go on: the kubelet leaves it deleted; we
// restore it. When every try failed, the result's Err wraps the last try's error.
func (s *Syncer) updateNodeStatus(ctx context.Context) SyncResult {
	logger := klog.FromContext(ctx)
	var r SyncResult
	var patches []PatchAttempt
	for i := 0; i < NodeStatusUpdateRetry; i++ {
		r = s.tryUpdateNodeStatus(ctx, i)
		r.Try = i + 1
		if r.Patched {
			patches = append(patches, PatchAttempt{Duration: r.PatchDuration, Reason: r.PatchReason})
		}
		r.Patches = patches
		if r.Err == nil {
			return r
		}
		if ctx.Err() != nil {
			r.Err = fmt.Errorf("update node status: %w", r.Err)
			return r
		}
		if i > 0 && s.cfg.OnRepeatedHeartbeatFailure != nil {
			s.cfg.OnRepeatedHeartbeatFailure()
		}
		if i == 0 && apierrors.IsNotFound(r.Err) {
			// The informer has not seen the Node yet (just registered): the next try GETs it.
			logger.V(2).Info("Node not in the informer cache yet, will get it from the API server", "err", r.Err)
		} else {
			logger.Error(r.Err, "Error updating node status, will retry", "try", i+1)
			s.cfg.Cache.MarkStale("node status update failed: " + r.Err.Error())
		}
		if errors.Is(r.Err, errNodeGone) && s.cfg.Register != nil {
			logger.Info("Node object was deleted; registering it again", "node", s.cfg.NodeName)
			s.registered.Store(false)
			if rerr := s.cfg.Register(ctx); rerr != nil { // the next sync tries again
				r.Err = fmt.Errorf("registering deleted node again: %w", rerr)
				return r
			}
			s.setRegistered(true)
		}
	}
	r.Err = fmt.Errorf("update node status exceeds retry count: %w", r.Err)
	return r
}

var errNodeGone = errors.New("node not found on the API server")

// getNode reads the Node: on try 0 from the lister (or the newer Node the last patch returned, see
// cachedNode) unless the cache is stale, else from the API server. Only an informer event makes the cache current again (see pkg/nodecache): a GET that finds
// the cache at the API server's resourceVersion proves nothing about the watch, which may still be
// down and miss the next change (the node lifecycle controller's Ready=Unknown right after an outage).
func (s *Syncer) getNode(ctx context.Context, try int) (*v1.Node, error) {
	if try == 0 && s.cfg.Cache.Stale() == nil {
		return s.cachedNode()
	}
	node, err := s.cfg.Client.CoreV1().Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting node %q: %w: %w", s.cfg.NodeName, errNodeGone, err)
	}
	if err != nil {
		return nil, err
	}
	s.known.Store(node)
	s.cfg.Cache.ReadAt(node.ResourceVersion)
	return node, nil
}

// cachedNode reads the Node from the lister, or returns the Node last had from the API server (a
// patch's response or a GET) when the lister's copy of the same Node is older than that: the
// informer may not have delivered this agent's own last patch yet, and a sync computed against the
// older copy would find a change it just made undone "unchanged" and post nothing for a status
// period (a pressure set and cleared within a second). Older is as resourceversion.CompareResourceVersion
// orders them; a resourceVersion it cannot compare leaves the lister's copy in use. It returns the lister's error (NotFound before the informer saw the Node).
func (s *Syncer) cachedNode() (*v1.Node, error) {
	node, err := s.cfg.Lister.Get(s.cfg.NodeName)
	if err != nil {
		return nil, err
	}
	if k := s.known.Load(); k != nil && k.UID == node.UID && olderResourceVersion(node.ResourceVersion, k.ResourceVersion) {
		return k, nil
	}
	return node, nil
}

// olderResourceVersion reports whether resourceVersion a is older than b, as apimachinery's
// resourceversion.CompareResourceVersion orders them; false when either is not a valid one.
func olderResourceVersion(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
}

// tryUpdateNodeStatus reads the Node, runs the setters, and patches if the status changed or the
// report period expired. Mirrors tryUpdateNodeStatus.
func (s *Syncer) tryUpdateNodeStatus(ctx context.Context, try int) SyncResult {
	original, err := s.getNode(ctx, try)
	if err != nil {
		return SyncResult{Err: fmt.Errorf("getting node %q: %w", s.cfg.NodeName, err)}
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
	if changed && s.unkept(original, node) {
		changed = false
	}
	if err := ctx.Err(); err != nil {
		// Shutting down: the setters' CRI calls failed on the cancelled context, so node would say
		// "containerd://Unknown" and list no images. Post nothing rather than that.
		return SyncResult{Err: fmt.Errorf("node status not patched: %w", err)}
	}
	if !changed && !s.isUpdateStatusPeriodExpired() {
		return SyncResult{Result: ResultUnchanged, Node: original}
	}
	if changed || s.lastStatusReportTime.IsZero() {
		s.delayAfterNodeStatusChange = s.calculateDelay()
	} else {
		s.delayAfterNodeStatusChange = 0
	}
	return s.patchNodeStatus(ctx, original, node)
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
	s.cfg.Funcs.Apply(ctx, node)
	return node, labelsChanged || NodeStatusHasChanged(&original.Status, &node.Status)
}

// patchNodeStatus sends a two-way strategic merge patch of original→node to nodes/status
// (component-helpers PatchNodeStatus, with $patch: replace for addresses) and records the report time.
// A failed patch's Err wraps the API error, so that its reason (Conflict, NotFound, ...) reaches the
// result and the node-gone check.
func (s *Syncer) patchNodeStatus(ctx context.Context, original, node *v1.Node) SyncResult {
	start := s.cfg.Clock.Now()
	nodes := &errorKeepingNodes{NodeInterface: s.cfg.Client.CoreV1().Nodes()}
	updated, patch, err := nodeutil.PatchNodeStatus(nodesClient{s.cfg.Client.CoreV1(), nodes}, types.NodeName(s.cfg.NodeName), original, node)
	r := SyncResult{Patched: true, PatchDuration: s.cfg.Clock.Since(start), Patch: string(patch)}
	if err != nil {
		if nodes.err != nil {
			// PatchNodeStatus formats the API error with %v, which drops its type: wrap it again.
			err = fmt.Errorf("failed to patch status %q for node %q: %w", nodes.data, s.cfg.NodeName, nodes.err)
			r.Patch = string(nodes.data)
		}
		r.PatchReason = string(apierrors.ReasonForError(err))
		if r.PatchReason == "" {
			r.PatchReason = "Unknown"
		}
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("patching node %q status: %w: %w", s.cfg.NodeName, errNodeGone, err)
		} else {
			err = fmt.Errorf("patching node %q status: %w", s.cfg.NodeName, err)
		}
		r.Err = err
		return r
	}
	klog.FromContext(ctx).V(4).Info("Patched node status", "node", s.cfg.NodeName, "patchBytes", len(patch))
	s.lastStatusReportTime = s.cfg.Clock.Now()
	if updated != nil {
		s.known.Store(updated)
	}
	s.recordUnkept(ctx, node, updated)
	r.Result, r.Node = ResultPatched, updated
	return r
}

// unkept reports whether the change from original to node is only what the API server did not keep
// after the last patch: the setters computed the same status as was then sent, and the Node still holds
// what was kept. An older API server drops fields it does not know (nodeInfo.runningInUserNamespace
// before 1.37, or with the KubeletInUserNamespace gate off): without this, every sync would patch them
// again, and the write rate per node would be one per status period instead of one per report period.
func (s *Syncer) unkept(original, node *v1.Node) bool {
	return s.unkeptSent != nil && !NodeStatusHasChanged(s.unkeptSent, &node.Status) && !NodeStatusHasChanged(s.unkeptKept, &original.Status)
}

// recordUnkept compares the status sent, as the API server decodes it (a JSON round trip: times to the
// second), with the status the patch returned; it remembers a difference for unkept and logs it (as a
// two-way merge patch from kept to sent) when it is new.
func (s *Syncer) recordUnkept(ctx context.Context, sent, updated *v1.Node) {
	s.unkeptSent, s.unkeptKept = nil, nil
	if updated == nil {
		return
	}
	want, err1 := json.Marshal(sent.Status)
	kept, err2 := json.Marshal(updated.Status)
	var wire v1.NodeStatus
	if err := errors.Join(err1, err2, json.Unmarshal(want, &wire)); err != nil || !NodeStatusHasChanged(&updated.Status, &wire) {
		return
	}
	p, err := strategicpatch.CreateTwoWayMergePatch(kept, want, v1.NodeStatus{})
	if err != nil || string(p) == "{}" {
		return
	}
	if key := string(p); key != s.unkeptLogged {
		s.unkeptLogged = key
		klog.FromContext(ctx).Info("The API server did not keep part of the node status it was sent (a field it does not know?); it is sent again only when the status changes or at the report frequency",
			"node", s.cfg.NodeName, "notKept", key)
	}
	s.unkeptSent, s.unkeptKept = &wire, updated.Status.DeepCopy()
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

// FastStatusUpdateTick is the fast start-up update's period, and FastStatusUpdateGrace how long it
// goes on (the kubelet's 100 ms and nodeReadyGracePeriod, 120 s).
const (
	FastStatusUpdateTick  = 100 * time.Millisecond
	FastStatusUpdateGrace = 120 * time.Second
)

// FastNodeStatusUpdate makes one attempt of the fast start-up update and reports whether the fast
// path is finished; the caller runs it every FastStatusUpdateTick until it is, with timedOut true
// once FastStatusUpdateGrace has passed. One attempt refreshes the runtime state (holding no lock),
// reads the Node from the lister, runs the setters and, once Ready is no longer False, patches once
// (falling back to a full sync if that patch fails). Mirrors fastStatusUpdateOnce's loop body,
// fastNodeStatusUpdate, whose updateRuntimeUp call runs under syncNodeStatusMux: here a runtime that
// hangs cannot hold up the status sync.
func (s *Syncer) FastNodeStatusUpdate(ctx context.Context, timedOut bool) bool {
	return s.fastNodeStatusUpdate(ctx, timedOut)
}

// fastNodeStatusUpdate makes one fast-path attempt and reports whether the fast path is finished.
func (s *Syncer) fastNodeStatusUpdate(ctx context.Context, timeout bool) bool {
	logger := klog.FromContext(ctx)
	if timeout {
		logger.Error(nil, "Node not becoming ready in time after startup")
		return true
	}
	if ready, ok := s.cachedReady(); !ok {
		return false
	} else if ready {
		return true
	}
	s.cfg.UpdateRuntimeUp(ctx)
	if ctx.Err() != nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.cfg.Clock.Now()
	original, err := s.cachedNode()
	if err != nil {
		return false
	}
	if _, ready := nodeutil.GetNodeCondition(&original.Status, v1.NodeReady); ready == nil {
		return false
	} else if ready.Status == v1.ConditionTrue {
		return true
	}
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
	r := s.patchNodeStatus(ctx, original, node)
	r.Patches = []PatchAttempt{{Duration: r.PatchDuration, Reason: r.PatchReason}}
	if r.Err != nil {
		logger.Error(r.Err, "Error updating node status, will retry with syncNodeStatus")
		s.syncLocked(ctx, start, r.Patches...) // the failed fast patch is reported with the full sync
		return true
	}
	r.Try, r.Fast = 1, true
	s.finish(start, r)
	return true
}

// cachedReady reads the Node's Ready condition from the lister: ok is false when the Node or its
// Ready condition is not there yet.
func (s *Syncer) cachedReady() (ready, ok bool) {
	node, err := s.cachedNode()
	if err != nil {
		return false, false
	}
	_, cond := nodeutil.GetNodeCondition(&node.Status, v1.NodeReady)
	if cond == nil {
		return false, false
	}
	return cond.Status == v1.ConditionTrue, true
}

// NodeStatusHasChanged reports whether status differs from original, ignoring condition heartbeat
// times and condition order. Mirrors nodeStatusHasChanged.
func NodeStatusHasChanged(original, status *v1.NodeStatus) bool {
	if original == nil || status == nil {
		return original != status
	}
	return conditionsChanged(original.Conditions, status.Conditions) || !statusEqualButConditions(original, status)
}

func conditionsChanged(original, current []v1.NodeCondition) bool {
	if len(original) != len(current) {
		return true
	}
	a := slices.Clone(original)
	b := slices.Clone(current)
	byType := func(x, y v1.NodeCondition) int { return strings.Compare(string(x.Type), string(y.Type)) }
	slices.SortStableFunc(a, byType)
	slices.SortStableFunc(b, byType)
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason || a[i].Message != b[i].Message ||
			!a[i].LastTransitionTime.Equal(&b[i].LastTransitionTime) {
			return true
		}
	}
	return false
}

// statusEqualButConditions reports whether a and b are equal in every field but Conditions, as
// apiequality.Semantic.DeepEqual would say (quantities by value, nil and empty slices and maps alike),
// without its reflection: the kubelet's nodeStatusHasChanged deep-copies both statuses and compares
// them with it, which at thousands of simulated Nodes was a tenth of the simulator's CPU (deep copies,
// and a reflect.Call for every Quantity). The rarely set pointer fields are still compared
// with Semantic.DeepEqual. TestStatusEqualButConditionsCoversNodeStatus fails when NodeStatus gains a
// field this does not compare; TestStatusEqualButConditionsAgreesWithSemantic checks it against
// Semantic.DeepEqual on random statuses.
func statusEqualButConditions(a, b *v1.NodeStatus) bool {
	return resourceListEqual(a.Capacity, b.Capacity) && resourceListEqual(a.Allocatable, b.Allocatable) &&
		a.Phase == b.Phase &&
		slices.Equal(a.Addresses, b.Addresses) &&
		a.DaemonEndpoints == b.DaemonEndpoints &&
		nodeInfoEqual(&a.NodeInfo, &b.NodeInfo) &&
		slices.EqualFunc(a.Images, b.Images, func(x, y v1.ContainerImage) bool {
			return x.SizeBytes == y.SizeBytes && slices.Equal(x.Names, y.Names)
		}) &&
		slices.Equal(a.VolumesInUse, b.VolumesInUse) &&
		slices.Equal(a.VolumesAttached, b.VolumesAttached) &&
		apiequality.Semantic.DeepEqual(a.Config, b.Config) &&
		apiequality.Semantic.DeepEqual(a.RuntimeHandlers, b.RuntimeHandlers) &&
		apiequality.Semantic.DeepEqual(a.Features, b.Features) &&
		slices.Equal(a.DeclaredFeatures, b.DeclaredFeatures)
}

// resourceListEqual compares quantities by value (Quantity.Cmp), as Semantic.DeepEqual does.
func resourceListEqual(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || x.Cmp(y) != 0 {
			return false
		}
	}
	return true
}

// nodeInfoEqual compares every NodeSystemInfo field: the strings with ==, the pointers by what they
// point to.
func nodeInfoEqual(a, b *v1.NodeSystemInfo) bool {
	x, y := *a, *b
	x.Swap, y.Swap = nil, nil
	x.RunningInUserNamespace, y.RunningInUserNamespace = nil, nil
	return x == y && ptr.Equal(a.RunningInUserNamespace, b.RunningInUserNamespace) && apiequality.Semantic.DeepEqual(a.Swap, b.Swap)
}
