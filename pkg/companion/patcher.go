package companion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// DefaultFieldManager is Config.FieldManager's default: what the API server derives from
	// nodeagent's user agent ("nodeagent/<version>").
	DefaultFieldManager = "nodeagent"
	// OwnedConditionsAnnotation lists, comma-separated and sorted, the condition types nodeagent
	// --companion writes on the Node: how a later run with fewer monitors knows which of the Node's
	// conditions it left there and may remove.
	OwnedConditionsAnnotation = "nodeagent.io/owned-conditions"
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
	// Types are every condition type this configuration may write, including those Conditions does
	// not return yet (a monitor with skip_initial_status). They are recorded on the Node in the
	// OwnedConditionsAnnotation, and the conditions of a type recorded there by an earlier run but
	// no longer in Types (a monitor removed from the config) are removed from the Node on the first
	// patch, unless another writer owns them (see Run). Nil records and removes nothing.
	Types []v1.NodeConditionType
	// FieldManager is the field manager of the patches (managedFields); default DefaultFieldManager.
	FieldManager string
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
	stale       []v1.NodeConditionType                    // to remove on the next patch
	annotated   bool                                      // the Node's annotation equals Types
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
	for i, t := range cfg.Types {
		if kubeletConditionTypes[t] {
			return nil, fmt.Errorf("companion: Config.Types[%d] %q: the kubelet owns this condition", i, t)
		}
	}
	if cfg.FieldManager == "" {
		cfg.FieldManager = DefaultFieldManager
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
// agent restarts, and to find stale conditions: those of a type listed in the Node's
// OwnedConditionsAnnotation but not in Config.Types, which it removes with its first patch
// ({"$patch":"delete"} per type), unless the kubelet owns the type or the Node's managedFields show
// another field manager owning a field of that condition (NPD, an operator, a controller: a type
// another writer owns is never touched). Each patch until the annotation equals Types also sets it.
// NPD never removes a condition (its issues 423, 470, 669, 1011). It returns nil when ctx ends.
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
	var annotation *string
	if p.cfg.Types != nil && !p.annotated {
		a := ownedAnnotation(p.cfg.Types)
		annotation = &a
	}
	body, err := buildPatch(conds, metav1.NewTime(now), p.stale, annotation)
	if err == nil {
		_, err = p.cfg.Client.CoreV1().Nodes().Patch(ctx, p.cfg.NodeName, types.StrategicMergePatchType, body,
			metav1.PatchOptions{FieldManager: p.cfg.FieldManager}, "status")
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
	if len(p.stale) > 0 {
		logger.Info("Removed the conditions of monitors no longer configured", "node", p.cfg.NodeName, "types", p.stale)
	}
	p.failures = 0
	p.seeded = true
	p.stale = nil
	p.annotated = p.annotated || annotation != nil
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
	if p.cfg.Types == nil {
		return
	}
	p.annotated = node.Annotations[OwnedConditionsAnnotation] == ownedAnnotation(p.cfg.Types)
	p.stale = StaleConditions(node, p.cfg.Types, p.cfg.FieldManager)
	for _, t := range p.stale {
		klog.FromContext(ctx).Info("Removing a condition nodeagent wrote whose monitor is no longer configured", "node", p.cfg.NodeName, "type", t)
	}
}

// kubeletConditionTypes are the kubelet's: never in Types, never removed.
var kubeletConditionTypes = map[v1.NodeConditionType]bool{
	v1.NodeReady: true, v1.NodeMemoryPressure: true, v1.NodeDiskPressure: true, v1.NodePIDPressure: true,
	v1.NodeNetworkUnavailable: true,
}

// StaleConditions returns, in the Node's order, the condition types node carries that its
// OwnedConditionsAnnotation lists (nodeagent wrote them) but types does not (no longer configured),
// leaving out the kubelet's types and any condition a field manager other than manager owns a
// field of in node's managedFields (another writer also keeps it, e.g. node-problem-detector).
func StaleConditions(node *v1.Node, types []v1.NodeConditionType, manager string) []v1.NodeConditionType {
	listed := map[v1.NodeConditionType]bool{}
	for _, t := range strings.Split(node.Annotations[OwnedConditionsAnnotation], ",") {
		if t = strings.TrimSpace(t); t != "" {
			listed[v1.NodeConditionType(t)] = true
		}
	}
	foreign := foreignConditionOwners(node, manager)
	var out []v1.NodeConditionType
	for _, c := range node.Status.Conditions {
		if listed[c.Type] && !slices.Contains(types, c.Type) && !kubeletConditionTypes[c.Type] && !foreign[c.Type] {
			out = append(out, c.Type)
		}
	}
	return out
}

// foreignConditionOwners returns the condition types of which a field manager other than manager
// owns a field, read from the managedFields entries' FieldsV1 (f:status, f:conditions,
// k:{"type":"X"}). An entry that does not parse counts as owning every condition: unknown is not ours.
func foreignConditionOwners(node *v1.Node, manager string) map[v1.NodeConditionType]bool {
	out := map[v1.NodeConditionType]bool{}
	for _, e := range node.ManagedFields {
		if e.Manager == manager || e.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Status struct {
				Conditions map[string]json.RawMessage `json:"f:conditions"`
			} `json:"f:status"`
		}
		if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
			for _, c := range node.Status.Conditions {
				out[c.Type] = true
			}
			continue
		}
		for key := range fields.Status.Conditions {
			var k struct {
				Type string `json:"type"`
			}
			if rest, ok := strings.CutPrefix(key, "k:"); ok && json.Unmarshal([]byte(rest), &k) == nil && k.Type != "" {
				out[v1.NodeConditionType(k.Type)] = true
			}
		}
	}
	return out
}

// ownedAnnotation is OwnedConditionsAnnotation's value for types: sorted, deduplicated, comma-separated.
func ownedAnnotation(types []v1.NodeConditionType) string {
	s := make([]string, 0, len(types))
	for _, t := range types {
		s = append(s, string(t))
	}
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

// Patch returns the strategic merge patch that sets conds, and nothing else, in a Node's
// status.conditions (merge key type), each with lastHeartbeatTime now:
// {"status":{"conditions":[...]}}, as NPD's problem client.
func Patch(conds []v1.NodeCondition, now metav1.Time) ([]byte, error) {
	return buildPatch(conds, now, nil, nil)
}

// buildPatch is Patch, plus a {"type":T,"$patch":"delete"} entry per type of remove and, when
// annotation is not nil, metadata.annotations[OwnedConditionsAnnotation] set to it (nodes/status
// keeps metadata changes).
func buildPatch(conds []v1.NodeCondition, now metav1.Time, remove []v1.NodeConditionType, annotation *string) ([]byte, error) {
	out := make([]any, 0, len(conds)+len(remove))
	for _, c := range conds {
		c.LastHeartbeatTime = now
		out = append(out, c)
	}
	for _, t := range remove {
		out = append(out, map[string]string{"type": string(t), "$patch": "delete"})
	}
	var body struct {
		Metadata *struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata,omitempty"`
		Status struct {
			Conditions []any `json:"conditions"`
		} `json:"status"`
	}
	if annotation != nil {
		body.Metadata = &struct {
			Annotations map[string]string `json:"annotations"`
		}{map[string]string{OwnedConditionsAnnotation: *annotation}}
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
