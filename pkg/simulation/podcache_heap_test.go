package simulation

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// benchPodFixture is a pod of bench-pods' scenario 2 as the API server returns it once running on a
// simulated Node (testdata/deployment-pod.json: defaults, managedFields, the status nodeagent writes),
// protobuf-encoded as the informer's watch receives it.
func benchPodFixture(tb testing.TB) []byte {
	tb.Helper()
	data, err := os.ReadFile("testdata/deployment-pod.json")
	if err != nil {
		tb.Fatal(err)
	}
	var p v1.Pod
	if err := json.Unmarshal(data, &p); err != nil {
		tb.Fatal(err)
	}
	b, err := p.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkPodCacheHeap reports the heap one running pod of a simulated Node holds in the process's
// pod informer: decoded from protobuf as the watch decodes it, through the informer's transform
// (trimPod) into an indexer with node.PodIndexers, 10 000 pods on 1000 Nodes, 400 started in each
// second: own, the Nodes of the shard; other-shard, the Nodes of another shard (trimmed to their keys).
// go test -run '^$' -bench PodCacheHeap ./pkg/simulation; with POD_CACHE_HEAP_PROFILE=FILE and
// -memprofilerate=1 it writes a heap profile of the cached pods to FILE.
func BenchmarkPodCacheHeap(b *testing.B) {
	for _, bc := range []struct {
		name  string
		shard Shard
	}{
		{"own", Shard{Index: 0, Count: 1}},
		{"other-shard", Shard{Index: 1, Count: 2}}, // pods of Nodes 0-999, the shard's are 1000-1999
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkPodCacheHeap(b, bc.shard) })
	}
}

func benchmarkPodCacheHeap(b *testing.B, shard Shard) {
	const pods, nodes, perSecond = 10000, 1000, 400
	wire := benchPodFixture(b)
	transform := trimPod("sim-node-", shard, nodes, false)
	var perPod float64
	for b.Loop() {
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, node.PodIndexers())
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range pods {
			var p v1.Pod
			if err := p.Unmarshal(wire); err != nil {
				b.Fatal(err)
			}
			p.Name = fmt.Sprintf("app-%05d", i)
			p.UID = types.UID(fmt.Sprintf("0c1f7d4e-5b7a-4d6e-9a51-%012d", i))
			p.ResourceVersion = strconv.Itoa(200000 + i)
			p.Spec.NodeName = NodeName("sim-node-", i%nodes)
			// What differs from pod to pod: its IP and container ID; its times, by the second
			// (perSecond pods started in each, as in bench-pods' scenario 1).
			p.Status.PodIP = fmt.Sprintf("10.244.%d.%d", i/250, i%250+2)
			p.Status.PodIPs = []v1.PodIP{{IP: p.Status.PodIP}}
			p.Status.ContainerStatuses[0].ContainerID = fmt.Sprintf("containerd://%064x", i)
			shift := time.Duration(i/perSecond) * time.Second
			for j := range p.Status.Conditions {
				p.Status.Conditions[j].LastTransitionTime = metav1.NewTime(p.Status.Conditions[j].LastTransitionTime.Add(shift))
			}
			start := metav1.NewTime(p.Status.StartTime.Add(shift))
			p.Status.StartTime = &start
			p.Status.ContainerStatuses[0].State.Running.StartedAt = start
			obj, err := transform(&p)
			if err != nil {
				b.Fatal(err)
			}
			if err := indexer.Add(obj); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPod = float64(after.HeapAlloc-before.HeapAlloc) / pods
		writeHeapProfile(b, "POD_CACHE_HEAP_PROFILE")
		runtime.KeepAlive(indexer)
	}
	b.ReportMetric(perPod, "heapB/pod")
}
