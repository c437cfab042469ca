//go:build scale || benchcompanion || benchkubeletapi || benchdevices || benchkarpenter

package integration_test

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// The scale tests and the companion benchmark (build tags scale, benchcompanion) take their sizes and
// durations from the environment.

// envInt returns the positive integer in the environment variable name, or def when it is unset; it
// fails the test when the value is not a positive integer.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s %q: want a positive integer", name, v)
	}
	return n
}

// envDuration returns the duration (time.ParseDuration) in the environment variable name, or def when
// it is unset; it fails the test when the value does not parse.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s %q: %v", name, v, err)
	}
	return d
}
