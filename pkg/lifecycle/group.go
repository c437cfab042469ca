// Package lifecycle runs a process's components as one group with one shutdown timeout, as
// controller-runtime's manager runs its Runnables: every Runnable starts at Run; the group stops
// when its context ends or when a Runnable returns an error; then every Runnable's context is
// cancelled and Run waits for them, at most ShutdownTimeout. The agent, companion mode and the
// simulation each run as one Group.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Runnable is a component that runs until its context ends (controller-runtime's manager.Runnable).
// Run returns nil when it stopped because ctx ended, or the error that stopped it.
type Runnable interface {
	Run(ctx context.Context) error
}

// RunnableFunc is a func as a Runnable.
type RunnableFunc func(ctx context.Context) error

// Run calls f.
func (f RunnableFunc) Run(ctx context.Context) error { return f(ctx) }

// DefaultShutdownTimeout is how long Run waits for the Runnables after the group stops, when the
// Group's ShutdownTimeout is 0 (controller-runtime's default gracefulShutdownTimeout is 30 s; an
// agent's loops stop within a request timeout).
const DefaultShutdownTimeout = 10 * time.Second

// Group is a set of named Runnables with one shutdown timeout. Add them, then call Run once.
type Group struct {
	// ShutdownTimeout bounds the wait for the Runnables once the group stops; DefaultShutdownTimeout
	// when 0.
	ShutdownTimeout time.Duration
	// Clock times the shutdown; default the real clock.
	Clock clock.Clock

	names     []string
	runnables []Runnable
}

// Add adds r under name (for logs and errors). Adding after Run has no effect.
func (g *Group) Add(name string, r Runnable) {
	g.names = append(g.names, name)
	g.runnables = append(g.runnables, r)
}

// ErrShutdownTimeout is wrapped in Run's error when some Runnables did not return within the
// shutdown timeout; the error names them.
var ErrShutdownTimeout = errors.New("runnables did not stop within the shutdown timeout")

// Run starts every Runnable in its own goroutine and blocks until ctx ends or one of them returns
// an error (or returns at all before ctx ended); then it cancels the others and waits for them,
// at most ShutdownTimeout. It returns the Runnables' errors joined, each wrapped with its name, plus
// ErrShutdownTimeout (wrapped, naming those still running) when the wait timed out; nil when every
// Runnable returned nil after ctx ended.
func (g *Group) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	timeout := g.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	clk := g.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(g.runnables))
	var mu sync.Mutex
	running := make(map[int]bool, len(g.runnables))
	for i := range g.runnables {
		running[i] = true // before any goroutine starts: one that returns at once deletes its entry
	}
	for i, r := range g.runnables {
		go func() {
			err := r.Run(runCtx)
			mu.Lock()
			delete(running, i)
			mu.Unlock()
			results <- result{i, err}
		}()
	}
	var errs []error
	pending := len(g.runnables)
	record := func(r result) {
		pending--
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", g.names[r.i], r.err))
		} else if ctx.Err() == nil && runCtx.Err() == nil {
			errs = append(errs, fmt.Errorf("%s: stopped before the group", g.names[r.i]))
		}
	}
	if pending > 0 {
		select {
		case <-ctx.Done():
		case r := <-results:
			record(r)
			if r.err != nil {
				logger.Error(r.err, "Stopping: a component failed", "component", g.names[r.i])
			}
		}
	}
	cancel()
	timer := clk.NewTimer(timeout)
	defer timer.Stop()
	for pending > 0 {
		select {
		case r := <-results:
			record(r)
		case <-timer.C():
			mu.Lock()
			var names []string
			for i := range g.runnables {
				if running[i] {
					names = append(names, g.names[i])
				}
			}
			mu.Unlock()
			logger.Info("Some components did not stop within the shutdown timeout; exiting anyway", "timeout", timeout, "components", names)
			return errors.Join(append(errs, fmt.Errorf("%w (%s): %v", ErrShutdownTimeout, timeout, names))...)
		}
	}
	return errors.Join(errs...)
}
