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

// suiteTimeoutMessage is the message of ginkgo's (v2.32.0, internal/suite.go) failure of a spec that was
// running when its --timeout ended the suite: state timedout, "A suite timeout occurred".
const suiteTimeoutMessage = "A suite timeout occurred"

// cut reports whether the spec did not run to its end because the run ended under it: it was running when
// ginkgo's --timeout ended the suite (state timedout with suiteTimeoutMessage; a spec's own timeout has
// another message), or ginkgo was interrupted (state interrupted, e.g. a signal). Such a spec counts as not
// run, neither passed nor failed.
func (s specResult) cut() bool {
	return s.State == "interrupted" || (s.State == "timedout" && strings.HasPrefix(s.Reason, suiteTimeoutMessage))
}

// counts returns how many specs of r passed, how many failed, and how many were cut (not run to their
// end: specResult.cut).
func (r systemResult) counts() (passed, failures, cut int) {
	for _, s := range r.Specs {
		switch {
		case s.State == "passed":
			passed++
		case s.cut():
			cut++
		default:
			failures++
		}
	}
	return passed, failures, cut
}

// countsLine is r's counts as one line: "SYSTEM: passed P, failed F (of N specs that ran)", or, when C specs
// were cut, "SYSTEM: passed P, failed F (of N specs that ran to their end); C cut by ginkgo's --timeout or
// an interrupt, counted as not run".
func (r systemResult) countsLine() string {
	passed, failures, cut := r.counts()
	if cut == 0 {
		return fmt.Sprintf("%s: passed %d, failed %d (of %d specs that ran)", r.System, passed, failures, len(r.Specs))
	}
	return fmt.Sprintf("%s: passed %d, failed %d (of %d specs that ran to their end); %d cut by ginkgo's --timeout or an interrupt, counted as not run",
		r.System, passed, failures, len(r.Specs)-cut, cut)
}

// comparison is the outcome of the same suite on several systems.
type comparison struct {
	Systems []systemResult
	// Specs is every spec that ran on any system, sorted; "not run" in the table where it did not run on
	// one (ginkgo's --timeout ended the run first), "not run (cut: STATE)" where that timeout cut it.
	Specs []string
	// Regressions are the specs the reference system (KWOK) passed and the first system (nodeagent) did not.
	Regressions []string
}

// compare puts the systems' results side by side. The first system is the one under test; a spec that
// any other system passed and it did not (failed, was cut, or did not run) is a regression.
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
		var lines, cut []string
		for name, s := range r.Specs {
			switch {
			case s.State == "passed":
			case s.cut():
				cut = append(cut, fmt.Sprintf("- %s: %s (%s)", name, s.State, s.Reason))
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
		if len(cut) > 0 {
			slices.Sort(cut)
			p("")
			p("cut on %s by ginkgo's --timeout or an interrupt, not run to their end (%d):", r.System, len(cut))
			for _, l := range cut {
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
			switch {
			case !ok:
				state = "not run"
			case s.cut():
				state = "not run (cut: " + s.State + ")"
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
