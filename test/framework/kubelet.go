package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// KubeletOptions configures NewKubelet.
type KubeletOptions struct {
	// Dir holds the kubelet's config (Dir/kubelet-config.yaml), root dir (Dir/root), certificate dir
	// (Dir/pki) and log (Dir/kubelet.log). Required; created if missing.
	Dir string
	// NodeName is --hostname-override, the Node it registers. Required.
	NodeName string
	// Kubeconfig is --kubeconfig, normally ControlPlane.KubeconfigFor(NodeName) (the Node authorizer
	// and NodeRestriction want the system:node:<NodeName> identity). Required.
	Kubeconfig string
	// RuntimeEndpoint is the config's containerRuntimeEndpoint, e.g. Containerd.Endpoint. Required.
	RuntimeEndpoint string
	// Binary is the kubelet to run; default the one EnsureBinaries builds (_output/bin/kubelet).
	Binary string
	// Args are appended to the command line.
	Args []string
	// WebhookAuth configures the kubelet's API as the kubelet's v1beta1 defaults and kubeadm do,
	// instead of the harness's anonymous AlwaysAllow: anonymous off, TokenReview, x509 client
	// certificates against ClientCAFile (e.g. ControlPlane.KubeletClientCAFile), authorization
	// Webhook (SubjectAccessReview). Its :Port/metrics then needs credentials.
	WebhookAuth  bool
	ClientCAFile string
}

// Kubelet is the reference kubelet (k8s.io/kubernetes v1.37, built by hack/install-deps.sh) for one node
// name, configured as shared/reference/real-components.md says it runs on these machines (cgroup v1,
// cgroupfs, no QoS cgroups, no swap check, everything on 127.0.0.1). NewKubelet writes its config; Start
// runs it, and it can be stopped and started again (a cold start each time, same ports and root dir).
type Kubelet struct {
	// NodeName is KubeletOptions.NodeName; Binary the executable run.
	NodeName, Binary string
	// Dir is KubeletOptions.Dir; RootDir (--root-dir), ConfigPath (--config) and LogPath are in it.
	Dir, RootDir, ConfigPath, LogPath string
	// Port is the kubelet's HTTPS server (/metrics, /pods, ...; anonymous requests allowed) and
	// HealthzPort its plain HTTP /healthz, both on 127.0.0.1.
	Port, HealthzPort int

	args []string

	mu   sync.Mutex
	proc *process // of the last Start
}

// kubeletConfig is the KubeletConfiguration of shared/reference/real-components.md with two ports to fill
// in and the runtime endpoint. Two differences: anonymous authentication is on, so that tests and the
// benchmark can read :port/metrics without a client certificate (authorization is AlwaysAllow anyway and
// everything listens on 127.0.0.1); and evictionHard is HarnessEvictionHard.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
%saddress: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
containerRuntimeEndpoint: %s
localStorageCapacityIsolation: false
evictionHard:
%s`

// HarnessEvictionHard is the --eviction-hard of every agent StartAgent runs, and the evictionHard of every
// reference kubelet's config: the kubelet's default memory.available<100Mi, and the disk signals disabled
// ("0%", as kind's node config does). The harness's filesystems are the host's, and a shared build machine's
// disk sits near the kubelet's defaults (imagefs.available<15%, met first when the image store shares the
// root dir's filesystem; nodefs.available<10%): on CI's, a node reported DiskPressure, the node lifecycle
// controller tainted it NoSchedule, and tests of other things failed; and a kubelet under disk pressure
// deletes the unused images of a containerd other tests share. A test of disk pressure sets thresholds of
// its own (Args), on a containerd of its own.
const HarnessEvictionHard = "memory.available<100Mi,nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%,imagefs.inodesFree<0%"

// evictionHardYAML returns HarnessEvictionHard as the lines of a KubeletConfiguration's evictionHard map.
func evictionHardYAML() string {
	var b strings.Builder
	for _, kv := range strings.Split(HarnessEvictionHard, ",") {
		k, v, _ := strings.Cut(kv, "<")
		fmt.Fprintf(&b, "  %s: %q\n", k, v)
	}
	return b.String()
}

// anonymousAuth is the harness's default authentication and authorization; webhookAuth the
// kubelet's v1beta1 defaults with a client CA file (KubeletOptions.WebhookAuth).
const (
	anonymousAuth = `authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`
	webhookAuth = `authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
`
)

// NewKubelet writes the kubelet's config (picking its two ports) and creates its directories; it starts
// nothing. Call Start.
func NewKubelet(opts KubeletOptions) (*Kubelet, error) {
	if opts.Dir == "" || opts.NodeName == "" || opts.Kubeconfig == "" || opts.RuntimeEndpoint == "" {
		return nil, errors.New("new kubelet: KubeletOptions.Dir, NodeName, Kubeconfig and RuntimeEndpoint are required")
	}
	if opts.Binary == "" {
		binDir, err := EnsureBinaries()
		if err != nil {
			return nil, fmt.Errorf("new kubelet: %w", err)
		}
		opts.Binary = filepath.Join(binDir, "kubelet")
	}
	k := &Kubelet{
		NodeName: opts.NodeName, Binary: opts.Binary, Dir: opts.Dir,
		RootDir: filepath.Join(opts.Dir, "root"), ConfigPath: filepath.Join(opts.Dir, "kubelet-config.yaml"),
		LogPath: filepath.Join(opts.Dir, "kubelet.log"), Port: FreePort(), HealthzPort: FreePort(),
	}
	if err := os.MkdirAll(k.RootDir, 0o755); err != nil {
		return nil, fmt.Errorf("new kubelet: %w", err)
	}
	auth := anonymousAuth
	if opts.WebhookAuth {
		auth = fmt.Sprintf(webhookAuth, opts.ClientCAFile)
	}
	cfg := fmt.Sprintf(kubeletConfig, auth, k.Port, k.HealthzPort, opts.RuntimeEndpoint, evictionHardYAML())
	if err := os.WriteFile(k.ConfigPath, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("new kubelet: write config: %w", err)
	}
	k.args = append([]string{
		"--kubeconfig=" + opts.Kubeconfig, "--config=" + k.ConfigPath, "--root-dir=" + k.RootDir,
		"--hostname-override=" + opts.NodeName, "--cert-dir=" + filepath.Join(opts.Dir, "pki"), "--v=2",
	}, opts.Args...)
	return k, nil
}

// StartKubelet is NewKubelet and Start, then waits until its /healthz answers 200 (it registers and turns
// Ready about 1 s after start; wait for that with WaitReady). On error the kubelet is stopped.
func StartKubelet(ctx context.Context, opts KubeletOptions) (*Kubelet, error) {
	k, err := NewKubelet(opts)
	if err != nil {
		return nil, err
	}
	if err := k.Start(); err != nil {
		return nil, err
	}
	if err := k.WaitHealthy(ctx); err != nil {
		return nil, errors.Join(err, k.Stop())
	}
	return k, nil
}

// Start execs the kubelet and returns at once, without waiting for it to serve. It errors if the kubelet
// of the last Start is still running.
func (k *Kubelet) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != nil {
		if done, _ := k.proc.exited(); !done {
			return errors.New("start kubelet: already running")
		}
	}
	unlock, err := lockFile(kubeletStartLock)
	if err != nil {
		return fmt.Errorf("start kubelet: %w", err)
	}
	var offset int64
	if fi, err := os.Stat(k.LogPath); err == nil {
		offset = fi.Size()
	}
	p, err := startProcess("kubelet", k.LogPath, k.Binary, k.args...)
	if err != nil {
		unlock()
		return err
	}
	k.proc = p
	go func() {
		defer unlock()
		waitDevicePluginServer(p, k.LogPath, offset, kubeletStartLockTimeout)
	}()
	return nil
}

// kubeletStartLock is a machine-wide lock that one kubelet holds from its exec until its device plugin
// registration server listens. The kubelet's socket for it is fixed,
// /var/lib/kubelet/device-plugins/kubelet.sock whatever --root-dir says
// (pkg/kubelet/cm/devicemanager: pluginapi.KubeletSocket), and its server.Start removes every file in
// that directory, then listens: two kubelets starting at once (two tests, or two test binaries of
// `go test ./...`) race, and the loser exits with "Failed to start ContainerManager: listen unix
// .../kubelet.sock: bind: address already in use". A kubelet that starts after another has listened
// removes the first's socket file and listens itself; the first keeps serving on its open listener.
var kubeletStartLock = filepath.Join(os.TempDir(), "nodeagent-test-kubelet-start.lock")

// kubeletStartLockTimeout bounds how long one kubelet's start holds kubeletStartLock.
const kubeletStartLockTimeout = 2 * time.Minute

// kubeletStartedMarkers are log lines of the kubelet's initializeRuntimeDependentModules: the first
// comes right after the container manager (and so the device plugin server) started, the second when
// it failed (and the kubelet exits).
var kubeletStartedMarkers = []string{"Eviction manager: starting control loop", "Failed to start ContainerManager"}

// waitDevicePluginServer returns when the kubelet of p has logged, after offset in logPath, one of
// kubeletStartedMarkers, when p exits, or after timeout, whichever comes first. It polls the log every
// 50 ms (WaitFor).
func waitDevicePluginServer(p *process, logPath string, offset int64, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		if done, _ := p.exited(); done {
			return true, nil
		}
		return logHasAfter(logPath, offset, kubeletStartedMarkers), nil
	})
}

// logHasAfter reports whether the file at path holds one of markers after its first offset bytes.
func logHasAfter(path string, offset int64, markers []string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<40))
	if err != nil {
		return false
	}
	s := string(b)
	for _, m := range markers {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func (k *Kubelet) current() *process {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.proc
}

// PID returns the process ID of the last Start (0 before the first).
func (k *Kubelet) PID() int {
	if p := k.current(); p != nil {
		return p.pid()
	}
	return 0
}

// Exited returns a channel closed when the process of the last Start has exited (nil before the first).
func (k *Kubelet) Exited() <-chan struct{} {
	if p := k.current(); p != nil {
		return p.done
	}
	return nil
}

// Running reports whether the process of the last Start is still running.
func (k *Kubelet) Running() bool {
	p := k.current()
	if p == nil {
		return false
	}
	done, _ := p.exited()
	return !done
}

// WaitHealthy polls http://127.0.0.1:HealthzPort/healthz every 100 ms until it answers 200. It errors,
// quoting the end of the log, if the kubelet exits first, or when ctx ends.
func (k *Kubelet) WaitHealthy(ctx context.Context) error {
	p := k.current()
	if p == nil {
		return errors.New("wait for kubelet /healthz: not started")
	}
	if err := waitHealthz(ctx, p, "http://127.0.0.1:"+strconv.Itoa(k.HealthzPort)+"/healthz"); err != nil {
		return fmt.Errorf("wait for kubelet %s /healthz: %w", k.NodeName, err)
	}
	return nil
}

// waitHealthz polls url every 100 ms until it answers 200. It errors, quoting the end of p's
// log, if p exits first; when ctx ends, with the last answer or error.
func waitHealthz(ctx context.Context, p *process, url string) error {
	return WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("/healthz answered %d: %s", resp.StatusCode, body)
		}
		return true, nil
	})
}

// kubeletHTTP trusts the kubelet's self-signed serving certificate (127.0.0.1 only).
var kubeletHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, self-signed
}}

// Metrics scrapes the kubelet's https://127.0.0.1:Port/metrics (ScrapeMetrics).
func (k *Kubelet) Metrics(ctx context.Context) (*Metrics, error) {
	return ScrapeMetrics(ctx, kubeletHTTP, "https://127.0.0.1:"+strconv.Itoa(k.Port)+"/metrics")
}

// Stop sends SIGTERM to the kubelet of the last Start and waits for it (SIGKILL of its process group after
// 20 s), then unmounts what it left mounted under Dir (it bind-mounts its root dir), so that the next Start
// is cold. Its exit status is not an error (the kubelet exits non-zero on SIGTERM); being killed, or a
// failed unmount, is. Safe to call more than once, and before Start.
func (k *Kubelet) Stop() error {
	var err error
	if p := k.current(); p != nil {
		if serr := p.stop(20 * time.Second); errors.Is(serr, errKilled) {
			err = serr
		}
	}
	if uerr := UnmountAll(k.Dir); uerr != nil {
		err = errors.Join(err, fmt.Errorf("stop kubelet: %w", uerr))
	}
	return err
}

// Logs returns the kubelet's log so far (or a note that it cannot be read).
func (k *Kubelet) Logs() string { return readLog(k.LogPath) }

// readLog returns the file at path (or a note that it cannot be read).
func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return string(b)
}

// StartTestKubelet starts the kubelet with StartKubelet (bounded by ctx and one minute) and fails the test if
// it does not start. When the test ends it stops the kubelet (an error there is a test error) and, if the
// test failed, logs the last 40 lines of its log.
func StartTestKubelet(ctx context.Context, t testing.TB, opts KubeletOptions) *Kubelet {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	k, err := StartKubelet(ctx, opts)
	if err != nil {
		t.Fatalf("start kubelet %s: %v", opts.NodeName, err)
	}
	stopWhenTestEnds(t, "kubelet "+opts.NodeName, k.Stop, k.LogPath)
	return k
}

// stopWhenTestEnds registers a cleanup that calls stop (an error is a test error) and, if the test failed,
// logs the last 40 lines of the log at logPath under the name what.
func stopWhenTestEnds(t testing.TB, what string, stop func() error, logPath string) {
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("%s: stop: %v", what, err)
		}
		if t.Failed() {
			t.Logf("%s log (%s), last lines:\n%s", what, logPath, TailLines(readLog(logPath), 40))
		}
	})
}
