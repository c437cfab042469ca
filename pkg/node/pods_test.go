package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	netutils "k8s.io/utils/net"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/pod"
)

// fakePods is a PodProvider that records its calls; its containers run and are ready once created,
// and have exited 0 once the pod was stopped or when the pod is annotated test/exited: "true"; its
// sandbox is always ready.
type fakePods struct {
	mu      sync.Mutex
	calls   []string
	deleted []*v1.Pod // the pods DeletePod was given
	stopped map[types.UID]bool
	running []*v1.Pod // what GetPods returns
	// createdHostIPs: by pod name, the status.hostIPs of the pod CreatePod was given.
	createdHostIPs map[string][]v1.HostIP
}

func (f *fakePods) record(call string, p *v1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call+" "+p.Name)
	if call == "delete" {
		f.deleted = append(f.deleted, p)
		if f.stopped == nil {
			f.stopped = map[types.UID]bool{}
		}
		f.stopped[p.UID] = true
	}
}

func (f *fakePods) CreatePod(_ context.Context, p *v1.Pod) error {
	f.record("create", p)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createdHostIPs == nil {
		f.createdHostIPs = map[string][]v1.HostIP{}
	}
	f.createdHostIPs[p.Name] = p.Status.HostIPs
	return nil
}
func (f *fakePods) UpdatePod(_ context.Context, p *v1.Pod) error { f.record("update", p); return nil }
func (f *fakePods) DeletePod(_ context.Context, p *v1.Pod) error { f.record("delete", p); return nil }
func (f *fakePods) GetPodStatus(_ context.Context, p *v1.Pod) (PodRuntimeStatus, error) {
	f.mu.Lock()
	stopped := f.stopped[p.UID] || p.Annotations["test/exited"] == "true"
	f.mu.Unlock()
	if p.Annotations["test/never-started"] == "true" { // stopped before its containers were created
		return PodRuntimeStatus{Status: &pod.RuntimeStatus{Sandbox: pod.SandboxReady}}, nil
	}
	started := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	var cs []pod.ContainerStatus
	for _, c := range p.Spec.Containers {
		s := pod.ContainerStatus{Name: c.Name, ID: "id-" + c.Name, ImageID: "sha256:1", Started: true, Ready: true,
			State: pod.ContainerState{Running: &pod.Running{StartedAt: started}}}
		if stopped {
			s.Started, s.Ready = false, false
			s.State = pod.ContainerState{Terminated: &pod.Terminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: started.Add(time.Minute)}}
		}
		cs = append(cs, s)
	}
	return PodRuntimeStatus{Status: &pod.RuntimeStatus{Sandbox: pod.SandboxReady, Containers: cs}}, nil
}

// GetPods returns the pods of the calls' record that were created and not forgotten: none here but
// those a test adds to running.
func (f *fakePods) GetPods(context.Context) ([]*v1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.running), nil
}

func (f *fakePods) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

const podNode = "pod-node"

func testPod(name string, cpu string, mutate func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))},
		Spec: v1.PodSpec{NodeName: podNode, RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{
			Name: "app", Image: "app:1",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

// podEnv is one Node with a pod provider over a fake clientset, its Node and pods in the listers.
type podEnv struct {
	ctrl     *Controller
	client   *fake.Clientset
	pods     cache.Indexer
	provider *fakePods
	recorder *record.FakeRecorder
	nodes    cache.Indexer // the Node lister's
}

func newPodEnv(t *testing.T, pods ...*v1.Pod) *podEnv {
	t.Helper()
	return newPodEnvWith(t, false, pods...)
}

// cachedPod is what a transform such as the simulator's keeps of p: a CachedPod.
func cachedPod(p *v1.Pod) *CachedPod {
	spec := p.Spec
	spec.NodeName = ""
	return &CachedPod{ObjectMeta: p.ObjectMeta, Spec: &spec, NodeName: p.Spec.NodeName, Status: p.Status}
}

// newPodEnvWith is newPodEnv; cached: the informer holds each pod as a CachedPod.
func newPodEnvWith(t *testing.T, cached bool, pods ...*v1.Pod) *podEnv {
	t.Helper()
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: podNode},
		Spec:       v1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status: v1.NodeStatus{
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("110")},
			Addresses:   []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
		},
	}
	objs := []any{node}
	e := &podEnv{provider: &fakePods{}, recorder: record.NewFakeRecorder(100)}
	e.client = fake.NewClientset(node)
	e.pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, PodIndexers())
	for _, p := range pods {
		objs = append(objs, p)
		if _, err := e.client.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var obj any = p
		if cached {
			obj = cachedPod(p)
		}
		if err := e.pods.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(node); err != nil {
		t.Fatal(err)
	}
	e.nodes = nodes
	cfg := Config{
		NodeName: podNode, RegisterNode: true, NodeIPs: []net.IP{netutils.ParseIPSloppy("10.0.0.1")}, MaxPods: 110,
		NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
		NodeLeaseDurationSeconds: 40, Host: fakeHost{}, Runtime: criruntime.Services{}, Pods: e.provider,
	}
	deps := Dependencies{Client: e.client, HeartbeatClient: e.client, NodeLister: corelisters.NewNodeLister(nodes),
		Cache: nodecache.New(clock.RealClock{}), Recorder: e.recorder, Clock: clock.RealClock{},
		Pods: IndexedPodLister{Indexer: e.pods}}
	ctrl, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.registered.Store(true)
	e.ctrl = ctrl
	return e
}

// writes returns the fake client's pod writes: "patch-status <name> <patch>" and "delete <name> grace=<s> uid=<uid>".
func (e *podEnv) writes() []string {
	var out []string
	for _, a := range e.client.Actions() {
		switch a := a.(type) {
		case core.PatchAction:
			if a.GetResource().Resource == "pods" {
				out = append(out, "patch-"+a.GetSubresource()+" "+a.GetName())
			}
		case core.DeleteAction:
			if a.GetResource().Resource == "pods" {
				o := a.GetDeleteOptions()
				out = append(out, "delete "+a.GetName()+" grace="+itoa(o.GracePeriodSeconds)+" uid="+string(*o.Preconditions.UID))
			}
		}
	}
	return out
}

func itoa(p *int64) string {
	if p == nil {
		return "nil"
	}
	b, _ := json.Marshal(*p)
	return string(b)
}

func (e *podEnv) pod(t *testing.T, name string) *v1.Pod {
	t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPodStep: one pass of a pod step, for each way a pod comes to a Node: admitted and started,
// rejected as the kubelet rejects, an earlier run's pod keeping its IP (no IP given twice), a pod being
// deleted (stopped, terminal status, deleted with grace 0 and its UID), a pod gone from the API
// (stopped and forgotten, its IP freed).
func TestPodStep(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC))
	started := metav1.NewTime(time.Date(2026, 11, 26, 0, 30, 0, 0, time.UTC))
	running := func(ip string) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Status.Phase, p.Status.StartTime = v1.PodRunning, &started
			p.Status.PodIP, p.Status.PodIPs = ip, []v1.PodIP{{IP: ip}}
		}
	}
	for _, tc := range []struct {
		name       string
		pods       []*v1.Pod
		step       string // the pod stepped
		remove     bool   // removed from the informer before the step
		wantCalls  []string
		wantWrites []string
		wantPhase  v1.PodPhase
		wantReason string
		wantIP     string
		wantAfter  time.Duration
		// wantReadyToStart is PodReadyToStartContainers' status, when not "".
		wantReadyToStart v1.ConditionStatus
	}{
		{
			name: "admitted and started", pods: []*v1.Pod{testPod("a", "500m", nil)}, step: "a",
			wantCalls: []string{"create a"}, wantWrites: []string{"patch-status a"},
			wantPhase: v1.PodRunning, wantIP: "10.244.1.2", wantAfter: PodReconcilePeriod, wantReadyToStart: v1.ConditionTrue,
		},
		{
			name: "completed: terminal, its sandbox stopped as the kubelet's pod worker stops it, in one write",
			pods: []*v1.Pod{testPod("done", "100m", func(p *v1.Pod) {
				running("10.244.1.2")(p)
				p.Spec.RestartPolicy = v1.RestartPolicyNever
				p.Annotations = map[string]string{"test/exited": "true"}
			})}, step: "done",
			wantCalls: []string{"create done"}, wantWrites: []string{"patch-status done"},
			wantPhase: v1.PodSucceeded, wantIP: "10.244.1.2", wantAfter: never, wantReadyToStart: v1.ConditionFalse,
		},
		{
			name: "rejected: does not fit", pods: []*v1.Pod{testPod("big", "2", nil)}, step: "big",
			wantWrites: []string{"patch-status big"}, wantPhase: v1.PodFailed, wantReason: "OutOfcpu", wantAfter: never,
		},
		{
			name: "the running pods of an earlier run count and keep their IPs",
			pods: []*v1.Pod{testPod("old", "600m", running("10.244.1.2")), testPod("new", "300m", nil)}, step: "new",
			wantCalls: []string{"create new"}, wantWrites: []string{"patch-status new"},
			wantPhase: v1.PodRunning, wantIP: "10.244.1.3", wantAfter: PodReconcilePeriod,
		},
		{
			name: "an earlier run's pod that no longer fits is rejected",
			pods: []*v1.Pod{testPod("old", "600m", running("10.244.1.2")), testPod("new", "500m", nil)}, step: "new",
			wantWrites: []string{"patch-status new"}, wantPhase: v1.PodFailed, wantReason: "OutOfcpu", wantAfter: never,
		},
		{
			name: "being deleted: stopped, terminal, deleted with grace 0",
			pods: []*v1.Pod{testPod("d", "100m", func(p *v1.Pod) {
				running("10.244.1.2")(p)
				p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &deleted, new(int64(30))
			})}, step: "d",
			wantCalls:  []string{"delete d"},
			wantWrites: []string{"patch-status d", "delete d grace=0 uid=uid-d"},
			wantPhase:  v1.PodSucceeded, wantAfter: never,
		},
		{
			name: "gone from the API: nothing known of it, nothing done", pods: []*v1.Pod{testPod("g", "100m", nil)}, step: "g", remove: true,
			wantAfter: never,
		},
	} {
		for _, cached := range []bool{false, true} {
			name := tc.name
			if cached {
				name += " (the informer holds CachedPods)"
			}
			t.Run(name, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				e := newPodEnvWith(t, cached, tc.pods...)
				if tc.remove {
					if err := e.pods.Delete(tc.pods[0]); err != nil {
						t.Fatal(err)
					}
				}
				r := e.ctrl.pods.podStep(ctx, "default/"+tc.step)
				if r.err != nil {
					t.Fatalf("podStep: %v", r.err)
				}
				if r.after != tc.wantAfter {
					t.Errorf("after %v, want %v", r.after, tc.wantAfter)
				}
				if got := e.provider.Calls(); !slices.Equal(got, tc.wantCalls) {
					t.Errorf("provider calls %q, want %q", got, tc.wantCalls)
				}
				if got := e.writes(); !slices.Equal(got, tc.wantWrites) {
					t.Errorf("writes %q, want %q", got, tc.wantWrites)
				}
				if tc.remove || slices.Contains(tc.wantWrites, "delete "+tc.step+" grace=0 uid=uid-"+tc.step) {
					return
				}
				p := e.pod(t, tc.step)
				if p.Status.Phase != tc.wantPhase || p.Status.Reason != tc.wantReason || p.Status.PodIP != tc.wantIP {
					t.Errorf("status: phase %s reason %q podIP %q, want %s %q %q (message %q)", p.Status.Phase, p.Status.Reason, p.Status.PodIP,
						tc.wantPhase, tc.wantReason, tc.wantIP, p.Status.Message)
				}
				if tc.wantReadyToStart != "" {
					var got v1.PodCondition
					for _, c := range p.Status.Conditions {
						if c.Type == v1.PodReadyToStartContainers {
							got = c
						}
					}
					want := v1.PodCondition{Type: v1.PodReadyToStartContainers, Status: tc.wantReadyToStart}
					if tc.wantReadyToStart == v1.ConditionFalse {
						want.Reason, want.Message = pod.ReasonPodSandboxNotReady, "pod sandbox is not ready"
					}
					if got.Status != want.Status || got.Reason != want.Reason || got.Message != want.Message {
						t.Errorf("PodReadyToStartContainers %s %q %q, want %s %q %q", got.Status, got.Reason, got.Message, want.Status, want.Reason, want.Message)
					}
				}
				if tc.wantReason != "" {
					select {
					case ev := <-e.recorder.Events:
						if want := "Warning " + tc.wantReason + " Node didn't have enough resource: cpu"; len(ev) < len(want) || ev[:len(want)] != want {
							t.Errorf("event %q, want %q...", ev, want)
						}
					default:
						t.Errorf("no Event for the rejection")
					}
				}
			})
		}
	}
}

// TestPodStepIdempotentAndForgotten: a second pass over an unchanged pod writes nothing; once the pod
// has left the API its containers are stopped, and its IP goes back to the pool (the next pod gets it).
func TestPodStepIdempotentAndForgotten(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newPodEnv(t, testPod("a", "100m", nil))
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	// The informer sees what was written.
	if err := e.pods.Update(e.pod(t, "a")); err != nil {
		t.Fatal(err)
	}
	e.client.ClearActions()
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("second pass over an unchanged pod wrote %q, want nothing", w)
	}
	if err := e.pods.Delete(e.pod(t, "a")); err != nil {
		t.Fatal(err)
	}
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	if got, want := e.provider.Calls(), []string{"create a", "delete a"}; !slices.Equal(got, want) {
		t.Errorf("provider calls %q, want %q", got, want)
	}
	if n := e.ctrl.pods.resources.allocatedIPs(); n != 0 {
		t.Errorf("%d pod IPs still allocated after the pod left, want 0", n)
	}
}

// TestPodGoneDeletePodGetsFinalCopy: once a pod has left the API, DeletePod is given the informer's
// last copy of it (its deletion event's object, whichever form the informer holds), not an older copy
// and not one the worker kept: the worker keeps none. Without the deletion event (a pod replaced under
// its name, a relist), it gets the pod's namespace, name, UID and Node.
func TestPodGoneDeletePodGetsFinalCopy(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cached, event bool
		wantLabel     string
	}{
		{"deletion event, the informer holds pods", false, true, "final"},
		{"deletion event, the informer holds CachedPods", true, true, "final"},
		{"no deletion event", false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e := newPodEnvWith(t, tc.cached, testPod("a", "100m", nil))
			if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			final := e.pod(t, "a")
			final.Labels = map[string]string{"copy": "final"}
			var obj any = final
			if tc.cached {
				obj = cachedPod(final)
			}
			if err := e.pods.Delete(obj); err != nil {
				t.Fatal(err)
			}
			if tc.event {
				e.ctrl.PodEventHandler().OnDelete(obj)
			}
			if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			if len(e.provider.deleted) != 1 {
				t.Fatalf("DeletePod called %d times, want 1", len(e.provider.deleted))
			}
			got := e.provider.deleted[0]
			if got.Name != "a" || got.Namespace != "default" || got.UID != "uid-a" || got.Spec.NodeName != podNode || got.Labels["copy"] != tc.wantLabel {
				t.Errorf("DeletePod got %s/%s uid %s node %q labels %v; want default/a uid-a %q, label copy=%q",
					got.Namespace, got.Name, got.UID, got.Spec.NodeName, got.Labels, podNode, tc.wantLabel)
			}
		})
	}
}

// TestPodIPsFollowNodePodCIDRs is issue 35's H2: a Node deleted and registered again gets a new
// spec.podCIDRs from nodeipam (its old one may go to another Node); the pods started after that get
// addresses of the new CIDR, never of the old one, and a running pod keeps the address it has.
func TestPodIPsFollowNodePodCIDRs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newPodEnv(t, testPod("a", "100m", nil))
	step := func(name string) string {
		t.Helper()
		if r := e.ctrl.pods.podStep(ctx, "default/"+name); r.err != nil {
			t.Fatal(r.err)
		}
		p := e.pod(t, name)
		if err := e.pods.Update(p); err != nil { // the informer sees what was written
			t.Fatal(err)
		}
		if len(p.Status.PodIPs) != 1 {
			t.Fatalf("pod %s: podIPs %v, want one", name, p.Status.PodIPs)
		}
		return p.Status.PodIPs[0].IP
	}
	if ip := step("a"); !strings.HasPrefix(ip, "10.244.1.") {
		t.Fatalf("pod a got %s, want an address of 10.244.1.0/24", ip)
	}
	// The provider is given the Node's addresses too, for the downward API's status.hostIP(s) of the
	// containers it starts before the pod's status has them (the kubelet's getHostIPsAnyWay).
	e.provider.mu.Lock()
	created := e.provider.createdHostIPs["a"]
	e.provider.mu.Unlock()
	if want := toHostIPs(e.ctrl.hostIPs()); len(want) == 0 || !slices.Equal(created, want) {
		t.Errorf("CreatePod was given hostIPs %v, want the Node's %v", created, want)
	}
	node, err := e.client.CoreV1().Nodes().Get(ctx, podNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.PodCIDR, node.Spec.PodCIDRs = "10.244.7.0/24", []string{"10.244.7.0/24"} // registered again
	if err := e.nodes.Update(node); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "c"} {
		p := testPod(name, "100m", nil)
		if _, err := e.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := e.pods.Add(p); err != nil {
			t.Fatal(err)
		}
		if ip := step(name); !strings.HasPrefix(ip, "10.244.7.") {
			t.Errorf("pod %s got %s after the Node's podCIDR became 10.244.7.0/24, want an address of it", name, ip)
		}
	}
	if ip := step("a"); !strings.HasPrefix(ip, "10.244.1.") {
		t.Errorf("pod a now shows %s, want the 10.244.1.0/24 address it had", ip)
	}
}

// TestPodWritesUsePodClient: with Dependencies.PodClient set (the simulator's pods client, its own rate
// limit), a pod's status patch and its deletion go through it, and none through the main client.
func TestPodWritesUsePodClient(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newPodEnv(t, testPod("a", "100m", nil))
	podClient := fake.NewClientset(e.pod(t, "a"))
	e.ctrl.deps.PodClient = podClient
	e.client.ClearActions()
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("main client's pod writes %q, want none", w)
	}
	main := e.client
	e.client = podClient
	if w := e.writes(); !slices.Equal(w, []string{"patch-status a"}) {
		t.Errorf("pods client's writes %q, want [patch-status a]", w)
	}
	e.client = main
}

// TestPodWritesUsePodMetadataClient: with Dependencies.PodMetadataClient set, a pod's status patch goes
// through it (the same strategic-merge patch of pods/status), none through the typed clients, and the
// resourceVersion of its answer (the pod's metadata only) is the one later passes compare the informer's
// copy with (staleCopy).
func TestPodWritesUsePodMetadataClient(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newPodEnv(t, testPod("a", "100m", nil))
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	var patches []string
	meta.PrependReactor("patch", "pods", func(a core.Action) (bool, runtime.Object, error) {
		pa := a.(core.PatchAction)
		patches = append(patches, pa.GetSubresource()+" "+pa.GetName()+" "+string(pa.GetPatchType()))
		return true, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", ResourceVersion: "1234"}}, nil
	})
	e.ctrl.deps.PodMetadataClient = meta
	e.client.ClearActions()
	if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
		t.Fatal(r.err)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("typed client's pod writes %q, want none", w)
	}
	if want := []string{"status a " + string(types.StrategicMergePatchType)}; !slices.Equal(patches, want) {
		t.Errorf("metadata client's patches %q, want %q", patches, want)
	}
	if got := e.ctrl.pods.statuses["default/a"].writtenRV.Load(); got != 1234 {
		t.Errorf("written resourceVersion %d, want 1234 (the answer's)", got)
	}
}

// TestPodStepTellsProviderOfChanges: once a pod is created, a later pass calls the provider's UpdatePod
// when the pod's spec (metadata.generation) or annotations changed, and not for any other change.
func TestPodStepTellsProviderOfChanges(t *testing.T) {
	for _, tc := range []struct {
		name      string
		change    func(*v1.Pod)
		wantCalls []string
	}{
		{"nothing", func(*v1.Pod) {}, []string{"create a"}},
		{"a label", func(p *v1.Pod) { p.Labels = map[string]string{"x": "y"} }, []string{"create a"}},
		{"the generation", func(p *v1.Pod) { p.Generation++ }, []string{"create a", "update a"}},
		{"an annotation added", func(p *v1.Pod) { p.Annotations = map[string]string{"a": "1"} }, []string{"create a", "update a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e := newPodEnv(t, testPod("a", "100m", nil))
			if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			p := e.pod(t, "a")
			tc.change(p)
			if err := e.pods.Update(p); err != nil {
				t.Fatal(err)
			}
			if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			if got := e.provider.Calls(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("provider calls %q, want %q", got, tc.wantCalls)
			}
		})
	}
}

// TestPodStepDeletedBeforeStarted: a pod deleted before its containers were created ends as the kubelet
// ends it (the status manager's TerminatePod): Failed, its container terminated with exit code 137
// ContainerStatusUnknown, then deleted with grace 0; not Pending for ever.
func TestPodStepDeletedBeforeStarted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	deleted := metav1.NewTime(time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC))
	e := newPodEnv(t, testPod("n", "100m", func(p *v1.Pod) {
		p.Annotations = map[string]string{"test/never-started": "true"}
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &deleted, new(int64(30))
		p.Status.StartTime = &deleted // admitted
	}))
	if r := e.ctrl.pods.podStep(ctx, "default/n"); r.err != nil {
		t.Fatal(r.err)
	}
	if got, want := e.writes(), []string{"patch-status n", "delete n grace=0 uid=uid-n"}; !slices.Equal(got, want) {
		t.Fatalf("writes %q, want %q", got, want)
	}
	var patched *v1.Pod
	for _, a := range e.client.Actions() {
		if pa, ok := a.(core.PatchAction); ok {
			patched = &v1.Pod{}
			if err := json.Unmarshal(pa.GetPatch(), patched); err != nil {
				t.Fatal(err)
			}
		}
	}
	if patched.Status.Phase != v1.PodFailed {
		t.Errorf("phase %s, want Failed", patched.Status.Phase)
	}
	if len(patched.Status.ContainerStatuses) != 1 || patched.Status.ContainerStatuses[0].State.Terminated == nil ||
		patched.Status.ContainerStatuses[0].State.Terminated.ExitCode != 137 || patched.Status.ContainerStatuses[0].State.Terminated.Reason != pod.ReasonContainerStatusUnknown {
		t.Errorf("container statuses %+v, want one terminated 137 ContainerStatusUnknown", patched.Status.ContainerStatuses)
	}
}

// TestPodStepLaterPasses: what a pass writes after an earlier one, by what the informer has: nothing
// once the pod was deleted (until the informer's delete event forgets it), nothing against a copy
// older than the last write (the informer has not delivered it: its event queues another pass), and
// the status again when another writer changed it after the last write.
func TestPodStepLaterPasses(t *testing.T) {
	deletedAt := metav1.NewTime(time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name       string
		mutate     func(*v1.Pod)
		writtenRV  uint64 // set after the first pass, as a write the API answered with would
		informer   func(first, written *v1.Pod) *v1.Pod
		wantWrites []string
	}{
		{name: "deleted: nothing more", mutate: func(p *v1.Pod) { p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &deletedAt, new(int64(30)) },
			informer: func(_, written *v1.Pod) *v1.Pod { return written }, wantWrites: nil},
		{name: "the informer's copy predates the write: nothing", writtenRV: 12,
			informer:   func(first, _ *v1.Pod) *v1.Pod { p := first.DeepCopy(); p.ResourceVersion = "11"; return p },
			wantWrites: nil},
		{name: "another writer after the write: written again", writtenRV: 12,
			informer: func(_, written *v1.Pod) *v1.Pod {
				p := written.DeepCopy()
				p.ResourceVersion = "13"
				for i := range p.Status.Conditions {
					if p.Status.Conditions[i].Type == v1.PodReady {
						p.Status.Conditions[i].Status = v1.ConditionFalse // the node lifecycle controller
					}
				}
				return p
			},
			wantWrites: []string{"patch-status a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			first := testPod("a", "100m", tc.mutate)
			first.ResourceVersion = "10"
			e := newPodEnv(t, first)
			if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			if tc.writtenRV != 0 {
				e.ctrl.pods.statuses["default/a"].writtenRV.Store(tc.writtenRV)
			}
			written := first
			if p, err := e.client.CoreV1().Pods("default").Get(ctx, "a", metav1.GetOptions{}); err == nil {
				written = p
			}
			if err := e.pods.Update(tc.informer(first, written)); err != nil {
				t.Fatal(err)
			}
			e.client.ClearActions()
			if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			if got := e.writes(); !slices.Equal(got, tc.wantWrites) {
				t.Errorf("writes of the second pass %q, want %q", got, tc.wantWrites)
			}
		})
	}
}

// TestPodAdmissionUsage: admission counts the Node's active pods as they are admitted and stop: the
// Node's pods capacity is full with admitted pods, free again once one is terminal.
func TestPodAdmissionUsage(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var pods []*v1.Pod
	for i := range 3 {
		pods = append(pods, testPod(fmt.Sprintf("p%d", i), "100m", nil))
	}
	e := newPodEnv(t, pods...)
	node, _ := e.ctrl.deps.NodeLister.Get(podNode)
	node.Status.Allocatable[v1.ResourcePods] = resource.MustParse("2")
	for _, name := range []string{"p0", "p1", "p2"} {
		if r := e.ctrl.pods.podStep(ctx, "default/"+name); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if p := e.pod(t, "p2"); p.Status.Reason != pod.ReasonOutOfPods {
		t.Errorf("third pod on a Node of 2: %s %q, want rejected %s", p.Status.Phase, p.Status.Reason, pod.ReasonOutOfPods)
	}
	// p0 completes: its place is free for the next pod.
	done := e.pod(t, "p0")
	done.Annotations = map[string]string{"test/exited": "true"}
	done.Spec.RestartPolicy = v1.RestartPolicyNever
	if err := e.pods.Update(done); err != nil {
		t.Fatal(err)
	}
	if r := e.ctrl.pods.podStep(ctx, "default/p0"); r.err != nil {
		t.Fatal(r.err)
	}
	next := testPod("p3", "100m", nil)
	if _, err := e.client.CoreV1().Pods("default").Create(ctx, next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.pods.Add(next); err != nil {
		t.Fatal(err)
	}
	if r := e.ctrl.pods.podStep(ctx, "default/p3"); r.err != nil {
		t.Fatal(r.err)
	}
	if p := e.pod(t, "p3"); p.Status.Phase != v1.PodRunning {
		t.Errorf("a pod after one completed: %s %q, want Running", p.Status.Phase, p.Status.Reason)
	}
}

// countingPodLister counts OnNode calls.
type countingPodLister struct {
	PodLister
	onNode atomic.Int32
}

func (l *countingPodLister) OnNode(nodeName string) ([]*v1.Pod, error) {
	l.onNode.Add(1)
	return l.PodLister.OnNode(nodeName)
}

// TestPodAdmissionListsPodsOnce: admission lists the Node's pods once, to fill the usage at the first
// admission (pods an earlier run admitted), and keeps the usage after: the pods of a Node are not listed
// at each admission (O(pods) each: 44 % of bench-pods' scenario 1 CPU at 10 000 pods on one Node), nor
// at each address given (the allocator is made once).
func TestPodAdmissionListsPodsOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, n := range []int{1, 5, 20} {
		t.Run(fmt.Sprintf("%d pods", n), func(t *testing.T) {
			var pods []*v1.Pod
			for i := range n {
				pods = append(pods, testPod(fmt.Sprintf("p%d", i), "10m", nil))
			}
			e := newPodEnv(t, pods...)
			lister := &countingPodLister{PodLister: e.ctrl.deps.Pods}
			e.ctrl.deps.Pods = lister
			for _, p := range pods {
				if r := e.ctrl.pods.podStep(ctx, "default/"+p.Name); r.err != nil {
					t.Fatal(r.err)
				}
			}
			for _, p := range pods {
				if got := e.pod(t, p.Name); got.Status.Phase != v1.PodRunning {
					t.Fatalf("pod %s: %s %q, want Running", p.Name, got.Status.Phase, got.Status.Reason)
				}
			}
			// One list to fill the usage, one to restore the IP allocator when it is made.
			if got := lister.onNode.Load(); got > 2 {
				t.Errorf("%d pods admitted and started listed the Node's pods %d times, want at most 2", n, got)
			}
		})
	}
}

// TestPodOwnWriteNotSynced: an update of a pod that is only this process's last status write of it
// (its resourceVersion the write's answer's) queues no pass, as the kubelet syncs no pod for an update
// of its status alone; any other news does: another writer's update, an add, a deletion, a deletion
// timestamp, another pod under the name, and the write's own update while a pass waits for it (it found
// the informer's copy older than the write). A pass that finds the informer's copy older than its
// write, when the write's update is in the informer already (its event came between the pass's read
// and its check), runs again at once.
func TestPodOwnWriteNotSynced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	deleting := metav1.NewTime(time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name     string
		rv       string
		update   bool
		mutate   func(*v1.Pod)
		awaiting bool
		want     bool // the news dropped
	}{
		{name: "the write's update", rv: "1234", update: true, want: true},
		{name: "another writer's update", rv: "1235", update: true},
		{name: "an add at the write's version", rv: "1234"},
		{name: "a deletion at the write's version", rv: "1234"},
		{name: "a deletion timestamp", rv: "1234", update: true, mutate: func(p *v1.Pod) { p.DeletionTimestamp = &deleting }},
		{name: "another pod under the name", rv: "1234", update: true, mutate: func(p *v1.Pod) { p.UID = "other" }},
		{name: "a pass waits for the write", rv: "1234", update: true, awaiting: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPodEnv(t, testPod("a", "100m", nil))
			meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
			meta.PrependReactor("patch", "pods", func(core.Action) (bool, runtime.Object, error) {
				return true, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1234"}}, nil
			})
			e.ctrl.deps.PodMetadataClient = meta
			if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
				t.Fatal(r.err)
			}
			e.ctrl.pods.statuses["default/a"].awaitingWrite.Store(tc.awaiting)
			p := e.pod(t, "a")
			p.ResourceVersion = tc.rv
			if tc.mutate != nil {
				tc.mutate(p)
			}
			if got := e.ctrl.onlyOwnWrite("default/a", &p.ObjectMeta, tc.update); got != tc.want {
				t.Errorf("dropped: %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a stale pass finds the write in the informer", func(t *testing.T) {
		first := testPod("a", "100m", nil)
		first.ResourceVersion = "10"
		e := newPodEnv(t, first)
		if r := e.ctrl.pods.podStep(ctx, "default/a"); r.err != nil {
			t.Fatal(r.err)
		}
		st := e.ctrl.pods.statuses["default/a"]
		st.writtenRV.Store(12)
		written := e.pod(t, "a")
		written.ResourceVersion = "12"
		// The pass reads a copy older than the write (RV 10), and the informer has the write (RV 12).
		stale := first.DeepCopy()
		if err := e.pods.Update(written); err != nil {
			t.Fatal(err)
		}
		_, _, r, ok := e.ctrl.pods.syncPodStatus(ctx, "default/a", stale, stale, st, false)
		if ok || r.after != 0 || r.err != nil {
			t.Errorf("stale pass: ok %v, result %+v; want it run again at once (after 0)", ok, r)
		}
		if !st.awaitingWrite.Load() {
			t.Errorf("awaitingWrite not set by the stale pass")
		}
	})
}
