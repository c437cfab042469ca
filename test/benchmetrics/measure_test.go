package main

import (
	"math"
	"testing"
)

// TestHistogramQuantile: the quantile is interpolated within its bucket, as Prometheus'
// histogram_quantile does; one past the last finite bound is that bound; an empty histogram is NaN.
func TestHistogramQuantile(t *testing.T) {
	h := histogram{0.005: 0, 0.01: 50, 0.025: 90, 0.05: 99, 0.1: 100, math.Inf(1): 100}
	for _, tc := range []struct {
		q, want float64
	}{{0.5, 0.01}, {0.25, 0.0075}, {0.9, 0.025}, {0.99, 0.05}, {0.995, 0.075}} {
		if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("q %v: %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := (histogram{1: 10, math.Inf(1): 20}).quantile(0.99); got != 1 {
		t.Errorf("in +Inf: %v, want the last finite bound 1", got)
	}
	if got := (histogram{1: 0, math.Inf(1): 0}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty: %v, want NaN", got)
	}
	if got := (histogram{1: 10, 2: 30}).sub(histogram{1: 4, 2: 10}); got[1] != 6 || got[2] != 20 {
		t.Errorf("sub: %v", got)
	}
}
