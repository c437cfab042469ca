// Package server serves nodeagent's HTTP endpoints: /healthz (checks ping, log, syncloop),
// /readyz (ping, registered: the Node is registered and its status posted), /livez (ping, log),
// /metrics (Prometheus text), /statusz and /flagz (k8s.io/apiserver's, as the kubelet serves them),
// the caller's extra Handlers and, when enabled, /debug/pprof to loopback clients only. Health checks
// use k8s.io/apiserver's healthz package, as the kubelet does, so /healthz/<check> and ?verbose work alike.
//
// Everything is served on one listener, 127.0.0.1:10248 by default (--healthz-bind-address,
// --healthz-port), without authentication. On any other address /debug/pprof still answers only
// requests whose peer is a loopback address, and Run logs a warning.
//
//	s, err := server.New(server.Config{BindAddress: "127.0.0.1", Port: 10248, SyncLoop: f, Registered: g})
//	go s.Run(ctx)
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/server/statusz"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/compatibility"
	"k8s.io/klog/v2"

	nodeagentversion "github.com/nodeagent/nodeagent/pkg/version"
)

// DefaultComponentName is the component name /statusz and /flagz report when Config.ComponentName is empty.
const DefaultComponentName = "nodeagent"

// pprofPath is where the profiling handlers are mounted (with --enable-profiling-handler).
const pprofPath = "/debug/pprof/"

// Config configures a Server.
type Config struct {
	// BindAddress and Port give the listen address; Port 0 picks a free port (tests). The caller
	// does not build a Server at all to not serve (--healthz-port=0).
	BindAddress string
	Port        int
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// SyncLoop returns nil while the status and lease loops are keeping up (the syncloop check).
	SyncLoop func() error
	// Registered returns nil once the Node is registered and its first status posted (/readyz).
	Registered func() error
	// Checks are more named /healthz checks after syncloop (e.g. one per problem monitor:
	// problem.Manager.Checks), each also served at /healthz/<Name>. New fails on an empty, repeated
	// or built-in name (ping, log, syncloop) or a name that is not a plain path segment.
	Checks []Check
	// EnableProfiling serves /debug/pprof/ (index, cmdline, profile, symbol, trace and the named
	// profiles), to loopback peers only: any other peer gets 403 Forbidden, whatever BindAddress is.
	EnableProfiling bool

	// ComponentName names the component in /statusz and /flagz; empty means DefaultComponentName.
	ComponentName string
	// BinaryVersion is the "Binary version" /statusz reports, a version such as "v0.1.0" or
	// "v0.1.0-dev+abc"; empty means nodeagent's (pkg/version). New fails if it does not parse.
	// /statusz reports no emulation version: nodeagent emulates no Kubernetes version. The start
	// time and uptime /statusz reports are the process's (from /proc), not configurable.
	BinaryVersion string
	// Flags is the parsed command line /flagz serves, each flag's name and current value (flags
	// annotated "classified" show CLASSIFIED), as the kubelet's /flagz; nil leaves /flagz out.
	// Typically config.Options.Flags.
	Flags *pflag.FlagSet
	// Handlers are extra handlers mounted on the same mux and listener (and so loopback-only by
	// default), keyed by path: an http.ServeMux pattern without method or host, starting with "/"
	// ("/debug/nodestatus", or "/simulation/" for a subtree). They are served to any peer that can
	// reach the listener; wrap a handler in LoopbackOnly to refuse remote peers. New fails on a path
	// that does not start with "/" or collides with a built-in path.
	Handlers map[string]http.Handler
}

// Check is a named health check: Check returns nil while healthy, else why not.
type Check struct {
	Name  string
	Check func() error
}

// Server is the HTTP server. Build with New, run with Run.
type Server struct {
	cfg      Config
	listener net.Listener
	handler  http.Handler
}

// New validates cfg, builds the mux and listens (so that the address is known, and a port in use
// fails at start). It returns an error naming the address when it cannot listen, naming the path for
// a bad Handlers key, and naming the version when BinaryVersion does not parse.
func New(cfg Config) (*Server, error) {
	if cfg.SyncLoop == nil || cfg.Registered == nil {
		return nil, fmt.Errorf("server: Config needs SyncLoop and Registered")
	}
	if cfg.ComponentName == "" {
		cfg.ComponentName = DefaultComponentName
	}
	if cfg.BinaryVersion == "" {
		cfg.BinaryVersion = nodeagentversion.Get().GitVersion
	}
	binaryVersion, err := version.Parse(cfg.BinaryVersion)
	if err != nil {
		return nil, fmt.Errorf("server: binary version %q: %w", cfg.BinaryVersion, err)
	}

	healthChecks := []healthz.HealthChecker{healthz.PingHealthz, healthz.LogHealthz,
		healthz.NamedCheck("syncloop", func(*http.Request) error { return cfg.SyncLoop() })}
	names := map[string]bool{"ping": true, "log": true, "syncloop": true}
	for i, c := range cfg.Checks {
		if c.Name == "" || names[c.Name] || strings.ContainsAny(c.Name, "/?#% ") || c.Check == nil {
			return nil, fmt.Errorf("server: Checks[%d] %q: the name must be a non-empty path segment, not repeated nor one of ping, log, syncloop, and Check must be set", i, c.Name)
		}
		names[c.Name] = true
		check := c.Check
		healthChecks = append(healthChecks, healthz.NamedCheck(c.Name, func(*http.Request) error { return check() }))
	}
	mux := &pathsMux{ServeMux: http.NewServeMux()}
	healthz.InstallHandler(mux, healthChecks...)
	healthz.InstallReadyzHandler(mux, healthz.PingHealthz,
		healthz.NamedCheck("registered", func(*http.Request) error { return cfg.Registered() }))
	healthz.InstallLivezHandler(mux, healthz.PingHealthz, healthz.LogHealthz)
	if cfg.Metrics != nil {
		mux.Handle("/metrics", cfg.Metrics)
	}
	if cfg.EnableProfiling {
		// pprof.Index also serves the named profiles (/debug/pprof/goroutine, heap, ...).
		mux.Handle(pprofPath, LoopbackOnly(http.HandlerFunc(pprof.Index)))
		mux.Handle(pprofPath+"cmdline", LoopbackOnly(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle(pprofPath+"profile", LoopbackOnly(http.HandlerFunc(pprof.Profile)))
		mux.Handle(pprofPath+"symbol", LoopbackOnly(http.HandlerFunc(pprof.Symbol)))
		mux.Handle(pprofPath+"trace", LoopbackOnly(http.HandlerFunc(pprof.Trace)))
	}
	paths := make([]string, 0, len(cfg.Handlers))
	for p := range cfg.Handlers {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := mux.handleChecked(p, cfg.Handlers[p]); err != nil {
			return nil, fmt.Errorf("server: Handlers[%q]: %w", p, err)
		}
	}
	// As the kubelet's InstallZPages: /flagz when there are flags, then /statusz last, so that it
	// lists every other path.
	if cfg.Flags != nil {
		flagz.Install(mux, cfg.ComponentName, flagz.NamedFlagSetsReader{
			FlagSets: cliflag.NamedFlagSets{FlagSets: map[string]*pflag.FlagSet{cfg.ComponentName: cfg.Flags}},
		})
	}
	effective := binaryOnlyVersion{compatibility.NewEffectiveVersion(binaryVersion, false, version.MajorMinor(0, 0), version.MajorMinor(0, 0))}
	statusz.Install(mux, cfg.ComponentName, statusz.NewRegistry(effective, statusz.WithListedPaths(mux.paths)))

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
// else the serve error. When the listener is not on a loopback address (e.g. 0.0.0.0), it logs a
// warning at start: every endpoint but /debug/pprof is then reachable from the network, unauthenticated.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(s.listener) }()
	logger.Info("Serving healthz and metrics", "address", s.Addr())
	if !isLoopback(s.listener.Addr()) {
		msg := "Warning: the healthz server listens on a non-loopback address; /healthz, /readyz, /livez, /metrics, /statusz, /flagz " +
			"and any extra handlers are served to the network without authentication (--healthz-bind-address=127.0.0.1 keeps them local)"
		if s.cfg.EnableProfiling {
			msg += "; /debug/pprof is refused to non-loopback clients"
		}
		logger.Info(msg, "address", s.Addr())
	}
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

// LoopbackOnly wraps h so that only requests whose peer (http.Request.RemoteAddr) is a loopback
// address (127.0.0.0/8, ::1) reach it; any other peer gets 403 Forbidden with a one-line plain-text
// body saying so. Forwarding headers are not trusted. nodeagent uses it for /debug/pprof.
func LoopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, fmt.Sprintf("forbidden: %s is served to loopback clients only, not to %s; request it from the node itself (http://127.0.0.1:<healthz-port>%s)",
				r.URL.Path, r.RemoteAddr, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// isLoopback reports whether a listener address is a loopback IP (not an unspecified one such as 0.0.0.0).
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// pathsMux is an http.ServeMux that records the patterns registered on it, for /statusz's paths
// (the kubelet lists its restful container's RegisteredHandlePaths).
type pathsMux struct {
	*http.ServeMux
	paths []string
}

func (m *pathsMux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.paths = append(m.paths, pattern)
}

// handleChecked registers a caller's handler, returning an error instead of http.ServeMux's panic
// for a malformed or conflicting pattern.
func (m *pathsMux) handleChecked(pattern string, h http.Handler) (err error) {
	if !strings.HasPrefix(pattern, "/") {
		return fmt.Errorf("path must start with \"/\"")
	}
	if h == nil {
		return fmt.Errorf("nil handler")
	}
	for _, builtin := range []string{"/healthz", "/readyz", "/livez", "/metrics", "/flagz", "/statusz", "/debug/pprof"} {
		if pattern == builtin || strings.HasPrefix(pattern, builtin+"/") {
			return fmt.Errorf("%s is a built-in path", builtin)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	m.Handle(pattern, h)
	return nil
}

// binaryOnlyVersion reports a binary version and no emulation version: /statusz then leaves
// "Emulation version" out (nodeagent emulates no Kubernetes version).
type binaryOnlyVersion struct{ compatibility.EffectiveVersion }

func (binaryOnlyVersion) EmulationVersion() *version.Version { return nil }
