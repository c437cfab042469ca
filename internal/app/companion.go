package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/companion"
	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/node"
)

// companionMode is what runs beside the node's own kubelet (--companion): the CRI poller and its
// runtimeState feed the ContainerRuntimeUnhealthy condition; the problem monitors (if any) their
// own; the patcher keeps exactly those conditions on the kubelet's Node. Nothing registers the Node,
// renews its Lease or writes a field the kubelet writes.
type companionMode struct {
	state   *criruntime.State
	poller  *criruntime.Poller
	runtime *companion.RuntimeHealth
	patcher *companion.Patcher
	started time.Time
}

// newCompanionMode composes companion mode from cfg's node name and the shared dependencies.
func newCompanionMode(nodeName string, heartbeat time.Duration, deps *Dependencies) (*companionMode, error) {
	m := &companionMode{state: criruntime.NewState(deps.Clock, node.MaxWaitForContainerRuntime), started: deps.Clock.Now()}
	var err error
	if m.runtime, err = companion.NewRuntimeHealth(companion.RuntimeHealthConfig{
		Errors: m.runtimeError, Clock: deps.Clock,
		Recorder: func(eventType, reason, message, source string) {
			deps.RecorderFor(source, nodeName).Event(nodeRef(nodeName), eventType, reason, message)
		},
	}); err != nil {
		return nil, err
	}
	conditions := []func() []v1.NodeCondition{m.runtime.Conditions}
	if deps.Problems != nil {
		conditions = append(conditions, deps.Problems.Conditions)
	}
	if m.patcher, err = companion.New(companion.Config{
		Client: deps.HeartbeatClient, NodeName: nodeName, Conditions: companion.JoinConditions(conditions...),
		HeartbeatPeriod: heartbeat, Clock: deps.Clock,
	}); err != nil {
		return nil, err
	}
	m.poller, err = criruntime.NewPoller(criruntime.PollerConfig{
		Runtime: deps.Runtime, State: m.state, Timeout: node.StatusCallTimeout, Clock: deps.Clock,
		Observer: deps.Metrics, OnChange: m.patcher.Trigger,
	})
	return m, err
}

// runtimeError is the ContainerRuntimeUnhealthy input: why the last CRI Status call failed, or, once
// the runtime has answered, runtimeState's runtime errors (not ready, or no answer for 30 s).
func (m *companionMode) runtimeError() error {
	if err := m.state.StatusError(); err != nil {
		return err
	}
	if m.state.LastRuntimeSync().IsZero() {
		return nil // no answer yet: not known to be unhealthy
	}
	return m.state.RuntimeErrors()
}

// run runs the poller and the patcher until ctx ends, and triggers a patch on each problem change.
func (m *companionMode) run(ctx context.Context, problemChanges <-chan struct{}) {
	go m.poller.Run(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-problemChanges:
				m.patcher.Trigger()
			}
		}
	}()
	_ = m.patcher.Run(ctx)
}

// healthy fails while condition patches keep failing for longer than 30 s (the syncloop check).
func (m *companionMode) healthy() error {
	st := m.patcher.Status()
	last := st.LastPatch
	if last.IsZero() {
		last = m.started
	}
	if st.LastErrorTime.After(st.LastPatch) && time.Since(last) > 30*time.Second {
		return fmt.Errorf("node condition patches failing since %s: %s", last.Format(time.RFC3339), st.LastError)
	}
	return nil
}

// patched is /readyz's check in companion mode: the conditions have been patched once.
func (m *companionMode) patched() error {
	if m.patcher.Status().LastPatch.IsZero() {
		return errors.New("node conditions not patched yet")
	}
	return nil
}

// nodeRef is the Node as the object of problem monitors' Events and of the companion's, as
// node-problem-detector's k8sexporter makes it (UID = name): what NPD's users select on.
func nodeRef(name string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}

// eventRef is the Node as the object of the agent's own Events: the node controller's (the 1.37
// kubelet's, with the Node's UID once known) when it owns the Node, nodeRef in companion mode.
func (a *Agent) eventRef() *v1.ObjectReference {
	if a.node != nil {
		return a.node.EventRef()
	}
	return nodeRef(a.cfg.NodeName)
}
