package node_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/pod"
)

// podRunner is what a provider implements as node.PodProvider (Virtual Kubelet's PodLifecycleHandler):
// here containers that start when created and stop when deleted. nodeagent admits the pods, gives them
// IPs, writes their status and deletes them.
type podRunner struct {
	mu      sync.Mutex
	pods    map[types.UID]*v1.Pod
	started map[types.UID]time.Time
	stopped map[types.UID]time.Time
}

func (r *podRunner) CreatePod(_ context.Context, p *v1.Pod) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods[p.UID] = p
	r.started[p.UID] = time.Now()
	return nil
}

func (r *podRunner) GetPods(context.Context) ([]*v1.Pod, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Values(r.pods)), nil
}

func (r *podRunner) UpdatePod(context.Context, *v1.Pod) error { return nil }

func (r *podRunner) DeletePod(_ context.Context, p *v1.Pod) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.DeletionTimestamp != nil {
		r.stopped[p.UID] = time.Now()
	} else {
		delete(r.pods, p.UID)
		delete(r.started, p.UID)
		delete(r.stopped, p.UID)
	}
	return nil
}

func (r *podRunner) GetPodStatus(_ context.Context, p *v1.Pod) (node.PodRuntimeStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &pod.RuntimeStatus{RuntimeName: "example", Sandbox: pod.SandboxReady}
	for _, c := range p.Spec.Containers {
		cs := pod.ContainerStatus{Name: c.Name, ID: fmt.Sprintf("%x", p.UID+types.UID(c.Name)), ImageID: "sha256:0", Started: true, Ready: true,
			State: pod.ContainerState{Running: &pod.Running{StartedAt: r.started[p.UID]}}}
		if at, ok := r.stopped[p.UID]; ok {
			cs.Started, cs.Ready = false, false
			cs.State = pod.ContainerState{Terminated: &pod.Terminated{Reason: "Completed", StartedAt: r.started[p.UID], FinishedAt: at}}
		}
		st.Containers = append(st.Containers, cs)
	}
	return node.PodRuntimeStatus{Status: st}, nil
}

// A program that also implements node.PodProvider runs the pods bound to its Node: nodeagent admits
// them as the kubelet does, gives them IPs from the Node's pod CIDR, and writes the kubelet's status.
func Example_pods() {
	client := fake.NewClientset()                          // a real program passes its kubernetes.Clientset
	nodes := informers.NewSharedInformerFactory(client, 0) // a real one selects its own Node (metadata.name)
	podInformer := nodes.Core().V1().Pods().Informer()     // ... and the pods bound to it (spec.nodeName)
	if err := podInformer.AddIndexers(node.PodIndexers()); err != nil {
		panic(err)
	}
	nodes.Core().V1().Nodes().Informer() // the Node's, for admission and the pod IPs
	ctrl, err := node.New(node.Config{
		NodeName: "example-node", RegisterNode: true, MaxPods: 110,
		NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
		NodeLeaseDurationSeconds: 40, AgentVersion: "v1.37.2-example",
		Host: host{}, Runtime: containerRuntime{},
		Pods: &podRunner{pods: map[types.UID]*v1.Pod{}, started: map[types.UID]time.Time{}, stopped: map[types.UID]time.Time{}},
		// Without kube-controller-manager's nodeipam, the pod IPs come from here.
		FallbackPodCIDR: netip.MustParsePrefix("10.244.7.0/24"),
	}, node.Dependencies{
		Client: client, HeartbeatClient: client,
		NodeLister: nodes.Core().V1().Nodes().Lister(), Cache: nodecache.New(clock.RealClock{}),
		Recorder: &record.FakeRecorder{},
		Pods:     node.IndexedPodLister{Indexer: podInformer.GetIndexer()},
	})
	if err != nil {
		panic(err)
	}
	if _, err := podInformer.AddEventHandler(ctrl.PodEventHandler()); err != nil {
		panic(err)
	}
	running := make(chan *v1.Pod, 1) // the example's own wait: the first Running pod the informer sees
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if p := obj.(*v1.Pod); p.Status.Phase == v1.PodRunning {
			select {
			case running <- p:
			default:
			}
		}
	}}); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nodes.Start(ctx.Done())
	nodes.WaitForCacheSync(ctx.Done())
	done := make(chan error)
	go func() { done <- ctrl.Run(ctx) }()
	<-ctrl.Ready()

	// The scheduler binds a pod to the Node.
	web := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec:       v1.PodSpec{NodeName: "example-node", Containers: []v1.Container{{Name: "web", Image: "nginx:1.27"}}},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		panic(err)
	}
	p := <-running
	cancel()
	<-done
	fmt.Println(p.Status.Phase, p.Status.PodIP, p.Status.QOSClass)
	for _, c := range p.Status.Conditions {
		fmt.Println(c.Type, c.Status)
	}
	// Output:
	// Running 10.244.7.2 BestEffort
	// PodReadyToStartContainers True
	// Initialized True
	// Ready True
	// ContainersReady True
	// PodScheduled True
}
