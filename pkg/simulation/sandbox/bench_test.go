package sandbox

import (
	"context"
	"strings"
	"testing"
)

// BenchmarkRun: the CPU (ns/op) and heap (B/op, allocs/op) of one interpreted run, parse included, for
// the e2e Job fixtures, a loop, a loop that sleeps cut at its steps (Result.Cut) and a busy loop
// refused at them. BENCHMARKS.md ("Sandbox: one interpreted command") has the figures.
//
//	go test -run '^$' -bench BenchmarkRun -benchmem ./pkg/simulation/sandbox
func BenchmarkRun(b *testing.B) {
	vol := NewFS(0)
	for _, bc := range []struct {
		name string
		p    Program
	}{
		{"sleep 300", Program{Command: []string{"sleep", "300"}}},
		{"exit 1", Program{Command: []string{"/bin/sh", "-c", "exit 1"}}},
		{"failOddSucceedEven", Program{Command: []string{"sh", "-c"}, Args: []string{failOddSucceedEven}, Env: []string{"JOB_COMPLETION_INDEX=3"}}},
		{"failOncePerIndex", Program{Command: []string{"/bin/sh", "-c"}, Args: []string{failOncePerIndex}, Env: []string{"JOB_COMPLETION_INDEX=3"},
			Mounts: []Mount{{Path: "/data", FS: vol, Root: "/"}}}},
		{"loop of 100 with arithmetic", Program{Command: []string{"sh", "-c", `i=0; while [ $i -lt 100 ]; do i=$((i+1)); done; sleep $i`}}},
		{"refused: unknown program", Program{Command: []string{"sh", "-c", "wget http://example.com/"}}},
		{"cut: the Ephemeral Containers loop", Program{Command: []string{"sh", "-c", "while true; do echo polo; sleep 2; done"}}},
		{"refused: a busy loop", Program{Command: []string{"sh", "-c", "while true; do :; done"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := Run(context.Background(), &bc.p, Limits{}); r.Honoured == strings.HasPrefix(bc.name, "refused") {
					b.Fatalf("%+v", r)
				}
			}
		})
	}
}
