package startgc

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestPause: the collector is paused under MemoryLimit unless GOGC or GOMEMLIMIT is set, and Release
// restores Go's defaults once.
func TestPause(t *testing.T) {
	t.Cleanup(func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	})
	for _, tc := range []struct {
		name       string
		env        map[string]string
		wantPaused bool
	}{
		{"no environment", nil, true},
		{"GOGC set", map[string]string{"GOGC": "200"}, false},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			got := pause(func(k string) string { return tc.env[k] })
			if got != tc.wantPaused {
				t.Fatalf("pause = %v, want %v", got, tc.wantPaused)
			}
			percent, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
			wantPercent, wantLimit := 100, int64(math.MaxInt64)
			if tc.wantPaused {
				wantPercent, wantLimit = -1, MemoryLimit
			}
			if percent != wantPercent || limit != wantLimit {
				t.Errorf("after pause: GC percent %d, memory limit %d; want %d, %d", percent, limit, wantPercent, wantLimit)
			}
		})
	}
}

// TestRelease: Release turns a paused collector back on (GOGC=100, no limit), reports it no longer
// paused, and a second call changes nothing.
func TestRelease(t *testing.T) {
	t.Cleanup(func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	})
	paused.Store(pause(func(string) string { return "" }))
	if !Paused() {
		t.Fatal("Paused() = false after pause")
	}
	Release()
	if Paused() {
		t.Error("Paused() = true after Release")
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GC percent after Release = %d, want 100", p)
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Errorf("memory limit after Release = %d, want none", l)
	}
	debug.SetGCPercent(300) // an operator's later choice stays
	Release()
	if p := debug.SetGCPercent(100); p != 300 {
		t.Errorf("a second Release changed the GC percent to %d", p)
	}
}
