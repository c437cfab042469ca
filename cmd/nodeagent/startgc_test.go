package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartGCPausesInits: internal/startgc's init runs before the heavy package inits (client-go's
// scheme, component-base's legacy registry), so that no garbage collection runs while the process
// initialises (GODEBUG=gctrace=1 prints none for `nodeagent version`), and with GOGC set the
// collector is left alone.
func TestStartGCPausesInits(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nodeagent")
	if out, err := exec.Command("go", "build", "-tags", "grpcnotrace", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(env ...string) string {
		cmd := exec.Command(bin, "version")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, out)
		}
		return string(out)
	}
	order := map[string]int{}
	for i, line := range strings.Split(run("GODEBUG=inittrace=1"), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			order[f[1]] = i
		}
	}
	first, ok := order["github.com/nodeagent/nodeagent/internal/startgc"]
	if !ok {
		t.Fatal("internal/startgc's init did not run")
	}
	for _, heavy := range []string{"k8s.io/client-go/kubernetes/scheme", "k8s.io/component-base/metrics/legacyregistry", "k8s.io/apiserver/pkg/server/egressselector"} {
		if at, ok := order[heavy]; !ok || at < first {
			t.Errorf("%s initialised at line %d, before internal/startgc (line %d)", heavy, at, first)
		}
	}
	gcs := func(out string) (n int) {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "gc ") {
				n++
			}
		}
		return n
	}
	if n := gcs(run("GODEBUG=gctrace=1")); n != 0 {
		t.Errorf("%d garbage collections during `nodeagent version`, want 0", n)
	}
	if n := gcs(run("GODEBUG=gctrace=1", "GOGC=100")); n == 0 {
		t.Error("with GOGC=100 no garbage collection ran during `nodeagent version`: the test cannot tell a pause")
	}
}
