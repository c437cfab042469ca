package sandbox

import (
	"context"
	"reflect"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

// nested is issue 45's script: a of 1 KiB, b of a 1024 times (1 MiB), c of b n times, exit 3 — one
// assignment allocates n MiB, with no command in between (the interpreter calls no handler).
func nested(n int) string {
	return "a=" + strings.Repeat("x", 1024) + "; b=" + strings.Repeat("$a", 1024) + "; c=" + strings.Repeat("$b", n) + "; exit 3"
}

// TestRunMemory: every way a script grows memory without a command in between (assignments,
// expansions, command substitutions, here-documents, printf, function parameters) is stopped at
// Limits.Memory before it allocates: the run is not honoured, for a limit, and allocates a few MiB at
// most.
func TestRunMemory(t *testing.T) {
	const k100 = "a=$(printf '%0102400d' 0); "
	for _, tc := range []struct {
		name, script string
		reason       string // a prefix of Result.Reason
	}{
		{"issue 45, N=256", nested(256), "would hold more than 1048576 bytes (the statement at 1:"},
		{"issue 45, N=1024", nested(1024), "would hold more than 1048576 bytes (the statement at 1:"},
		{"doubling in a straight line", "a=" + strings.Repeat("x", 1024) + strings.Repeat("; a=$a$a", 20), "would hold more than"},
		{"assignments of one statement see each other", "a=" + strings.Repeat("x", 1024) + "; b=$a" + strings.Repeat(" a=$a$a$a$a", 10), "would hold more than"},
		{"an expansion as arguments", "a=" + strings.Repeat("x", 1024) + "; b=" + strings.Repeat("$a", 512) + "; : " + strings.Repeat("$b ", 64), "would hold more than"},
		{"for words", k100 + "for i in " + strings.Repeat("$a ", 64) + "; do :; done", "would hold more than"},
		{"[[ ]] words", k100 + "[[ " + strings.Repeat("$a", 64) + " == x ]]", "would hold more than"},
		{"${x:=...} assigns in the statement", k100 + ": ${b:=" + strings.Repeat("$a", 8) + "} ${c:=" + strings.Repeat("$b", 8) + "}", "would hold more than"},
		{"command substitution output", k100 + "x=$(" + strings.Repeat("echo $a; ", 64) + ")", "would hold more than"},
		{"command substitutions side by side", k100 + "echo $a > /tmp/f; x=" + strings.Repeat("$(cat /tmp/f)", 64), "would hold more than"},
		{"file reads side by side", k100 + "echo $a > /tmp/f; x=" + strings.Repeat("$(</tmp/f)", 64), "would hold more than"},
		{"nested command substitutions", k100 + "f() { x=$(echo $a; f); }; f", "would hold more than"},
		{"a loop in a command substitution", k100 + "x=$(while :; do echo $a; done)", "would hold more than"},
		{"a here-document", k100 + "cat <<EOF >/dev/null\n" + strings.Repeat("$a", 64) + "\nEOF", "would hold more than"},
		{"printf repeats its format", "printf '" + strings.Repeat("x", 1000) + "' $(seq 2000) >/dev/null", "would hold more than"},
		{"brace expansion of a variable", k100 + "echo {a,b}{a,b}{a,b}{a,b}$a >/dev/null", "would hold more than"},
		{"growing parameters of a recursion", k100 + "f() { f \"x$1\"; }; f $a", "would hold more than"},
		{"recursion", "f(){ f; }; f", "would hold more than 1048576 bytes (calling f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			got := Run(context.Background(), &Program{Command: sh(tc.script)}, Limits{Steps: 1 << 20, RealTime: time.Minute})
			runtime.ReadMemStats(&after)
			if got.Honoured || !got.Limit || !strings.HasPrefix(got.Reason, tc.reason) {
				t.Errorf("Run = %+v, want not honoured, a limit: %q...", got, tc.reason)
			}
			if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 32<<20 {
				t.Errorf("the run allocated %d MiB", grew>>20)
			}
		})
	}
}

// TestRunMemoryOrdinary: what ordinary scripts do is honoured within the default limits, and the
// guards change no exit status ($?, set -e, the statuses of assignments and negations).
func TestRunMemoryOrdinary(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		exit         int32
	}{
		{"loops writing files", `mkdir -p /tmp/d; for i in $(seq 100); do echo "line $i" >> /tmp/d/f; done; n=0; while read -r l; do n=$((n+1)); done < /tmp/d/f; exit $((n - 97))`, 3},
		{"printf and command substitutions", `x=$(printf '%s-%05d' a 42); y="$(echo "$x")$(echo "$x")"; [ "$y" = a-00042a-00042 ] && exit 4`, 4},
		{"a 300 KiB variable", `a=$(printf '%0307200d' 0); [ ${#a} -eq 307200 ] && exit 5`, 5},
		{"$? after a failure", `false; exit $?`, 1},
		{"$? of an assignment with a substitution", `x=$(exit 7); exit $?`, 7},
		{"$? of an assignment", `false; x=1; exit $?`, 0},
		{"$? in a condition", `(exit 6) || exit $?`, 6},
		{"negation", `! true; exit $?`, 1},
		{"negation in a list", `! false && ! (exit 3); exit $?`, 0},
		{"a file read by $(<file)", `echo hello > /tmp/f; x=$(</tmp/f); [ "$x" = hello ] && exit 16`, 16},
		{"set -e stops at a failure", `set -e; x=1; (exit 9); exit 0`, 9},
		{"set -e ignores a failing &&", `set -e; false && true; x=$?; exit $((x + 10))`, 11},
		{"a function's status", `f() { x=2; return 12; }; f; exit $?`, 12},
		{"case and [[ ]]", `x=abc; case $x in a*) [[ $x == *c ]] && exit 13;; esac`, 13},
		{"here-document", "read -r l <<EOF\nhello $HOSTNAME\nEOF\n[ \"$l\" = 'hello h' ] && exit 14", 14},
		{"recursion 50 deep", `f() { if [ $1 -gt 0 ]; then f $(($1 - 1)); else exit 15; fi; }; f 50`, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Run(context.Background(), &Program{Command: sh(tc.script), Hostname: "h"}, Limits{RealTime: time.Minute})
			if !got.Honoured || got.ExitCode != tc.exit {
				t.Errorf("Run = %+v, want honoured, exit %d", got, tc.exit)
			}
		})
	}
}

// heapPeak samples the heap's live objects until done is closed, and returns the most seen.
func heapPeak(done <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				out <- peak
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	return out
}

// TestRunnerBudget: 100 runs of a worst-case command at once (each holds most of its 1 MiB, then
// loops to its step limit) through one Runner hold at most the budget together: the runs interpreting
// at once and the live heap they make are bounded by Budget, whatever the number of runs waiting.
func TestRunnerBudget(t *testing.T) {
	worst := &Program{Command: sh("a=" + strings.Repeat("x", 1024) + "; b=" + strings.Repeat("$a", 800) + "; while :; do :; done")}
	for _, tc := range []struct {
		name     string
		budget   Budget
		runs     int
		heapMiB  uint64 // the most the live heap may grow
		parallel int
	}{
		{"default budget", Budget{}, 100, 24, 1},
		{"8 MiB, 4 at once", Budget{Memory: 8 << 20, Parallel: 4}, 100, 24, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := NewRunner(tc.budget)
			runtime.GC()
			s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			metrics.Read(s)
			base := s[0].Value.Uint64()
			done := make(chan struct{})
			peak := heapPeak(done)
			var wg sync.WaitGroup
			results := make([]Result, tc.runs)
			for i := range tc.runs {
				wg.Go(func() {
					var err error
					results[i], err = rr.Run(context.Background(), worst, Limits{Steps: 2000, RealTime: time.Minute})
					if err != nil {
						t.Errorf("run %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			close(done)
			grew := (max(<-peak, base) - base) >> 20
			for i, r := range results {
				if r.Honoured || r.Reason != "took more than 2000 steps" {
					t.Errorf("run %d: %+v, want not honoured: took more than 2000 steps", i, r)
				}
			}
			runs, mem := rr.Peak()
			b := rr.Budget()
			t.Logf("%d runs: at most %d at once holding %d MiB of the budget; live heap grew %d MiB at most", tc.runs, runs, mem>>20, grew)
			if runs > tc.parallel || mem > b.Memory {
				t.Errorf("%d runs at once holding %d bytes, want at most %d, %d", runs, mem, tc.parallel, b.Memory)
			}
			if grew > tc.heapMiB {
				t.Errorf("the live heap grew %d MiB, want at most %d", grew, tc.heapMiB)
			}
		})
	}
}

// TestRunnerWait: a run waiting for the budget ends with ctx, without running.
func TestRunnerWait(t *testing.T) {
	rr := NewRunner(Budget{Memory: 1 << 20, Parallel: 1})
	if err := rr.mem.Acquire(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := rr.Run(ctx, &Program{Command: sh("exit 3")}, Limits{})
	if err == nil || !reflect.DeepEqual(res, Result{}) || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("Run = %+v, %v; want a zero Result and the end of the wait", res, err)
	}
	rr.mem.Release(1 << 20)
	if res, err := rr.Run(context.Background(), &Program{Command: sh("exit 3")}, Limits{}); err != nil || res.ExitCode != 3 {
		t.Errorf("Run = %+v, %v; want exit 3", res, err)
	}
}
