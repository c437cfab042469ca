package node

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/ptr"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclientv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	netutils "k8s.io/utils/net"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

const nodeName = "node-1"

// kubeletSetters are the names of the kubelet's defaultNodeStatusFuncs, in its order, without
// VolumesInUse and VolumeLimits (nodeagent mounts no volumes).
var kubeletSetters = []string{
	"NodeAddress", "MachineInfo", "VersionInfo", "DaemonEndpoints", "Images", "GoRuntime", "RuntimeHandlers",
	"NodeFeatures", "MemoryPressureCondition", "DiskPressureCondition", "PIDPressureCondition", "ReadyCondition",
	"SchedulableEvent",
}

// fakeHost is a 2-CPU 4 GiB machine with a 10 GiB nodefs and no pressure.
type fakeHost struct{}

func (fakeHost) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	return &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 4 << 30, MachineID: "machine-1", SystemUUID: "uuid-1", BootID: "boot-1"}, nil
}
func (fakeHost) EphemeralStorageCapacity() (resource.Quantity, error) {
	return resource.MustParse("10Gi"), nil
}
func (fakeHost) KernelVersion() string       { return "6.1.0" }
func (fakeHost) OSImage() string             { return "Debian GNU/Linux 12 (bookworm)" }
func (fakeHost) ValidateNodeIP(net.IP) error { return nil }
func (fakeHost) LookupIP(string) ([]net.IP, error) {
	return []net.IP{netutils.ParseIPSloppy("10.0.0.1")}, nil
}
func (fakeHost) ResolveAddress(ip net.IP) (net.IP, error) { return ip, nil }
func (fakeHost) IsUnderMemoryPressure() bool              { return false }
func (fakeHost) IsUnderDiskPressure() bool                { return false }
func (fakeHost) IsUnderPIDPressure() bool                 { return false }
func (fakeHost) RunningInUserNamespace() *bool            { return ptr.To(false) }

// env is one Controller over a fake API server, an informer-less Node lister (an indexer nobody
// fills: every sync reads the Node from the API server), the CRI fakes and a fake event recorder.
// Build it inside a synctest bubble: its clock is the bubble's.
type env struct {
	t        *testing.T
	client   *fake.Clientset
	runtime  *critest.FakeRuntimeService
	images   *critest.FakeImageService
	recorder *record.FakeRecorder
	tracker  *nodecache.Tracker
	indexer  cache.Indexer // the Node lister's store: empty unless a test plays the informer (syncInformer)
	ctrl     *Controller
	start    time.Time
}

// syncInformer plays the Node informer: the lister gets the Node as the API server has it.
func (e *env) syncInformer() {
	e.t.Helper()
	if n := e.node(); n != nil {
		if err := e.indexer.Update(n); err != nil {
			e.t.Fatal(err)
		}
	}
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	return newEnvWith(t, mutate, nil)
}

// newEnvWith is newEnv whose heartbeat client (status, Lease) is wrap(the fake API server) when wrap
// is not nil.
func newEnvWith(t *testing.T, mutate func(*Config), wrap func(kubernetes.Interface) kubernetes.Interface) *env {
	t.Helper()
	return newEnvFull(t, mutate, wrap, nil, "")
}

// newEnvFull is newEnvWith over client (a new fake API server when nil) with Dependencies.Instance.
func newEnvFull(t *testing.T, mutate func(*Config), wrap func(kubernetes.Interface) kubernetes.Interface, client *fake.Clientset, instance string) *env {
	t.Helper()
	if client == nil {
		client = fake.NewClientset()
	}
	e := &env{
		t:        t,
		client:   client,
		runtime:  critest.NewFakeRuntimeService(),
		images:   critest.NewFakeImageService(),
		recorder: record.NewFakeRecorder(1000),
		tracker:  nodecache.New(clock.RealClock{}),
		start:    time.Now(),
	}
	e.indexer = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	e.setRuntimeStatus(true, true)
	e.images.SetFakeImages([]string{"registry.k8s.io/pause:3.10"})
	cfg := Config{
		NodeName: nodeName, RegisterNode: true, NodeIPs: []net.IP{netutils.ParseIPSloppy("10.0.0.1")}, MaxPods: 110,
		NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
		NodeLeaseDurationSeconds: 40, NodeStatusMaxImages: 50,
		RuntimeEndpoint: "unix:///run/containerd/containerd.sock", AgentVersion: "v1.36.3-nodeagent",
		Host: fakeHost{}, Runtime: criruntime.Services{RuntimeService: e.runtime, ImageManagerService: e.images},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	var heartbeat kubernetes.Interface = e.client
	if wrap != nil {
		heartbeat = wrap(e.client)
	}
	deps := Dependencies{
		Client: e.client, HeartbeatClient: heartbeat,
		NodeLister: corelisters.NewNodeLister(e.indexer),
		Cache:      e.tracker, Recorder: e.recorder, Clock: clock.RealClock{}, Instance: instance,
	}
	ctrl, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl = ctrl
	return e
}

// setRuntimeStatus sets what the fake runtime's Status answers.
func (e *env) setRuntimeStatus(runtimeReady, networkReady bool) {
	e.runtime.Lock()
	defer e.runtime.Unlock()
	e.runtime.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: runtimeReady, Reason: "RuntimeDown", Message: "shim gone"},
		{Type: runtimeapi.NetworkReady, Status: networkReady},
	}}
}

// failStatus makes the fake runtime's next 10000 Status calls fail with err.
func (e *env) failStatus(err error) {
	for range 10000 {
		e.runtime.InjectError("Status", err)
	}
}

// run starts the Controller; stop cancels it and waits for Run to return (all its loops).
func (e *env) run(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		if err := e.ctrl.Run(ctx); err != nil {
			e.t.Error(err)
		}
		close(done)
	}()
	return func() { cancel(); <-done }
}

// node returns the Node as the API server has it, or nil.
func (e *env) node() *v1.Node {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// lease returns the node's Lease, or nil.
func (e *env) lease() *coordinationv1.Lease {
	e.t.Helper()
	l, err := e.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// events drains the recorded events.
func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// writes returns the API writes made so far as "verb resource[/subresource]", in order.
func (e *env) writes() []string {
	var out []string
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		s := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		out = append(out, s)
	}
	return out
}

func ready(n *v1.Node) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// TestRegistersReady: with the runtime ready, Run registers the Node Ready with the kubelet's reason
// and message, its status filled by the named setter list in the kubelet's order (extra setters
// last); the Lease is created in the same instant, right after registration; the controller reports
// itself registered, healthy and without problems.
func TestRegistersReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		extraRuns := 0
		e := newEnv(t, func(c *Config) {
			c.ExtraFuncs = []nodestatus.Func{{Name: "ProblemMonitor", Setter: func(context.Context, *v1.Node) error { extraRuns++; return nil }}}
		})
		wantNames := append(slices.Clone(kubeletSetters), "ProblemMonitor")
		var defaults []string
		for _, f := range e.ctrl.DefaultNodeStatusFuncs() {
			defaults = append(defaults, f.Name)
		}
		if !slices.Equal(defaults, kubeletSetters) {
			t.Errorf("DefaultNodeStatusFuncs names\n %v\nwant the kubelet's order\n %v", defaults, kubeletSetters)
		}
		stop := e.run(ctx)
		synctest.Wait()

		n := e.node()
		if n == nil {
			t.Fatal("Node not registered")
		}
		r := ready(n)
		if r == nil || r.Status != v1.ConditionTrue || r.Reason != "KubeletReady" || r.Message != "kubelet is posting ready status" {
			t.Errorf("Ready = %+v, want True KubeletReady \"kubelet is posting ready status\"", r)
		}
		if !r.LastHeartbeatTime.Time.Equal(e.start) {
			t.Errorf("Ready heartbeat %v, want the start %v (registered at once)", r.LastHeartbeatTime, e.start)
		}
		info := n.Status.NodeInfo
		if info.ContainerRuntimeVersion != "fakeRuntime://0.1.0" || info.KernelVersion != "6.1.0" || info.KubeletVersion != "v1.36.3-nodeagent" || info.BootID != "boot-1" {
			t.Errorf("nodeInfo %+v", info)
		}
		if cpu := n.Status.Capacity[v1.ResourceCPU]; cpu.String() != "2" {
			t.Errorf("cpu capacity %s, want 2", cpu.String())
		}
		if len(n.Status.Images) != 1 || len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != "10.0.0.1" {
			t.Errorf("images %v, addresses %v", n.Status.Images, n.Status.Addresses)
		}

		st := e.ctrl.Status()
		var names []string
		for _, s := range st.Setters {
			names = append(names, s.Name)
			if s.LastError != "" || !s.LastRun.Equal(e.start) {
				t.Errorf("setter %s: %+v, want a run at the start without error", s.Name, s)
			}
		}
		if !slices.Equal(names, wantNames) {
			t.Errorf("Status().Setters\n %v\nwant\n %v", names, wantNames)
		}
		if extraRuns == 0 {
			t.Error("the extra setter never ran")
		}

		l := e.lease()
		if l == nil {
			t.Fatal("no Lease after registration")
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(e.start) || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != nodeName {
			t.Errorf("Lease renewTime %v holder %v, want %v and %s: written in the instant of registration", l.Spec.RenewTime, l.Spec.HolderIdentity, e.start, nodeName)
		}
		// The Lease's and the Node's creates run beside each other (startup.go), in either order.
		writes := e.writes()
		if len(writes) < 2 || !slices.Contains(writes[:2], "create leases") || !slices.Contains(writes[:2], "create nodes") {
			t.Errorf("API writes %v, want the Lease and the Node created first, in either order", writes)
		}
		if leaseFirst := len(writes) > 0 && writes[0] == "create leases"; leaseFirst && len(l.OwnerReferences) != 0 {
			t.Errorf("Lease owners %v at creation, before the Node existed", l.OwnerReferences)
		} else if len(l.OwnerReferences) > 1 || len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID != e.node().UID {
			t.Errorf("Lease owners %v, want none or the Node %q", l.OwnerReferences, e.node().UID)
		}

		if err := e.ctrl.Registered(); err != nil {
			t.Errorf("Registered() = %v", err)
		}
		if err := e.ctrl.Healthy(); err != nil {
			t.Errorf("Healthy() = %v", err)
		}
		if !e.ctrl.IsRegistered() || !e.ctrl.Posted() || !e.ctrl.LastSync().Equal(e.start) || !e.ctrl.LastLeaseRenew().Equal(e.start) {
			t.Errorf("IsRegistered %v Posted %v LastSync %v LastLeaseRenew %v", e.ctrl.IsRegistered(), e.ctrl.Posted(), e.ctrl.LastSync(), e.ctrl.LastLeaseRenew())
		}
		if len(st.Problems) != 0 {
			t.Errorf("Status().Problems = %q, want none", st.Problems)
		}
		if st.Ready == nil || st.Ready.Status != v1.ConditionTrue || !st.FirstReadyAt.Equal(e.start) || !st.Registered || !st.NodeCache.Current {
			t.Errorf("Status() = %+v", st)
		}
		if evs := e.events(); len(evs) == 0 || evs[0] != "Normal Starting Starting nodeagent." {
			t.Errorf("events %q, want Starting first", evs)
		}

		// Nothing else is written until the status period: no poll loop, no second patch.
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if got := e.writes(); len(got) != len(writes) {
			t.Errorf("writes in the first 9 s after registration: %v", got[len(writes):])
		}
		// The first renewal (10 s) points the Lease at the Node, as the kubelet's setNodeOwnerFunc.
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if l := e.lease(); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" || l.OwnerReferences[0].UID != e.node().UID {
			t.Errorf("Lease owners %v after the first renewal, want the Node %q", l.OwnerReferences, e.node().UID)
		}
		stop()
	})
}

// TestNodeCreatedBesideLeaseWrite (issue 39): registration does not wait for the first Lease write:
// with that write still in flight (and whether it then succeeds or fails), the Node is created Ready
// at once, as the kubelet's registration runs beside its lease controller (startup.go: the node
// lifecycle controller judges both orders alike); the Lease is written once its call is answered.
func TestNodeCreatedBesideLeaseWrite(t *testing.T) {
	for name, leaseErr := range map[string]error{
		"lease created": nil,
		"lease fails":   apierrors.NewServiceUnavailable("etcd down"),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				release := make(chan struct{})
				e := newEnvWith(t, nil, func(c kubernetes.Interface) kubernetes.Interface { return gatedLeases{Interface: c, release: release} })
				if leaseErr != nil {
					e.client.PrependReactor("create", "leases", func(core.Action) (bool, runtime.Object, error) {
						return true, nil, leaseErr
					})
				}
				stop := e.run(ctx)
				defer stop()
				synctest.Wait()
				if n := e.node(); n == nil {
					t.Error("Node not created while the Lease's first write was in flight")
				} else if r := ready(n); r == nil || r.Status != v1.ConditionTrue {
					t.Errorf("Ready = %+v, want True", r)
				}
				if writes := e.writes(); len(writes) == 0 || writes[0] != "create nodes" {
					t.Errorf("API writes %v, want the Node's create first", writes)
				}
				close(release)
				synctest.Wait()
				if w := e.writes(); len(w) < 2 || w[1] != "create leases" {
					t.Errorf("API writes %v, want the Lease's create once its call was answered", w)
				}
			})
		})
	}
}

// TestRuntimeNotReadyPatchedWithinOnePoll: a runtime that turns NotReady is posted at the next CRI
// Status poll (5 s), not at the end of the 10 s status period: the poller triggers a sync.
func TestRuntimeNotReadyPatchedWithinOnePoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newEnv(t, nil)
		stop := e.run(ctx)
		synctest.Wait()
		if r := ready(e.node()); r == nil || r.Status != v1.ConditionTrue {
			t.Fatalf("Ready at registration = %+v", r)
		}
		e.events()

		time.Sleep(time.Second)
		e.setRuntimeStatus(false, true)
		time.Sleep(4*time.Second - time.Nanosecond)
		synctest.Wait()
		if r := ready(e.node()); r.Status != v1.ConditionTrue {
			t.Fatalf("Ready = %s before the next poll", r.Status)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		r := ready(e.node())
		const want = "container runtime not ready: RuntimeReady=false reason:RuntimeDown message:shim gone"
		if r.Status != v1.ConditionFalse || r.Reason != "KubeletNotReady" || r.Message != want {
			t.Errorf("Ready 5 s after start = %s %s %q, want False KubeletNotReady %q", r.Status, r.Reason, r.Message, want)
		}
		if !r.LastTransitionTime.Time.Equal(e.start.Add(5 * time.Second)) {
			t.Errorf("Ready transition at %v, want at the poll 5 s after start", r.LastTransitionTime)
		}
		if evs := e.events(); !slices.Contains(evs, "Normal NodeNotReady Node node-1 status is now: NodeNotReady") {
			t.Errorf("events %q, want NodeNotReady", evs)
		}
		if p := e.ctrl.Status().Problems; !slices.Contains(p, "runtime: "+want) {
			t.Errorf("Status().Problems = %q, want the runtime error", p)
		}

		// Back to ready: posted at the next poll too.
		e.setRuntimeStatus(true, true)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if r := ready(e.node()); r.Status != v1.ConditionTrue {
			t.Errorf("Ready = %s at the poll after the runtime recovered", r.Status)
		}
		stop()
	})
}

// TestRuntimeStatusFails: a runtime whose CRI Status fails registers the Node NotReady saying why
// ("container runtime is down: <error>"), without waiting for the 30 s threshold; no CRI Version or
// ListImages call is made while Status fails; Status().Problems names the runtime error.
func TestRuntimeStatusFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newEnv(t, nil)
		statusErr := errors.New("rpc error: code = Unavailable desc = connection error: dial unix /run/containerd/containerd.sock: connect: no such file or directory")
		e.failStatus(statusErr)
		stop := e.run(ctx)
		synctest.Wait()

		n := e.node()
		if n == nil {
			t.Fatal("Node not registered while the runtime is down")
		}
		r := ready(n)
		down := "container runtime is down: " + statusErr.Error()
		if r == nil || r.Status != v1.ConditionFalse || r.Reason != "KubeletNotReady" || !strings.HasPrefix(r.Message, "["+down+", ") {
			t.Errorf("Ready = %+v, want False KubeletNotReady starting with %q", r, down)
		}
		if want := "[" + down + ", network state unknown]"; r != nil && r.Message != want {
			t.Errorf("Ready message %q, want %q", r.Message, want)
		}
		if v := n.Status.NodeInfo.ContainerRuntimeVersion; v != "containerd://Unknown" {
			t.Errorf("containerRuntimeVersion %q, want containerd://Unknown", v)
		}
		e.runtime.Lock()
		called := slices.Clone(e.runtime.Called)
		e.runtime.Unlock()
		if slices.Contains(called, "Version") {
			t.Errorf("CRI calls %v: Version called although Status fails", called)
		}
		st := e.ctrl.Status()
		if !slices.Contains(st.Problems, "runtime: "+down) {
			t.Errorf("Status().Problems = %q, want %q", st.Problems, "runtime: "+down)
		}
		if st.Runtime.RuntimeError != down {
			t.Errorf("Status().Runtime.RuntimeError = %q", st.Runtime.RuntimeError)
		}
		stop()
	})
}

// TestHealthy: while the API server refuses every status sync the loops are alive: Healthy (the
// syncloop check and the watchdog's test) stays nil, while Late fails once the last successful sync
// is older than three status periods (30 s) and Status().Problems says so with the failing sync.
func TestHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newEnv(t, nil)
		// The fake clientset's reactor chain is not safe to change while the loops use it: install
		// the reactors first, refusing nothing until down is set.
		var mu sync.Mutex
		down := false
		refuse := func(core.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
			}
			return false, nil, nil
		}
		e.client.PrependReactor("get", "nodes", refuse)
		e.client.PrependReactor("patch", "nodes", refuse)
		stop := e.run(ctx)
		synctest.Wait()
		if err := errors.Join(e.ctrl.Healthy(), e.ctrl.Late()); err != nil {
			t.Fatalf("Healthy() and Late() after registration = %v", err)
		}
		last := e.ctrl.LastSync()
		mu.Lock()
		down = true
		mu.Unlock()

		time.Sleep(last.Add(30 * time.Second).Sub(time.Now()))
		synctest.Wait()
		if err := e.ctrl.Late(); err != nil {
			t.Errorf("Late() 30 s after the last sync = %v, want nil (the bound is three periods)", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		err := e.ctrl.Late()
		if err == nil || err.Error() != "last node status sync 31s ago, bound 30s" {
			t.Errorf("Late() 31 s after the last sync = %v, want \"last node status sync 31s ago, bound 30s\"", err)
		}
		problems := strings.Join(e.ctrl.Status().Problems, "\n")
		if !strings.Contains(problems, "last node status sync 31s ago") || !strings.Contains(problems, "etcd leader changed") {
			t.Errorf("Status().Problems:\n%s\nwant the stale sync and its error", problems)
		}
		// Three minutes of refusals: the loops still run, so the process is healthy.
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		if err := e.ctrl.Healthy(); err != nil {
			t.Errorf("Healthy() after 3 minutes of API errors = %v, want nil: the loops are alive", err)
		}

		// The API server answers again: the next sync makes the controller on time again.
		mu.Lock()
		down = false
		mu.Unlock()
		time.Sleep(10500 * time.Millisecond)
		synctest.Wait()
		if err := e.ctrl.Late(); err != nil {
			t.Errorf("Late() after a successful sync = %v", err)
		}
		stop()
	})
}

// TestHealthyFailsOnAStuckLoop: a setter that never returns (a genuinely stuck loop, ignoring its
// context) holds the status step: Healthy fails once that step has not finished for three periods
// plus the step timeout, naming it, while the Lease goes on being renewed on its own worker.
func TestHealthyFailsOnAStuckLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		stuck := make(chan struct{})
		var block atomic.Bool
		e := newEnv(t, func(c *Config) {
			c.ExtraFuncs = []nodestatus.Func{{Name: "Stuck", Setter: func(context.Context, *v1.Node) error {
				if block.Load() {
					<-stuck
				}
				return nil
			}}}
		})
		stop := e.run(ctx)
		synctest.Wait()
		block.Store(true)
		time.Sleep(30*time.Second + DefaultStepTimeout + 15*time.Second)
		synctest.Wait()
		err := e.ctrl.Healthy()
		if err == nil || !strings.Contains(err.Error(), "status step") {
			t.Errorf("Healthy() with the status step stuck = %v, want it to name the status step", err)
		}
		if age := time.Since(e.ctrl.LastLeaseRenew()); age > 11*time.Second {
			t.Errorf("last Lease renewal %v ago while the status step is stuck, want within a renew interval", age)
		}
		close(stuck)
		stop()
	})
}

// TestRegistrationFails: while the Node cannot be created, the Lease is still renewed (as the
// kubelet's lease controller, which starts at once) without an owner, and Registered() and Status().Problems say why.
func TestRegistrationFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newEnv(t, nil)
		e.client.PrependReactor("create", "nodes", func(core.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(v1.Resource("nodes"), nodeName, errors.New("node authorizer says no"))
		})
		stop := e.run(ctx)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if l := e.lease(); l == nil || len(l.OwnerReferences) != 0 {
			t.Errorf("Lease %+v, want one without owner while the Node cannot be registered", l)
		}

		if err := e.ctrl.Registered(); err == nil || err.Error() != `node "node-1" not registered yet` {
			t.Errorf("Registered() = %v", err)
		}
		p := e.ctrl.Status().Problems
		if len(p) == 0 || !strings.HasPrefix(p[0], "node not registered after ") || !strings.Contains(p[0], "node authorizer says no") {
			t.Errorf("Status().Problems = %q, want the registration error first", p)
		}
		stop()
	})
}

func TestNew(t *testing.T) {
	client := fake.NewClientset()
	rt := criruntime.Services{RuntimeService: critest.NewFakeRuntimeService(), ImageManagerService: critest.NewFakeImageService()}
	valid := func() (Config, Dependencies) {
		return Config{NodeName: nodeName, Host: fakeHost{}, Runtime: rt, NodeStatusUpdateFrequency: 10 * time.Second,
				NodeStatusReportFrequency: 5 * time.Minute, NodeLeaseDurationSeconds: 40},
			Dependencies{Client: client, HeartbeatClient: client,
				NodeLister: corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
				Cache:      nodecache.New(nil), Recorder: record.NewFakeRecorder(10)}
	}
	for name, mutate := range map[string]func(*Config, *Dependencies){
		"no NodeName":            func(c *Config, _ *Dependencies) { c.NodeName = "" },
		"no Host":                func(c *Config, _ *Dependencies) { c.Host = nil },
		"no Runtime":             func(c *Config, _ *Dependencies) { c.Runtime = nil },
		"no Client":              func(_ *Config, d *Dependencies) { d.Client = nil },
		"no HeartbeatClient":     func(_ *Config, d *Dependencies) { d.HeartbeatClient = nil },
		"no NodeLister":          func(_ *Config, d *Dependencies) { d.NodeLister = nil },
		"no Cache":               func(_ *Config, d *Dependencies) { d.Cache = nil },
		"no Recorder":            func(_ *Config, d *Dependencies) { d.Recorder = nil },
		"no status frequency":    func(c *Config, _ *Dependencies) { c.NodeStatusUpdateFrequency = 0 },
		"no lease duration":      func(c *Config, _ *Dependencies) { c.NodeLeaseDurationSeconds = 0 },
		"no report frequency":    func(c *Config, _ *Dependencies) { c.NodeStatusReportFrequency = 0 },
		"negative lease seconds": func(c *Config, _ *Dependencies) { c.NodeLeaseDurationSeconds = -40 },
	} {
		cfg, deps := valid()
		mutate(&cfg, &deps)
		if _, err := New(cfg, deps); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	cfg, deps := valid()
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() of a valid Config = %v", err)
	}
	bad := cfg
	bad.NodeStatusUpdateFrequency = -time.Second
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "NodeStatusUpdateFrequency -1s") {
		t.Errorf("Validate() = %v, want it to name NodeStatusUpdateFrequency and its value", err)
	}
	c, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != nodeName || c.cfg.Hostname != nodeName || c.LeaseRenewInterval() != 10*time.Second {
		t.Errorf("Name %q Hostname %q LeaseRenewInterval %v", c.Name(), c.cfg.Hostname, c.LeaseRenewInterval())
	}
	if len(client.Actions()) != 0 {
		t.Errorf("New made API calls: %v", client.Actions())
	}
}

// TestHeartbeatRecoveryResyncs (issue 13): after Lease renewals fail and one succeeds again, the
// status is synced at once and again 1 s and 3 s later, each reading the Node from the API server, so
// a Ready=Unknown the node lifecycle controller writes just after the first sync is undone within a
// second instead of a status period.
func TestHeartbeatRecoveryResyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newEnv(t, nil)
		var mu sync.Mutex
		leaseDown := false
		e.client.PrependReactor("update", "leases", func(core.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			if leaseDown {
				return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
			}
			return false, nil, nil
		})
		stop := e.run(ctx)
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := e.node(); n == nil || ready(n).Status != v1.ConditionTrue {
			t.Fatalf("not registered Ready: %+v", n)
		}
		mu.Lock()
		leaseDown = true
		mu.Unlock()
		// The next renewal (10 s) fails; the lease controller retries with its backoff.
		time.Sleep(12 * time.Second)
		synctest.Wait()
		mu.Lock()
		leaseDown = false
		mu.Unlock()
		// The lifecycle controller marks the Node Unknown while the agent's renewals fail.
		n := e.node()
		ready(n).Status, ready(n).Reason = v1.ConditionUnknown, "NodeStatusUnknown"
		if _, err := e.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.client.ClearActions()
		// Wait for the renewal that succeeds (the controller's backoff is at most 7 s), then 3 s more.
		deadline := time.Now().Add(10 * time.Second)
		for e.ctrl.renewer.Status().LastRenew.Before(time.Now().Add(-time.Hour)) || e.ctrl.renewer.Status().Errors == 0 ||
			!e.ctrl.renewer.Status().LastRenew.After(e.ctrl.renewer.Status().ErrorTime) {
			if time.Now().After(deadline) {
				t.Fatalf("Lease not renewed after the outage: %+v", e.ctrl.renewer.Status())
			}
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		recovered := time.Now()
		synctest.Wait()
		if got := ready(e.node()).Status; got != v1.ConditionTrue {
			t.Errorf("Ready %s right after the Lease recovered, want True at once", got)
		}
		gets := func() int {
			k := 0
			for _, a := range e.client.Actions() {
				if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
					k++
				}
			}
			return k
		}
		time.Sleep(recovered.Add(3500 * time.Millisecond).Sub(time.Now()))
		synctest.Wait()
		if k := gets(); k < 3 {
			t.Errorf("%d Node GETs in the 3.5 s after recovery, want the immediate sync and the 1 s and 3 s resyncs", k)
		}
	})
}

// TestHeartbeatFailureCountsOnlyInAnOutage: one policy for the agent and the simulation
// (Heartbeats): a Node's failed heartbeat marks its cache stale only when no heartbeat of the
// process succeeded since the failed call started, and the recovery that ends such an outage opens
// every Node's window of reads from the API server; a failure while others succeed counts for nothing.
func TestHeartbeatFailureCountsOnlyInAnOutage(t *testing.T) {
	for _, tc := range []struct {
		name              string
		successAfterStart bool
		wantStale         bool
	}{
		{"no heartbeat succeeded since the failed call started (one agent, or every Node failing)", false, true},
		{"another heartbeat succeeded meanwhile (a busy API server)", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, nil)
				s, err := NewQueue(QueueConfig{})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Start(e.ctrl); err != nil {
					t.Fatal(err)
				}
				defer runQueue(t.Context(), s)()
				time.Sleep(time.Second)
				start := time.Now()
				time.Sleep(time.Second)
				if tc.successAfterStart {
					s.Heartbeats().Succeeded()
				}
				e.ctrl.heartbeatFailed("lease Timeout: context deadline exceeded", start)
				if got := e.tracker.Stale(nodeName) != nil; got != tc.wantStale {
					t.Errorf("after the failure: stale %v, want %v", got, tc.wantStale)
				}
				e.tracker.MarkFresh(nodeName)
				e.ctrl.heartbeatSucceeded()
				if got := e.tracker.Stale(nodeName) != nil; got != tc.wantStale {
					t.Errorf("after the next success: stale %v (the recovery's read window), want %v", got, tc.wantStale)
				}
			})
		})
	}
}

// gatedLeases is a client whose Lease creates wait for release (outside the fake's lock, which its
// reactors hold).
type gatedLeases struct {
	kubernetes.Interface
	release <-chan struct{}
}

func (c gatedLeases) CoordinationV1() coordinationclientv1.CoordinationV1Interface {
	return gatedCoordination{CoordinationV1Interface: c.Interface.CoordinationV1(), release: c.release}
}

type gatedCoordination struct {
	coordinationclientv1.CoordinationV1Interface
	release <-chan struct{}
}

func (c gatedCoordination) Leases(namespace string) coordinationclientv1.LeaseInterface {
	return gatedLeaseInterface{LeaseInterface: c.CoordinationV1Interface.Leases(namespace), release: c.release}
}

type gatedLeaseInterface struct {
	coordinationclientv1.LeaseInterface
	release <-chan struct{}
}

func (l gatedLeaseInterface) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	<-l.release
	return l.LeaseInterface.Create(ctx, lease, opts)
}

// TestDuplicateAgentDetected: two agents with one node name (each its own process identity) renew
// the same Lease; each finds the other's identity on it after a conflict and says so: a Warning Event
// DuplicateNodeAgent, a Problem, and a failing /readyz check. One agent alone never does.
func TestDuplicateAgentDetected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		a := newEnvFull(t, nil, nil, nil, "host-a_1_1")
		// The API server's optimistic concurrency, which the fake lacks: an update of a Lease at an
		// older resourceVersion is a Conflict.
		var rv atomic.Int64
		a.client.PrependReactor("*", "leases", func(act core.Action) (bool, runtime.Object, error) {
			switch act.GetVerb() {
			case "create":
				act.(core.CreateAction).GetObject().(*coordinationv1.Lease).ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
			case "update":
				l := act.(core.UpdateAction).GetObject().(*coordinationv1.Lease)
				stored, err := a.client.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), l.Namespace, l.Name)
				if err == nil && stored.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
					return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), l.Name, errors.New("the object has been modified"))
				}
				l.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
			}
			return false, nil, nil
		})
		stopA := a.run(ctx)
		defer stopA()
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if p := a.ctrl.Status().Problems; len(p) != 0 || a.ctrl.Registered() != nil {
			t.Fatalf("one agent alone: problems %v, Registered() %v", p, a.ctrl.Registered())
		}
		// A second agent with the same node name, on the same API server.
		b := newEnvFull(t, nil, nil, a.client, "host-b_2_2")
		stopB := b.run(ctx)
		defer stopB()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		for name, e := range map[string]*env{"a": a, "b": b} {
			other := map[string]string{"a": "host-b_2_2", "b": "host-a_1_1"}[name]
			err := e.ctrl.Registered()
			if err == nil || !strings.Contains(err.Error(), other) {
				t.Errorf("agent %s: Registered() = %v, want it to name %s", name, err, other)
			}
			if p := strings.Join(e.ctrl.Status().Problems, "\n"); !strings.Contains(p, "another agent ("+other+")") {
				t.Errorf("agent %s: problems %q, want the other agent", name, p)
			}
			if ev := strings.Join(e.events(), "\n"); !strings.Contains(ev, "Warning DuplicateNodeAgent") {
				t.Errorf("agent %s: events %q, want a DuplicateNodeAgent warning", name, ev)
			}
		}
	})
}

// TestRestartIsNotADuplicate: an agent stopped and started again with the same node name (a
// systemd restart, a rollout: a new process identity) finds its predecessor's Lease renewed seconds
// ago. That predecessor is gone: no DuplicateNodeAgent Event, no Problem, and /readyz's check passes
// from the first sync on.
func TestRestartIsNotADuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		a := newEnvFull(t, nil, nil, nil, "host-a_1_1")
		stopA := a.run(ctx)
		time.Sleep(25 * time.Second)
		synctest.Wait()
		stopA()
		time.Sleep(time.Second)
		b := newEnvFull(t, nil, nil, a.client, "host-a_2_2")
		stopB := b.run(ctx)
		defer stopB()
		time.Sleep(time.Second)
		synctest.Wait()
		if err := b.ctrl.Registered(); err != nil {
			t.Errorf("restarted agent, 1 s after its start: Registered() = %v, want nil", err)
		}
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if p := b.ctrl.Status().Problems; len(p) != 0 {
			t.Errorf("restarted agent: problems %q, want none", p)
		}
		if ev := strings.Join(b.events(), "\n"); strings.Contains(ev, "DuplicateNodeAgent") {
			t.Errorf("restarted agent: events %q, want no DuplicateNodeAgent", ev)
		}
		if got := b.lease().Annotations[lease.AnnotationInstance]; got != "host-a_2_2" {
			t.Errorf("Lease instance %q, want the restarted agent's", got)
		}
	})
}
