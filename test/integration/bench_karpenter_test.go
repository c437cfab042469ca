//go:build benchkarpenter

package integration_test

import (
	"strconv"
	"testing"
	"time"
)

// TestBenchKarpenter is `make bench-karpenter`: TestKarpenter's flow at scale, Karpenter's kwok provider
// scaling a Deployment to BENCH_KARPENTER_PODS (default 3000) pods of 100m CPU on instance types of up to
// 32 CPUs (110 pods each), then to 0, with nodeagent simulate and then KWOK v0.8.0 as the backend, each on a
// fresh control plane: seconds from the Deployment's create to all pods Running and from the scale to 0 to
// no Node, NodeClaim or pod left, the backend's CPU over the run and RSS with every pod Running
// (Karpenter's CPU beside), the Lease renew-interval p50/p99 (nearest rank) from the Deployment's create
// through BENCH_KARPENTER_STEADY (default 1m) with every pod Running to the scale to 0, and the Nodes,
// NodeClaims and pods left. Build tag benchkarpenter; not part of make test.
func TestBenchKarpenter(t *testing.T) {
	pods := envInt(t, "BENCH_KARPENTER_PODS", 3000)
	bin := karpenterBin(t)
	runKarpenterBackends(t, bin, karpenterScenario{replicas: int32(pods), cpu: "100m", maxInstanceCPU: strconv.Itoa(33),
		running: envDuration(t, "BENCH_KARPENTER_TIMEOUT", 15*time.Minute), gone: envDuration(t, "BENCH_KARPENTER_TIMEOUT", 15*time.Minute),
		steady: envDuration(t, "BENCH_KARPENTER_STEADY", time.Minute),
		total:  3*envDuration(t, "BENCH_KARPENTER_TIMEOUT", 15*time.Minute) + envDuration(t, "BENCH_KARPENTER_STEADY", time.Minute), minNodes: 1})
}
