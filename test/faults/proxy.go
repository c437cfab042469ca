// Package faults holds nodeagent's fault-injection integration suite (its tests start real etcd,
// kube-apiserver, kube-controller-manager, containerd and nodeagent processes through test/framework,
// break one thing per case and check what the cluster sees) and Proxy, the loopback reverse proxy the
// suite puts between nodeagent and the real API server to answer chosen requests with errors.
//
// Run the suite with `go test ./test/faults/ -count=1 -v -timeout 30m`; the soak (case 11) is behind
// the build tag soak: `make soak` (SOAK_DURATION, default 30m).
package faults

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fault is an error answer the Proxy gives instead of forwarding a request: a metav1.Status body
// with Code and Reason, as the API server would send it.
type Fault struct {
	// Code is the HTTP status code, e.g. 409, 429, 500, 503, 504.
	Code int
	// Reason is the Status reason, e.g. metav1.StatusReasonConflict; empty derives one from Code.
	Reason metav1.StatusReason
	// RetryAfter, if positive, sets the Retry-After header (seconds) and Status details
	// retryAfterSeconds; client-go itself retries 429 and 5xx answers that carry it.
	RetryAfter int
}

// InjectFunc decides, for each request, whether the Proxy answers it with a Fault (non-nil) or
// forwards it. It is called from the Proxy's handler goroutines, one request at a time.
type InjectFunc func(r *http.Request) *Fault

// Request is one request the Proxy saw.
type Request struct {
	// Time is when the request arrived.
	Time time.Time
	// Method and Path are the HTTP method and URL path, e.g. "PATCH", "/api/v1/nodes/n1/status".
	Method, Path string
	// Watch is true for watch requests (?watch=true).
	Watch bool
	// Code is the HTTP status the client got: the Fault's code for injected requests, the API
	// server's otherwise, 0 if the request failed without an answer (or a watch still streams).
	Code int
	// Injected is true when the Proxy answered with a Fault instead of forwarding; RetryAfter is
	// then the Fault's.
	Injected   bool
	RetryAfter int
}

// Proxy is a TLS reverse proxy on 127.0.0.1 in front of a real kube-apiserver. It forwards every
// request (Authorization header included, watches streamed) unless its InjectFunc returns a Fault,
// and records every request. Clients reach it at URL and trust CAData. Build with NewProxy, end
// with Close.
type Proxy struct {
	// URL is the proxy's address, "https://127.0.0.1:<port>".
	URL string
	// CAData is the PEM of the proxy's self-signed serving certificate (valid for 127.0.0.1).
	CAData []byte

	srv *httptest.Server

	mu       sync.Mutex
	inject   InjectFunc
	requests []Request
}

// NewProxy starts a proxy in front of the API server at upstream ("https://127.0.0.1:<port>"),
// trusting upstreamCA (PEM) for it. It errors when upstream is not a URL or the CA has no certificate.
func NewProxy(upstream string, upstreamCA []byte) (*Proxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("proxy upstream %q: %w", upstream, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(upstreamCA) {
		return nil, errors.New("proxy upstream CA: no PEM certificate")
	}
	p := &Proxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	rp.FlushInterval = -1 // stream watches
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		writeStatus(w, &Fault{Code: http.StatusBadGateway}, fmt.Sprintf("proxy: %v", err))
	}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := Request{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Watch: r.URL.Query().Get("watch") == "true"}
		p.mu.Lock()
		inject := p.inject
		p.mu.Unlock()
		var f *Fault
		if inject != nil {
			f = inject(r)
		}
		if f != nil {
			req.Injected, req.Code, req.RetryAfter = true, f.Code, f.RetryAfter
			p.record(req)
			writeStatus(w, f, fmt.Sprintf("injected by the fault proxy: %d", f.Code))
			return
		}
		rw := &codeWriter{ResponseWriter: w}
		i := p.record(req)
		rp.ServeHTTP(rw, r)
		p.mu.Lock()
		p.requests[i].Code = rw.code
		p.mu.Unlock()
	}))
	p.srv.EnableHTTP2 = true
	p.srv.StartTLS()
	p.URL = p.srv.URL
	p.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	return p, nil
}

// SetInject replaces the InjectFunc; nil forwards everything.
func (p *Proxy) SetInject(f InjectFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inject = f
}

// Requests returns a copy of every request seen so far, in arrival order.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

// Close stops the proxy and closes its connections (watches included).
func (p *Proxy) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}

func (p *Proxy) record(r Request) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, r)
	return len(p.requests) - 1
}

// codeWriter remembers the status code written through it and passes Flush on (for watches).
type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *codeWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *codeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *codeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeStatus answers with a JSON metav1.Status for f, as the API server does for errors.
func writeStatus(w http.ResponseWriter, f *Fault, msg string) {
	reason := f.Reason
	if reason == "" {
		reason = reasonForCode(f.Code)
	}
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(f.Code),
	}
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(f.RetryAfter)}
	}
	body, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Code)
	_, _ = w.Write(body)
}

// reasonForCode is the Status reason the API server uses for code.
func reasonForCode(code int) metav1.StatusReason {
	switch code {
	case http.StatusConflict:
		return metav1.StatusReasonConflict
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	case http.StatusGatewayTimeout:
		return metav1.StatusReasonTimeout
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	default:
		return metav1.StatusReasonUnknown
	}
}
