package app

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartStartupTrace: the trace is written only when NODEAGENT_STARTUP_TRACE names a writable
// file; a bad duration falls back to the default; stop is safe to call twice and when nothing runs.
func TestStartStartupTrace(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path, duration string
		wantFile       bool
	}{
		"unset":          {},
		"written":        {path: filepath.Join(dir, "a.trace"), duration: "1m", wantFile: true},
		"bad duration":   {path: filepath.Join(dir, "b.trace"), duration: "soon", wantFile: true},
		"unwritable dir": {path: filepath.Join(dir, "missing", "c.trace")},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{StartupTraceEnv: tc.path, StartupTraceEnv + "_DURATION": tc.duration}
			stop := StartStartupTrace(func(k string) string { return env[k] })
			stop()
			stop()
			if tc.path == "" {
				return
			}
			fi, err := os.Stat(tc.path)
			if got := err == nil && fi.Size() > 0; got != tc.wantFile {
				t.Errorf("trace file written = %v (%v), want %v", got, err, tc.wantFile)
			}
		})
	}
}
