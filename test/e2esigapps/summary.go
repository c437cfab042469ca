package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// ginkgoReport is what readReport reads of ginkgo's JSON report (types.Report).
type ginkgoReport []struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		Failure                 struct {
			Message string
		}
		RunTime time.Duration
	}
}

// specResult is one spec's outcome on one system.
type specResult struct {
	// State is ginkgo's: passed, failed, timedout, interrupted, panicked, skipped, pending...
	State string
	// Reason is the first line of the failure's message; empty when the spec passed or was skipped.
	Reason string
	// RunTime is how long the spec ran.
	RunTime time.Duration
}

// systemResult is one system's run: the outcomes of the specs that ran, keyed by the spec's full text (its containers' texts
// and its own, joined by spaces).
type systemResult struct {
	System string
	Specs  map[string]specResult
}

// readReport reads the It specs of the ginkgo JSON report at path that ran: the suite's set-up and report
// nodes, and the specs skipped (not in the focus, or not reached before ginkgo's --timeout) or pending,
// left out.
func readReport(system, path string) (systemResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return systemResult{}, fmt.Errorf("%s: ginkgo's report: %w", system, err)
	}
	var r ginkgoReport
	if err := json.Unmarshal(b, &r); err != nil {
		return systemResult{}, fmt.Errorf("%s: ginkgo's report %s: %w", system, path, err)
	}
	res := systemResult{System: system, Specs: map[string]specResult{}}
	for _, suite := range r {
		for _, s := range suite.SpecReports {
			if s.LeafNodeType != "It" || s.State == "skipped" || s.State == "pending" {
				continue
			}
			name := strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
			sr := specResult{State: s.State, RunTime: s.RunTime}
			if s.State != "passed" {
				sr.Reason, _, _ = strings.Cut(strings.TrimSpace(s.Failure.Message), "\n")
			}
			res.Specs[name] = sr
		}
	}
	return res, nil
}

// counts returns how many specs of r passed and how many failed.
func (r systemResult) counts() (passed, failures int) {
	for _, s := range r.Specs {
		if s.State == "passed" {
			passed++
		} else {
			failures++
		}
	}
	return passed, failures
}

// comparison is the outcome of the same suite on several systems.
type comparison struct {
	Systems []systemResult
	// Specs is every spec that ran on any system, sorted; "not run" in the table where it did not run on
	// one (ginkgo's --timeout ended the run first).
	Specs []string
	// Regressions are the specs the reference system (KWOK) passed and the first system (nodeagent) did not.
	Regressions []string
}

// compare puts the systems' results side by side. The first system is the one under test; a spec that
// any other system passed and it did not (failed, or did not run) is a regression.
func compare(results []systemResult) comparison {
	c := comparison{Systems: results}
	seen := map[string]bool{}
	for _, r := range results {
		for name := range r.Specs {
			if !seen[name] {
				seen[name] = true
				c.Specs = append(c.Specs, name)
			}
		}
	}
	slices.Sort(c.Specs)
	if len(results) < 2 {
		return c
	}
	for _, name := range c.Specs {
		if results[0].Specs[name].State == "passed" {
			continue
		}
		for _, other := range results[1:] {
			if other.Specs[name].State == "passed" {
				c.Regressions = append(c.Regressions, name)
				break
			}
		}
	}
	return c
}

// write prints the comparison as Markdown: each system's pass count, each system's failures with their
// reasons, a table of every spec with its state on each system, and the specs another system passes that
// the first one does not.
func (c comparison) write(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	for _, r := range c.Systems {
		passed, failures := r.counts()
		p("%s: passed %d, failed %d (of %d specs that ran)", r.System, passed, failures, len(r.Specs))
	}
	for _, r := range c.Systems {
		var lines []string
		for name, s := range r.Specs {
			if s.State != "passed" {
				lines = append(lines, fmt.Sprintf("- %s: %s (%s)", name, s.State, s.Reason))
			}
		}
		slices.Sort(lines)
		p("")
		p("failures on %s (%d):", r.System, len(lines))
		for _, l := range lines {
			p("%s", l)
		}
	}
	p("")
	header, rule := "| spec |", "|---|"
	for _, r := range c.Systems {
		header += " " + r.System + " |"
		rule += "---|"
	}
	p("%s", header)
	p("%s", rule)
	for _, name := range c.Specs {
		row := "| " + strings.ReplaceAll(name, "|", `\|`) + " |"
		for _, r := range c.Systems {
			s, ok := r.Specs[name]
			state := s.State
			if !ok {
				state = "not run"
			}
			row += " " + state + " |"
		}
		p("%s", row)
	}
	if len(c.Systems) > 1 {
		p("")
		others := make([]string, 0, len(c.Systems)-1)
		for _, r := range c.Systems[1:] {
			others = append(others, r.System)
		}
		p("specs %s passes that %s does not: %d", strings.Join(others, " or "), c.Systems[0].System, len(c.Regressions))
		for _, name := range c.Regressions {
			p("- %s", name)
		}
	}
}
