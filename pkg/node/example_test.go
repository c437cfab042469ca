package node_test

import (
	"context"
	"fmt"
	"net"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
)

// host is a machine of 4 CPUs and 16 GiB with no pressure: what a provider implements as node.Host.
type host struct{}

func (host) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	return &cadvisorapi.MachineInfo{NumCores: 4, MemoryCapacity: 16 << 30, MachineID: "m-1", SystemUUID: "u-1", BootID: "b-1"}, nil
}
func (host) EphemeralStorageCapacity() (resource.Quantity, error) {
	return resource.MustParse("100Gi"), nil
}
func (host) KernelVersion() string                    { return "6.1.0" }
func (host) OSImage() string                          { return "Example OS" }
func (host) ValidateNodeIP(net.IP) error              { return nil }
func (host) LookupIP(string) ([]net.IP, error)        { return []net.IP{net.ParseIP("192.0.2.10")}, nil }
func (host) ResolveAddress(ip net.IP) (net.IP, error) { return ip, nil }
func (host) IsUnderMemoryPressure() bool              { return false }
func (host) IsUnderDiskPressure() bool                { return false }
func (host) IsUnderPIDPressure() bool                 { return false }
func (host) RunningInUserNamespace() *bool            { return nil }

// containerRuntime is a runtime that is always ready: what a provider implements as node.Runtime.
type containerRuntime struct{}

func (containerRuntime) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}
func (containerRuntime) Version(context.Context, string) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "example", RuntimeVersion: "1.0.0", RuntimeApiVersion: "v1"}, nil
}
func (containerRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return nil, nil
}
func (containerRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// A program that implements node.Host and node.Runtime gets a kubelet-faithful Node: registered
// with the kubelet's labels and setters, Ready with the kubelet's reason, and its Lease renewed.
func Example() {
	client := fake.NewClientset() // a real program passes its kubernetes.Clientset
	ctrl, err := node.New(node.Config{
		NodeName: "example-node", RegisterNode: true, MaxPods: 110,
		NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
		NodeLeaseDurationSeconds: 40, NodeStatusMaxImages: 50, AgentVersion: "v1.37.2-example",
		Host: host{}, Runtime: containerRuntime{},
	}, node.Dependencies{
		Client: client, HeartbeatClient: client,
		// A real program passes its Node informer's lister, and the tracker hears its events.
		NodeLister: corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
		Cache:      nodecache.New(clock.RealClock{}),
		Recorder:   &record.FakeRecorder{},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ctrl.Run(ctx) }()
	select {
	case <-ctrl.Ready():
	case <-time.After(30 * time.Second):
		panic("not ready")
	}
	cancel()
	<-done

	n, _ := client.CoreV1().Nodes().Get(context.Background(), "example-node", metav1.GetOptions{})
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			fmt.Println(c.Type, c.Status, c.Reason)
		}
	}
	l, _ := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), "example-node", metav1.GetOptions{})
	fmt.Println("lease holder:", *l.Spec.HolderIdentity)
	// Output:
	// Ready True KubeletReady
	// lease holder: example-node
}
