package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerdOptions configures StartContainerd.
type ContainerdOptions struct {
	// Dir holds containerd's config, root, state, CNI config and log (containerd.log). Required; created
	// if missing. Usually t.TempDir().
	Dir string
	// CNI writes a bridge conflist before start, so the CRI reports NetworkReady=true; see SetCNI.
	CNI bool
}

// Containerd is a private containerd (Debian's, 1.6) with its CRI plugin, on a unix socket of its own.
// Stop, Kill and Start stop and restart it keeping its state; Close tears it down for good.
type Containerd struct {
	// Dir is ContainerdOptions.Dir.
	Dir string
	// Socket is the path of containerd's gRPC socket (under Dir, or under a short temporary directory
	// when Dir is too long for a unix socket path).
	Socket string
	// Endpoint is "unix://" + Socket, for --container-runtime-endpoint.
	Endpoint string
	// ConfigPath is containerd's config.toml.
	ConfigPath string
	// LogPath is containerd's log (stdout and stderr, appended to across restarts).
	LogPath string

	sockDir  string // temporary socket directory to remove on Close, if any
	cniConf  string // the conflist path SetCNI writes
	cniName  string // CNI network name, unique per instance (names the CNI cache files)
	cniIface string // bridge name, unique per instance
	subnet   string
	conn     *grpc.ClientConn

	mu   sync.Mutex
	proc *process
}

// StartContainerd writes a config (as in shared/reference/real-components.md, restrict_oom_score_adj =
// true), starts containerd (installing it first if needed, via EnsureBinaries) and returns once the CRI
// Status call answers (about 0.1 s). On error the process is killed. ctx bounds the start-up only; call
// Close to end it.
func StartContainerd(ctx context.Context, opts ContainerdOptions) (*Containerd, error) {
	if opts.Dir == "" {
		return nil, errors.New("start containerd: ContainerdOptions.Dir is required")
	}
	if _, err := EnsureBinaries(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	c := &Containerd{
		Dir:        dir,
		ConfigPath: filepath.Join(dir, "containerd.toml"),
		LogPath:    filepath.Join(dir, "containerd.log"),
		cniConf:    filepath.Join(dir, "cni", "net.d", "10-bridge.conflist"),
		cniName:    "nodeagent-" + hex.EncodeToString(id),
		cniIface:   "cni-" + hex.EncodeToString(id),
		subnet:     fmt.Sprintf("10.88.%d.0/24", id[0]),
	}
	sockDir := dir
	if len(dir)+len("/containerd.sock.ttrpc") > 100 { // sun_path is 108 bytes
		if sockDir, err = os.MkdirTemp("", "ctrd"); err != nil {
			return nil, fmt.Errorf("start containerd: socket directory: %w", err)
		}
		c.sockDir = sockDir
	}
	c.Socket = filepath.Join(sockDir, "containerd.sock")
	c.Endpoint = "unix://" + c.Socket
	for _, d := range []string{dir, filepath.Dir(c.cniConf), filepath.Join(dir, "cni", "ipam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
	}
	if err := os.WriteFile(c.ConfigPath, []byte(c.config()), 0o644); err != nil {
		return nil, fmt.Errorf("start containerd: write config: %w", err)
	}
	if err := c.SetCNI(opts.CNI); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	c.conn, err = grpc.NewClient(c.Endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("start containerd: grpc client for %s: %w", c.Endpoint, err)
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Containerd) config() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %q
      max_conf_num = 1
`, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), c.Socket, c.Socket+".ttrpc",
		filepath.Join(c.Dir, "opt"), SandboxImage, filepath.Dir(c.cniConf))
}

// Start starts containerd (again, after Stop or Kill) with the same config and state, and waits until
// the CRI Status call answers or ctx is done. It errors if containerd is running already or exits early.
func (c *Containerd) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.proc != nil {
		if done, _ := c.proc.exited(); !done {
			c.mu.Unlock()
			return errors.New("start containerd: already running")
		}
	}
	p, err := startProcess("containerd", c.LogPath, "containerd", "--config", c.ConfigPath)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.proc = p
	c.mu.Unlock()
	err = WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.Status(sctx)
		return err == nil, err
	})
	if err != nil {
		p.kill()
		return fmt.Errorf("wait for containerd CRI status: %w", err)
	}
	return nil
}

// Status calls the CRI RuntimeService.Status; the result's Conditions hold RuntimeReady and NetworkReady.
func (c *Containerd) Status(ctx context.Context) (*runtimeapi.RuntimeStatus, error) {
	resp, err := c.RuntimeClient().Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI status: %w", err)
	}
	return resp.GetStatus(), nil
}

// RuntimeClient returns a CRI runtime client on Endpoint (its connection lives until Close).
func (c *Containerd) RuntimeClient() runtimeapi.RuntimeServiceClient {
	return runtimeapi.NewRuntimeServiceClient(c.conn)
}

// ImageClient returns a CRI image client on Endpoint (its connection lives until Close).
func (c *Containerd) ImageClient() runtimeapi.ImageServiceClient {
	return runtimeapi.NewImageServiceClient(c.conn)
}

// Condition returns the status of the CRI condition typ ("RuntimeReady" or "NetworkReady") in st, and
// its reason and message; ok is false when st has no such condition.
func Condition(st *runtimeapi.RuntimeStatus, typ string) (status bool, reason string, ok bool) {
	for _, cond := range st.GetConditions() {
		if cond.GetType() == typ {
			return cond.GetStatus(), cond.GetReason() + ": " + cond.GetMessage(), true
		}
	}
	return false, "", false
}

// SetPodCIDR writes the bridge conflist (as SetCNI(true)) with host-local IPAM over cidr, a Node's
// spec.podCIDR (kube-controller-manager's nodeipam), so that the pods the kubelet runs on this
// containerd get addresses of their Node's range; the bridge's gateway is the range's first address.
// Later SetCNI(true) calls keep it.
func (c *Containerd) SetPodCIDR(cidr string) error {
	if _, err := netip.ParsePrefix(cidr); err != nil {
		return fmt.Errorf("set pod CIDR: %w", err)
	}
	c.subnet = cidr
	return c.SetCNI(true)
}

// SetCNI writes (on) or removes (off) the bridge conflist in containerd's CNI conf_dir. containerd
// watches that directory: NetworkReady follows within about 2 s, without a restart.
func (c *Containerd) SetCNI(on bool) error {
	if !on {
		if err := os.Remove(c.cniConf); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove CNI config: %w", err)
		}
		return nil
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"isGateway":true,`+
		`"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}}]}`+"\n",
		c.cniName, c.cniIface, c.subnet, filepath.Join(c.Dir, "cni", "ipam"))
	tmp := c.cniConf + ".tmp" // not a .conflist name, so containerd ignores it until the rename
	if err := os.WriteFile(tmp, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	if err := os.Rename(tmp, c.cniConf); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	return nil
}

// ImportImage imports an OCI or Docker image tarball into the CRI's image store (namespace k8s.io) with
// Debian's ctr; flags go to `ctr images import` (e.g. --digests). The error carries ctr's output.
func (c *Containerd) ImportImage(ctx context.Context, tarPath string, flags ...string) error {
	args := append([]string{"-a", c.Socket, "-n", "k8s.io", "images", "import"}, flags...)
	out, err := exec.CommandContext(ctx, "ctr", append(args, tarPath)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", tarPath, err, out)
	}
	return nil
}

// PID returns containerd's process ID (of the last start).
func (c *Containerd) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc.pid()
}

// Stop stops containerd gracefully (SIGTERM; SIGKILL after 10 s; it takes about 2 s) and returns its
// exit error. Pods' shims keep running; Start brings containerd back on the same state.
func (c *Containerd) Stop() error {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(10 * time.Second); err != nil {
		return fmt.Errorf("stop containerd: %w", err)
	}
	return nil
}

// Kill SIGKILLs containerd (a crash, as far as clients can tell) and waits for it to be reaped.
func (c *Containerd) Kill() {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Close tears containerd down for good: it removes all pod sandboxes through the CRI (freeing their
// network namespaces and CNI results), stops containerd, kills shims still serving its socket, removes
// their sockets in /run/containerd/s and the CNI cache files of its network in /var/lib/cni/results,
// deletes its bridge, and unmounts anything left under Dir. Errors are ignored; safe to call twice.
func (c *Containerd) Close() {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p != nil {
		if done, _ := p.exited(); !done {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			c.removeSandboxes(ctx)
			cancel()
		}
	}
	_ = c.Stop()
	if c.conn != nil {
		c.conn.Close()
	}
	c.killShims()
	if addrs, _ := filepath.Glob(filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", "*", "*", "address")); len(addrs) > 0 {
		for _, a := range addrs {
			if b, err := os.ReadFile(a); err == nil {
				_ = os.Remove(strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://"))
			}
		}
	}
	if results, _ := filepath.Glob("/var/lib/cni/results/" + c.cniName + "-*"); len(results) > 0 {
		for _, r := range results {
			_ = os.Remove(r)
		}
	}
	if _, err := exec.LookPath("ip"); err == nil {
		_ = exec.Command("ip", "link", "delete", c.cniIface).Run() // fails harmlessly when no pod made it
	}
	_ = UnmountAll(c.Dir)
	if c.sockDir != "" {
		_ = os.RemoveAll(c.sockDir)
	}
}

// removeSandboxes stops and removes every pod sandbox, best effort.
func (c *Containerd) removeSandboxes(ctx context.Context) {
	rc := c.RuntimeClient()
	resp, err := rc.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	for _, sb := range resp.GetItems() {
		_, _ = rc.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()})
		_, _ = rc.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()})
	}
}

// killShims SIGKILLs containerd-shim processes started for this containerd (their -address is Socket).
func (c *Containerd) killShims() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.Contains(args[0], "containerd-shim") {
			continue
		}
		for i, a := range args {
			if (a == "-address" || a == "--address") && i+1 < len(args) && args[i+1] == c.Socket {
				var pid int
				if _, err := fmt.Sscanf(f, "/proc/%d/cmdline", &pid); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
}

// WaitNetwork polls the CRI status every 100 ms until NetworkReady is ready (true or false), e.g. after
// SetCNI (containerd follows its CNI config directory within about 2 s), or until ctx ends.
func (c *Containerd) WaitNetwork(ctx context.Context, ready bool) error {
	err := WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		st, err := c.Status(ctx)
		got, _, _ := Condition(st, "NetworkReady")
		return err == nil && got == ready, err
	})
	if err != nil {
		return fmt.Errorf("containerd NetworkReady=%v: %w", ready, err)
	}
	return nil
}
