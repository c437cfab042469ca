package fulldisk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMount: a file cannot be written in the mounted directory until the filler is removed.
func TestMount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "full")
	filler := Mount(t, dir)
	if filepath.Dir(filler) != dir {
		t.Errorf("filler %s, want it in %s", filler, dir)
	}
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, make([]byte, 4096), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write in the full dir: %v, want ENOSPC", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(probe, make([]byte, 4096), 0o600); err != nil {
		t.Errorf("write once the filler is gone: %v", err)
	}
}
