package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSimulationCommandsAreREADMEs (issue 47): what `make up SIMULATE=N` prints, with the control API on
// the kubelet's healthz port 10248 and localup's paths, is README's simulation quick start, line for
// line (comments after " # " aside), so that a newcomer pastes README's or the printed lines alike;
// without metrics-server only the lines that need none. TestSimulationQuickStart runs them.
func TestSimulationCommandsAreREADMEs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "<!-- BEGIN quick-start (simulation) -->")
	section, _, _ = strings.Cut(section, "<!-- END quick-start (simulation) -->")
	var blocks [][]string
	in := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in = true
			blocks = append(blocks, nil)
		case in && strings.TrimSpace(line) == "```":
			in = false
		case in:
			if i := strings.Index(line, " # "); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" {
				blocks[len(blocks)-1] = append(blocks[len(blocks)-1], line)
			}
		}
	}
	if len(blocks) != 2 {
		t.Fatalf("README's simulation quick start has %d sh blocks, want 2 (make up, the commands)", len(blocks))
	}
	got := SimulationCommands("_output/bin/kubectl --kubeconfig=_output/simulate/admin.kubeconfig", 10248)
	if !slices.Equal(got, blocks[1]) {
		t.Errorf("printed:\n  %s\nREADME:\n  %s", strings.Join(got, "\n  "), strings.Join(blocks[1], "\n  "))
	}
	for i, want := range []string{" logs -f ", " exec ", " port-forward "} {
		if l := got[3+i]; !strings.Contains(l, want) {
			t.Errorf("command %d %q: want the kubelet API's %q there (the first %d need only the Nodes)", 3+i, l, want, 3)
		}
	}
	for _, l := range got[:simulationMetricsCommands] {
		if strings.Contains(l, " top ") || strings.Contains(l, " hpa ") || strings.Contains(l, "autoscale") {
			t.Errorf("%q is among the commands printed without metrics-server", l)
		}
	}
}
