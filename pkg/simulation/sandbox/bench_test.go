package sandbox

import (
	"context"
	"testing"
)

// BenchmarkRun: the CPU (ns/op) and heap (B/op, allocs/op) of one interpreted run, parse included, for
// the e2e Job fixtures and a loop. BENCHMARKS.md ("Sandbox: one interpreted command") has the figures.
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
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := Run(context.Background(), &bc.p, Limits{}); r.Honoured == (bc.name == "refused: unknown program") {
					b.Fatalf("%+v", r)
				}
			}
		})
	}
}
