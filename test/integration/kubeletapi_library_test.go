package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	utilexec "k8s.io/utils/exec"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/pod"
	"github.com/nodeagent/nodeagent/test/framework"
)

// libHost and libRuntime are the smallest node.Host and node.Runtime a library user writes.
type libHost struct{}

func (libHost) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	return &cadvisorapi.MachineInfo{NumCores: 4, MemoryCapacity: 16 << 30, MachineID: "m-1", SystemUUID: "u-1", BootID: "b-1"}, nil
}
func (libHost) EphemeralStorageCapacity() (resource.Quantity, error) {
	return resource.MustParse("100Gi"), nil
}
func (libHost) KernelVersion() string                    { return "6.1.0" }
func (libHost) OSImage() string                          { return "Library OS" }
func (libHost) ValidateNodeIP(net.IP) error              { return nil }
func (libHost) LookupIP(string) ([]net.IP, error)        { return nil, fmt.Errorf("no lookups") }
func (libHost) ResolveAddress(ip net.IP) (net.IP, error) { return ip, nil }
func (libHost) IsUnderMemoryPressure() bool              { return false }
func (libHost) IsUnderDiskPressure() bool                { return false }
func (libHost) IsUnderPIDPressure() bool                 { return false }
func (libHost) RunningInUserNamespace() *bool            { return nil }

type libRuntime struct{}

func (libRuntime) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true}}}}, nil
}
func (libRuntime) Version(context.Context, string) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "library", RuntimeVersion: "1.0.0", RuntimeApiVersion: "v1"}, nil
}
func (libRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return nil, nil
}
func (libRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// libProvider runs every container at once and for ever, and implements GetContainerLogs and
// RunInContainer (Virtual Kubelet's names) but not AttachToContainer.
type libProvider struct{ started time.Time }

func (*libProvider) CreatePod(context.Context, *corev1.Pod) error { return nil }
func (*libProvider) UpdatePod(context.Context, *corev1.Pod) error { return nil }
func (*libProvider) DeletePod(context.Context, *corev1.Pod) error { return nil }

// GetPods is the fifth PodProvider method issue 35 adds (Virtual Kubelet's): no pod runs before start.
func (*libProvider) GetPods(context.Context) ([]*corev1.Pod, error) { return nil, nil }
func (p *libProvider) GetPodStatus(_ context.Context, v *corev1.Pod) (node.PodRuntimeStatus, error) {
	st := &pod.RuntimeStatus{RuntimeName: "library", Sandbox: pod.SandboxReady}
	for _, c := range v.Spec.Containers {
		st.Containers = append(st.Containers, pod.ContainerStatus{Name: c.Name, ID: string(v.UID) + "-" + c.Name, ImageID: "sha256:0",
			Started: true, Ready: true, State: pod.ContainerState{Running: &pod.Running{StartedAt: p.started}}})
	}
	return node.PodRuntimeStatus{Status: st}, nil
}
func (*libProvider) GetContainerLogs(_ context.Context, ns, name, c string, opts node.ContainerLogOpts) (io.ReadCloser, error) {
	lines := []string{"one " + ns + "/" + name + "/" + c, "two", "three"}
	if opts.TailSet && opts.Tail < len(lines) {
		lines = lines[len(lines)-opts.Tail:]
	}
	return io.NopCloser(strings.NewReader(strings.Join(lines, "\n") + "\n")), nil
}
func (*libProvider) RunInContainer(_ context.Context, _, _, _ string, cmd []string, a node.AttachIO) error {
	_, _ = io.WriteString(a.Stdout(), "ran "+strings.Join(cmd, " ")+"\n")
	return utilexec.CodeExitError{Err: fmt.Errorf("exit 4"), Code: 4}
}

// TestKubeletAPILibrary (issue 36): a library Node (pkg/node in this process, its provider
// implementing GetContainerLogs and RunInContainer) serves kubectl logs, kubectl exec and the node
// proxy's /pods through the real API server with its Controller.KubeletServer, and kubectl attach
// gets 501 (the provider lacks AttachToContainer).
func TestKubeletAPILibrary(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	const name, ns = nodeKubeletAPILibrary, "kubelet-api-library"
	startLibraryNode(ctx, t, e.cp, name, &libProvider{started: time.Now()})

	if err := e.cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lib", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Image: "example"}}}}
	if _, err := e.cp.AdminClient.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := framework.WaitFor(ctx, 300*time.Millisecond, func() (bool, error) {
		got, err := e.cp.AdminClient.CoreV1().Pods(ns).Get(ctx, "lib", metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, err
	})
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return e.cp.Kubectl(cctx, append([]string{"-n", ns}, args...)...)
	}
	if out, err := kubectl("logs", "lib", "--tail=2"); err != nil || out != "two\nthree\n" {
		t.Errorf("kubectl logs lib --tail=2: %q, %v", out, err)
	}
	out, err := kubectl("exec", "lib", "--", "ls", "/")
	if ee, ok := asExitError(err); !ok || ee.ExitCode() != 4 || !strings.HasPrefix(out, "ran ls /\n") {
		t.Errorf("kubectl exec lib -- ls /: %q, %v; want its output and exit 4", out, err)
	}
	if out, err := kubectl("attach", "lib"); err == nil || !strings.Contains(out, "does not implement AttachToContainer") {
		t.Errorf("kubectl attach lib: %q, %v; want the 501 of a provider without AttachToContainer", out, err)
	}
	out, err = kubectl("get", "--raw", "/api/v1/nodes/"+name+"/proxy/pods")
	var list corev1.PodList
	if err == nil {
		err = json.Unmarshal([]byte(out), &list)
	}
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "lib" {
		t.Errorf("node proxy /pods: %d pods, %v; want [lib]: %.300s", len(list.Items), err, out)
	}
}

// startLibraryNode runs a library Node (pkg/node in this process, as TestKubeletAPILibrary describes
// it) named name, with cp's node identity of that name, on this host's address with its kubelet API
// (Controller.KubeletServer: the kubelet's default authentication and authorization, the API server's
// client CA), its pods served by provider, until the test ends; it returns once the Node is Ready.
func startLibraryNode(ctx context.Context, t *testing.T, cp *framework.ControlPlane, name string, provider node.PodProvider) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	client, err := kubernetes.NewForConfig(cp.NodeConfig(name))
	if err != nil {
		t.Fatal(err)
	}
	ip := hostAddress(t)
	ln, err := kubeletserver.Listen(ip, framework.FreePort())
	if err != nil {
		t.Fatal(err)
	}
	nodes := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}))
	pods := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", name).String()
	}))
	podInformer := pods.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(node.PodIndexers()); err != nil {
		t.Fatal(err)
	}
	ctrl, err := node.New(node.Config{
		NodeName: name, RegisterNode: true, MaxPods: 110, NodeIPs: []net.IP{net.ParseIP(ip)},
		NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute, NodeLeaseDurationSeconds: 40,
		AgentVersion: "v1.37.2-library", Host: libHost{}, Runtime: libRuntime{}, Pods: provider,
		FallbackPodCIDR: netip.MustParsePrefix("10.244.99.0/24"), KubeletPort: int32(ln.Addr().(*net.TCPAddr).Port),
	}, node.Dependencies{
		Client: client, HeartbeatClient: client, NodeLister: nodes.Core().V1().Nodes().Lister(),
		Cache: nodecache.New(clock.RealClock{}), Recorder: &record.FakeRecorder{},
		Pods: node.IndexedPodLister{Indexer: podInformer.GetIndexer()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := podInformer.AddEventHandler(ctrl.PodEventHandler()); err != nil {
		t.Fatal(err)
	}
	// The kubelet's defaults, and the CA of the API server's client certificate to kubelets.
	authn := kubeletserver.DefaultAuthentication()
	authn.X509.ClientCAFile = cp.KubeletClientCAFile
	auth, err := kubeletserver.BuildAuth(client, authn, kubeletserver.DefaultAuthorization())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ctrl.KubeletServer(auth)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := kubeletserver.SelfSignedCertificate("", ip, []net.IP{net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := kubeletserver.TLSConfig(kubeletserver.StaticCertificate(cert), cp.KubeletClientCAFile)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- kubeletserver.Serve(ctx, ln, tlsConfig, srv) }()
	go func() { _ = auth.Run(ctx) }()
	nodes.Start(ctx.Done())
	pods.Start(ctx.Done())
	nodes.WaitForCacheSync(ctx.Done())
	pods.WaitForCacheSync(ctx.Done())
	ran := make(chan error, 1)
	go func() { ran <- ctrl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran; <-served })
	framework.WaitReady(ctx, t, cp.AdminClient, name, time.Minute)
}
