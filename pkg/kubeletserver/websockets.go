package kubeletserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"

	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// FeatureExtendWebSocketsToKubelet is the node feature a Node declares in status.declaredFeatures
// when its kubelet API takes kubectl's WebSockets itself, as the kubelet declares it while its
// ExtendWebSocketsToKubelet gate is on (component-helpers nodedeclaredfeatures; Beta, on by default,
// in 1.37): the 1.37 API server then proxies exec, attach and port-forward WebSockets to the Node
// instead of translating them to SPDY itself (pkg/registry/core/pod/rest/subresources.go).
const FeatureExtendWebSocketsToKubelet = "ExtendWebSocketsToKubelet"

// serveExecOrAttachWebSocket serves a v5.channel.k8s.io WebSocket exec or attach as the kubelet's
// getExec and getAttach do with ExtendWebSocketsToKubelet: k8s.io/apiserver's StreamTranslatorHandler
// speaks WebSocket to the client and SPDY to the session, which the kubelet finds at its runtime's
// streaming server and this server serves itself, over an in-memory connection to its own routes
// (the request was authenticated and authorized as it came in).
func (s *Server) serveExecOrAttachWebSocket(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options) {
	location := &url.URL{Scheme: "http", Host: "localhost", Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	transport := &http.Transport{DialContext: s.dialRoutes}
	defer transport.CloseIdleConnections()
	translator.NewStreamTranslatorHandler(location, transport, 0, translator.Options{
		Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
	}).ServeHTTP(w, r)
}

// servePortForwardWebSocket serves a port-forward WebSocket tunnel (SPDY/3.1+portforward.k8s.io)
// as the kubelet's getPortForward does with ExtendWebSocketsToKubelet: k8s.io/apiserver's
// TunnelingHandler hands the tunnelled SPDY connection to serve.
func servePortForwardWebSocket(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
	translator.NewTunnelingHandler(serve).ServeHTTP(w, r)
}

// isWebSocketStreamClose and isWebSocketTunnel say which WebSocket protocol a request asks for.
func isWebSocketStreamClose(r *http.Request) bool {
	return wsstream.IsWebSocketRequestWithStreamCloseProtocol(r)
}

func isWebSocketTunnel(r *http.Request) bool {
	return wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
}

// dialRoutes returns one end of an in-memory connection whose other end an http.Server of the
// Server's routes (no authentication: the caller's request passed it) serves.
func (s *Server) dialRoutes(context.Context, string, string) (net.Conn, error) {
	client, server := net.Pipe()
	srv := &http.Server{Handler: s.routes} //nolint:gosec // an in-memory connection, no slow client to time out
	go func() { _ = srv.Serve(&oneConnListener{conn: server}) }()
	return client, nil
}

// oneConnListener is a net.Listener that accepts conn once and then no more.
type oneConnListener struct {
	mu   sync.Mutex
	conn net.Conn
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil, io.EOF
	}
	c := l.conn
	l.conn = nil
	return c, nil
}

func (l *oneConnListener) Close() error { return nil }

func (l *oneConnListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
