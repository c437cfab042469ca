package kubeletserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// LoadCertificate reads a serving certificate and key (--tls-cert-file, --tls-private-key-file) and
// refuses one that cannot be read or parsed, does not match its key, or is not valid at now
// (expired or not yet valid): the error names the file and says why, so that the agent refuses to
// start rather than serve it.
func LoadCertificate(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %q --tls-private-key-file %q: %w", certFile, keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %q: %w", certFile, err)
	}
	switch {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("--tls-cert-file %q: certificate expired at %s (now %s)", certFile, leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("--tls-cert-file %q: certificate not valid before %s (now %s)", certFile, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	cert.Leaf = leaf
	return &cert, nil
}

// SelfSignedCertificate returns the serving certificate the kubelet makes itself when it is given
// none (cmd/kubelet/app/server.go InitializeTLS): <certDir>/kubelet.crt and kubelet.key when they
// can be read, else a new one from client-go's certutil.GenerateSelfSignedCertKey(host, ips, nil)
// written there (a CA of its own signing a certificate for host, valid one year). An empty certDir
// keeps it in memory only (the simulator's and the library's case).
func SelfSignedCertificate(certDir, host string, ips []net.IP) (*tls.Certificate, error) {
	var certFile, keyFile string
	if certDir != "" {
		certFile, keyFile = filepath.Join(certDir, "kubelet.crt"), filepath.Join(certDir, "kubelet.key")
		if cert, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
			return &cert, nil
		}
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, ips, nil)
	if err != nil {
		return nil, fmt.Errorf("unable to generate self signed cert: %w", err)
	}
	if certDir != "" {
		if err := certutil.WriteCert(certFile, certPEM); err != nil {
			return nil, fmt.Errorf("writing self-signed certificate %q: %w", certFile, err)
		}
		if err := keyutil.WriteKey(keyFile, keyPEM); err != nil {
			return nil, fmt.Errorf("writing self-signed key %q: %w", keyFile, err)
		}
		klog.Background().Info("Using self-signed cert", "certFile", certFile, "keyFile", keyFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &cert, nil
}

// TLSConfig is the kubelet's serving TLS configuration: TLS 1.2 at least, the certificate from
// getCertificate (a fixed one, or a rotating certificate manager's current one), and, with a client
// CA file, client certificates requested but not required (tls.RequestClientCert), verified by the
// x509 authenticator against that CA: a request without one can still authenticate with a token.
func TLSConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), clientCAFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate}
	if clientCAFile != "" {
		pool, err := certutil.NewPool(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("authentication.x509.clientCAFile %q: %w", clientCAFile, err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequestClientCert
	}
	return cfg, nil
}

// StaticCertificate is a getCertificate for TLSConfig that always returns cert.
func StaticCertificate(cert *tls.Certificate) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }
}

// ReadHeaderTimeout bounds, on every connection of Serve, the TLS handshake and the reading of
// each request's headers (http.Server.ReadHeaderTimeout, which the handshake's deadline is the
// least of): the healthz server's 10 s (pkg/server) and the HTTP/2 server's preface timeout, within
// the API server's 32 s (k8s.io/apiserver's secure serving). The kubelet's http.Server sets none, so
// that a connection which never finishes its ClientHello or its headers holds a descriptor for its
// 4 h ReadTimeout (issue 45); once its headers are read a request (logs -f, exec, attach,
// port-forward) has the kubelet's 4 h.
const ReadHeaderTimeout = 10 * time.Second

// Serve serves handler with TLS on ln until ctx ends, with the kubelet's http.Server limits (idle
// 90 s, read and write 4 h, 1 MiB of headers) and ReadHeaderTimeout for the TLS handshake and the
// headers, then closes the listener and every connection. Limit ln with a ConnectionPool to cap
// the connections it holds open. It returns nil when ctx ended, else the server's error.
func Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config, handler http.Handler) error {
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         tlsConfig,
		IdleTimeout:       90 * time.Second,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       4 * 60 * time.Minute,
		WriteTimeout:      4 * 60 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          nil,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	// No goroutine waits for ctx: the simulator runs one Serve per Node (10 000 Nodes, 10 000 fewer
	// parked goroutines; BENCHMARKS.md, "bench-kubelet-api").
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	err := srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) && ctx.Err() != nil {
		return nil
	}
	return err
}

// Listen opens the TCP listener of address:port (the kubelet's --address and --port).
func Listen(address string, port int) (net.Listener, error) {
	addr := net.JoinHostPort(address, fmt.Sprint(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--address %q --port %d: %w", address, port, err)
	}
	return ln, nil
}
