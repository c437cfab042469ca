package main

import "testing"

func TestGroup(t *testing.T) {
	tests := []struct {
		name  string
		depth int
		want  string
	}{
		{"k8s.io/api/core/v1.(*Pod).Marshal", 3, "k8s.io/api/core"},
		{"k8s.io/api/core/v1.(*Pod).Marshal", 6, "k8s.io/api/core/v1"},
		{"type:*k8s.io/api/core/v1.Pod", 4, "k8s.io/api/core/v1"},
		{"runtime.mallocgc", 3, "runtime"},
		{"go:string.*", 3, "go:string"},
		{"go:itab.*net/http.http2Framer,io.Writer", 3, "go:itab"},
		{"github.com/nodeagent/nodeagent/pkg/simulation/sandbox.init.0", 5, "github.com/nodeagent/nodeagent/pkg/simulation"},
	}
	for _, tt := range tests {
		if got := group(tt.name, tt.depth); got != tt.want {
			t.Errorf("group(%q, %d) = %q, want %q", tt.name, tt.depth, got, tt.want)
		}
	}
}

func TestAttribute(t *testing.T) {
	ss := []sym{{0, 100, "a"}, {100, 4000, "b"}, {5000, 9000, "c"}}
	tests := []struct {
		name        string
		lo, hi      uint64
		want        map[string]float64
		wantCovered uint64
	}{
		{"two symbols and a gap", 0, 4096, map[string]float64{"a": 100, "b": 3900}, 4000},
		{"a symbol across the page's edge", 4096, 8192, map[string]float64{"c": 3192}, 3192},
		{"no symbol", 9000, 13096, map[string]float64{}, 0},
	}
	for _, tt := range tests {
		got := map[string]float64{}
		if c := attribute(ss, tt.lo, tt.hi, got); c != tt.wantCovered {
			t.Errorf("%s: covered %d, want %d", tt.name, c, tt.wantCovered)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("%s: %s got %v, want %v", tt.name, k, got[k], v)
			}
		}
	}
}
