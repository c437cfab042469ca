package simulation

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
)

// BenchmarkNodeHeap reports the heap one simulated Node's own objects hold before it has talked to
// the API server: its simNode (host, in-memory runtime) and its controller (node.New: setters,
// syncer, Lease renewer, runtime poller, start-up state), built for 2000 Nodes of the default
// template. What the Node holds once running (the informer's copy of the Node: see
// nodecache.BenchmarkTrimNodeHeap; the Lease kept for its next update; the last patch) comes on top.
// go test -run '^$' -bench NodeHeap ./pkg/simulation; with NODE_HEAP_PROFILE=FILE and -memprofilerate=1 it
// writes a heap profile of the live Nodes to FILE.
func BenchmarkNodeHeap(b *testing.B) {
	const n = 2000
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	deps := node.Dependencies{Client: client, HeartbeatClient: client, Cache: nodecache.New(clock.RealClock{}),
		NodeLister: factory.Core().V1().Nodes().Lister(),
		Recorder:   &record.FakeRecorder{}, Clock: clock.RealClock{}}
	nodeCfg := node.Config{NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
		NodeLeaseDurationSeconds: 40, NodeStatusMaxImages: 50, AgentVersion: "v0.0.0-test"}
	var perNode float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		sim, err := New(Config{Nodes: n, NamePrefix: "sim-node-", Node: nodeCfg, Dependencies: deps})
		if err != nil {
			b.Fatal(err)
		}
		ctrls := make([]*node.Controller, n)
		for i, sn := range sim.nodes {
			if ctrls[i], err = node.New(sim.nodeConfig(sn), sim.cfg.Dependencies); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perNode = float64(after.HeapAlloc-before.HeapAlloc) / n
		writeHeapProfile(b, "NODE_HEAP_PROFILE")
		runtime.KeepAlive(ctrls)
		runtime.KeepAlive(sim)
	}
	b.ReportMetric(perNode, "heapB/node")
}

// writeHeapProfile writes the heap profile to the file $env names, if set (with -memprofilerate=1 for
// every allocation).
func writeHeapProfile(b *testing.B, env string) {
	path := os.Getenv(env)
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}
