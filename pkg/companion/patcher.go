package companion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of Config.
const (
	// DefaultHeartbeatPeriod is NPD's --k8s-exporter-heartbeat-period default.
	DefaultHeartbeatPeriod = 5 * time.Minute
	// DefaultCheckPeriod is how often the conditions are compared with the last patch: NPD's
	// condition manager updatePeriod.
	DefaultCheckPeriod = time.Second
	// Retry delays after a failed patch: 1 s, doubling up to 30 s, until one succeeds.
	retryBase = time.Second
	retryCap  = 30 * time.Second
)

// Config configures a Patcher.
type Config struct {
	// Client patches nodes/status (and reads the Node once, see Run); required.
	Client kubernetes.Interface
	// NodeName is the kubelet's Node; required.
	NodeName string
	// Conditions returns the conditions nodeagent owns, lastHeartbeatTime ignored; required.
	// Its condition types must not be the kubelet's.
	Conditions func() []v1.NodeCondition
	// HeartbeatPeriod is how often the conditions are patched even when unchanged, to refresh
	// their lastHeartbeatTime (NPD's --k8s-exporter-heartbeat-period); default 5 m.
	HeartbeatPeriod time.Duration
	// CheckPeriod is how often Conditions is compared with the last patch; default 1 s. Trigger
	// checks at once.
	CheckPeriod time.Duration
	// Clock is injected for tests; default the real clock.
	Clock clock.WithTicker
	// OnPatch, if set, is called after each patch with its error (nil on success), for metrics.
	OnPatch func(err error)
}

// Patcher keeps nodeagent's own conditions on a kubelet's Node. Build one with New.
type Patcher struct {
	cfg     Config
	trigger chan struct{}

	// Owned by Run.
	seeded      bool
	transitions map[v1.NodeConditionType]v1.NodeCondition // the Node's, kept while the status is the same
	last        []v1.NodeCondition                        // last patched, heartbeat cleared
	lastPatch   time.Time
	failures    int
	nextRetry   time.Time

	mu     sync.Mutex
	status PatcherStatus
}

// PatcherStatus is a snapshot of a Patcher, for /debug/nodestatus.
type PatcherStatus struct {
	LastPatch     time.Time `json:"lastPatch,omitzero"`
	Patches       int64     `json:"patches"`
	Failures      int64     `json:"failures"`
	LastError     string    `json:"lastError,omitempty"`
	LastErrorTime time.Time `json:"lastErrorTime,omitzero"`
}

// New validates cfg, fills defaults and returns a Patcher.
func New(cfg Config) (*Patcher, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.Conditions == nil {
		return nil, errors.New("companion: Config needs Client, NodeName and Conditions")
	}
	if cfg.HeartbeatPeriod <= 0 {
		cfg.HeartbeatPeriod = DefaultHeartbeatPeriod
	}
	if cfg.CheckPeriod <= 0 {
		cfg.CheckPeriod = DefaultCheckPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Patcher{cfg: cfg, trigger: make(chan struct{}, 1)}, nil
}

// Trigger makes Run check the conditions now instead of at the next CheckPeriod. It never blocks.
func (p *Patcher) Trigger() {
	select {
	case p.trigger <- struct{}{}:
	default:
	}
}

// Status returns a snapshot of the patcher.
func (p *Patcher) Status() PatcherStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Run patches the conditions when they change (checked every CheckPeriod and on Trigger) and once
// per HeartbeatPeriod, until ctx ends. A failed patch is logged and retried after 1 s, doubling up
// to 30 s. Before its first patch it reads the Node once (from the API server's cache) so that a
// condition whose status is the same as on the Node keeps the Node's lastTransitionTime across
// agent restarts. It returns nil when ctx ends.
func (p *Patcher) Run(ctx context.Context) error {
	ticker := p.cfg.Clock.NewTicker(p.cfg.CheckPeriod)
	defer ticker.Stop()
	for {
		p.sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		case <-p.trigger:
		}
	}
}

func (p *Patcher) sync(ctx context.Context) {
	logger := klog.FromContext(ctx)
	now := p.cfg.Clock.Now()
	if p.failures > 0 && now.Before(p.nextRetry) {
		return
	}
	conds := slices.Clone(p.cfg.Conditions())
	if len(conds) == 0 {
		return
	}
	if !p.seeded {
		p.seed(ctx)
	}
	for i := range conds {
		conds[i].LastHeartbeatTime = metav1.Time{}
		if old, ok := p.transitions[conds[i].Type]; ok {
			if old.Status == conds[i].Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
			} else {
				delete(p.transitions, conds[i].Type)
			}
		}
	}
	due := p.failures > 0 || p.lastPatch.IsZero() || !slices.EqualFunc(conds, p.last, conditionEqual) ||
		!now.Before(p.lastPatch.Add(p.cfg.HeartbeatPeriod))
	if !due {
		return
	}
	body, err := Patch(conds, metav1.NewTime(now))
	if err == nil {
		_, err = p.cfg.Client.CoreV1().Nodes().Patch(ctx, p.cfg.NodeName, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	}
	if p.cfg.OnPatch != nil {
		p.cfg.OnPatch(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		delay := retryBase << min(p.failures, 5)
		if delay > retryCap {
			delay = retryCap
		}
		p.failures++
		p.nextRetry = now.Add(delay)
		p.status.Failures++
		p.status.LastError, p.status.LastErrorTime = err.Error(), now
		logger.Error(err, "Failed to patch the node's conditions, retrying", "node", p.cfg.NodeName, "after", delay)
		return
	}
	if p.failures > 0 {
		logger.Info("Patched the node's conditions after failures", "node", p.cfg.NodeName, "failures", p.failures)
	}
	p.failures = 0
	p.seeded = true
	p.last, p.lastPatch = conds, now
	p.status.Patches++
	p.status.LastPatch = now
	logger.V(4).Info("Patched the node's conditions", "node", p.cfg.NodeName, "conditions", len(conds))
}

// seed reads the Node once and keeps the lastTransitionTime of the conditions it already has.
func (p *Patcher) seed(ctx context.Context) {
	node, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.NodeName, metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
		p.seeded = true // nothing to keep; the patch will fail until the kubelet registers the Node
		return
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Could not read the node to keep its condition transition times", "node", p.cfg.NodeName, "err", err)
		return
	}
	p.seeded = true
	p.transitions = map[v1.NodeConditionType]v1.NodeCondition{}
	for _, c := range node.Status.Conditions {
		if !c.LastTransitionTime.IsZero() {
			p.transitions[c.Type] = c
		}
	}
}

// Patch returns the strategic merge patch that sets conds, and nothing else, in a Node's
// status.conditions (merge key type), each with lastHeartbeatTime now:
// {"status":{"conditions":[...]}}, as NPD's problem client.
func Patch(conds []v1.NodeCondition, now metav1.Time) ([]byte, error) {
	out := make([]v1.NodeCondition, len(conds))
	for i, c := range conds {
		c.LastHeartbeatTime = now
		out[i] = c
	}
	var body struct {
		Status struct {
			Conditions []v1.NodeCondition `json:"conditions"`
		} `json:"status"`
	}
	body.Status.Conditions = out
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("companion: building the conditions patch: %w", err)
	}
	return b, nil
}

func conditionEqual(a, b v1.NodeCondition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

// JoinConditions returns a func that returns the conditions of every fn, in order.
func JoinConditions(fns ...func() []v1.NodeCondition) func() []v1.NodeCondition {
	return func() []v1.NodeCondition {
		var out []v1.NodeCondition
		for _, fn := range fns {
			out = append(out, fn()...)
		}
		return out
	}
}
