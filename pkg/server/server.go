// Package server serves nodeagent's HTTP endpoints: /healthz (checks ping, log, syncloop),
// /readyz (ping, registered: the Node is registered and its status posted), /livez (ping, log),
// /metrics (Prometheus text) and, when enabled, /debug/pprof. Health checks use
// k8s.io/apiserver's healthz package, as the kubelet does, so /healthz/<check> and ?verbose work alike.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"
)

// Config configures a Server.
type Config struct {
	// BindAddress and Port give the listen address; Port 0 picks a free port (tests). Use
	// Enabled=false to not serve at all.
	BindAddress string
	Port        int
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// SyncLoop returns nil while the status and lease loops are keeping up (the syncloop check).
	SyncLoop func() error
	// Registered returns nil once the Node is registered and its first status posted (/readyz).
	Registered func() error
	// EnableProfiling serves /debug/pprof.
	EnableProfiling bool
	// Handlers are more paths to serve (path → handler), e.g. /debug/nodestatus.
	Handlers map[string]http.Handler
}

// Server is the HTTP server. Build with New, run with Run.
type Server struct {
	cfg      Config
	listener net.Listener
	handler  http.Handler
}

// New validates cfg, builds the mux and listens (so that the address is known, and a port in use
// fails at start). It returns an error naming the address when it cannot listen.
func New(cfg Config) (*Server, error) {
	if cfg.SyncLoop == nil || cfg.Registered == nil {
		return nil, fmt.Errorf("server: Config needs SyncLoop and Registered")
	}
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, healthz.PingHealthz, healthz.LogHealthz,
		healthz.NamedCheck("syncloop", func(*http.Request) error { return cfg.SyncLoop() }))
	healthz.InstallReadyzHandler(mux, healthz.PingHealthz,
		healthz.NamedCheck("registered", func(*http.Request) error { return cfg.Registered() }))
	healthz.InstallLivezHandler(mux, healthz.PingHealthz, healthz.LogHealthz)
	if cfg.Metrics != nil {
		mux.Handle("/metrics", cfg.Metrics)
	}
	for path, h := range cfg.Handlers {
		mux.Handle(path, h)
	}
	if cfg.EnableProfiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	addr := net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.Port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("healthz server: listening on %s: %w", addr, err)
	}
	return &Server{cfg: cfg, listener: l, handler: mux}, nil
}

// Addr returns the address the server listens on, e.g. "127.0.0.1:10248".
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Handler returns the server's mux (for tests).
func (s *Server) Handler() http.Handler { return s.handler }

// Run serves until ctx ends, then shuts down within 2 s. It returns nil after a clean shutdown,
// else the serve error.
func (s *Server) Run(ctx context.Context) error {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(s.listener) }()
	klog.FromContext(ctx).Info("Serving healthz and metrics", "address", s.Addr())
	select {
	case err := <-errCh:
		return fmt.Errorf("healthz server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("healthz server shutdown: %w", err)
	}
	return nil
}
