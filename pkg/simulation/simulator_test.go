package simulation

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
)

// simEnv is a Simulator over a fake API server, with the one Node informer (label selector) and
// tracker the command wires. Build it inside a synctest bubble.
type simEnv struct {
	t       *testing.T
	client  *fake.Clientset
	sim     *Simulator
	factory informers.SharedInformerFactory
}

func newSimEnv(t *testing.T, mutate func(*Config)) *simEnv {
	t.Helper()
	e := &simEnv{t: t, client: fake.NewClientset()}
	tracker := nodecache.New(clock.RealClock{})
	e.factory = informers.NewSharedInformerFactoryWithOptions(e.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelSimulated + "=true" }))
	inf := e.factory.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(tracker.EventHandler()); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Nodes: 3, NamePrefix: "sim-",
		Node: node.Config{
			NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
			NodeLeaseDurationSeconds: 40, NodeStatusMaxImages: 50, AgentVersion: "v0.0.0-test",
		},
		Dependencies: node.Dependencies{
			Client: e.client, HeartbeatClient: e.client, NodeLister: e.factory.Core().V1().Nodes().Lister(),
			Cache: tracker, Recorder: record.NewFakeRecorder(10000), Clock: clock.RealClock{},
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	sim, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.sim = sim
	return e
}

// run starts the informer and the Simulator; stop cancels them and waits for both.
func (e *simEnv) run(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	e.factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { _ = e.sim.Run(ctx); close(done) }()
	return func() { cancel(); <-done; e.factory.Shutdown() }
}

func (e *simEnv) node(name string) *v1.Node {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *simEnv) lease(name string) *coordinationv1.Lease {
	e.t.Helper()
	l, err := e.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func condition(n *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func conditionText(c *v1.NodeCondition) string {
	if c == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s %s %q", c.Status, c.Reason, c.Message)
}

// TestSimulatorRegistersEveryNode: every Node is registered Ready by its own controller, with the
// simulated label, the template's capacity, its own InternalIP and IDs; each gets a Lease; /readyz's
// check passes once all are posted and the health check holds.
func TestSimulatorRegistersEveryNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newSimEnv(t, nil)
		if err := e.sim.Registered(); err == nil {
			t.Error("Registered() before Run: nil, want an error counting the nodes")
		}
		stop := e.run(ctx)
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()

		ids := map[string]bool{}
		for i, name := range e.sim.Names() {
			n := e.node(name)
			if n == nil {
				t.Fatalf("node %s not registered", name)
			}
			if n.Labels[LabelSimulated] != "true" || n.Labels[v1.LabelHostname] != name {
				t.Errorf("%s labels %v", name, n.Labels)
			}
			if c := condition(n, v1.NodeReady); c == nil || c.Status != v1.ConditionTrue || c.Reason != "KubeletReady" {
				t.Errorf("%s Ready %s", name, conditionText(c))
			}
			for res, want := range map[v1.ResourceName]string{"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"} {
				if q := n.Status.Capacity[res]; q.String() != want {
					t.Errorf("%s capacity[%s] = %s, want %s", name, res, q.String(), want)
				}
				if q := n.Status.Allocatable[res]; q.String() != want {
					t.Errorf("%s allocatable[%s] = %s, want %s", name, res, q.String(), want)
				}
			}
			if want := fmt.Sprintf("100.64.0.%d", i+1); len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != want {
				t.Errorf("%s addresses %v, want InternalIP %s", name, n.Status.Addresses, want)
			}
			if n.Status.NodeInfo.ContainerRuntimeVersion != "fakeRuntime://0.1.0" || n.Status.NodeInfo.KubeletVersion != "v0.0.0-test" {
				t.Errorf("%s nodeInfo %+v", name, n.Status.NodeInfo)
			}
			ids[n.Status.NodeInfo.MachineID], ids[n.Status.NodeInfo.BootID] = true, true
			if l := e.lease(name); l == nil || *l.Spec.HolderIdentity != name {
				t.Errorf("%s lease %v", name, l)
			}
			if st := e.sim.State(name); st.Phase != PhaseRunning || !st.Registered || st.Ready != "True" {
				t.Errorf("%s state %+v", name, st)
			}
		}
		if len(ids) != 6 {
			t.Errorf("machine and boot IDs %v: want one of each per node", ids)
		}
		if err := e.sim.Registered(); err != nil {
			t.Errorf("Registered(): %v", err)
		}
		if err := e.sim.Healthy(); err != nil {
			t.Errorf("Healthy(): %v", err)
		}
	})
}

// TestSimulatorPacesStarts: with StartQPS 1 and burst 1, one Node starts per second, in index order;
// a Node stopped while pending is never started.
func TestSimulatorPacesStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newSimEnv(t, func(c *Config) { c.StartQPS, c.StartBurst = 1, 1 })
		if _, err := e.sim.Set(ctx, "sim-0002", Change{Stopped: ptr.To(true)}); err != nil {
			t.Fatal(err)
		}
		stop := e.run(ctx)
		defer stop()
		synctest.Wait()
		if e.node("sim-0000") == nil || e.node("sim-0001") != nil {
			t.Fatalf("at start: want sim-0000 only")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if e.node("sim-0001") == nil {
			t.Fatalf("after 1s: sim-0001 not registered")
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if e.node("sim-0002") != nil || e.sim.State("sim-0002").Phase != PhaseStopped {
			t.Errorf("sim-0002, stopped while pending, was started: %+v", e.sim.State("sim-0002"))
		}
	})
}

// TestSimulatorChanges: the control changes reach only their Node, with the kubelet's conditions:
// runtime and network not ready within one poll (5 s), pressure at once; stopping a Node ends its
// loops (no more Lease renewals or status) and starting it runs a new controller on the same Node.
func TestSimulatorChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newSimEnv(t, nil)
		stop := e.run(ctx)
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()
		const target = "sim-0001"
		others := []string{"sim-0000", "sim-0002"}
		before := map[string]string{}
		for _, name := range others {
			before[name] = conditionText(condition(e.node(name), v1.NodeReady))
		}
		set := func(c Change) NodeState {
			t.Helper()
			st, err := e.sim.Set(ctx, target, c)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		want := func(what string, typ v1.NodeConditionType, status v1.ConditionStatus, reason, message string) {
			t.Helper()
			c := condition(e.node(target), typ)
			if c == nil || c.Status != status || c.Reason != reason || c.Message != message {
				t.Errorf("%s: %s = %s, want %s %s %q", what, typ, conditionText(c), status, reason, message)
			}
		}

		set(Change{RuntimeReady: ptr.To(false)})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want("runtime not ready", v1.NodeReady, v1.ConditionFalse, "KubeletNotReady",
			"container runtime not ready: RuntimeReady=false reason:SimulatedRuntimeNotReady message:runtime made not ready through the simulation API")
		set(Change{RuntimeReady: ptr.To(true), NetworkReady: ptr.To(false)})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want("network not ready", v1.NodeReady, v1.ConditionFalse, "KubeletNotReady",
			"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")
		set(Change{NetworkReady: ptr.To(true)})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want("ready again", v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")

		st := set(Change{MemoryPressure: ptr.To(true), DiskPressure: ptr.To(true), PIDPressure: ptr.To(true)})
		if !st.MemoryPressure || !st.DiskPressure || !st.PIDPressure {
			t.Errorf("state after pressure %+v", st)
		}
		synctest.Wait() // the change triggers a sync: no time passes
		want("memory pressure", v1.NodeMemoryPressure, v1.ConditionTrue, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
		want("disk pressure", v1.NodeDiskPressure, v1.ConditionTrue, "KubeletHasDiskPressure", "kubelet has disk pressure")
		want("PID pressure", v1.NodePIDPressure, v1.ConditionTrue, "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
		set(Change{MemoryPressure: ptr.To(false), DiskPressure: ptr.To(false), PIDPressure: ptr.To(false)})
		synctest.Wait()
		want("no memory pressure", v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")

		for _, name := range others {
			if now := conditionText(condition(e.node(name), v1.NodeReady)); now != before[name] {
				t.Errorf("untouched %s: Ready %s, was %s", name, now, before[name])
			}
			if c := condition(e.node(name), v1.NodeMemoryPressure); c == nil || c.Status != v1.ConditionFalse {
				t.Errorf("untouched %s: MemoryPressure %s", name, conditionText(c))
			}
		}

		first := e.sim.Controller(target)
		if st := set(Change{Stopped: ptr.To(true)}); st.Phase != PhaseStopped {
			t.Errorf("state after stop %+v", st)
		}
		renewed := e.lease(target).Spec.RenewTime.Time
		hb := condition(e.node(target), v1.NodeReady).LastHeartbeatTime
		time.Sleep(time.Minute)
		synctest.Wait()
		if l := e.lease(target); !l.Spec.RenewTime.Time.Equal(renewed) {
			t.Errorf("stopped node's lease renewed at %v, after the stop", l.Spec.RenewTime.Time)
		}
		if now := condition(e.node(target), v1.NodeReady).LastHeartbeatTime; !now.Equal(&hb) {
			t.Errorf("stopped node's status posted at %v, after the stop", now)
		}
		if err := e.sim.Registered(); err != nil {
			t.Errorf("Registered() with one node stopped: %v", err)
		}
		if err := e.sim.Healthy(); err != nil {
			t.Errorf("Healthy() with one node stopped: %v", err)
		}
		if l := e.lease("sim-0000"); time.Since(l.Spec.RenewTime.Time) > 11*time.Second {
			t.Errorf("running node's lease last renewed %v ago", time.Since(l.Spec.RenewTime.Time))
		}

		if st := set(Change{Stopped: ptr.To(false)}); st.Phase != PhaseRunning {
			t.Errorf("state after start %+v", st)
		}
		synctest.Wait()
		if e.sim.Controller(target) == first {
			t.Error("start reused the stopped controller, want a new one")
		}
		if l := e.lease(target); !l.Spec.RenewTime.Time.After(renewed) {
			t.Errorf("restarted node's lease not renewed")
		}
		if _, err := e.sim.Set(ctx, "sim-0009", Change{Stopped: ptr.To(true)}); !errors.Is(err, ErrUnknownNode) {
			t.Errorf("Set on an unknown node: %v, want ErrUnknownNode", err)
		}
	})
}

// TestTemplateOnNodes: the template's labels, taints, allocatable, hugepages, extended resources,
// node info, extra conditions, images and runtime handlers reach the registered Node.
func TestTemplateOnNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		tmpl, err := ParseTemplate([]byte(fullTemplate))
		if err != nil {
			t.Fatal(err)
		}
		e := newSimEnv(t, func(c *Config) {
			c.Nodes, c.Template = 1, tmpl
			c.Node.Labels = map[string]string{"extra": "yes"}
			c.Node.Taints = []v1.Taint{SimulatedTaint}
		})
		stop := e.run(ctx)
		defer stop()
		time.Sleep(11 * time.Second) // one status period after registration
		synctest.Wait()
		n := e.node("sim-0000")
		if n.Labels["topology.kubernetes.io/zone"] != "a" || n.Labels["extra"] != "yes" || n.Labels[v1.LabelHostname] != "sim-0000" {
			t.Errorf("labels %v", n.Labels)
		}
		if len(n.Spec.Taints) != 2 || n.Spec.Taints[1] != SimulatedTaint {
			t.Errorf("taints %v", n.Spec.Taints)
		}
		for res, want := range map[v1.ResourceName][2]string{
			"cpu": {"8", "7500m"}, "memory": {"32Gi", "28Gi"}, "hugepages-2Mi": {"1Gi", "1Gi"}, "example.com/gpu": {"2", "1"},
			"pods": {"50", "50"}, "ephemeral-storage": {"100Gi", "100Gi"},
		} {
			if c, a := n.Status.Capacity[res], n.Status.Allocatable[res]; c.String() != want[0] || a.String() != want[1] {
				t.Errorf("%s: capacity %s allocatable %s, want %s %s", res, c.String(), a.String(), want[0], want[1])
			}
		}
		info := n.Status.NodeInfo
		if info.KernelVersion != "6.1.0" || info.OSImage != "Debian" || info.ContainerRuntimeVersion != "containerd://1.7.24" || info.KubeletVersion != "v1.36.3" {
			t.Errorf("nodeInfo %+v", info)
		}
		if c := condition(n, "KernelDeadlock"); c == nil || c.Status != v1.ConditionFalse || c.Reason != "KernelHasNoDeadlock" || c.Message != "fine" {
			t.Errorf("KernelDeadlock %s", conditionText(c))
		}
		if c := condition(n, v1.NodeReady); c == nil || c.Status != v1.ConditionTrue {
			t.Errorf("Ready %s (the template's False is ignored)", conditionText(c))
		}
		if len(n.Status.Images) != 2 || n.Status.Images[0].SizeBytes != 2000 || n.Status.Images[0].Names[0] != "b@sha256:1" {
			t.Errorf("images %+v", n.Status.Images)
		}
		if len(n.Status.RuntimeHandlers) != 1 || n.Status.RuntimeHandlers[0].Name != "runc" || !*n.Status.RuntimeHandlers[0].Features.UserNamespaces {
			t.Errorf("runtime handlers %+v", n.Status.RuntimeHandlers)
		}
		// The Create and at most the fast start-up's patch: the template's extras do not make every sync a change.
		patches := 0
		for _, a := range e.client.Actions() {
			if a.GetVerb() == "patch" {
				patches++
			}
		}
		if patches > 1 {
			t.Errorf("%d status patches within one period of registration, want at most 1", patches)
		}
	})
}
