package companion

import (
	"errors"
	"sync"

	v1 "k8s.io/api/core/v1"
	npdtypes "k8s.io/node-problem-detector/pkg/types"
	"k8s.io/node-problem-detector/pkg/util"
	"k8s.io/utils/clock"
)

// The ContainerRuntimeUnhealthy condition as node-problem-detector's
// config/health-checker-containerd.json declares it.
const (
	RuntimeConditionType   = "ContainerRuntimeUnhealthy"
	RuntimeHealthyReason   = "ContainerRuntimeIsHealthy"
	RuntimeHealthyMessage  = "Container runtime on the node is functioning properly"
	RuntimeUnhealthyReason = "ContainerdUnhealthy"
	// RuntimeSource is the config's source, the component of the condition's events.
	RuntimeSource = "health-checker"
	// runtimeMaxMessage is the config's max_output_length.
	runtimeMaxMessage = 80
)

// RuntimeHealthConfig configures a RuntimeHealth.
type RuntimeHealthConfig struct {
	// Errors returns the container runtime's error, nil when it is healthy; required. Give it the
	// error of the last CRI Status call (or "not ready"), so that the condition follows within one
	// poll period.
	Errors func() error
	// Clock stamps transitions and events; default the real clock.
	Clock clock.PassiveClock
	// Recorder, if set, records NPD's "Node condition ContainerRuntimeUnhealthy is now: ..." event
	// on each change, with source health-checker. It must not block.
	Recorder func(eventType, reason, message, source string)
}

// RuntimeHealth is the ContainerRuntimeUnhealthy condition, computed from the runtime's error with
// the reasons and messages of NPD's health-checker-containerd.json: False
// ContainerRuntimeIsHealthy "Container runtime on the node is functioning properly" while Errors
// returns nil, True ContainerdUnhealthy with the error (cut to the config's max_output_length, 80)
// otherwise, keeping the message it turned True with while it stays True. It mirrors the custom plugin monitor running NPD's health-checker --component=cri,
// without the repair. Safe for concurrent use.
type RuntimeHealth struct {
	cfg  RuntimeHealthConfig
	mu   sync.Mutex
	cond npdtypes.Condition
}

// NewRuntimeHealth returns the condition at its default (False), as NPD starts it.
func NewRuntimeHealth(cfg RuntimeHealthConfig) (*RuntimeHealth, error) {
	if cfg.Errors == nil {
		return nil, errors.New("companion: RuntimeHealthConfig needs Errors")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &RuntimeHealth{cfg: cfg, cond: npdtypes.Condition{
		Type: RuntimeConditionType, Status: npdtypes.False, Transition: cfg.Clock.Now(),
		Reason: RuntimeHealthyReason, Message: RuntimeHealthyMessage,
	}}, nil
}

// Conditions asks Errors and returns the condition, updated; its lastTransitionTime moves only when
// its status changes.
func (r *RuntimeHealth) Conditions() []v1.NodeCondition {
	err := r.cfg.Errors()
	status, reason, message := npdtypes.False, RuntimeHealthyReason, RuntimeHealthyMessage
	if err != nil {
		status, reason, message = npdtypes.True, RuntimeUnhealthyReason, err.Error()
		if len(message) > runtimeMaxMessage {
			message = message[:runtimeMaxMessage]
		}
	}
	r.mu.Lock()
	now := r.cfg.Clock.Now()
	flipped := r.cond.Status != status
	if flipped {
		// As the custom plugin monitor with enable_message_change_based_condition_update false
		// (NPD's default): a condition that stays True keeps the message it turned True with.
		r.cond = npdtypes.Condition{Type: RuntimeConditionType, Status: status, Transition: now, Reason: reason, Message: message}
	}
	c := util.ConvertToAPICondition(r.cond)
	r.mu.Unlock()
	if flipped && r.cfg.Recorder != nil {
		ev := util.GenerateConditionChangeEvent(RuntimeConditionType, status, reason, message, now)
		r.cfg.Recorder(util.ConvertToAPIEventType(ev.Severity), ev.Reason, ev.Message, RuntimeSource)
	}
	return []v1.NodeCondition{c}
}
