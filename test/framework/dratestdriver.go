package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// DRATestDriverName is the driver name of the e2e suite's DRA test driver by default (its --drivername).
const DRATestDriverName = "test-driver.cdi.k8s.io"

// DRATestDriverServiceAccount is the service account the driver runs as, named as in the e2e suite's
// plugin-permissions.yaml.
const DRATestDriverServiceAccount = "dra-kubelet-plugin-service-account"

// DRATestDriverOptions configures StartDRATestDriver.
type DRATestDriverOptions struct {
	// Dir holds the driver's CDI directory (Dir/cdi, its --cdi-dir) and log (Dir/dra-test-driver.log).
	// Required; created if missing.
	Dir string
	// Kubelet is the reference kubelet the driver is the plugin of: its --node-name is Kubelet.NodeName,
	// its --plugin-registration-path <Kubelet.RootDir>/plugins_registry and its --datadir
	// <Kubelet.RootDir>/plugins, where the kubelet with that --root-dir looks for them (the kubelet's
	// defaults /var/lib/kubelet/plugins_registry and /var/lib/kubelet/plugins). Required.
	Kubelet *Kubelet
	// Kubeconfig is the driver's identity, normally ControlPlane.DRATestDriverKubeconfig's. Required.
	Kubeconfig string
	// DriverName is --drivername; default DRATestDriverName.
	DriverName string
	// NumDevices is --num-devices, the devices of its Node's one slice (device-00, device-01, ...);
	// default 4 (the driver's default).
	NumDevices int
	// Binary is the driver to run; default the one EnsureDRATestDriver builds (_output/bin/dra-test-driver).
	Binary string
}

// DRATestDriver is a running e2e DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver's
// `kubelet-plugin` command) beside a reference kubelet, as the e2e suite runs it in a DaemonSet pod: it
// registers with the kubelet through the plugin registration directory, publishes one ResourceSlice
// for its Node (pool = node name, NumDevices devices), and prepares a claim by writing a CDI spec file
// into CDIDir that gives the container the env claim_<claim>_<request>=true (plus the claim's opaque
// parameters of this driver as user_<key>=<value>; a config whose parameters are not a JSON object of
// strings fails the preparation: "parameters in config #N: decoding user parameters: ...").
type DRATestDriver struct {
	// NodeName, DriverName and NumDevices are the driver's flags; CDIDir its --cdi-dir; LogPath its log.
	NodeName, DriverName string
	NumDevices           int
	CDIDir, LogPath      string

	proc *process
}

var draTestDriverOnce = sync.OnceValues(func() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "build-dra-test-driver.sh"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("hack/build-dra-test-driver.sh: %w\n%s", err, out)
	}
	return filepath.Join(root, "_output", "bin", "dra-test-driver"), nil
})

// EnsureDRATestDriver runs hack/build-dra-test-driver.sh once per process (a no-op when
// _output/bin/dra-test-driver is up to date with hack/dra-test-driver; a cold build takes about 2-3 min
// on 2 cores) and returns the binary's path.
func EnsureDRATestDriver() (string, error) { return draTestDriverOnce() }

// DRATestDriverKubeconfig gives the DRA test driver of node the identity the e2e suite gives it: it
// applies the suite's own plugin-permissions.yaml (test/e2e/dra/test-driver/deploy/example, read from the
// k8s.io/kubernetes module hack/dra-test-driver pins) with the names replaced as the suite's deploy.go does
// (namespace: namespace, the driver name: driverName): the ServiceAccount DRATestDriverServiceAccount, a
// ClusterRole to get claims and update their status, get Nodes and write ResourceSlices (no admin), and
// the ValidatingAdmissionPolicy that lets that account write only the slices of the node its token is
// bound to. The token is bound to a pod on node (ControlPlane.PodServiceAccountKubeconfig: a pod running
// PauseImage in namespace, standing for the driver's DaemonSet pod, so that the kubelet runs it if the
// image is there), so it carries the node name the policy checks. It returns the kubeconfig's path.
func (cp *ControlPlane) DRATestDriverKubeconfig(ctx context.Context, namespace, driverName, node string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(root, "hack", "dra-test-driver")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate module k8s.io/kubernetes of hack/dra-test-driver: %w", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "test", "e2e", "dra", "test-driver", "deploy", "example", "plugin-permissions.yaml")
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("the DRA test driver's permissions: %w", err)
	}
	content := strings.ReplaceAll(string(b), "dra-kubelet-plugin-namespace", namespace)
	content = strings.ReplaceAll(content, "dra-kubelet-plugin-driver-name", driverName)
	if err := cp.CreateNamespace(ctx, namespace); err != nil {
		return "", err
	}
	manifest := filepath.Join(cp.opts.KubeconfigDir, "dra-test-driver-permissions-"+namespace+".yaml")
	if err := os.WriteFile(manifest, []byte(content), 0o600); err != nil {
		return "", fmt.Errorf("the DRA test driver's permissions: %w", err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		return "", fmt.Errorf("apply %s: %w\n%s", src, err, out)
	}
	return cp.PodServiceAccountKubeconfig(ctx, namespace, DRATestDriverServiceAccount, node)
}

// StartDRATestDriver starts the driver's `kubelet-plugin` command for opts.Kubelet's Node, and waits
// until its ResourceSlice (driver DriverName, pool and nodeName the Node) is in the API, read with
// client-go through cp's admin client, and the kubelet logged "Registered DRA plugin" for it (the
// kubelet's --v must be 3 or more for dra_plugin_manager.go, e.g. --vmodule=dra_plugin_manager=3), or ctx
// is done; then it errors, with the driver's last log lines, and stops it.
func StartDRATestDriver(ctx context.Context, cp *ControlPlane, opts DRATestDriverOptions) (*DRATestDriver, error) {
	if opts.Dir == "" || opts.Kubelet == nil || opts.Kubeconfig == "" {
		return nil, errors.New("start DRA test driver: DRATestDriverOptions.Dir, Kubelet and Kubeconfig are required")
	}
	if opts.DriverName == "" {
		opts.DriverName = DRATestDriverName
	}
	if opts.NumDevices == 0 {
		opts.NumDevices = 4
	}
	if opts.Binary == "" {
		bin, err := EnsureDRATestDriver()
		if err != nil {
			return nil, fmt.Errorf("start DRA test driver: %w", err)
		}
		opts.Binary = bin
	}
	d := &DRATestDriver{NodeName: opts.Kubelet.NodeName, DriverName: opts.DriverName, NumDevices: opts.NumDevices,
		CDIDir: filepath.Join(opts.Dir, "cdi"), LogPath: filepath.Join(opts.Dir, "dra-test-driver.log")}
	// The driver creates the parent of its data directory (<datadir>/<driver>), not the directory itself,
	// which its DaemonSet mounts: make it, as the mount would.
	for _, d := range []string{d.CDIDir, filepath.Join(opts.Kubelet.RootDir, "plugins", opts.DriverName)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("start DRA test driver: %w", err)
		}
	}
	var offset int64
	if fi, err := os.Stat(opts.Kubelet.LogPath); err == nil {
		offset = fi.Size()
	}
	p, err := startProcess("dra-test-driver", d.LogPath, opts.Binary,
		"--kubeconfig="+opts.Kubeconfig, "--drivername="+opts.DriverName, "-v=5",
		"kubelet-plugin", "--node-name="+d.NodeName, "--num-devices="+strconv.Itoa(opts.NumDevices),
		"--cdi-dir="+d.CDIDir,
		"--plugin-registration-path="+filepath.Join(opts.Kubelet.RootDir, "plugins_registry"),
		"--datadir="+filepath.Join(opts.Kubelet.RootDir, "plugins"))
	if err != nil {
		return nil, err
	}
	d.proc = p
	selector := fields.Set{resourcev1.ResourceSliceSelectorNodeName: d.NodeName, resourcev1.ResourceSliceSelectorDriver: d.DriverName}.AsSelector().String()
	// The kubelet's line: "Registered DRA plugin" logger="DRA registration handler" driverName="<driver>" ...
	marker := regexp.MustCompile(`"Registered DRA plugin" .*driverName="` + regexp.QuoteMeta(d.DriverName) + `"`)
	err = WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if done, err := p.exited(); done {
			return false, fmt.Errorf("dra-test-driver exited: %v: %w", err, ErrStop)
		}
		l, err := cp.AdminClient.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, nil
		}
		return len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == opts.NumDevices &&
			logMatchesAfter(opts.Kubelet.LogPath, offset, marker), nil
	})
	if err != nil {
		_ = d.Stop()
		return nil, fmt.Errorf("start DRA test driver for node %s: no ResourceSlice with %d devices, or no line matching %s in the kubelet's log: %w\n%s",
			d.NodeName, opts.NumDevices, marker, err, TailLines(readLog(d.LogPath), 30))
	}
	return d, nil
}

// Stop sends SIGTERM (the driver removes its sockets) and waits up to 10 s for it to exit, then kills it.
func (d *DRATestDriver) Stop() error {
	if d.proc == nil {
		return nil
	}
	return d.proc.stop(10 * time.Second)
}

// Logs returns the driver's log so far.
func (d *DRATestDriver) Logs() string { return readLog(d.LogPath) }

// StartTestDRATestDriver is StartDRATestDriver bounded by ctx and two minutes (a cold build of the driver
// included), failing the test if it does not start; when the test ends it stops the driver (an error there
// is a test error) and, if the test failed, logs its last 40 lines.
func StartTestDRATestDriver(ctx context.Context, t testing.TB, cp *ControlPlane, opts DRATestDriverOptions) *DRATestDriver {
	t.Helper()
	if _, err := EnsureDRATestDriver(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	d, err := StartDRATestDriver(ctx, cp, opts)
	if err != nil {
		t.Fatal(err)
	}
	stopWhenTestEnds(t, "dra-test-driver "+d.NodeName, d.Stop, d.LogPath)
	return d
}

// logMatchesAfter reports whether the file at path, after offset, has a match of re.
func logMatchesAfter(path string, offset int64, re *regexp.Regexp) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<40))
	return err == nil && re.Match(b)
}
