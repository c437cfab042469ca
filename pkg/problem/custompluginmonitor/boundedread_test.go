package custompluginmonitor

import (
	"strings"
	"testing"
)

// TestLoadDevZero: a custom plugin monitor config given as /dev/zero is refused with an error naming
// the file and the limit, not read until memory runs out.
func TestLoadDevZero(t *testing.T) {
	_, err := Load("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "custom-plugin-monitor config /dev/zero") || !strings.Contains(err.Error(), "file too large") || !strings.Contains(err.Error(), "4 MiB") {
		t.Fatalf("Load(/dev/zero) = %v, want file too large naming the file and the limit", err)
	}
}
