package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestGroup: the group stops when its context ends or a Runnable fails, cancels the others, waits
// at most the shutdown timeout, and says which Runnables failed or did not stop.
func TestGroup(t *testing.T) {
	boom := errors.New("boom")
	var release chan struct{} // closed after each case's Run: lets the stuck runnable end
	untilDone := RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return nil })
	for _, tc := range []struct {
		name       string
		runnables  map[string]Runnable
		cancelAt   time.Duration // 0: never
		wantErr    []string
		wantTimout bool
		wantTook   time.Duration
	}{
		{name: "every runnable stops with the context", runnables: map[string]Runnable{"a": untilDone, "b": untilDone},
			cancelAt: time.Second, wantTook: time.Second},
		{name: "a failing runnable stops the others", runnables: map[string]Runnable{"a": untilDone,
			"b": RunnableFunc(func(ctx context.Context) error { time.Sleep(2 * time.Second); return boom })},
			wantErr: []string{"b: boom"}, wantTook: 2 * time.Second},
		{name: "a runnable that ignores its context is waited for 10 s", runnables: map[string]Runnable{"a": untilDone,
			"stuck": RunnableFunc(func(ctx context.Context) error { <-release; return nil })},
			cancelAt: time.Second, wantErr: []string{"stuck"}, wantTimout: true, wantTook: 11 * time.Second},
		{name: "a runnable that returns early stops the group", runnables: map[string]Runnable{"a": untilDone,
			"early": RunnableFunc(func(ctx context.Context) error { return nil })},
			wantErr: []string{"early: stopped before the group"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release = make(chan struct{})
				defer close(release)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var g Group
				for name, r := range tc.runnables {
					g.Add(name, r)
				}
				if tc.cancelAt > 0 {
					go func() { time.Sleep(tc.cancelAt); cancel() }()
				}
				start := time.Now()
				err := g.Run(ctx)
				if took := time.Since(start); took != tc.wantTook {
					t.Errorf("Run took %v, want %v", took, tc.wantTook)
				}
				if len(tc.wantErr) == 0 && err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("Run = %v, want it to say %q", err, w)
					}
				}
				if got := errors.Is(err, ErrShutdownTimeout); got != tc.wantTimout {
					t.Errorf("errors.Is(err, ErrShutdownTimeout) = %v, want %v", got, tc.wantTimout)
				}
			})
		})
	}
}

// fakeCache syncs syncAfter after it starts (never when negative), and records when it starts and stops.
type fakeCache struct {
	syncAfter time.Duration
	log       *[]string
	mu        *sync.Mutex
	synced    chan struct{}
}

func (c *fakeCache) note(s string) { c.mu.Lock(); *c.log = append(*c.log, s); c.mu.Unlock() }

func (c *fakeCache) Run(ctx context.Context) error {
	c.note(fmt.Sprintf("cache start %v", time.Since(epoch)))
	if c.syncAfter >= 0 {
		go func() { time.Sleep(c.syncAfter); close(c.synced) }()
	}
	<-ctx.Done()
	c.note("cache stop")
	return nil
}

func (c *fakeCache) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-c.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

var epoch time.Time

// TestGroupPhases: caches start first and the other Runnables only once every cache has synced; on
// stop the others return before the caches are cancelled (controller-runtime's manager); a cache that
// never syncs keeps the others from starting, and the group still stops with its context.
func TestGroupPhases(t *testing.T) {
	for _, tc := range []struct {
		name      string
		syncAfter time.Duration
		want      []string
	}{
		{name: "the runnable starts once the cache has synced, and stops before it", syncAfter: 2 * time.Second,
			want: []string{"cache start 0s", "runnable start 2s", "runnable stop", "cache stop"}},
		{name: "a cache that never syncs: the runnable never starts", syncAfter: -1,
			want: []string{"cache start 0s", "cache stop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				epoch = time.Now()
				var log []string
				var mu sync.Mutex
				note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var g Group
				g.Add("runnable", RunnableFunc(func(ctx context.Context) error {
					note(fmt.Sprintf("runnable start %v", time.Since(epoch)))
					<-ctx.Done()
					time.Sleep(time.Second) // the cache must outlive this
					note("runnable stop")
					return nil
				}))
				g.AddCache("cache", &fakeCache{syncAfter: tc.syncAfter, log: &log, mu: &mu, synced: make(chan struct{})})
				go func() { time.Sleep(5 * time.Second); cancel() }()
				if err := g.Run(ctx); err != nil {
					t.Errorf("Run = %v", err)
				}
				if strings.Join(log, ", ") != strings.Join(tc.want, ", ") {
					t.Errorf("order %q, want %q", log, tc.want)
				}
			})
		})
	}
}
