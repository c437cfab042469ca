package config

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxFileSize is the cap ReadFileLimited callers use for operator-given configuration files
// (--config, node-problem-detector monitor configs, node templates): 4 MiB, far above any real
// file (a full config is a few KiB) and small enough that /dev/zero or a wrong path cannot exhaust
// memory.
const MaxFileSize int64 = 4 << 20

// ErrFileTooLarge is wrapped by ReadFileLimited's error when the file holds more than the limit.
var ErrFileTooLarge = errors.New("file too large")

// ReadFileLimited reads the file at path as os.ReadFile does, but at most limit bytes (limit > 0;
// use MaxFileSize): a file larger than limit, or a device or pipe that yields more than limit
// bytes (/dev/zero), is an error wrapping ErrFileTooLarge that names the file and the limit, e.g.
// `reading "/dev/zero": file too large: more than the limit of 4194304 bytes (4 MiB)`. Other errors are
// os.Open's or the read's, wrapped with %w (errors.Is(err, fs.ErrNotExist) works). It never reads
// more than limit+1 bytes, whatever the file's reported size. The kubelet reads --config with
// os.ReadFile (pkg/kubelet/kubeletconfig/configfiles), unbounded; this is nodeagent's own guard.
func ReadFileLimited(path string, limit int64) ([]byte, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("reading %q: limit %d: must be positive", path, limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, fmt.Errorf("reading %q: %w: %d bytes, the limit is %d bytes (%s)", path, ErrFileTooLarge, fi.Size(), limit, humanBytes(limit))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("reading %q: %w: more than the limit of %d bytes (%s)", path, ErrFileTooLarge, limit, humanBytes(limit))
	}
	return data, nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
