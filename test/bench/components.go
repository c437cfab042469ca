package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodeagent/nodeagent/test/framework"
)

// component is one node agent under test: the reference kubelet or nodeagent, each with a node name
// of its own. start execs the process; stop ends it and cleans its mounts, so the next start is cold.
type component interface {
	// name is "kubelet" or "nodeagent".
	name() string
	// nodeName is the Node it registers (and its system:node:<nodeName> identity).
	nodeName() string
	// binary is the path of the executable.
	binary() string
	// start execs the process. It may return before the process is up (kubelet) or once its HTTP
	// server answers (nodeagent, framework.StartAgent); the caller's clock starts before the call.
	start(ctx context.Context) error
	// pid is the process ID of the last start.
	pid() int
	// exited is closed when the process of the last start has exited.
	exited() <-chan struct{}
	// stop sends SIGTERM, waits (SIGKILL after a grace period) and unmounts what it left mounted.
	stop() error
	// goroutines scrapes go_goroutines from the process's /metrics.
	goroutines(ctx context.Context) (int, error)
}

// nodeAgent runs the nodeagent binary through framework.StartAgent.
type nodeAgent struct {
	dir, node, kubeconfig, endpoint, bin string
	args                                 []string
	agent                                *framework.Agent
	done                                 chan struct{}
}

func (n *nodeAgent) name() string     { return "nodeagent" }
func (n *nodeAgent) nodeName() string { return n.node }
func (n *nodeAgent) binary() string   { return n.bin }
func (n *nodeAgent) pid() int         { return n.agent.PID }

func (n *nodeAgent) exited() <-chan struct{} { return n.done }

func (n *nodeAgent) start(ctx context.Context) error {
	a, err := framework.StartAgent(ctx, framework.AgentOptions{
		Dir: n.dir, NodeName: n.node, Kubeconfig: n.kubeconfig, RuntimeEndpoint: n.endpoint, Args: n.args,
	})
	if err != nil {
		return err
	}
	n.agent = a
	done := make(chan struct{})
	n.done = done
	go func() { _ = a.Wait(context.Background()); close(done) }()
	return nil
}

func (n *nodeAgent) stop() error {
	if n.agent == nil {
		return nil
	}
	err := n.agent.Stop()
	<-n.done
	if err != nil {
		return fmt.Errorf("stop nodeagent: %w", err)
	}
	return nil
}

func (n *nodeAgent) goroutines(ctx context.Context) (int, error) {
	m, err := n.agent.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return goroutinesOf(m)
}

// kubelet runs the reference kubelet through framework.Kubelet (its KubeletConfiguration is the one of
// shared/reference/real-components.md, anonymous authentication on so that go_goroutines can be read from
// its :port/metrics).
type kubelet struct {
	k *framework.Kubelet
}

func (k *kubelet) name() string            { return "kubelet" }
func (k *kubelet) nodeName() string        { return k.k.NodeName }
func (k *kubelet) binary() string          { return k.k.Binary }
func (k *kubelet) pid() int                { return k.k.PID() }
func (k *kubelet) exited() <-chan struct{} { return k.k.Exited() }
func (k *kubelet) start(context.Context) error {
	return k.k.Start()
}

// stop ends the kubelet and unmounts its root dir; its exit status on SIGTERM is not an error.
func (k *kubelet) stop() error { return k.k.Stop() }

func (k *kubelet) goroutines(ctx context.Context) (int, error) {
	m, err := k.k.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return goroutinesOf(m)
}

// goroutinesOf returns the value of go_goroutines in a scrape.
func goroutinesOf(m *framework.Metrics) (int, error) {
	v, ok := m.Get("go_goroutines", nil)
	if !ok {
		return 0, errors.New("no go_goroutines in the scrape")
	}
	return int(v), nil
}
