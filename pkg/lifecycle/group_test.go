package lifecycle

import (
	"context"
	"errors"
	"strings"
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
