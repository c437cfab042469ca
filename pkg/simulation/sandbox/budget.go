package sandbox

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"
)

// Budget is what all the runs of one process may take together, whatever the number of pods running
// commands at once. A zero field takes its DefaultBudget value.
type Budget struct {
	// Memory is the most bytes the runs interpreting at once may hold together: each run takes its
	// Limits.Memory of it (at most all of it) for its whole duration.
	Memory int64
	// Parallel is the most runs interpreting at once; each takes at most one core while it runs (a
	// run never waits: it is interpreted from start to end at once, for at most Limits.RealTime).
	Parallel int
}

// DefaultBudget is the budget of a zero Budget field: 64 MiB (64 runs of the default 1 MiB) and one
// run at a time (one core).
var DefaultBudget = Budget{Memory: 64 << 20, Parallel: 1}

func (b Budget) withDefaults() Budget {
	if b.Memory <= 0 {
		b.Memory = DefaultBudget.Memory
	}
	if b.Parallel <= 0 {
		b.Parallel = DefaultBudget.Parallel
	}
	return b
}

// Runner runs commands within a Budget. Safe for concurrent use.
type Runner struct {
	budget   Budget
	mem, cpu *semaphore.Weighted

	mu          sync.Mutex
	running     int
	memHeld     int64
	peakRunning int
	peakMem     int64
	runs        int
}

// NewRunner returns a Runner within b (zero fields: DefaultBudget's).
func NewRunner(b Budget) *Runner {
	b = b.withDefaults()
	return &Runner{budget: b, mem: semaphore.NewWeighted(b.Memory), cpu: semaphore.NewWeighted(int64(b.Parallel))}
}

// Budget returns the runner's budget, defaults applied.
func (rr *Runner) Budget() Budget { return rr.budget }

// Run is Run within the runner's budget: it waits for lim.Memory bytes of the budget (Limits' default
// applied; at most the budget's Memory) and for one of its parallel slots, then runs p. The wait is
// bounded by ctx: when ctx ends first, p does not run and the error (wrapping ctx.Err()) says so; the
// Result is then zero.
func (rr *Runner) Run(ctx context.Context, p *Program, lim Limits) (Result, error) {
	lim = lim.withDefaults()
	w := min(lim.Memory, rr.budget.Memory)
	if err := rr.mem.Acquire(ctx, w); err != nil {
		return Result{}, fmt.Errorf("waiting for %d bytes of the sandbox's budget of %d: %w", w, rr.budget.Memory, err)
	}
	defer rr.mem.Release(w)
	if err := rr.cpu.Acquire(ctx, 1); err != nil {
		return Result{}, fmt.Errorf("waiting for one of the sandbox's %d parallel runs: %w", rr.budget.Parallel, err)
	}
	defer rr.cpu.Release(1)
	rr.mu.Lock()
	rr.running++
	rr.runs++
	rr.memHeld += w
	rr.peakRunning = max(rr.peakRunning, rr.running)
	rr.peakMem = max(rr.peakMem, rr.memHeld)
	rr.mu.Unlock()
	defer func() {
		rr.mu.Lock()
		rr.running--
		rr.memHeld -= w
		rr.mu.Unlock()
	}()
	return Run(ctx, p, lim), nil
}

// Peak returns the most runs that interpreted at once and the most bytes of the budget they held.
func (rr *Runner) Peak() (runs int, memory int64) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.peakRunning, rr.peakMem
}

// Runs returns the number of runs made (not those whose wait ended).
func (rr *Runner) Runs() int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.runs
}
