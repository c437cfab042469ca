package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeagent/nodeagent/test/framework"
)

// component is one node agent under test: the reference kubelet or nodeagent, each with a node name
// of its own. start execs the process; stop ends it and cleans its mounts, so the next start is cold.
type component interface {
	// name is "kubelet" or "nodeagent".
	name() string
	// nodeName is the Node it registers (and its system:node:<nodeName> identity).
	nodeName() string
	// binary is the path of the executable.
	binary() string
	// start execs the process. It may return before the process is up (kubelet) or once its HTTP
	// server answers (nodeagent, framework.StartAgent); the caller's clock starts before the call.
	start(ctx context.Context) error
	// pid is the process ID of the last start.
	pid() int
	// exited is closed when the process of the last start has exited.
	exited() <-chan struct{}
	// stop sends SIGTERM, waits (SIGKILL after a grace period) and unmounts what it left mounted.
	stop() error
	// goroutines scrapes go_goroutines from the process's /metrics.
	goroutines(ctx context.Context) (int, error)
}

// nodeAgent runs the nodeagent binary through framework.StartAgent.
type nodeAgent struct {
	dir, node, kubeconfig, endpoint, bin string
	args                                 []string
	agent                                *framework.Agent
	done                                 chan struct{}
}

func (n *nodeAgent) name() string     { return "nodeagent" }
func (n *nodeAgent) nodeName() string { return n.node }
func (n *nodeAgent) binary() string   { return n.bin }
func (n *nodeAgent) pid() int         { return n.agent.PID }

func (n *nodeAgent) exited() <-chan struct{} { return n.done }

func (n *nodeAgent) start(ctx context.Context) error {
	a, err := framework.StartAgent(ctx, framework.AgentOptions{
		Dir: n.dir, NodeName: n.node, Kubeconfig: n.kubeconfig, RuntimeEndpoint: n.endpoint, Args: n.args,
	})
	if err != nil {
		return err
	}
	n.agent = a
	done := make(chan struct{})
	n.done = done
	go func() { _ = a.Wait(context.Background()); close(done) }()
	return nil
}

func (n *nodeAgent) stop() error {
	if n.agent == nil {
		return nil
	}
	err := n.agent.Stop()
	<-n.done
	if err != nil {
		return fmt.Errorf("stop nodeagent: %w", err)
	}
	return nil
}

func (n *nodeAgent) goroutines(ctx context.Context) (int, error) {
	return scrapeGoroutines(ctx, http.DefaultClient, n.agent.HealthzURL+"/metrics")
}

// kubelet runs the reference kubelet with the KubeletConfiguration of shared/reference/real-components.md.
type kubelet struct {
	dir, node, kubeconfig, endpoint, bin string
	port, healthzPort                    int
	cmd                                  *exec.Cmd
	done                                 chan struct{}
}

func (k *kubelet) name() string            { return "kubelet" }
func (k *kubelet) nodeName() string        { return k.node }
func (k *kubelet) binary() string          { return k.bin }
func (k *kubelet) pid() int                { return k.cmd.Process.Pid }
func (k *kubelet) exited() <-chan struct{} { return k.done }
func (k *kubelet) rootDir() string         { return filepath.Join(k.dir, "root") }
func (k *kubelet) configPath() string      { return filepath.Join(k.dir, "kubelet-config.yaml") }
func (k *kubelet) logPath() string         { return filepath.Join(k.dir, "kubelet.log") }

// writeConfig writes the KubeletConfiguration once, picking its two ports. Differences from the
// reference configuration: anonymous authentication is on (authorization is AlwaysAllow anyway, and
// everything listens on 127.0.0.1) so that the benchmark can read go_goroutines from :port/metrics.
func (k *kubelet) writeConfig() error {
	if err := os.MkdirAll(k.rootDir(), 0o755); err != nil {
		return fmt.Errorf("kubelet dir: %w", err)
	}
	k.port, k.healthzPort = framework.FreePort(), framework.FreePort()
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
containerRuntimeEndpoint: %s
localStorageCapacityIsolation: false
`, k.port, k.healthzPort, k.endpoint)
	if err := os.WriteFile(k.configPath(), []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("write kubelet config: %w", err)
	}
	return nil
}

func (k *kubelet) start(context.Context) error {
	logf, err := os.OpenFile(k.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open kubelet log: %w", err)
	}
	args := []string{
		"--kubeconfig=" + k.kubeconfig, "--config=" + k.configPath(), "--root-dir=" + k.rootDir(),
		"--hostname-override=" + k.node, "--cert-dir=" + filepath.Join(k.dir, "pki"), "--v=2",
	}
	fmt.Fprintf(logf, "=== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), k.bin, strings.Join(args, " "))
	cmd := exec.Command(k.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start kubelet: %w", err)
	}
	k.cmd = cmd
	done := make(chan struct{})
	k.done = done
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	return nil
}

func (k *kubelet) stop() error {
	if k.cmd == nil {
		return nil
	}
	select {
	case <-k.done: // already stopped: do not signal a PID that may have been reused
	default:
		_ = syscall.Kill(k.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-k.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
			<-k.done
		}
	}
	// The kubelet bind-mounts its root dir (and may leave more below it): unmount before the next start.
	if err := framework.UnmountAll(k.dir); err != nil {
		return fmt.Errorf("stop kubelet: %w", err)
	}
	return nil
}

// kubeletHTTP trusts the kubelet's self-signed serving certificate (127.0.0.1 only).
var kubeletHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, self-signed
}}

func (k *kubelet) goroutines(ctx context.Context) (int, error) {
	return scrapeGoroutines(ctx, kubeletHTTP, "https://127.0.0.1:"+strconv.Itoa(k.port)+"/metrics")
}

// scrapeGoroutines scrapes a Prometheus text endpoint and returns the value of go_goroutines.
func scrapeGoroutines(ctx context.Context, c *http.Client, url string) (int, error) {
	m, err := framework.ScrapeMetrics(ctx, c, url)
	if err != nil {
		return 0, err
	}
	v, ok := m.Get("go_goroutines", nil)
	if !ok {
		return 0, errors.New("scrape " + url + ": no go_goroutines")
	}
	return int(v), nil
}
