package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// AgentOptions configures StartAgent.
type AgentOptions struct {
	// Dir holds the agent's root dir (Dir/root, its --root-dir) and log (Dir/nodeagent.log). Required;
	// created if missing.
	Dir string
	// NodeName is --hostname-override. Required.
	NodeName string
	// Kubeconfig is --kubeconfig, e.g. ControlPlane.KubeconfigFor(NodeName). Required.
	Kubeconfig string
	// RuntimeEndpoint is --container-runtime-endpoint, e.g. Containerd.Endpoint. Required.
	RuntimeEndpoint string
	// HealthzPort is --healthz-port: 0 picks a free port, -1 disables the HTTP server (--healthz-port=0).
	HealthzPort int
	// Args are appended to the command line (see docs/flags.md); a later flag overrides an earlier one.
	Args []string
	// Env is added to the agent's environment (which is otherwise the test process's), e.g.
	// NotifySocket.Env() (NOTIFY_SOCKET=...) to receive its sd_notify messages.
	Env []string
}

// Agent is a running nodeagent process.
type Agent struct {
	// NodeName is AgentOptions.NodeName.
	NodeName string
	// Dir is AgentOptions.Dir; RootDir is Dir/root.
	Dir, RootDir string
	// HealthzURL is the base URL of its HTTP server, "http://127.0.0.1:<port>" (serving /healthz,
	// /readyz, /livez, /metrics), or "" if disabled.
	HealthzURL string
	// LogPath is the file its stdout and stderr go to.
	LogPath string
	// PID is its process ID.
	PID int
	// Cmdline is the full command line it was started with.
	Cmdline []string

	proc   *process
	killed atomic.Bool // Kill was called
}

// StartAgent builds nodeagent if needed (BuildAgent) and runs it with --kubeconfig, --hostname-override,
// --container-runtime-endpoint, --root-dir Dir/root, --healthz-bind-address 127.0.0.1, --healthz-port,
// --port=0, --eviction-hard=HarnessEvictionHard and -v=2, then opts.Args (an --eviction-hard there is merged
// into the harness's, signal by signal, as the flag's repeats are). Unless the HTTP server is disabled, it returns once /healthz answers with any
// HTTP status; it errors (after killing it) if the agent exits first or ctx ends first. Call Stop to end it.
func StartAgent(ctx context.Context, opts AgentOptions) (*Agent, error) {
	if opts.Dir == "" || opts.NodeName == "" || opts.Kubeconfig == "" || opts.RuntimeEndpoint == "" {
		return nil, errors.New("start nodeagent: AgentOptions.Dir, NodeName, Kubeconfig and RuntimeEndpoint are required")
	}
	bin, err := BuildAgent()
	if err != nil {
		return nil, fmt.Errorf("start nodeagent: %w", err)
	}
	a := &Agent{NodeName: opts.NodeName, Dir: opts.Dir, RootDir: filepath.Join(opts.Dir, "root"),
		LogPath: filepath.Join(opts.Dir, "nodeagent.log")}
	if err := os.MkdirAll(a.RootDir, 0o755); err != nil {
		return nil, fmt.Errorf("start nodeagent: %w", err)
	}
	port := opts.HealthzPort
	switch {
	case port == 0:
		port = FreePort()
	case port < 0:
		port = 0
	}
	if port > 0 {
		a.HealthzURL = "http://127.0.0.1:" + strconv.Itoa(port)
	}
	args := append([]string{
		"--kubeconfig=" + opts.Kubeconfig,
		"--hostname-override=" + opts.NodeName,
		"--container-runtime-endpoint=" + opts.RuntimeEndpoint,
		"--root-dir=" + a.RootDir,
		"--healthz-bind-address=127.0.0.1",
		"--healthz-port=" + strconv.Itoa(port),
		// The kubelet's API off unless a test asks for it (--port=N in Args): agents and the
		// reference kubelet share this machine, and 10250 is one port.
		"--port=0",
		"--eviction-hard=" + HarnessEvictionHard,
		"-v=2",
	}, opts.Args...)
	a.Cmdline = append([]string{bin}, args...)
	if a.proc, err = startProcessEnv("nodeagent", a.LogPath, opts.Env, bin, args...); err != nil {
		return nil, fmt.Errorf("start nodeagent: %w", err)
	}
	a.PID = a.proc.pid()
	if a.HealthzURL == "" {
		return a, nil
	}
	err = WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		if err := a.proc.exitedErr(); err != nil {
			return false, err
		}
		_, _, err := a.Get(ctx, "/healthz")
		return err == nil, err
	})
	if err != nil {
		a.proc.kill()
		return nil, fmt.Errorf("start nodeagent: wait for its HTTP server: %w", err)
	}
	return a, nil
}

// Get GETs HealthzURL+path with a 5 s timeout and returns the HTTP status code and the body.
func (a *Agent) Get(ctx context.Context, path string) (code int, body string, err error) {
	if a.HealthzURL == "" {
		return 0, "", errors.New("nodeagent HTTP server disabled")
	}
	return HTTPGet(ctx, a.HealthzURL+path)
}

// HTTPGet GETs url with a 5 s timeout and returns the HTTP status code and the body.
func HTTPGet(ctx context.Context, url string) (code int, body string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// WaitHealthy polls /healthz every 100 ms until it answers 200 (WaitHTTP).
func (a *Agent) WaitHealthy(ctx context.Context) error {
	return a.WaitHTTP(ctx, "/healthz", http.StatusOK)
}

// WaitHTTP polls path (e.g. "/readyz", "/healthz/syncloop") every 100 ms until it answers with status
// code want. It errors if the agent exits, its HTTP server is disabled, or ctx ends first (the error then
// names the last status and body).
func (a *Agent) WaitHTTP(ctx context.Context, path string, want int) error {
	err := WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if err := a.proc.exitedErr(); err != nil {
			return false, err
		}
		code, body, err := a.Get(ctx, path)
		if err == nil && code != want {
			err = fmt.Errorf("%s answered %d: %s", path, code, strings.TrimSpace(body))
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("wait for nodeagent %s to answer %d: %w", path, want, err)
	}
	return nil
}

// Metrics scrapes the agent's /metrics (ScrapeMetrics).
func (a *Agent) Metrics(ctx context.Context) (*Metrics, error) {
	return ScrapeMetrics(ctx, nil, a.HealthzURL+"/metrics")
}

// Wait waits until the agent exits and returns its exit error (nil for exit status 0, an *exec.ExitError
// otherwise), or ctx's error if ctx ends first.
func (a *Agent) Wait(ctx context.Context) error {
	select {
	case <-a.proc.done:
		return a.proc.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Running reports whether the agent process has not exited yet.
func (a *Agent) Running() bool {
	done, _ := a.proc.exited()
	return !done
}

// Stop sends SIGTERM and waits for the agent to exit (SIGKILL after 30 s), then unmounts anything left
// mounted under Dir. It returns the exit error: nil for a clean exit 0, an *exec.ExitError otherwise
// (a SIGKILL fallback shows as "signal: killed"). Safe to call more than once.
func (a *Agent) Stop() error {
	err := a.proc.stop(30 * time.Second)
	if uerr := UnmountAll(a.Dir); uerr != nil {
		return errors.Join(err, uerr)
	}
	return err
}

// Kill SIGKILLs the agent's process group, waits for it, and unmounts anything left under Dir.
func (a *Agent) Kill() {
	a.killed.Store(true)
	a.proc.kill()
	_ = UnmountAll(a.Dir)
}

// Logs returns the agent's log so far (or a note that it cannot be read).
func (a *Agent) Logs() string {
	b, err := os.ReadFile(a.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", a.LogPath, err)
	}
	return string(b)
}
