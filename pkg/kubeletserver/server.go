package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/util/flushwriter"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/component-base/metrics"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/probemetrics"
	"github.com/nodeagent/nodeagent/pkg/resourcemetrics"
)

// The CRI streaming server's defaults, which the kubelet's streaming sessions run under
// (k8s.io/cri-streaming/pkg/streaming.DefaultConfig; the kubelet's streamingConnectionIdleTimeout
// default is the same 4 h).
const (
	StreamIdleTimeout     = 4 * time.Hour
	StreamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// Config configures the API of one Node.
type Config struct {
	// NodeName is the Node's name: the name in every authorization request, and the pods listed
	// and reached are those with this spec.nodeName. Required.
	NodeName string
	// Pods reads the pods bound to the Node (the pod informer). Required.
	Pods PodLister
	// ContainerLogs, Runner, Attacher and PortForwarder serve the containers' paths, one optional
	// interface per capability as Virtual Kubelet's api.PodHandlerConfig has one handler per path:
	// /containerLogs, /exec and /run, /attach, /portForward. A nil one answers its paths 501.
	ContainerLogs ContainerLogsGetter
	Runner        ContainerRunner
	Attacher      ContainerAttacher
	PortForwarder PortForwarder
	// Auth authenticates and authorizes every request (BuildAuth); required: the kubelet's secure
	// port has no unauthenticated mode, and anonymous requests are Auth's to allow.
	Auth *Auth
	// SyncLoop is /healthz's syncloop check (the kubelet's SyncLoopHealthCheck); nil: always
	// healthy. Checks are more /healthz checks.
	SyncLoop func(*http.Request) error
	Checks   []healthz.HealthChecker
	// StatsSummary serves /stats/summary, and /metrics/resource without MetricsResource
	// (resourcemetrics.FromSummary); MetricsResource serves /metrics/resource (Virtual Kubelet's
	// GetStatsSummary and GetMetricsResource). A path without either answers 501.
	StatsSummary    resourcemetrics.StatsSummaryGetter
	MetricsResource resourcemetrics.MetricsResourceGetter
	// CadvisorCollectors serve /metrics/cadvisor (cadvisor's Prometheus collectors, as the
	// kubelet registers them); none: 501.
	CadvisorCollectors []prometheus.Collector
	// Probes serves /metrics/probes (probemetrics.Handler): the counts of the Node's probes; nil:
	// the kubelet's registry with no prober worker (process_start_time_seconds only).
	Probes probemetrics.Getter
}

// Server is the kubelet's API of one Node, an http.Handler (the kubelet's server.Server).
type Server struct {
	cfg     Config
	handler http.Handler
	// routes is handler without authentication and authorization: what a translated WebSocket
	// session reaches in-process (websockets.go).
	routes http.Handler
	// summary, resource and cadvisor serve /stats/summary, /metrics/resource and /metrics/cadvisor
	// (cadvisor nil: 501).
	summary, resource, cadvisor http.Handler
	// probes serves /metrics/probes; healthz /healthz and its checks.
	probes, healthz http.Handler
}

// New validates cfg and builds the Node's handler. It errors, naming the field, when NodeName,
// Pods or Auth is missing.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("kubeletserver: Config.NodeName is required")
	case cfg.Pods == nil:
		return nil, fmt.Errorf("kubeletserver %q: Config.Pods is required", cfg.NodeName)
	case cfg.Auth == nil || cfg.Auth.Authenticator == nil || cfg.Auth.Authorizer == nil:
		return nil, fmt.Errorf("kubeletserver %q: Config.Auth (an authenticator and an authorizer) is required", cfg.NodeName)
	}
	s := &Server{cfg: cfg}
	s.summary, s.resource = resourcemetrics.Handlers(cfg.NodeName, cfg.StatsSummary, cfg.MetricsResource)
	s.probes = probemetrics.Handler(cfg.Probes)
	if len(cfg.CadvisorCollectors) > 0 {
		r := metrics.NewKubeRegistry()
		for _, c := range cfg.CadvisorCollectors {
			r.RawMustRegister(c)
		}
		s.cadvisor = metrics.HandlerFor(r, metrics.HandlerOpts{ErrorHandling: metrics.ContinueOnError})
	}
	mux := http.NewServeMux()
	syncLoop := cfg.SyncLoop
	if syncLoop == nil {
		syncLoop = func(*http.Request) error { return nil }
	}
	checks := append([]healthz.HealthChecker{healthz.PingHealthz, healthz.LogHealthz, healthz.NamedCheck("syncloop", syncLoop)}, cfg.Checks...)
	healthz.InstallHandler(mux, checks...)
	s.healthz = mux
	s.routes = router{s: s}
	s.handler = cfg.Auth.filter(cfg.NodeName, s.routes)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// writeErrorString writes msg with status code, as go-restful's Response.WriteErrorString (the
// kubelet's error answers): no Content-Type set (Go's sniffing makes it text/plain).
func writeErrorString(w http.ResponseWriter, code int, msg string) {
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

// notImplemented answers a path whose interface the provider lacks: 501 and the plain-text error
// body the kubelet writes for a runtime error, naming the Virtual Kubelet method.
func (s *Server) notImplemented(w http.ResponseWriter, method string) {
	writeErrorString(w, http.StatusNotImplemented, fmt.Sprintf("node %q does not implement %s", s.cfg.NodeName, method))
}

// The routes' handlers (webServices).

func (s *Server) serveHealthz(w http.ResponseWriter, r *http.Request, _ pathParams) {
	s.healthz.ServeHTTP(w, r)
}

func (s *Server) serveSummary(w http.ResponseWriter, r *http.Request, _ pathParams) {
	s.summary.ServeHTTP(w, r)
}

func (s *Server) serveMetricsResource(w http.ResponseWriter, r *http.Request, _ pathParams) {
	s.resource.ServeHTTP(w, r)
}

func (s *Server) serveMetricsCadvisor(w http.ResponseWriter, r *http.Request, _ pathParams) {
	if s.cadvisor == nil {
		s.notImplemented(w, "cadvisor metrics")
		return
	}
	s.cadvisor.ServeHTTP(w, r)
}

func (s *Server) serveMetricsProbes(w http.ResponseWriter, r *http.Request, _ pathParams) {
	s.probes.ServeHTTP(w, r)
}

func (s *Server) serveContainerLogs(w http.ResponseWriter, r *http.Request, p pathParams) {
	s.getContainerLogs(w, r, p.namespace, p.pod, p.container)
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request, p pathParams) {
	s.getExecOrAttach(w, r, true, p.namespace, p.pod, p.uid, p.container)
}

func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request, p pathParams) {
	s.getExecOrAttach(w, r, false, p.namespace, p.pod, p.uid, p.container)
}

func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request, p pathParams) {
	s.getPortForward(w, r, p.namespace, p.pod, p.uid)
}

func (s *Server) serveRun(w http.ResponseWriter, r *http.Request, p pathParams) {
	s.getRun(w, r, p.namespace, p.pod, p.uid, p.container)
}

// podByName is the kubelet's GetPodByName: the pod bound to this Node, else false (absent, or
// bound to another Node).
func (s *Server) podByName(namespace, name string) (*v1.Pod, bool) {
	p, err := s.cfg.Pods.Get(namespace, name)
	if err != nil || p == nil || p.Spec.NodeName != s.cfg.NodeName {
		return nil, false
	}
	return p, true
}

// getPods is the kubelet's getPods: a v1 PodList of the pods bound to the Node.
func (s *Server) getPods(w http.ResponseWriter, r *http.Request) {
	pods, err := s.cfg.Pods.OnNode(s.cfg.NodeName)
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	list := &v1.PodList{Items: make([]v1.Pod, 0, len(pods))}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	data, err := runtime.Encode(scheme.Codecs.LegacyCodec(v1.SchemeGroupVersion), list)
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// containerSpec is the kubelet's kubecontainer.GetContainerSpec: the container, init container or
// ephemeral container of that name.
func containerSpec(p *v1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range p.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// DecodeLogOptions decodes the query of a container log request as the kubelet's getContainerLogs
// does (the v1 PodLogOptions parameter codec, the legacy "tail" parameter, ValidatePodLogOptions):
// a decode error answers 400 {"message": "Unable to decode query."}, an invalid value 422
// {"message": "Invalid request."}.
func DecodeLogOptions(query map[string][]string) (ContainerLogOpts, int, error) {
	q := make(map[string][]string, len(query))
	for k, v := range query {
		q[k] = v
	}
	if tail := q["tail"]; len(tail) > 0 && tail[0] != "" {
		q["tailLines"] = tail
		if tail[0] == "all" {
			delete(q, "tailLines")
		}
	}
	var opts v1.PodLogOptions
	badQuery := errors.New(`{"message": "Unable to decode query."}`)
	for _, f := range []struct {
		key string
		out **int64
	}{{"tailLines", &opts.TailLines}, {"limitBytes", &opts.LimitBytes}, {"sinceSeconds", &opts.SinceSeconds}} {
		if v, ok := q[f.key]; ok {
			if err := runtime.Convert_Slice_string_To_Pointer_int64(&v, f.out, nil); err != nil {
				return ContainerLogOpts{}, http.StatusBadRequest, badQuery
			}
		}
	}
	for _, f := range []struct {
		key string
		out *bool
	}{{"follow", &opts.Follow}, {"previous", &opts.Previous}, {"timestamps", &opts.Timestamps}, {"insecureSkipTLSVerifyBackend", &opts.InsecureSkipTLSVerifyBackend}} {
		if v, ok := q[f.key]; ok {
			if err := runtime.Convert_Slice_string_To_bool(&v, f.out, nil); err != nil {
				return ContainerLogOpts{}, http.StatusBadRequest, badQuery
			}
		}
	}
	if v := q["sinceTime"]; len(v) > 0 && v[0] != "" {
		var t metav1.Time
		if err := t.UnmarshalQueryParameter(v[0]); err != nil {
			return ContainerLogOpts{}, http.StatusBadRequest, badQuery
		}
		opts.SinceTime = &t
	}
	if v := q["stream"]; len(v) > 0 && v[0] != "" && v[0] != v1.LogStreamAll {
		return ContainerLogOpts{}, http.StatusBadRequest, fmt.Errorf("invalid stream type %q: this node serves the %q stream only", v[0], v1.LogStreamAll)
	}
	invalid := errors.New(`{"message": "Invalid request."}`)
	if (opts.TailLines != nil && *opts.TailLines < 0) || (opts.LimitBytes != nil && *opts.LimitBytes < 1) ||
		(opts.SinceSeconds != nil && opts.SinceTime != nil) || (opts.SinceSeconds != nil && *opts.SinceSeconds < 1) {
		return ContainerLogOpts{}, http.StatusUnprocessableEntity, invalid
	}
	out := ContainerLogOpts{Follow: opts.Follow, Previous: opts.Previous, Timestamps: opts.Timestamps}
	const maxInt = int64(^uint(0) >> 1)
	if opts.TailLines != nil {
		out.Tail, out.TailSet = int(min(*opts.TailLines, maxInt)), true
	}
	if opts.LimitBytes != nil {
		out.LimitBytes = int(min(*opts.LimitBytes, maxInt))
	}
	if opts.SinceSeconds != nil {
		out.SinceSeconds = int(min(*opts.SinceSeconds, maxInt))
	}
	if opts.SinceTime != nil {
		out.SinceTime = opts.SinceTime.Time
	}
	return out, 0, nil
}

// getContainerLogs is the kubelet's getContainerLogs over the provider's GetContainerLogs.
func (s *Server) getContainerLogs(w http.ResponseWriter, r *http.Request, namespace, podName, container string) {
	opts, code, err := DecodeLogOptions(r.URL.Query())
	if err != nil {
		writeErrorString(w, code, err.Error())
		return
	}
	p, ok := s.podByName(namespace, podName)
	if !ok {
		writeErrorString(w, http.StatusNotFound, fmt.Sprintf("pod %q does not exist", podName))
		return
	}
	if !containerSpec(p, container) {
		writeErrorString(w, http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q", container, podName))
		return
	}
	if s.cfg.ContainerLogs == nil {
		s.notImplemented(w, "GetContainerLogs")
		return
	}
	rc, err := s.cfg.ContainerLogs.GetContainerLogs(r.Context(), namespace, podName, container, opts)
	if err != nil {
		writeErrorString(w, http.StatusBadRequest, err.Error())
		return
	}
	defer func() { _ = rc.Close() }()
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	fw := flushwriter.Wrap(w)
	if _, err := io.Copy(fw, rc); err != nil && r.Context().Err() == nil {
		klog.FromContext(r.Context()).V(3).Info("Container log stream ended", "node", s.cfg.NodeName, "pod", klog.KRef(namespace, podName), "container", container, "err", err)
	}
}

// runningContainer reports whether the pod's container runs now, as the kubelet's findContainer
// finds it among the runtime's running containers.
func runningContainer(p *v1.Pod, name string) bool {
	for _, list := range [][]v1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, st := range list {
			if st.Name == name {
				return st.State.Running != nil
			}
		}
	}
	return false
}

// getExecOrAttach is the kubelet's getExec and getAttach, the CRI streaming server's serveExec and
// serveAttach in one handler: the session runs here, not behind a redirect to a runtime.
func (s *Server) getExecOrAttach(w http.ResponseWriter, r *http.Request, exec bool, namespace, podName string, uid types.UID, container string) {
	streamOpts, err := remotecommand.NewOptions(r)
	if err != nil {
		writeErrorString(w, http.StatusBadRequest, err.Error())
		return
	}
	p, ok := s.podByName(namespace, podName)
	if !ok {
		writeErrorString(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if (uid != "" && p.UID != uid) || !runningContainer(p, container) {
		// The kubelet's GetExec/GetAttach: the runtime has no such running container.
		writeErrorString(w, http.StatusInternalServerError, fmt.Sprintf("container not found (%q)", container))
		return
	}
	a := adapter{namespace: namespace, cfg: &s.cfg}
	if exec {
		if s.cfg.Runner == nil {
			s.notImplemented(w, "RunInContainer")
			return
		}
		if isWebSocketStreamClose(r) {
			s.serveExecOrAttachWebSocket(w, r, streamOpts)
			return
		}
		remotecommand.ServeExec(w, r, a, podName, string(p.UID), container, r.URL.Query()["command"], streamOpts,
			StreamIdleTimeout, StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
		return
	}
	if s.cfg.Attacher == nil {
		s.notImplemented(w, "AttachToContainer")
		return
	}
	if isWebSocketStreamClose(r) {
		s.serveExecOrAttachWebSocket(w, r, streamOpts)
		return
	}
	remotecommand.ServeAttach(w, r, a, podName, string(p.UID), container, streamOpts,
		StreamIdleTimeout, StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// getPortForward is the kubelet's getPortForward and the CRI streaming server's servePortForward.
func (s *Server) getPortForward(w http.ResponseWriter, r *http.Request, namespace, podName string, uid types.UID) {
	tunnel := isWebSocketTunnel(r)
	pfOpts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if pfOpts, err = portforward.NewV4Options(r); err != nil {
			writeErrorString(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	p, ok := s.podByName(namespace, podName)
	if !ok {
		writeErrorString(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if uid != "" && p.UID != uid {
		writeErrorString(w, http.StatusNotFound, "pod not found")
		return
	}
	if s.cfg.PortForwarder == nil {
		s.notImplemented(w, "PortForward")
		return
	}
	serve := func(w http.ResponseWriter, r *http.Request) {
		portforward.ServePortForward(w, r, adapter{namespace: namespace, cfg: &s.cfg}, podName, string(p.UID), pfOpts,
			StreamIdleTimeout, StreamCreationTimeout, portforward.SupportedProtocols)
	}
	if tunnel {
		servePortForwardWebSocket(w, r, serve)
		return
	}
	serve(w, r)
}

// getRun is the kubelet's getRun: the command (the "cmd" parameter split at spaces) run without
// stdin, its stdout and stderr together in the answer.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request, namespace, podName string, uid types.UID, container string) {
	p, ok := s.podByName(namespace, podName)
	if !ok {
		writeErrorString(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if s.cfg.Runner == nil {
		s.notImplemented(w, "RunInContainer")
		return
	}
	if (uid != "" && p.UID != uid) || !runningContainer(p, container) {
		writeErrorString(w, http.StatusInternalServerError, fmt.Sprintf("container not found (%q)", container))
		return
	}
	cmd := strings.Split(r.URL.Query().Get("cmd"), " ")
	var out limitedBuffer
	out.max = maxRunOutput
	aio := &attachIO{stdout: nopCloser{&out}, stderr: nopCloser{&out}, resize: closedResize()}
	if err := s.cfg.Runner.RunInContainer(r.Context(), namespace, podName, container, cmd, aio); err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.buf)
}

// maxRunOutput bounds what /run keeps of a command's output (the kubelet's RunInContainer keeps it
// all; a provider's command could write without end).
const maxRunOutput = 4 << 20

type limitedBuffer struct {
	buf []byte
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func closedResize() <-chan TermSize {
	c := make(chan TermSize)
	close(c)
	return c
}

// adapter turns the Config's Virtual Kubelet methods into cri-streaming's Executor, Attacher and
// PortForwarder (which name a pod without its namespace).
type adapter struct {
	namespace string
	cfg       *Config
}

func (a adapter) ExecInContainer(ctx context.Context, name, _ string, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	aio := newAttachIO(ctx, in, out, errw, tty, resize)
	return a.cfg.Runner.RunInContainer(ctx, a.namespace, name, container, cmd, aio)
}

func (a adapter) AttachContainer(ctx context.Context, name, _ string, container string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	aio := newAttachIO(ctx, in, out, errw, tty, resize)
	return a.cfg.Attacher.AttachToContainer(ctx, a.namespace, name, container, aio)
}

func (a adapter) PortForward(ctx context.Context, name, _ string, port int32, stream io.ReadWriteCloser) error {
	return a.cfg.PortForwarder.PortForward(ctx, a.namespace, name, port, stream)
}

// attachIO is AttachIO over cri-streaming's streams.
type attachIO struct {
	stdin          io.Reader
	stdout, stderr io.WriteCloser
	tty            bool
	resize         <-chan TermSize
}

func (a *attachIO) Stdin() io.Reader        { return a.stdin }
func (a *attachIO) Stdout() io.WriteCloser  { return a.stdout }
func (a *attachIO) Stderr() io.WriteCloser  { return a.stderr }
func (a *attachIO) TTY() bool               { return a.tty }
func (a *attachIO) Resize() <-chan TermSize { return a.resize }

// newAttachIO wraps the streams; the resize events are copied until the session's ctx ends or the
// client closes its resize stream. Nil streams stay nil (an interface holding no value).
func newAttachIO(ctx context.Context, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) *attachIO {
	a := &attachIO{tty: tty}
	if in != nil {
		a.stdin = in
	}
	if out != nil {
		a.stdout = out
	}
	if errw != nil {
		a.stderr = errw
	}
	sizes := make(chan TermSize)
	a.resize = sizes
	go func() {
		defer close(sizes)
		if resize == nil {
			<-ctx.Done()
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-resize:
				if !ok {
					return
				}
				select {
				case sizes <- TermSize{Width: sz.Width, Height: sz.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return a
}
