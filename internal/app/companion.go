package app

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/companion"
	"github.com/nodeagent/nodeagent/pkg/node"
)

// newCompanionMode wires companion mode (pkg/companion.Mode) from the node name, NPD's heartbeat
// period and the shared dependencies: the heartbeat client, the CRI connection, the problem monitors
// and the event recorders.
func newCompanionMode(nodeName string, heartbeat time.Duration, deps *Dependencies) (*companion.Mode, error) {
	cfg := companion.ModeConfig{
		NodeName: nodeName, Client: deps.HeartbeatClient, Runtime: deps.Runtime, HeartbeatPeriod: heartbeat,
		StatusCallTimeout: node.StatusCallTimeout, MaxWaitForRuntime: node.MaxWaitForContainerRuntime,
		ProblemChanges: deps.ProblemChanges, Observer: deps.Metrics, Clock: deps.Clock,
		Recorder: func(eventType, reason, message, source string) {
			deps.RecorderFor(source, nodeName).Event(nodeRef(nodeName), eventType, reason, message)
		},
	}
	if deps.Problems != nil {
		cfg.Problems, cfg.ProblemTypes = deps.Problems.Conditions, deps.Problems.ConditionTypes()
	}
	return companion.NewMode(cfg)
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
