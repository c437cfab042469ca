package simulation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
)

// What a simulated pod's port answers to kubectl port-forward (docs/simulation.md, "port-forward").
// A kubelet forwards a port-forward stream into the pod's network namespace, so that its author reaches
// only what the pod's own containers listen on. A simulated pod has no network namespace and no
// process: its ports are answered by the simulator in memory, and nothing is dialed unless the
// operator named the target (PortForwardTargets, --port-forward-target) and the pod's annotation picks
// it by name. A pod's author can never choose an address.

// PortAnswer is what one port of a simulated pod answers, in AnnotationPortForward: at most one of
// HTTP, Echo, Refuse and Target; none (the JSON {}) is the default HTTP answer.
type PortAnswer struct {
	// HTTP answers every request on the connection with the same response (HTTP/1.1, keep-alive).
	HTTP *HTTPAnswer `json:"http,omitempty"`
	// Echo writes back every byte the client sends, until it closes.
	Echo bool `json:"echo,omitempty"`
	// Refuse: nothing listens on the port; port-forward fails as the kubelet's does when the pod's
	// port is closed.
	Refuse bool `json:"refuse,omitempty"`
	// Target is the name of one of the operator's port-forward targets (--port-forward-target
	// NAME=host:port): the connection is joined to a TCP connection to that address.
	Target string `json:"target,omitempty"`
}

// HTTPAnswer is an HTTP response: Status (default 200), Headers, and Body (default a line naming the
// pod and the port, DefaultPortAnswerBody).
type HTTPAnswer struct {
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    *string           `json:"body,omitempty"`
}

// DefaultPortAnswerBody is the body of the default HTTP answer of pod namespace/name's port.
func DefaultPortAnswerBody(namespace, name string, port int32) string {
	return fmt.Sprintf("nodeagent simulate: pod %s/%s port %d (simulated)\n", namespace, name, port)
}

// portForwardTargetName is the form of a target's name: a DNS-1123 label.
var portForwardTargetName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParsePortForwardTargets parses --port-forward-target values, each NAME=host:port (NAME a DNS-1123
// label, port 1 to 65535), into a map from name to address. An error names the value; a name given
// twice is an error.
func ParsePortForwardTargets(values []string) (map[string]string, error) {
	targets := make(map[string]string, len(values))
	for _, v := range values {
		name, addr, ok := strings.Cut(v, "=")
		if !ok || !portForwardTargetName.MatchString(name) {
			return nil, fmt.Errorf("--port-forward-target %q: want NAME=host:port with NAME a lower-case DNS label (a-z, 0-9, -)", v)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return nil, fmt.Errorf("--port-forward-target %q: want NAME=host:port: %q is not a host:port", v, addr)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("--port-forward-target %q: port %q must be a number from 1 to 65535", v, port)
		}
		if _, dup := targets[name]; dup {
			return nil, fmt.Errorf("--port-forward-target %q: target %q is named twice", v, name)
		}
		targets[name] = addr
	}
	return targets, nil
}

// ErrPortRefused is the error of a port-forward to a port whose answer is Refuse.
var ErrPortRefused = errors.New("connection refused")

// portAnswer returns the answer of the pod's port from AnnotationPortForward: a JSON object from a
// port number ("80") or "*" (any other port) to a PortAnswer. Without the annotation, or for a port it
// does not name, the default HTTP answer. An annotation that is not such an object (among them the
// host:port form of earlier releases, by which a pod named any address) is an error naming it.
func portAnswer(p *v1.Pod, port int32) (PortAnswer, error) {
	v, ok := p.Annotations[AnnotationPortForward]
	if !ok || v == "" {
		return PortAnswer{}, nil
	}
	var answers map[string]PortAnswer
	if err := json.Unmarshal([]byte(v), &answers); err != nil {
		return PortAnswer{}, fmt.Errorf("annotation %s %q of pod %s/%s: want a JSON object from a port (or \"*\") to its answer, e.g. {\"80\": {\"http\": {\"body\": \"ok\\n\"}}, \"5432\": {\"target\": \"NAME\"}} (a pod cannot name an address: only the operator's --port-forward-target names): %w",
			AnnotationPortForward, truncateString(v, 80), p.Namespace, p.Name, err)
	}
	a, found := answers[strconv.Itoa(int(port))]
	if !found {
		a = answers["*"]
	}
	n := 0
	for _, set := range []bool{a.HTTP != nil, a.Echo, a.Refuse, a.Target != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return PortAnswer{}, fmt.Errorf("annotation %s of pod %s/%s: port %d: give one of http, echo, refuse and target", AnnotationPortForward, p.Namespace, p.Name, port)
	}
	if a.HTTP != nil && a.HTTP.Status != 0 && (a.HTTP.Status < 100 || a.HTTP.Status > 999) {
		return PortAnswer{}, fmt.Errorf("annotation %s of pod %s/%s: port %d: http status %d is not a 3-digit HTTP status", AnnotationPortForward, p.Namespace, p.Name, port, a.HTTP.Status)
	}
	return a, nil
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// portAnswerReadHeaderTimeout and portAnswerIdleTimeout bound an HTTP answer's connection: a client
// that sends no request headers, or no further request, is closed after them.
const (
	portAnswerReadHeaderTimeout = 10 * time.Second
	portAnswerIdleTimeout       = 60 * time.Second
	portAnswerMaxHeaderBytes    = 16 << 10
	targetDialTimeout           = 10 * time.Second
)

// PortForward implements kubeletserver.PortForwarder: the pod's port answers as AnnotationPortForward
// says (PortAnswer): in memory (HTTP, echo), refused, or joined to one of the operator's targets. It
// returns when the client or the answer closes the connection, or ctx ends; the error of a refused port,
// an unknown target or a failed dial names the pod and the port (the kubelet's port-forward reports its
// own failure to connect inside the pod's network namespace the same way: an error on the stream).
func (st *Streaming) PortForward(ctx context.Context, namespace, podName string, port int32, stream io.ReadWriteCloser) error {
	defer func() { _ = stream.Close() }()
	p, err := st.Pods.Get(namespace, podName)
	if err != nil {
		return err
	}
	a, err := portAnswer(p, port)
	if err != nil {
		return err
	}
	switch {
	case a.Refuse:
		return fmt.Errorf("pod %s/%s port %d: %w (annotation %s)", namespace, podName, port, ErrPortRefused, AnnotationPortForward)
	case a.Echo:
		return echo(ctx, stream)
	case a.Target != "":
		addr, ok := st.PortForwardTargets[a.Target]
		if !ok {
			return fmt.Errorf("pod %s/%s port %d: annotation %s names target %q, which is not one of this simulator's --port-forward-target names", namespace, podName, port, AnnotationPortForward, a.Target)
		}
		d := net.Dialer{Timeout: targetDialTimeout}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("pod %s/%s port %d: target %q: %w", namespace, podName, port, a.Target, err)
		}
		return join(ctx, stream, conn)
	}
	return serveHTTPAnswer(ctx, stream, httpAnswerHandler(namespace, podName, port, a.HTTP))
}

// httpAnswerHandler answers every request with a (nil: 200 and DefaultPortAnswerBody).
func httpAnswerHandler(namespace, podName string, port int32, a *HTTPAnswer) http.Handler {
	status, body := http.StatusOK, DefaultPortAnswerBody(namespace, podName, port)
	var headers map[string]string
	if a != nil {
		if a.Status != 0 {
			status = a.Status
		}
		if a.Body != nil {
			body = *a.Body
		}
		headers = a.Headers
	}
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	sort.Strings(names)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		for _, k := range names {
			h.Set(k, headers[k])
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, body)
		}
	})
}

// serveHTTPAnswer serves handler over stream with net/http's server (its request parsing, header
// limits and keep-alive), through an in-memory pipe, until the client closes the stream, the server
// closes an idle connection, or ctx ends.
func serveHTTPAnswer(ctx context.Context, stream io.ReadWriteCloser, handler http.Handler) error {
	client, server := net.Pipe()
	srv := &http.Server{
		Handler: handler, ReadHeaderTimeout: portAnswerReadHeaderTimeout, IdleTimeout: portAnswerIdleTimeout,
		MaxHeaderBytes: portAnswerMaxHeaderBytes, BaseContext: func(net.Listener) context.Context { return ctx },
	}
	ln := &pipeListener{conn: server, done: make(chan struct{})}
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			ln.close()
		}
	}
	go func() { _ = srv.Serve(ln) }()
	err := join(ctx, stream, client)
	_ = srv.Close()
	return err
}

// join copies between the stream and conn both ways until either side's copy ends or ctx ends, then
// closes conn (the caller closes the stream).
func join(ctx context.Context, stream io.ReadWriteCloser, conn io.ReadWriteCloser) error {
	defer func() { _ = conn.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// echo writes back what the stream reads until it ends or ctx ends.
func echo(ctx context.Context, stream io.ReadWriter) error {
	done := make(chan struct{})
	go func() { _, _ = io.Copy(stream, stream); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// pipeListener is a net.Listener that accepts conn once, then blocks until the connection is closed
// (so that http.Server.Serve keeps serving it) and returns net.ErrClosed.
type pipeListener struct {
	mu   sync.Mutex
	conn net.Conn
	once sync.Once
	done chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *pipeListener) close()         { l.once.Do(func() { close(l.done) }) }
func (l *pipeListener) Close() error   { l.close(); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "simulated-port" }
