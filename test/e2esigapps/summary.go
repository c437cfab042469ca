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

// stateInterrupted is ginkgo's state of a spec it interrupted: when its --timeout ended the suite (or on a
// signal), the specs running then. Such a spec did not run to its end: it is counted as not run, neither
// passed nor failed.
const stateInterrupted = "interrupted"

// counts returns how many specs of r passed, how many failed, and how many were interrupted (not run to
// their end: stateInterrupted).
func (r systemResult) counts() (passed, failures, interrupted int) {
	for _, s := range r.Specs {
		switch s.State {
		case "passed":
			passed++
		case stateInterrupted:
			interrupted++
		default:
			failures++
		}
	}
	return passed, failures, interrupted
}

// countsLine is r's counts as one line: "SYSTEM: passed P, failed F (of N specs that ran)", with
// ", interrupted I (...)" before the parenthesis when I is not 0.
func (r systemResult) countsLine() string {
	passed, failures, interrupted := r.counts()
	if interrupted == 0 {
		return fmt.Sprintf("%s: passed %d, failed %d (of %d specs that ran)", r.System, passed, failures, len(r.Specs))
	}
	return fmt.Sprintf("%s: passed %d, failed %d (of %d specs that ran to their end); %d interrupted by ginkgo's --timeout, counted as not run",
		r.System, passed, failures, len(r.Specs)-interrupted, interrupted)
}

// comparison is the outcome of the same suite on several systems.
type comparison struct {
	Systems []systemResult
	// Specs is every spec that ran on any system, sorted; "not run" in the table where it did not run on
	// one (ginkgo's --timeout ended the run first), "interrupted" where that timeout cut it.
	Specs []string
	// Regressions are the specs the reference system (KWOK) passed and the first system (nodeagent) did not.
	Regressions []string
}

// compare puts the systems' results side by side. The first system is the one under test; a spec that
// any other system passed and it did not (failed, was interrupted, or did not run) is a regression.
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
		p("%s", r.countsLine())
	}
	for _, r := range c.Systems {
		var lines, interrupted []string
		for name, s := range r.Specs {
			switch s.State {
			case "passed":
			case stateInterrupted:
				interrupted = append(interrupted, "- "+name)
			default:
				lines = append(lines, fmt.Sprintf("- %s: %s (%s)", name, s.State, s.Reason))
			}
		}
		slices.Sort(lines)
		p("")
		p("failures on %s (%d):", r.System, len(lines))
		for _, l := range lines {
			p("%s", l)
		}
		if len(interrupted) > 0 {
			slices.Sort(interrupted)
			p("")
			p("interrupted on %s by ginkgo's --timeout, not run to their end (%d):", r.System, len(interrupted))
			for _, l := range interrupted {
				p("%s", l)
			}
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
