// Package statussync keeps a registered Node's status true: a Syncer runs the ordered setters on a
// copy of the Node and patches nodes/status when something changed or the report period has passed
// (the kubelet's syncNodeStatus / updateNodeStatus / tryUpdateNodeStatus in
// pkg/kubelet/kubelet_node_status.go); FastNodeStatusUpdate gets a new node Ready within one 100 ms
// tick of the runtime being ready (the kubelet's fastNodeStatusUpdate, kubernetes#112618). A Node
// found deleted is reported (ErrNodeGone) to the caller, which owns registration.
package statussync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

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

// SyncResult describes one finished sync (metrics, /debug/nodestatus).
type SyncResult struct {
	// Time is when the sync ended; Duration how long it took (registration included).
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"duration"`
	// Result is patched, unchanged or error.
	Result Result `json:"result"`
	// Try is the 1-based try that ended the sync (1 to NodeStatusUpdateRetry).
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
	// UpdateFrequency is --node-status-update-frequency (10 s); ReportFrequency is
	// --node-status-report-frequency (5 m).
	UpdateFrequency, ReportFrequency time.Duration
	// OnRepeatedHeartbeatFailure runs after each failed try but the first, before the next try
	// (close idle connections), as the kubelet's onRepeatedHeartbeatFailure.
	OnRepeatedHeartbeatFailure func()
	// Clock is injected for tests; default the real clock. Rand returns a float in [0,1); default math/rand.
	Clock clock.WithTicker
	Rand  func() float64
}

// Syncer posts the Node's status. Build with New; call SyncNodeStatus every update period and
// FastNodeStatusUpdate every tick at start-up; safe for concurrent use.
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
	return &Syncer{cfg: cfg}, nil
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

// SyncNodeStatus updates the registered Node's status with up to NodeStatusUpdateRetry tries and
// returns the result. When ctx ended, nothing was posted and the result's Err wraps ctx's error;
// when the Node is gone from the API server (deleted), Err wraps ErrNodeGone and the caller
// registers it again (the kubelet leaves it deleted). Errors are logged. Mirrors syncNodeStatus.
func (s *Syncer) SyncNodeStatus(ctx context.Context) SyncResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(ctx, s.cfg.Clock.Now())
}

// syncLocked updates the status; earlier are PATCHes already sent for this sync (by a failed fast
// update) and are reported with it.
func (s *Syncer) syncLocked(ctx context.Context, start time.Time, earlier ...PatchAttempt) SyncResult {
	logger := klog.FromContext(ctx)
	r := s.updateNodeStatus(ctx)
	r.Patches = append(earlier, r.Patches...)
	if r.Err != nil {
		if ctx.Err() != nil {
			r.Result = ResultError
			return r // shutting down: nothing was posted, nothing to report
		}
		if !errors.Is(r.Err, ErrNodeGone) { // the caller registers it again, and says so
			logger.Error(r.Err, "Unable to update node status", "node", s.cfg.NodeName)
		}
	}
	return s.finish(start, r)
}

// finish stamps r, records it as the last result and returns it.
func (s *Syncer) finish(start time.Time, r SyncResult) SyncResult {
	r.Time = s.cfg.Clock.Now()
	r.Duration = r.Time.Sub(start)
	if r.Err != nil {
		r.Result, r.Error = ResultError, r.Err.Error()
	} else {
		s.ok.Store(r.Time.UnixNano())
	}
	last := r
	last.Node = nil // the Node is the caller's to keep, or not
	s.last.Store(&last)
	return r
}

// updateNodeStatus makes up to NodeStatusUpdateRetry tries. A Node the API server says is gone
// (deleted by an admin) ends the tries at once with an error wrapping ErrNodeGone: the remaining
// tries would find it gone too. When every try failed, the result's Err wraps the last try's error.
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
		if errors.Is(r.Err, ErrNodeGone) {
			s.cfg.Cache.MarkStale("node deleted: " + r.Err.Error())
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
	}
	r.Err = fmt.Errorf("update node status exceeds retry count: %w", r.Err)
	return r
}

// ErrNodeGone is wrapped in a sync's error when the API server says the Node does not exist (an
// admin deleted it): the Node must be registered again.
var ErrNodeGone = errors.New("node not found on the API server")

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
	return node, labelsChanged || nodestatus.NodeStatusHasChanged(&original.Status, &node.Status)
}
