package monitoring

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const runbookBase = "https://github.com/nodeagent/nodeagent/blob/main/docs/operating.md#"

// TestPromtoolCheckRules: promtool accepts the rules file and the Helm chart's copy of it.
func TestPromtoolCheckRules(t *testing.T) {
	root := repoRoot(t)
	for _, f := range []string{rulesFile, "deploy/helm/nodeagent/files/nodeagent.rules.yaml"} {
		out, err := promtool(t, root, "check", "rules", f)
		if err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// TestPromtoolTestRules runs the unit tests of every alert and recording rule.
func TestPromtoolTestRules(t *testing.T) {
	out, err := promtool(t, repoRoot(t), "test", "rules", rulesTestFile)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// rulesTests is the part of a promtool test file the tests read and rewrite.
type rulesTests struct {
	RuleFiles          []string         `json:"rule_files"`
	EvaluationInterval string           `json:"evaluation_interval"`
	Tests              []map[string]any `json:"tests"`
}

// alertCases returns, per alert name, how many of testdata/rules.test.yaml's cases expect it to fire
// (a non-empty exp_alerts) and how many expect it silent (an empty one).
func alertCases(t *testing.T) (fires, silent map[string]int) {
	t.Helper()
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, rulesTestFile), &f); err != nil {
		t.Fatal(err)
	}
	fires, silent = map[string]int{}, map[string]int{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname]++
			} else {
				silent[a.Alertname]++
			}
		}
	}
	return fires, silent
}

// TestEveryAlertTested: each alert has a case where it fires and one where it stays silent, and no
// case names an alert the rules do not have.
func TestEveryAlertTested(t *testing.T) {
	fires, silent := alertCases(t)
	names := map[string]bool{}
	for _, a := range parseRules(t, readRepoFile(t, rulesFile)).alerts() {
		if names[a.Alert] {
			continue // a second severity of the same alert
		}
		names[a.Alert] = true
		if fires[a.Alert] == 0 {
			t.Errorf("%s: no promtool case expects it to fire", a.Alert)
		}
		if silent[a.Alert] == 0 {
			t.Errorf("%s: no promtool case expects it to stay silent", a.Alert)
		}
	}
	for n := range fires {
		if !names[n] {
			t.Errorf("%s has promtool cases but no rule", n)
		}
	}
}

// writeMutatedRules writes the rules with mutate applied to the alert named alert (every rule of that
// name) and a copy of the promtool tests of that alert reading them, into a temporary directory, and
// returns the tests' path.
func writeMutatedRules(t *testing.T, alert string, mutate func(*rule)) string {
	t.Helper()
	dir := t.TempDir()
	f := parseRules(t, readRepoFile(t, rulesFile))
	found := false
	for gi := range f.Groups {
		for ri := range f.Groups[gi].Rules {
			if f.Groups[gi].Rules[ri].Alert == alert {
				mutate(&f.Groups[gi].Rules[ri])
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no alert %s", alert)
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var tests rulesTests
	if err := yaml.Unmarshal(readRepoFile(t, rulesTestFile), &tests); err != nil {
		t.Fatal(err)
	}
	tests.RuleFiles = []string{"rules.yaml"}
	// Only the cases of this alert: they must catch it on their own (and promtool runs faster).
	var own []map[string]any
	for _, tc := range tests.Tests {
		cases, _ := tc["alert_rule_test"].([]any)
		if slices.ContainsFunc(cases, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["alertname"] == alert
		}) {
			own = append(own, tc)
		}
	}
	if len(own) == 0 {
		t.Fatalf("no promtool case for %s", alert)
	}
	tests.Tests = own
	b, err = yaml.Marshal(tests)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.test.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPromtoolTestRulesCatchBrokenAlerts breaks each alert in a copy of the rules and wants promtool's
// unit tests to fail on it: an alert that never fires (its firing cases fail) and, for alerts with a
// `for` of 5 minutes or more, one without its `for` (the cases while it is only pending fail).
func TestPromtoolTestRulesCatchBrokenAlerts(t *testing.T) {
	promBinary(t, "promtool")
	seen := map[string]bool{}
	for _, a := range parseRules(t, readRepoFile(t, rulesFile)).alerts() {
		if seen[a.Alert] {
			continue // a second severity of the same alert: the mutation breaks both
		}
		seen[a.Alert] = true
		mutations := map[string]func(*rule){
			"never fires": func(r *rule) { r.Expr = "vector(1) == 0" },
		}
		if a.For != "" && a.For != "1m" {
			mutations["no for"] = func(r *rule) { r.For = "" }
		}
		for what, mutate := range mutations {
			t.Run(a.Alert+"/"+what, func(t *testing.T) {
				t.Parallel()
				path := writeMutatedRules(t, a.Alert, mutate)
				out, err := promtool(t, filepath.Dir(path), "test", "rules", filepath.Base(path))
				if err == nil {
					t.Fatalf("promtool test rules passed with %s broken (%s):\n%s", a.Alert, what, out)
				}
				if !strings.Contains(out, "alertname: "+a.Alert) {
					t.Errorf("promtool failed, but not on %s:\n%s", a.Alert, out)
				}
			})
		}
	}
}

var alertNameRE = regexp.MustCompile(`^NodeAgent[A-Z][A-Za-z]+$`)

// TestAlertConventions: kubernetes-mixin's conventions for every alert (a NodeAgent CamelCase name,
// severity warning or critical and no other label, summary, description and a runbook_url into
// docs/operating.md ending in the alert's lowercased name), and recording rules named level:metric:operations.
func TestAlertConventions(t *testing.T) {
	f := parseRules(t, readRepoFile(t, rulesFile))
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				if len(strings.Split(r.Record, ":")) != 3 {
					t.Errorf("recording rule %s: want level:metric:operations", r.Record)
				}
				continue
			}
			if !alertNameRE.MatchString(r.Alert) {
				t.Errorf("alert %q: want NodeAgent followed by CamelCase", r.Alert)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if len(r.Labels) != 1 {
				t.Errorf("%s: labels %v, want only severity", r.Alert, r.Labels)
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: no %s", r.Alert, k)
				}
			}
			if len(r.Annotations) != 3 {
				t.Errorf("%s: annotations %v, want summary, description and runbook_url", r.Alert, r.Annotations)
			}
			if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %s, want %s", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.HasSuffix(r.Annotations["summary"], ".") {
				t.Errorf("%s: summary %q is not a sentence ending with a period", r.Alert, r.Annotations["summary"])
			}
		}
	}
}

// githubAnchor returns the anchor GitHub gives a Markdown heading: lowercased, punctuation other than
// '-' and '_' dropped, spaces turned into '-'.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestRunbooks: docs/operating.md has an "Alerts" section with one "### <alert>" heading per alert,
// each followed by text that says what to do, and no heading there for an alert that does not exist.
func TestRunbooks(t *testing.T) {
	doc := string(readRepoFile(t, operatingDoc))
	_, alertsSection, ok := strings.Cut(doc, "\n## Alerts\n")
	if !ok {
		t.Fatalf("%s has no \"## Alerts\" section", operatingDoc)
	}
	if i := strings.Index(alertsSection, "\n## "); i >= 0 {
		alertsSection = alertsSection[:i]
	}
	sections := map[string]string{}
	parts := strings.Split("\n"+alertsSection, "\n### ")
	for _, p := range parts[1:] {
		heading, body, _ := strings.Cut(p, "\n")
		sections[githubAnchor(heading)] = body
	}
	var names []string
	for _, a := range parseRules(t, readRepoFile(t, rulesFile)).alerts() {
		if !slices.Contains(names, a.Alert) {
			names = append(names, a.Alert)
		}
	}
	for _, n := range names {
		body, ok := sections[strings.ToLower(n)]
		if !ok {
			t.Errorf("%s: no \"### %s\" runbook under \"## Alerts\" in %s", n, n, operatingDoc)
			continue
		}
		if len(strings.Fields(body)) < 30 || !strings.Contains(body, "**What to do**") {
			t.Errorf("%s: the runbook says too little (want a **What to do** part):\n%s", n, body)
		}
	}
	for anchor := range sections {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.ToLower(n) == anchor }) {
			t.Errorf("runbook #%s names no alert of %s", anchor, rulesFile)
		}
	}
}

// TestPrometheusRuleManifest: the PrometheusRule's groups are the plain rules file's, and it is a
// monitoring.coreos.com/v1 PrometheusRule.
func TestPrometheusRuleManifest(t *testing.T) {
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec ruleFile `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(readRepoFile(t, prometheusRuleFile), &pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" {
		t.Errorf("%s: %s %s %q, want a named monitoring.coreos.com/v1 PrometheusRule", prometheusRuleFile, pr.APIVersion, pr.Kind, pr.Metadata.Name)
	}
	plain := parseRules(t, readRepoFile(t, rulesFile))
	a, _ := yaml.Marshal(plain)
	b, _ := yaml.Marshal(pr.Spec)
	if !bytes.Equal(a, b) {
		t.Errorf("%s spec.groups differ from %s: run make monitoring", prometheusRuleFile, rulesFile)
	}
}
