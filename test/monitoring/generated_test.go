package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesUpToDate runs hack/monitoring into a temporary directory and wants every file it
// writes (the PrometheusRule, the dashboard, the Helm chart's copies of the rules, the dashboard and the
// node-problem-detector configs) to equal the committed one: run `make monitoring` after editing a source.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root := repoRoot(t)
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./hack/monitoring", "-root", root, "-out", out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/monitoring: %v\n%s", err, b)
	}
	n := 0
	err := filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(out, path)
		if err != nil {
			return err
		}
		n++
		want, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v (run make monitoring)", rel, err)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what hack/monitoring writes: run make monitoring", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Errorf("hack/monitoring wrote %d files, want at least 5", n)
	}
}

// TestDashboard: the dashboard's panels have unique ids, fit the 24-column grid, and each panel other
// than a row has queries, every one naming a nodeagent job; the simulation's panels are per shard (by pod).
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X < 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if !bytes.Contains([]byte(tg.Expr), []byte(`job=`)) {
				t.Errorf("panel %q query %s selects no job: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	for _, title := range []string{"Nodes Ready", "Lease renew latency", "Lease renew errors", "Status patches per minute",
		"Runtime conditions", "Nodes with a problem condition", "CPU per mode", "RSS per mode", "Lease renewals per second", "CPU per shard"} {
		found := false
		for _, p := range d.Panels {
			found = found || p.Title == title
		}
		if !found {
			t.Errorf("no panel %q", title)
		}
	}
	t.Logf("%d panels, %d queries", len(d.Panels), queries)
}
