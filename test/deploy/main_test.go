package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMain makes sure systemd-analyze is installed before the tests run,
// installing Debian's systemd package when it is missing (the unit tests never
// skip for want of it). It needs root and apt; without them the run fails.
func TestMain(m *testing.M) {
	if err := ensureSystemdAnalyze(); err != nil {
		fmt.Fprintf(os.Stderr, "test/deploy: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// ensureSystemdAnalyze returns nil when systemd-analyze is on PATH, after
// running `apt-get install -y systemd` (and `apt-get update` first if the
// install fails) when it was not. The error carries apt-get's output.
func ensureSystemdAnalyze() error {
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		return nil
	}
	fmt.Fprintln(os.Stderr, "test/deploy: systemd-analyze not found, installing the systemd package")
	install := []string{"apt-get", "install", "-y", "--no-install-recommends", "systemd"}
	if err := aptGet(install...); err != nil {
		if err := aptGet("apt-get", "update"); err != nil {
			return err
		}
		if err := aptGet(install...); err != nil {
			return err
		}
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		return fmt.Errorf("systemd-analyze still missing after installing systemd: %w", err)
	}
	return nil
}

// aptGet runs one apt-get command non-interactively.
func aptGet(args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %w\n%s", args, err, out)
	}
	return nil
}

// repoRoot returns the repository's root directory: the test runs in
// test/deploy, two levels below it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("repository root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s has no go.mod: %v", root, err)
	}
	return root
}

// readRepoFile returns the contents of a file given relative to the repository root.
func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(data)
}

// documentedFlags returns the flags of the nodeagent command-line contract,
// docs/flags.md: every --flag named in the first column of its table.
func documentedFlags(t *testing.T) map[string]bool {
	t.Helper()
	flags := map[string]bool{}
	for _, line := range strings.Split(readRepoFile(t, "docs/flags.md"), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, f := range flagRE.FindAllString(cells[1], -1) {
			flags[f] = true
		}
	}
	if len(flags) == 0 {
		t.Fatal("no flags found in docs/flags.md")
	}
	return flags
}

var flagRE = regexp.MustCompile(`--[a-z][a-z0-9.-]*`)

// flagName returns the --name part of an argument like --name=value.
func flagName(arg string) string {
	name, _, _ := strings.Cut(arg, "=")
	return name
}
