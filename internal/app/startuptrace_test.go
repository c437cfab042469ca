package app

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartStartupTrace: the trace (the CPU profile) is written only when NODEAGENT_STARTUP_TRACE
// (NODEAGENT_STARTUP_CPUPROFILE) names a writable file, each without the other; a bad duration falls back
// to the default; stop is safe to call twice and when nothing runs.
func TestStartStartupTrace(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path, profile, duration string
		wantFile, wantProfile   bool
	}{
		"unset":          {},
		"written":        {path: filepath.Join(dir, "a.trace"), duration: "1m", wantFile: true},
		"bad duration":   {path: filepath.Join(dir, "b.trace"), duration: "soon", wantFile: true},
		"unwritable dir": {path: filepath.Join(dir, "missing", "c.trace")},
		"profile only":   {profile: filepath.Join(dir, "d.pprof"), wantProfile: true},
		"both":           {path: filepath.Join(dir, "e.trace"), profile: filepath.Join(dir, "e.pprof"), wantFile: true, wantProfile: true},
		"profile unwritable, trace written": {path: filepath.Join(dir, "f.trace"), profile: filepath.Join(dir, "missing", "f.pprof"),
			wantFile: true},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{StartupTraceEnv: tc.path, StartupTraceEnv + "_DURATION": tc.duration,
				StartupCPUProfileEnv: tc.profile}
			stop := StartStartupTrace(func(k string) string { return env[k] })
			stop()
			stop()
			for _, f := range []struct {
				path string
				want bool
			}{{tc.path, tc.wantFile}, {tc.profile, tc.wantProfile}} {
				if f.path == "" {
					continue
				}
				fi, err := os.Stat(f.path)
				if got := err == nil && fi.Size() > 0; got != f.want {
					t.Errorf("%s written = %v (%v), want %v", f.path, got, err, f.want)
				}
			}
		})
	}
}
