package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// report is a ginkgo JSON report with one set-up node and the It specs given as name=state[:reason].
func report(specs ...string) string {
	var b strings.Builder
	b.WriteString(`[{"SpecReports":[{"LeafNodeType":"SynchronizedBeforeSuite","State":"passed"}`)
	for _, s := range specs {
		name, state, _ := strings.Cut(s, "=")
		state, reason, _ := strings.Cut(state, ":")
		b.WriteString(`,{"ContainerHierarchyTexts":["[sig-apps] Job"],"LeafNodeType":"It","LeafNodeText":"` + name +
			`","State":"` + state + `","Failure":{"Message":"` + reason + `\nmore"}}`)
	}
	b.WriteString(`]}]`)
	return b.String()
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name            string
		reports         [][]string // per system: nodeagent, then kwok
		wantRegressions []string
		wantLines       []string
		wantNoLines     []string
	}{{
		name:      "one system",
		reports:   [][]string{{"a=passed", "b=failed:timed out"}},
		wantLines: []string{"nodeagent: passed 1, failed 1 (of 2 specs that ran)", "- [sig-apps] Job b: failed (timed out)", "| [sig-apps] Job a | passed |"},
	}, {
		name:        "kwok passes less",
		reports:     [][]string{{"a=passed", "b=passed", "c=skipped"}, {"a=passed", "b=timedout:no Complete condition", "c=skipped"}},
		wantLines:   []string{"nodeagent: passed 2, failed 0 (of 2 specs that ran)", "kwok: passed 1, failed 1 (of 2 specs that ran)", "| [sig-apps] Job b | passed | timedout |", "specs kwok passes that nodeagent does not: 0"},
		wantNoLines: []string{"| [sig-apps] Job c | skipped | skipped |"},
	}, {
		name:            "kwok passes one nodeagent fails",
		reports:         [][]string{{"a=failed:x", "b=passed"}, {"a=passed", "b=passed"}},
		wantRegressions: []string{"[sig-apps] Job a"},
		wantLines:       []string{"specs kwok passes that nodeagent does not: 1", "- [sig-apps] Job a"},
	}, {
		name: "cut by the suite's timeout: not run",
		reports: [][]string{
			{"a=passed", "b=failed:x", "c=interrupted:Interrupted by User", "d=timedout:A spec timeout occurred"},
			{"a=passed", "b=timedout:A suite timeout occurred", "c=passed", "d=passed"},
		},
		// nodeagent did not finish c, which KWOK passed: still a spec KWOK passes that nodeagent does not; d
		// timed out on its own timeout: a failure.
		wantRegressions: []string{"[sig-apps] Job c", "[sig-apps] Job d"},
		wantLines: []string{
			"nodeagent: passed 1, failed 2 (of 3 specs that ran to their end); 1 cut by ginkgo's --timeout or an interrupt, counted as not run",
			"kwok: passed 3, failed 0 (of 3 specs that ran to their end); 1 cut by ginkgo's --timeout or an interrupt, counted as not run",
			"failures on nodeagent (2):", "- [sig-apps] Job d: timedout (A spec timeout occurred)",
			"cut on nodeagent by ginkgo's --timeout or an interrupt, not run to their end (1):", "- [sig-apps] Job c: interrupted (Interrupted by User)",
			"failures on kwok (0):", "cut on kwok by ginkgo's --timeout or an interrupt, not run to their end (1):", "- [sig-apps] Job b: timedout (A suite timeout occurred)",
			"| [sig-apps] Job b | failed | not run (cut: timedout) |",
			"| [sig-apps] Job c | not run (cut: interrupted) | passed |",
		},
	}, {
		name:            "a spec that did not run on nodeagent",
		reports:         [][]string{{"a=skipped", "b=passed"}, {"a=passed", "b=passed"}},
		wantRegressions: []string{"[sig-apps] Job a"},
		wantLines:       []string{"| [sig-apps] Job a | not run | passed |"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var results []systemResult
			for i, specs := range tt.reports {
				path := filepath.Join(t.TempDir(), "report.json")
				if err := os.WriteFile(path, []byte(report(specs...)), 0o644); err != nil {
					t.Fatal(err)
				}
				r, err := readReport([]string{systemNodeagent, systemKWOK}[i], path)
				if err != nil {
					t.Fatal(err)
				}
				results = append(results, r)
			}
			c := compare(results)
			if !slices.Equal(c.Regressions, tt.wantRegressions) {
				t.Errorf("regressions %q, want %q", c.Regressions, tt.wantRegressions)
			}
			var b strings.Builder
			c.write(&b)
			lines := strings.Split(b.String(), "\n")
			for _, want := range tt.wantLines {
				if !slices.Contains(lines, want) {
					t.Errorf("no line %q in\n%s", want, b.String())
				}
			}
			for _, no := range tt.wantNoLines {
				if slices.Contains(lines, no) {
					t.Errorf("line %q in\n%s", no, b.String())
				}
			}
		})
	}
}

func TestGinkgoTimeout(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		timeout  time.Duration
		deadline time.Time
		want     time.Duration
		wantErr  string
	}{
		{name: "no deadline", timeout: 90 * time.Minute, want: 90 * time.Minute},
		{name: "deadline far", timeout: 33 * time.Minute, deadline: now.Add(2 * time.Hour), want: 33 * time.Minute},
		{name: "deadline cuts", timeout: 90 * time.Minute, deadline: now.Add(40*time.Minute + 500*time.Millisecond), want: 37 * time.Minute},
		{name: "a minute after the margin", timeout: time.Hour, deadline: now.Add(deadlineMargin + time.Minute), want: time.Minute},
		{name: "too late", timeout: time.Hour, deadline: now.Add(deadlineMargin + 59*time.Second), wantErr: "less than a minute"},
		{name: "past", timeout: time.Hour, deadline: now.Add(-time.Minute), wantErr: "--deadline 2026-11-27T12:59:00Z: -1m0s left"},
	}
	for _, tt := range tests {
		got, err := ginkgoTimeout(options{timeout: tt.timeout, deadline: tt.deadline}, now)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: ginkgoTimeout = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

func TestParseSystems(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "nodeagent,kwok", want: []string{"nodeagent", "kwok"}},
		{in: "kwok", want: []string{"kwok"}},
		{in: "nodeagent, kwok", want: []string{"nodeagent", "kwok"}},
		{in: "kubemark", wantErr: `"kubemark" is neither nodeagent nor kwok`},
		{in: "kwok,kwok", wantErr: `"kwok" is given twice`},
		{in: "", wantErr: `"" is neither`},
	}
	for _, tt := range tests {
		got, err := parseSystems(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseSystems(%q) error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseSystems(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
