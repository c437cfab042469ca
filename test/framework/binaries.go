package framework

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

const modulePath = "github.com/nodeagent/nodeagent"

// RepoRoot returns the absolute path of the nodeagent repository: the first directory, walking up from the
// working directory, whose go.mod declares module github.com/nodeagent/nodeagent. Errors if there is none.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find repo root: no go.mod with module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

var (
	binariesMu   sync.Mutex
	binariesSet  = "test"
	binariesDone bool
	binariesDir  string
	binariesErr  error
)

// installDeps runs hack/install-deps.sh with args (--for SET, or --skew VERSION) and returns the directory
// it built into: <repo>/_output/bin, or <repo>/_output/bin/<version> for --skew.
func installDeps(args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "_output", "bin")
	if len(args) == 2 && args[0] == "--skew" {
		dir = filepath.Join(dir, args[1])
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "hack", "install-deps.sh")}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("hack/install-deps.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return dir, nil
}

var (
	skewMu       sync.Mutex
	skewBinaries = map[string]func() (string, error){}
)

// EnsureSkewBinaries runs hack/install-deps.sh --skew version once per process and version (later calls
// return the first result) and returns <repo>/_output/bin/<version>, which holds etcd, kube-apiserver and
// kube-controller-manager of that older minor (e.g. "v1.34", from hack/tools-v1.34) for the version-skew
// smoke suite. A cold build takes about 20 minutes on 2 cores.
func EnsureSkewBinaries(version string) (binDir string, err error) {
	skewMu.Lock()
	f, ok := skewBinaries[version]
	if !ok {
		f = sync.OnceValues(func() (string, error) { return installDeps("--skew", version) })
		skewBinaries[version] = f
	}
	skewMu.Unlock()
	return f()
}

// EnsureBinaries runs hack/install-deps.sh once per process (later calls return the first result): it
// installs containerd and the CNI plugins if missing and builds etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet, kubectl, cloud-node-controller and kubemark into <repo>/_output/bin if
// missing or out of date (or only the set UseBinarySet chose). It returns that directory. The script takes a file lock,
// so parallel test binaries build at most once; a cold build takes about 15 minutes on 2 cores.
func EnsureBinaries() (binDir string, err error) {
	binariesMu.Lock()
	defer binariesMu.Unlock()
	if !binariesDone {
		binariesDir, binariesErr = installDeps("--for", binariesSet)
		binariesDone = true
	}
	return binariesDir, binariesErr
}

// UseBinarySet makes EnsureBinaries install only hack/install-deps.sh's set (its --for): "up" (etcd,
// kube-apiserver, kube-controller-manager, kubectl, and containerd, the CNI plugins and iproute2),
// "simulate" (the same with kube-scheduler, without the Debian packages) or "test" (everything: the
// default). For a program that runs only those components (hack/localup); call it before anything that
// calls EnsureBinaries. It errors on another set name, or once EnsureBinaries has run with another set.
func UseBinarySet(set string) error {
	switch set {
	case "test", "up", "simulate":
	default:
		return fmt.Errorf("binary set %q: must be test, up or simulate", set)
	}
	binariesMu.Lock()
	defer binariesMu.Unlock()
	if binariesDone && set != binariesSet {
		return fmt.Errorf("binary set %q: EnsureBinaries has already run with %q", set, binariesSet)
	}
	binariesSet = set
	return nil
}

var buildAgent = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("NODEAGENT_BINARY"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("NODEAGENT_BINARY: %w", err)
		}
		return bin, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(root, "_output", "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("build nodeagent: %w", err)
	}
	unlock, err := lockFile(filepath.Join(binDir, ".nodeagent.lock"))
	if err != nil {
		return "", fmt.Errorf("build nodeagent: %w", err)
	}
	defer unlock()
	out := filepath.Join(binDir, "nodeagent")
	cmd := AgentBuildCommand(root, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/nodeagent: %w\n%s", err, b)
	}
	return out, nil
})

// BuildAgent builds ./cmd/nodeagent into <repo>/_output/bin/nodeagent once per process (under a file lock
// shared with other test binaries) with AgentBuildTags and returns the binary's path. The error carries go build's output.
// If the environment variable NODEAGENT_BINARY is set, that binary is used instead and nothing is built.
func BuildAgent() (path string, err error) { return buildAgent() }

// lockFile takes an exclusive flock on path, blocking; the returned func releases it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// AgentBuildTags are the build tags nodeagent is built with everywhere (Makefile, Dockerfile, tests,
// benchmarks). grpcnotrace drops grpc's golang.org/x/net/trace, whose html/template use makes the
// linker keep every method of every linked type: without it the binary is ~2× larger and its mapped
// pages add ~12 MiB of RSS (BENCHMARKS.md).
const AgentBuildTags = "grpcnotrace"

// AgentBuildCommand returns the go build command that builds ./cmd/nodeagent in the repository at root
// into out, with AgentBuildTags and the repository's commit (git rev-parse --short HEAD) linked in as
// `nodeagent version`'s commit, as `make build` does: GOFLAGS=-buildvcs=false, set on some machines,
// would otherwise leave it empty. Without git, the commit is left out.
func AgentBuildCommand(root, out string) *exec.Cmd {
	args := []string{"build", "-tags", AgentBuildTags}
	if rev, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		args = append(args, "-ldflags", "-X github.com/nodeagent/nodeagent/pkg/version.gitCommit="+strings.TrimSpace(string(rev)))
	}
	cmd := exec.Command("go", append(args, "-o", out, "./cmd/nodeagent")...)
	cmd.Dir = root
	return cmd
}
