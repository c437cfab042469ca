// Package lifecycle runs a process's components as one group with one shutdown timeout, as
// controller-runtime's manager runs its Runnables, in two phases (pkg/manager/internal.go): the
// caches start first and the other Runnables once every cache has synced; the group stops when its
// context ends or when a Runnable returns an error; then the other Runnables are cancelled and
// waited for, then the caches (stop in reverse), in all at most ShutdownTimeout. The agent,
// companion mode and the simulation each run as one Group.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Runnable is a component that runs until its context ends (controller-runtime's manager.Runnable).
// Run returns nil when it stopped because ctx ended, or the error that stopped it.
type Runnable interface {
	Run(ctx context.Context) error
}

// Cache is a Runnable that others read (an informer factory's): Group starts the other Runnables
// once WaitForCacheSync has returned true (controller-runtime's cache phase). WaitForCacheSync
// returns false when ctx ended first.
type Cache interface {
	Runnable
	WaitForCacheSync(ctx context.Context) bool
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
	caches    []int // indexes of the Runnables added with AddCache
}

// Add adds r under name (for logs and errors). Adding after Run has no effect.
func (g *Group) Add(name string, r Runnable) {
	g.names = append(g.names, name)
	g.runnables = append(g.runnables, r)
}

// AddCache adds c under name to the first phase: Run starts it before the others, which start once
// every cache has synced, and stops it after them. Adding after Run has no effect.
func (g *Group) AddCache(name string, c Cache) {
	g.caches = append(g.caches, len(g.runnables))
	g.Add(name, c)
}

// ErrShutdownTimeout is wrapped in Run's error when some Runnables did not return within the
// shutdown timeout; the error names them.
var ErrShutdownTimeout = errors.New("runnables did not stop within the shutdown timeout")

// Run starts the caches, each in its own goroutine, waits for them to sync, then starts every other
// Runnable, and blocks until ctx ends or one of them returns an error (or returns at all before ctx
// ended); then it cancels the other Runnables, waits for them, and then for the caches, in all at
// most ShutdownTimeout. It returns the Runnables' errors joined, each wrapped with its name, plus
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
	runCtx, cancel := context.WithCancel(ctx) // the phase of the Runnables that are not caches
	// The caches' phase: cancelled last, once the others have returned, not when ctx ends.
	cacheCtx, cancelCaches := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer cancelCaches()
	isCache := make(map[int]bool, len(g.caches))
	for _, i := range g.caches {
		isCache[i] = true
	}

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
	start := func(i int, ctx context.Context) {
		go func() {
			err := g.runnables[i].Run(ctx)
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
	stopped := func(r result) {
		record(r)
		if r.err != nil {
			logger.Error(r.err, "Stopping: a component failed", "component", g.names[r.i])
		}
	}
	// Phase 1: the caches, until every one has synced (or the group stops).
	synced := make(chan bool, 1)
	for _, i := range g.caches {
		start(i, cacheCtx)
	}
	go func() {
		ok := true
		for _, i := range g.caches {
			ok = ok && g.runnables[i].(Cache).WaitForCacheSync(runCtx)
		}
		synced <- ok
	}()
	stop := false
	select {
	case <-ctx.Done():
		stop = true
	case r := <-results:
		stopped(r)
		stop = true
	case ok := <-synced:
		stop = !ok
	}
	// Phase 2: the rest, until the group stops.
	if !stop {
		for i := range g.runnables {
			if !isCache[i] {
				start(i, runCtx)
			}
		}
		select {
		case <-ctx.Done():
		case r := <-results:
			stopped(r)
		}
	} else {
		mu.Lock()
		for i := range g.runnables {
			if !isCache[i] {
				delete(running, i) // never started
				pending--
			}
		}
		mu.Unlock()
	}
	cancel()
	timer := clk.NewTimer(timeout)
	defer timer.Stop()
	// Stop in reverse: the caches once every other Runnable has returned.
	others := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for i := range running {
			if !isCache[i] {
				n++
			}
		}
		return n
	}
	if others() == 0 {
		cancelCaches()
	}
	for pending > 0 {
		select {
		case r := <-results:
			record(r)
			if others() == 0 {
				cancelCaches()
			}
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

// Informers is a client-go SharedInformerFactory as a Cache: Run starts its informers and shuts them
// down when ctx ends; WaitForCacheSync waits for every informer requested from it so far.
type Informers struct {
	informers.SharedInformerFactory
}

// Run starts the informers, blocks until ctx ends, then shuts them down (waiting for their
// goroutines). It returns nil.
func (f Informers) Run(ctx context.Context) error {
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// WaitForCacheSync reports whether every started informer has synced before ctx ended.
func (f Informers) WaitForCacheSync(ctx context.Context) bool {
	for _, ok := range f.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return false
		}
	}
	return true
}
