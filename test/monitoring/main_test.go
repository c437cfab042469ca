package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeagent/nodeagent/test/framework"
)

// The monitoring files, relative to the repository.
const (
	rulesFile          = "deploy/monitoring/nodeagent.rules.yaml"
	prometheusRuleFile = "deploy/monitoring/prometheusrule.yaml"
	dashboardFile      = "deploy/monitoring/nodeagent-dashboard.json"
	rulesTestFile      = "test/monitoring/testdata/rules.test.yaml"
	operatingDoc       = "docs/operating.md"
)

// repoRoot returns the repository's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// readRepoFile returns the contents of a file given relative to the repository root.
func readRepoFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// promBinary returns the path of Debian's promtool or prometheus (name), running hack/install-deps.sh
// (which installs the prometheus package) first when it is missing; it fails the test if it is still
// missing.
func promBinary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := framework.EnsureBinaries(); err != nil {
		t.Fatal(err)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s still missing after hack/install-deps.sh: %v", name, err)
	}
	return p
}

// promtool runs promtool with args in dir and returns its combined output and error.
func promtool(t testing.TB, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), promBinary(t, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// ruleFile is a Prometheus rules file.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// parseRules strictly decodes a rules file.
func parseRules(t testing.TB, data []byte) ruleFile {
	t.Helper()
	var f ruleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("rules: %v", err)
	}
	if len(f.Groups) == 0 {
		t.Fatal("rules: no groups")
	}
	return f
}

// alerts returns every alerting rule of f, in file order.
func (f ruleFile) alerts() []rule {
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// dashboard is the part of the Grafana dashboard the tests read.
type dashboard struct {
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// loadDashboard decodes the shipped dashboard.
func loadDashboard(t testing.TB) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readRepoFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}
