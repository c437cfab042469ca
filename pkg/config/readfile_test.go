package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFileLimited: a file over the limit and /dev/zero are refused with an error naming the
// file and the limit, without being read whole; a file at the limit is read.
func TestReadFileLimited(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	atLimit, overLimit := write("at", 1024), write("over", 1025)
	for _, tc := range []struct {
		path    string
		limit   int64
		wantLen int
		wantErr []string
		is      error
	}{
		{path: atLimit, limit: 1024, wantLen: 1024},
		{path: overLimit, limit: 1024, wantErr: []string{overLimit, "1025 bytes", "the limit is 1024 bytes (1 KiB)"}, is: ErrFileTooLarge},
		{path: "/dev/zero", limit: MaxFileSize, wantErr: []string{`"/dev/zero"`, "more than the limit of 4194304 bytes (4 MiB)"}, is: ErrFileTooLarge},
		{path: filepath.Join(dir, "none"), limit: 1024, wantErr: []string{"none"}, is: fs.ErrNotExist},
	} {
		data, err := ReadFileLimited(tc.path, tc.limit)
		if tc.wantErr == nil {
			if err != nil || len(data) != tc.wantLen {
				t.Errorf("ReadFileLimited(%s, %d) = %d bytes, %v; want %d bytes", tc.path, tc.limit, len(data), err, tc.wantLen)
			}
			continue
		}
		if err == nil || !errors.Is(err, tc.is) {
			t.Errorf("ReadFileLimited(%s, %d) = %v, want %v", tc.path, tc.limit, err, tc.is)
			continue
		}
		for _, w := range tc.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ReadFileLimited(%s): error %q lacks %q", tc.path, err, w)
			}
		}
	}
}

// TestLoadFileBounded: --config=/dev/zero and a config file over MaxFileSize fail at once with an
// error naming --config, the file and the limit (os.ReadFile would read /dev/zero until killed).
func TestLoadFileBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	// Valid YAML (a comment) so that only the size can be the problem.
	if err := os.WriteFile(big, []byte("#"+strings.Repeat("x", int(MaxFileSize))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", big} {
		_, err := LoadFile(path)
		if !errors.Is(err, ErrFileTooLarge) {
			t.Fatalf("LoadFile(%s) = %v, want ErrFileTooLarge", path, err)
		}
		for _, w := range []string{"--config " + `"` + path + `"`, "4194304 bytes (4 MiB)"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("LoadFile(%s) error %q lacks %q", path, err, w)
			}
		}
	}
}
