package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// HollowNodeOptions configures StartHollowNode.
type HollowNodeOptions struct {
	// Dir holds the hollow node's log (Dir/kubemark.log) and its private /tmp (Dir/tmp, see HollowNode).
	// Required; created if missing. It need not be short: the unix sockets are under /tmp inside.
	Dir string
	// NodeName is --name, the Node it registers. Required.
	NodeName string
	// Kubeconfig is normally ControlPlane.KubeconfigFor(NodeName): the Node authorizer and NodeRestriction
	// want the system:node:<NodeName> identity. Required. It is flattened (referenced files inlined) into the
	// private /tmp, where kubemark reads it.
	Kubeconfig string
	// Port is --kubelet-port, the hollow kubelet's server (plain HTTP: /healthz, /metrics, /pods); 0 picks a
	// free one. Every hollow node on a machine needs a port of its own.
	Port int
	// Binary is the kubemark to run; default the one EnsureBinaries builds (_output/bin/kubemark).
	Binary string
	// Args are appended to the command line (a later flag overrides an earlier one), e.g. --max-pods,
	// --node-labels, --extended-resources, --v.
	Args []string
}

// HollowNode is kubemark's hollow node (k8s.io/kubernetes v1.37 cmd/kubemark, built by hack/install-deps.sh)
// as --morph=kubelet: the kubelet's own code (kubelet.RunKubelet) over a fake CRI runtime and image service
// (--use-host-image-service=false), a fake cAdvisor and a stub container manager. It registers its Node,
// renews its Lease and runs the pods bound to it through the kubelet's pod workers and status manager, but
// the fake runtime's containers start at once, never exit and never restart, and every pod gets the same
// podIP, 192.168.192.168 (cri-api's FakePodSandboxIPs). It costs 80 to 90 MiB of RSS per Node (83.7 MiB
// measured with four pods).
//
// It mirrors how kubemark runs in a cluster, one hollow-node pod per Node (test/kubemark/resources/
// hollow-node_template.yaml: --morph=kubelet --name=<node> --kubeconfig=<kubelet.kubeconfig>), with the
// container's private /tmp and ports made explicit: kubemark puts its root dir (/tmp/hollow-kubelet.*) and
// its fake runtime's socket (/tmp/kubelet_remote_*.sock) in /tmp, whatever TMPDIR says, so the process runs
// in a mount namespace of its own (unshare --mount) whose /tmp is Dir/tmp; its Node, log and ports are
// those of the host, and its kubelet server listens on 0.0.0.0:Port (kubemark fixes the address; the
// read-only port is off). The mount namespace needs root (CAP_SYS_ADMIN), as the tests run.
type HollowNode struct {
	// NodeName is HollowNodeOptions.NodeName; Binary the kubemark run.
	NodeName, Binary string
	// Dir is HollowNodeOptions.Dir; TmpDir (Dir/tmp, the process's /tmp, holding its root dir
	// hollow-kubelet.*) and LogPath (Dir/kubemark.log) are in it.
	Dir, TmpDir, LogPath string
	// Port is --kubelet-port: http://127.0.0.1:Port/healthz, /metrics, /pods, without authentication.
	Port int

	mu   sync.Mutex
	proc *process
}

// hollowNodeShell is run by unshare --mount in the new mount namespace: it binds the binary ($2) onto
// $1/kubemark (so that it stays reachable wherever it is, /tmp included), binds $1 onto /tmp and execs
// /tmp/kubemark with the rest of the arguments, in the same process (so that PID is kubemark's).
const hollowNodeShell = `set -e; tmp=$1; bin=$2; shift 2; mount --bind "$bin" "$tmp/kubemark"; mount --rbind "$tmp" /tmp; exec /tmp/kubemark "$@"`

// StartHollowNode runs kubemark --morph=kubelet for opts.NodeName (see HollowNode) with
// --use-host-image-service=false, --kubelet-port, --kubelet-read-only-port=0 and --v=2 (as the reference
// kubelet of StartKubelet), then opts.Args, and waits until its /healthz answers 200. It registers its Node and
// turns it Ready within about a second; wait for that with WaitReady. It returns the running hollow node,
// or an error (the process stopped) if it cannot start, exits, or ctx ends first. Call Stop to end it.
func StartHollowNode(ctx context.Context, opts HollowNodeOptions) (*HollowNode, error) {
	if opts.Dir == "" || opts.NodeName == "" || opts.Kubeconfig == "" {
		return nil, errors.New("start hollow node: HollowNodeOptions.Dir, NodeName and Kubeconfig are required")
	}
	if opts.Binary == "" {
		binDir, err := EnsureBinaries()
		if err != nil {
			return nil, fmt.Errorf("start hollow node: %w", err)
		}
		opts.Binary = filepath.Join(binDir, "kubemark")
	}
	bin, err := filepath.Abs(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("start hollow node: %w", err)
	}
	h := &HollowNode{NodeName: opts.NodeName, Binary: bin, Dir: opts.Dir, TmpDir: filepath.Join(opts.Dir, "tmp"),
		LogPath: filepath.Join(opts.Dir, "kubemark.log"), Port: opts.Port}
	if h.Port == 0 {
		h.Port = FreePort()
	}
	if err := os.MkdirAll(h.TmpDir, 0o1777); err != nil {
		return nil, fmt.Errorf("start hollow node: %w", err)
	}
	// The mount point of the binary, and the kubeconfig as the process sees it: /tmp/kubeconfig.
	if err := os.WriteFile(filepath.Join(h.TmpDir, "kubemark"), nil, 0o755); err != nil {
		return nil, fmt.Errorf("start hollow node: %w", err)
	}
	if err := flattenKubeconfig(opts.Kubeconfig, filepath.Join(h.TmpDir, "kubeconfig")); err != nil {
		return nil, fmt.Errorf("start hollow node: %w", err)
	}
	args := append([]string{"--mount", "--propagation=private", "--", "/bin/sh", "-c", hollowNodeShell, "sh", h.TmpDir, bin,
		"--morph=kubelet", "--name=" + opts.NodeName, "--kubeconfig=/tmp/kubeconfig",
		"--use-host-image-service=false", "--kubelet-port=" + strconv.Itoa(h.Port), "--kubelet-read-only-port=0", "--v=2",
	}, opts.Args...)
	p, err := startProcess("kubemark "+opts.NodeName, h.LogPath, "unshare", args...)
	if err != nil {
		return nil, fmt.Errorf("start hollow node: %w", err)
	}
	h.proc = p
	if err := waitHealthz(ctx, p, "http://127.0.0.1:"+strconv.Itoa(h.Port)+"/healthz"); err != nil {
		return nil, errors.Join(fmt.Errorf("wait for hollow node %s /healthz: %w", opts.NodeName, err), h.Stop())
	}
	return h, nil
}

// flattenKubeconfig writes the kubeconfig at src to dst with the files it references inlined.
func flattenKubeconfig(src, dst string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("read kubeconfig: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return fmt.Errorf("flatten kubeconfig %s: %w", src, err)
	}
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

func (h *HollowNode) current() *process {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.proc
}

// PID returns the process ID of the hollow node: kubemark's own (unshare and its shell exec it in the same
// process), for /proc/<pid> (ReadProcCPU, ReadProcStats).
func (h *HollowNode) PID() int { return h.current().pid() }

// Running reports whether the hollow node has not exited yet.
func (h *HollowNode) Running() bool {
	done, _ := h.current().exited()
	return !done
}

// Metrics scrapes the hollow kubelet's http://127.0.0.1:Port/metrics (ScrapeMetrics).
func (h *HollowNode) Metrics(ctx context.Context) (*Metrics, error) {
	return ScrapeMetrics(ctx, nil, "http://127.0.0.1:"+strconv.Itoa(h.Port)+"/metrics")
}

// Stop sends SIGTERM to the hollow node and waits for it (SIGKILL of its process group after 20 s). Its
// mount namespace, and with it the /tmp mounts, go with the process; TmpDir stays (under the caller's
// directory). Its exit status is not an error (kubemark does not handle SIGTERM); being killed is. Safe to
// call more than once.
func (h *HollowNode) Stop() error {
	if err := h.current().stop(20 * time.Second); errors.Is(err, errKilled) {
		return fmt.Errorf("stop hollow node %s: %w", h.NodeName, err)
	}
	return nil
}

// Logs returns the hollow node's log so far (or a note that it cannot be read).
func (h *HollowNode) Logs() string { return readLog(h.LogPath) }

// StartTestHollowNode starts a hollow node with StartHollowNode (bounded by ctx and one minute) and fails
// the test if it does not start. When the test ends it stops it (an error there is a test error) and, if
// the test failed, logs the last 40 lines of its log; as StartTestKubelet does for the reference kubelet.
func StartTestHollowNode(ctx context.Context, t testing.TB, opts HollowNodeOptions) *HollowNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h, err := StartHollowNode(ctx, opts)
	if err != nil {
		t.Fatalf("start hollow node %s: %v", opts.NodeName, err)
	}
	stopWhenTestEnds(t, "hollow node "+opts.NodeName, h.Stop, h.LogPath)
	return h
}
