package app

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/companion"
	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/lifecycle"
	"github.com/nodeagent/nodeagent/pkg/node"
)

// companionMode is --companion: the runtime's and the problem monitors' conditions patched onto the
// kubelet's Node (pkg/companion.Mode).
type companionMode struct {
	*companion.Mode
	nodeName string
	deps     *Dependencies
}

// Ready is /readyz's check: the conditions have been patched once.
func (m *companionMode) Ready() error { return m.Patched() }

// EventRef is the Node as NPD's k8sexporter names it (nodeRef).
func (m *companionMode) EventRef() *v1.ObjectReference { return nodeRef(m.nodeName) }

func (m *companionMode) addTo(group *lifecycle.Group) error {
	m.deps.Recorder.Eventf(m.EventRef(), v1.EventTypeNormal, "Starting", "Starting nodeagent (companion).")
	group.Add("companion", m.Mode)
	return nil
}

func (m *companionMode) report(r *node.Report) {
	r.Extra["companion"] = m.PatcherStatus()
	runtimeErr := ""
	if err := m.RuntimeError(); err != nil {
		runtimeErr = err.Error()
	}
	r.Extra["runtime"] = map[string]string{"error": runtimeErr}
}

// newCompanionMode wires companion mode (pkg/companion.Mode) from the node name, NPD's heartbeat
// period and the shared dependencies: the heartbeat client, the CRI connection, the problem monitors
// and the event recorders.
func newCompanionMode(nodeName string, heartbeat time.Duration, deps *Dependencies) (*companionMode, error) {
	cfg := companion.ModeConfig{
		NodeName: nodeName, Client: deps.HeartbeatClient, Runtime: deps.Runtime, HeartbeatPeriod: heartbeat,
		Observer: deps.Metrics, Clock: deps.Clock,
		Recorder: func(eventType, reason, message, source string) {
			deps.RecorderFor(source, nodeName).Event(nodeRef(nodeName), eventType, reason, message)
		},
	}
	if deps.Problems != nil {
		cfg.Problems, cfg.ProblemTypes = deps.Problems.Conditions, deps.Problems.ConditionTypes()
	}
	m, err := companion.NewMode(cfg)
	if err != nil {
		return nil, err
	}
	return &companionMode{Mode: m, nodeName: nodeName, deps: deps}, nil
}

// nodeMode is the agent owning its Node: one node.Controller on a Queue of its own, with the
// Node informer and the eviction manager it reads.
type nodeMode struct {
	*node.Controller
	queue   *node.Queue
	deps    *Dependencies
	kubelet *kubeletAPI // nil with --port=0
}

// newNodeMode builds the agent's own Node from the flags and the shared dependencies.
func newNodeMode(cfg *config.Completed, deps *Dependencies) (*nodeMode, error) {
	s, err := node.NewQueue(node.QueueConfig{Clock: deps.Clock, CloseAllConns: deps.CloseAllConns})
	if err != nil {
		return nil, err
	}
	kubelet, err := newKubeletAPI(cfg, deps)
	if err != nil {
		return nil, err
	}
	nodeDeps := node.Dependencies{
		Client: deps.Client, HeartbeatClient: deps.HeartbeatClient, NodeLister: deps.Informers.Core().V1().Nodes().Lister(),
		Cache: deps.NodeCache, Recorder: deps.Recorder, Clock: deps.Clock, Queue: s,
		Observer: deps.Metrics, Serving: lease.NewServingProbe(deps.HeartbeatClient, cfg.NodeName, deps.Clock, 0),
		Instance: node.ProcessInstance(),
	}
	if kubelet != nil {
		nodeDeps.Pods = kubelet.lister
	}
	nc := nodeConfig(cfg, deps)
	if kubelet != nil && kubelet.stats != nil {
		// The kubelet API serves the machine's usage (/stats/summary, /metrics/resource,
		// /metrics/cadvisor) from cadvisor's root cgroup.
		nc.Host = machineStatsHost{machineHost{deps.Machine, deps.Eviction}, kubelet.stats}
	}
	ctrl, err := node.New(nc, nodeDeps)
	if err != nil {
		return nil, err
	}
	if kubelet != nil {
		kubelet.serve(ctrl)
		kubelet.onExpired = func(message string) {
			deps.Recorder.Event(ctrl.EventRef(), v1.EventTypeWarning, "ServingCertificateExpired", message)
		}
	}
	return &nodeMode{Controller: ctrl, queue: s, deps: deps, kubelet: kubelet}, nil
}

// Ready is /readyz's check: the Node registered, its status posted, no other agent on its Lease.
func (m *nodeMode) Ready() error { return m.Registered() }

// Healthy is the syncloop check: the Node's loops, and the kubelet API's serving certificate not
// expired (kubeletAPI.certificateError).
func (m *nodeMode) Healthy() error {
	if m.kubelet == nil {
		return m.Controller.Healthy()
	}
	return errors.Join(m.Controller.Healthy(), m.kubelet.certificateError())
}

// addTo adds the Node informer, the eviction manager and the step queue. The steps start without
// waiting for the informer to sync, unlike the simulation's (simulation.Process.Run): an agent
// started while the API server cannot be reached still polls its runtime and retries its Lease
// with backoff, and registers the moment the API server answers, as the kubelet does; the syncer
// reads a Node the informer does not have yet from the API server.
func (m *nodeMode) addTo(group *lifecycle.Group) error {
	group.Add("node informer", lifecycle.Informers{SharedInformerFactory: m.deps.Informers})
	group.Add("eviction manager", lifecycle.RunnableFunc(func(ctx context.Context) error { m.deps.Eviction.Run(ctx); return nil }))
	if err := m.queue.Start(m.Controller); err != nil {
		return err
	}
	group.Add("node step queue", m.queue)
	if m.kubelet != nil {
		m.kubelet.addTo(group)
	}
	return nil
}

func (m *nodeMode) report(r *node.Report) { r.Nodes = []node.Status{m.Status()} }

// nodeRef is the Node as the object of problem monitors' Events and of the companion's, as
// node-problem-detector's k8sexporter makes it (UID = name): what NPD's users select on.
func nodeRef(name string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}

// eventRef is the Node as the object of the agent's own Events: the node controller's (the 1.37
// kubelet's, with the Node's UID once known) when it owns the Node, nodeRef in companion mode.
func (a *Agent) eventRef() *v1.ObjectReference { return a.mode.EventRef() }
