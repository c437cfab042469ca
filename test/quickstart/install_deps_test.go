package quickstart

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeagent/nodeagent/test/framework"
)

// fakeGo stands for `go` in TestInstallDepsSets: `go list -m` prints a version, `go build -o OUT PKG...`
// writes an empty executable for each package (OUT a directory, ending in /) or OUT, and appends one line
// "build NAME..." with what it built to $FAKE_GO_LOG.
const fakeGo = `#!/usr/bin/env bash
set -euo pipefail
case $1 in
  list) echo v1.37.2 ;;
  build)
    shift
    out=""; pkgs=()
    while (($#)); do
      case $1 in
        -o) out=$2; shift 2 ;;
        -ldflags | -tags) shift 2 ;;
        -*) shift ;;
        *) pkgs+=("$1"); shift ;;
      esac
    done
    built=()
    if [[ $out == */ ]]; then
      for p in "${pkgs[@]}"; do printf '#!/bin/sh\n' >"$out${p##*/}"; chmod +x "$out${p##*/}"; built+=("${p##*/}"); done
    else
      printf '#!/bin/sh\n' >"$out"; chmod +x "$out"; built+=("$(basename "${pkgs[0]}")")
    fi
    echo "build ${built[*]}" >>"$FAKE_GO_LOG"
    ;;
  *) echo "fake go: $*" >&2; exit 1 ;;
esac
`

// TestInstallDepsSets: hack/install-deps.sh builds for `make up` (--for up) only etcd, kube-apiserver,
// kube-controller-manager, kubectl and metrics-server, for the simulation (--for simulate) kube-scheduler
// too, and by default (make test, make tools) everything with helm, and runs build-kwok.sh,
// build-karpenter.sh and build-dra-test-driver.sh (stand-ins here); each binary only when it is
// missing or was built from another hack/tools (its own stamp), and the stamp of an older install-deps.sh
// that built all eight at once (.tools.stamp) still counts. It runs a copy of the scripts over a stand-in
// hack/tools, hack/helm and hack/metrics-server with a fake go, so it builds nothing real. The Debian
// packages are checked as usual (make test's `tools` installed them).
func TestInstallDepsSets(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	bin := filepath.Join(repo, "_output", "bin")
	for _, f := range []string{"hack/install-deps.sh", "hack/build-helm.sh", "hack/build-metrics-server.sh", "hack/lib/stamp.sh"} {
		writeFile(t, filepath.Join(repo, f), readFile(t, filepath.Join(root, f)), 0o755)
	}
	// KWOK's, Karpenter's and the DRA test driver's builds are tested by the integration tests that
	// run them: here stand-ins that say they ran, to see which sets run them.
	for _, script := range []string{"build-kwok.sh", "build-karpenter.sh", "build-dra-test-driver.sh"} {
		writeFile(t, filepath.Join(repo, "hack", script), "#!/usr/bin/env bash\necho \"ran "+script+"\" >>\"$FAKE_GO_LOG\"\n", 0o755)
	}
	for _, mod := range []string{"hack/tools", "hack/helm", "hack/metrics-server"} {
		writeFile(t, filepath.Join(repo, mod, "go.mod"), "module example.com/"+filepath.Base(mod)+"\n", 0o644)
		writeFile(t, filepath.Join(repo, mod, "go.sum"), "", 0o644)
	}
	writeFile(t, filepath.Join(repo, "hack/tools/etcd/main.go"), "package main\n", 0o644)
	fakeBin := filepath.Join(repo, "fakebin")
	writeFile(t, filepath.Join(fakeBin, "go"), fakeGo, 0o755)
	logPath := filepath.Join(repo, "go.log")

	// run runs install-deps.sh with args and returns what it built, one entry per go build, and its output.
	run := func(args ...string) ([]string, string) {
		t.Helper()
		_ = os.Remove(logPath)
		cmd := exec.Command("bash", append([]string{filepath.Join(repo, "hack/install-deps.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+fakeBin+":"+os.Getenv("PATH"), "FAKE_GO_LOG="+logPath)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install-deps.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		b, _ := os.ReadFile(logPath)
		var built []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				built = append(built, strings.TrimPrefix(l, "build "))
			}
		}
		return built, string(out)
	}
	const (
		upSet   = "etcd kube-apiserver kube-controller-manager kubectl"
		restSet = "kube-scheduler kubelet cloud-node-controller kubemark"
	)
	for _, step := range []struct {
		name   string
		before func()
		args   []string
		built  []string
	}{
		{name: "make up on an empty _output/bin", args: []string{"--for", "up"}, built: []string{upSet, "metrics-server"}},
		{name: "make up again", args: []string{"--for", "up"}},
		{name: "the simulation adds kube-scheduler", args: []string{"--for", "simulate"}, built: []string{"kube-scheduler"}},
		{name: "make test builds the rest and helm, and runs KWOK's and Karpenter's builds", built: []string{"kubelet cloud-node-controller kubemark", "helm", "ran build-kwok.sh", "ran build-karpenter.sh", "ran build-dra-test-driver.sh"}},
		{name: "make test again", built: []string{"ran build-kwok.sh", "ran build-karpenter.sh", "ran build-dra-test-driver.sh"}},
		{name: "only the stamp of an older install-deps.sh", before: func() {
			m, _ := filepath.Glob(filepath.Join(bin, ".tools.*.stamp"))
			for _, f := range m {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}, built: []string{"ran build-kwok.sh", "ran build-karpenter.sh", "ran build-dra-test-driver.sh"}},
		{name: "hack/tools changed: make up", before: func() {
			writeFile(t, filepath.Join(repo, "hack/tools/go.sum"), "changed\n", 0o644)
		}, args: []string{"--for", "up"}, built: []string{upSet}},
		{name: "hack/tools changed: make test builds the others", built: []string{restSet, "ran build-kwok.sh", "ran build-karpenter.sh", "ran build-dra-test-driver.sh"}},
		{name: "a binary removed", before: func() {
			if err := os.Remove(filepath.Join(bin, "kubelet")); err != nil {
				t.Fatal(err)
			}
		}, built: []string{"kubelet", "ran build-kwok.sh", "ran build-karpenter.sh", "ran build-dra-test-driver.sh"}},
	} {
		if step.before != nil {
			step.before()
		}
		built, out := run(step.args...)
		if !slices.Equal(built, step.built) {
			t.Errorf("%s (install-deps.sh %s): built %q, want %q\n%s", step.name, strings.Join(step.args, " "), built, step.built, out)
		}
	}
	// The legacy stamp is written once all eight are built from the same hack/tools, and read by an older
	// install-deps.sh in another checkout sharing _output/bin.
	if got, want := readFile(t, filepath.Join(bin, ".tools.stamp")), readFile(t, filepath.Join(bin, ".tools.kubelet.stamp")); got != want {
		t.Errorf(".tools.stamp %q, want the stamp of the current hack/tools %q", got, want)
	}

	cmd := exec.Command("bash", filepath.Join(repo, "hack/install-deps.sh"), "--for", "kubelet")
	out, err := cmd.CombinedOutput()
	if want := `install-deps: --for wants test, up or simulate, not "kubelet"`; err == nil || !strings.Contains(string(out), want) {
		t.Errorf("--for kubelet: %v, %s; want an error saying %q", err, out, want)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}
