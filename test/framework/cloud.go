package framework

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// CloudNodeControllerOptions configures StartCloudNodeController. Zero values take the defaults below,
// which are those of hack/tools/cloud-node-controller.
type CloudNodeControllerOptions struct {
	// Dir holds the log (Dir/cloud-node-controller.log). Required; created if missing.
	Dir string
	// Kubeconfig is --kubeconfig; default the control plane's admin kubeconfig.
	Kubeconfig string
	// InstanceType, Zone, Region and ExternalIP describe every instance of the fake cloud: defaults
	// DefaultCloudInstanceType, DefaultCloudZone, DefaultCloudRegion and DefaultCloudExternalIP.
	InstanceType, Zone, Region, ExternalIP string
	// NodeStatusUpdateFrequency is how often the node controller reconciles the addresses of initialised
	// Nodes (cloud-controller-manager's --node-status-update-frequency); default 5 s here (5 m there),
	// so that a test sees several reconciles.
	NodeStatusUpdateFrequency time.Duration
	// NodeMonitorPeriod is the lifecycle controller's --node-monitor-period; default 5 s.
	NodeMonitorPeriod time.Duration
	// Binary is the command to run; default the one EnsureBinaries builds (_output/bin/cloud-node-controller).
	Binary string
	// Args are appended to the command line.
	Args []string
}

// The fake cloud's defaults (see CloudNodeControllerOptions).
const (
	DefaultCloudInstanceType = "fake.medium"
	DefaultCloudZone         = "fake-zone-a"
	DefaultCloudRegion       = "fake-region-1"
	// DefaultCloudExternalIP is in TEST-NET-3 (RFC 5737): on no interface of this host.
	DefaultCloudExternalIP = "203.0.113.10"
)

// CloudNodeController is hack/tools/cloud-node-controller, an external cloud provider for tests:
// k8s.io/cloud-provider's cloud node controller and cloud node lifecycle controller over its fake cloud.
// It initialises every Node tainted node.cloudprovider.kubernetes.io/uninitialized with providerID
// "fake://<node name>" (CloudProviderID), the instance-type, zone and region labels, and the addresses
// InternalIP (the Node's alpha.kubernetes.io/provided-node-ip annotation, else the InternalIPs it reports),
// ExternalIP and the Node's Hostname; then it reconciles the addresses of initialised Nodes every
// NodeStatusUpdateFrequency. It can be stopped and started again.
type CloudNodeController struct {
	// InstanceType, Zone, Region and ExternalIP are what the fake cloud says of every instance.
	InstanceType, Zone, Region, ExternalIP string
	// LogPath is its log; HealthzPort its /healthz on 127.0.0.1 (200 once its Node informer has synced).
	LogPath     string
	HealthzPort int

	binary string
	args   []string

	mu   sync.Mutex
	proc *process // of the last Start
}

// CloudProviderID is the providerID the fake cloud gives the Node called nodeName.
func CloudProviderID(nodeName string) string { return "fake://" + nodeName }

// NewCloudNodeController fills in opts' defaults and prepares the command line against cp; it starts
// nothing. Call Start.
func NewCloudNodeController(cp *ControlPlane, opts CloudNodeControllerOptions) (*CloudNodeController, error) {
	if opts.Dir == "" {
		return nil, errors.New("new cloud node controller: CloudNodeControllerOptions.Dir is required")
	}
	if opts.Kubeconfig == "" {
		if cp == nil {
			return nil, errors.New("new cloud node controller: a control plane or CloudNodeControllerOptions.Kubeconfig is required")
		}
		opts.Kubeconfig = cp.AdminKubeconfig
	}
	if opts.Binary == "" {
		binDir, err := EnsureBinaries()
		if err != nil {
			return nil, fmt.Errorf("new cloud node controller: %w", err)
		}
		opts.Binary = filepath.Join(binDir, "cloud-node-controller")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("new cloud node controller: %w", err)
	}
	c := &CloudNodeController{
		InstanceType: cmp.Or(opts.InstanceType, DefaultCloudInstanceType), Zone: cmp.Or(opts.Zone, DefaultCloudZone),
		Region: cmp.Or(opts.Region, DefaultCloudRegion), ExternalIP: cmp.Or(opts.ExternalIP, DefaultCloudExternalIP),
		LogPath: filepath.Join(opts.Dir, "cloud-node-controller.log"), HealthzPort: FreePort(), binary: opts.Binary,
	}
	status, monitor := opts.NodeStatusUpdateFrequency, opts.NodeMonitorPeriod
	if status <= 0 {
		status = 5 * time.Second
	}
	if monitor <= 0 {
		monitor = 5 * time.Second
	}
	c.args = append([]string{
		"--kubeconfig=" + opts.Kubeconfig,
		"--instance-type=" + c.InstanceType, "--zone=" + c.Zone, "--region=" + c.Region, "--external-ip=" + c.ExternalIP,
		"--node-status-update-frequency=" + status.String(), "--node-monitor-period=" + monitor.String(),
		"--healthz-port=" + strconv.Itoa(c.HealthzPort), "--v=2",
	}, opts.Args...)
	return c, nil
}

// StartCloudNodeController is NewCloudNodeController and Start. On error nothing is left running.
func StartCloudNodeController(ctx context.Context, cp *ControlPlane, opts CloudNodeControllerOptions) (*CloudNodeController, error) {
	c, err := NewCloudNodeController(cp, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Start runs the command (again, after Stop) and waits until its /healthz answers 200, that is until
// its Node informer has synced and the controllers are at work. It errors, after killing it, if the
// command exits first or ctx ends first, and if the process of the last Start is still running.
func (c *CloudNodeController) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.proc != nil {
		if done, _ := c.proc.exited(); !done {
			c.mu.Unlock()
			return errors.New("start cloud-node-controller: already running")
		}
	}
	p, err := startProcess("cloud-node-controller", c.LogPath, c.binary, c.args...)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.proc = p
	c.mu.Unlock()
	url := "http://127.0.0.1:" + strconv.Itoa(c.HealthzPort) + "/healthz"
	err = WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		code, body, err := HTTPGet(ctx, url)
		if err == nil && code != 200 {
			err = fmt.Errorf("/healthz answered %d: %s", code, body)
		}
		return err == nil, err
	})
	if err != nil {
		p.kill()
		return fmt.Errorf("start cloud-node-controller: wait for /healthz: %w", err)
	}
	return nil
}

// Running reports whether the process of the last Start is still running.
func (c *CloudNodeController) Running() bool {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return false
	}
	done, _ := p.exited()
	return !done
}

// Stop sends SIGTERM and waits for the command to exit (SIGKILL after 10 s). It returns its exit error:
// nil for a clean exit 0. Safe to call more than once, and before Start.
func (c *CloudNodeController) Stop() error {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	if done, err := p.exited(); done {
		return err
	}
	if err := p.stop(10 * time.Second); err != nil {
		return fmt.Errorf("stop cloud-node-controller: %w", err)
	}
	return nil
}

// Logs returns its log so far (or a note that it cannot be read).
func (c *CloudNodeController) Logs() string {
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.LogPath, err)
	}
	return string(b)
}

// NewTestCloudNodeController is NewCloudNodeController, failing the test on error, with its end registered:
// when the test ends it is stopped (an exit other than status 0 is a test error) and, if the test failed, the
// last 40 lines of its log are logged. It is not started: call Start (a test can register Nodes while it is
// down).
func NewTestCloudNodeController(t testing.TB, cp *ControlPlane, opts CloudNodeControllerOptions) *CloudNodeController {
	t.Helper()
	c, err := NewCloudNodeController(cp, opts)
	if err != nil {
		t.Fatalf("cloud-node-controller: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("cloud-node-controller: %v", err)
		}
		if t.Failed() {
			t.Logf("cloud-node-controller log (%s), last lines:\n%s", c.LogPath, TailLines(c.Logs(), 40))
		}
	})
	return c
}

// StartTestCloudNodeController is NewTestCloudNodeController and Start (bounded by ctx and one minute),
// failing the test if it does not start.
func StartTestCloudNodeController(ctx context.Context, t testing.TB, cp *ControlPlane, opts CloudNodeControllerOptions) *CloudNodeController {
	t.Helper()
	c := NewTestCloudNodeController(t, cp, opts)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}
