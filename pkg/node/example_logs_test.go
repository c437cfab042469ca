package node_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/pod"
)

// logsProvider is a PodProvider whose containers run from their creation on, and that also
// implements node.ContainerLogsGetter (Virtual Kubelet's GetContainerLogs): kubectl logs reaches it
// through the API server and the Node's kubelet API.
type logsProvider struct{ started time.Time }

func (*logsProvider) CreatePod(context.Context, *v1.Pod) error   { return nil }
func (*logsProvider) UpdatePod(context.Context, *v1.Pod) error   { return nil }
func (*logsProvider) DeletePod(context.Context, *v1.Pod) error   { return nil }
func (*logsProvider) GetPods(context.Context) ([]*v1.Pod, error) { return nil, nil }
func (p *logsProvider) GetPodStatus(_ context.Context, v *v1.Pod) (node.PodRuntimeStatus, error) {
	st := &pod.RuntimeStatus{RuntimeName: "example", Sandbox: pod.SandboxReady}
	for _, c := range v.Spec.Containers {
		st.Containers = append(st.Containers, pod.ContainerStatus{Name: c.Name, ID: string(v.UID) + "-" + c.Name, ImageID: "sha256:0",
			Started: true, Ready: true, State: pod.ContainerState{Running: &pod.Running{StartedAt: p.started}}})
	}
	return node.PodRuntimeStatus{Status: st}, nil
}

func (*logsProvider) GetContainerLogs(_ context.Context, namespace, pod, container string, opts node.ContainerLogOpts) (io.ReadCloser, error) {
	lines := []string{"starting", "listening on :80", "ready"}
	if opts.TailSet && opts.Tail < len(lines) {
		lines = lines[len(lines)-opts.Tail:]
	}
	return io.NopCloser(strings.NewReader(strings.Join(lines, "\n") + "\n")), nil
}

// A provider that implements node.ContainerLogsGetter serves `kubectl logs` for its pods: the Node
// serves the kubelet's API (Controller.KubeletServer) on its address and Config.KubeletPort, with the
// kubelet's authentication (TokenReview, x509) and authorization (SubjectAccessReview).
func Example_kubectlLogs() {
	client := fake.NewClientset() // a real program passes its kubernetes.Clientset
	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(node.PodIndexers()); err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a real Node: its InternalIP and port 10250
	if err != nil {
		panic(err)
	}
	ctrl, err := node.New(node.Config{
		NodeName: "example-node", RegisterNode: true, MaxPods: 110,
		NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
		NodeLeaseDurationSeconds: 40, AgentVersion: "v1.37.2-example",
		Host: host{}, Runtime: containerRuntime{}, Pods: &logsProvider{started: time.Now()},
		FallbackPodCIDR: netip.MustParsePrefix("10.244.7.0/24"),
		KubeletPort:     int32(ln.Addr().(*net.TCPAddr).Port), // status.daemonEndpoints.kubeletEndpoint.Port
	}, node.Dependencies{
		Client: client, HeartbeatClient: client,
		NodeLister: factory.Core().V1().Nodes().Lister(), Cache: nodecache.New(clock.RealClock{}),
		Recorder: &record.FakeRecorder{}, Pods: node.IndexedPodLister{Indexer: podInformer.GetIndexer()},
	})
	if err != nil {
		panic(err)
	}
	// One Auth per process. A real program builds the kubelet's, with the kubelet's v1beta1 defaults
	// (anonymous off, TokenReview, SubjectAccessReview) through its real client:
	//	auth, err := kubeletserver.BuildAuth(client, kubeletserver.DefaultAuthentication(), kubeletserver.DefaultAuthorization())
	// Here (the fake client serves no TokenReview) one token and everything allowed to it.
	auth := &kubeletserver.Auth{
		Authenticator: bearertoken.New(tokenfile.New(map[string]*user.DefaultInfo{
			"apiserver-token": {Name: "kube-apiserver-kubelet-client"}})),
		Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer(),
	}
	srv, err := ctrl.KubeletServer(auth)
	if err != nil {
		panic(err)
	}
	cert, err := kubeletserver.SelfSignedCertificate("", "127.0.0.1", nil) // or LoadCertificate(--tls-cert-file, ...)
	if err != nil {
		panic(err)
	}
	tlsConfig, err := kubeletserver.TLSConfig(kubeletserver.StaticCertificate(cert), "")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = kubeletserver.Serve(ctx, ln, tlsConfig, srv) }()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() { _ = ctrl.Run(ctx) }()

	web := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec:       v1.PodSpec{NodeName: "example-node", Containers: []v1.Container{{Name: "web", Image: "nginx:1.27"}}},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		panic(err)
	}
	// The informer sees the pod.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		pods, err := podInformer.GetIndexer().ByIndex(node.PodNodeNameIndex, "example-node")
		return err == nil && len(pods) == 1, nil
	}); err != nil {
		panic(err)
	}

	// What the API server sends for `kubectl logs web --tail=2`.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: insecure()}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+ln.Addr().String()+"/containerLogs/default/web/web?tailLines=2", nil)
	req.Header.Set("Authorization", "Bearer apiserver-token")
	resp, err := c.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	fmt.Print(resp.StatusCode, "\n", string(body))
	// Output:
	// 200
	// listening on :80
	// ready
}

// insecure skips the check of the Node's self-signed certificate, as the API server does without
// --kubelet-certificate-authority.
func insecure() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // as the API server
