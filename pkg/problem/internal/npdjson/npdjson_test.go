package npdjson

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// TestReadFileBounded: a monitor config given as /dev/zero or over config.MaxFileSize is refused with
// a FieldError naming the kind, the file and the limit, instead of being read until memory runs out.
func TestReadFileBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"x":"`+strings.Repeat("x", int(config.MaxFileSize))+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", big} {
		var v map[string]any
		err := ReadFile("system-log-monitor", path, &v)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("ReadFile(%s) = %v, want a FieldError", path, err)
		}
		for _, w := range []string{"system-log-monitor config " + path, config.ErrFileTooLarge.Error(), "4194304 bytes (4 MiB)"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ReadFile(%s) error %q lacks %q", path, err, w)
			}
		}
	}
}
