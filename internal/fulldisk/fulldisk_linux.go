package fulldisk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Size is the size of the tmpfs Mount mounts.
const Size = "16k"

// Mount creates dir (and its parents) if missing, mounts a tmpfs of Size over it and fills it with one
// file, whose path it returns: remove that file to make room again. The tmpfs is unmounted (lazily) when
// the test ends. Mount fails the test when dir cannot be created, the tmpfs cannot be mounted (the
// process is not root), or the filler cannot be written until the filesystem reports ENOSPC.
func Mount(t testing.TB, dir string) (filler string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+Size); err != nil {
		t.Fatalf("cannot mount a tmpfs on %s for a full disk (the tests run as root, as CI does): %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	filler = filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err = f.Write(block); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fill %s: %v, want ENOSPC", filler, err)
	}
	return filler
}
