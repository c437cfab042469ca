package host

import (
	"encoding/json"
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

func TestNodeStatsFromCadvisor(t *testing.T) {
	ts := time.Date(2026, 11, 27, 7, 0, 10, 0, time.UTC)
	mts := metav1.NewTime(ts)
	sample := func() *cadvisorapi.ContainerStats {
		return &cadvisorapi.ContainerStats{
			Timestamp: ts,
			Cpu: &cadvisorapi.CpuStats{Usage: cadvisorapi.CpuUsage{Total: 9_000_000_000},
				PSI: cadvisorapi.PSIStats{Some: cadvisorapi.PSIData{Total: 5, Avg10: 1.5}, Full: cadvisorapi.PSIData{Avg300: 0.25}}},
			DiskIo:  &cadvisorapi.DiskIoStats{PSI: cadvisorapi.PSIStats{Full: cadvisorapi.PSIData{Total: 7}}},
			CpuInst: &cadvisorapi.CpuInstStats{Usage: cadvisorapi.CpuInstUsage{Total: 250_000_000}},
			Memory: &cadvisorapi.MemoryStats{Usage: 3000, WorkingSet: 2000, RSS: 1500, Swap: 7,
				ContainerData: cadvisorapi.MemoryStatsMemoryData{Pgfault: 11, Pgmajfault: 1},
				PSI:           cadvisorapi.PSIStats{Some: cadvisorapi.PSIData{Avg60: 2}}},
			Network: &cadvisorapi.NetworkStats{Interfaces: []cadvisorapi.InterfaceStats{
				{Name: "lo", RxBytes: 1}, {Name: "eth0", RxBytes: 2, TxBytes: 3, RxErrors: 4, TxErrors: 5}}},
		}
	}
	spec := func(limit, swapLimit uint64) cadvisorapi.ContainerSpec {
		return cadvisorapi.ContainerSpec{HasCpu: true, HasMemory: true, HasNetwork: true, HasDiskIo: true,
			Memory: cadvisorapi.MemorySpec{Limit: limit, SwapLimit: swapLimit}}
	}
	unlimited := uint64(1<<63 - 4096)
	eth0 := statsv1alpha1.InterfaceStats{Name: "eth0", RxBytes: ptr.To[uint64](2), TxBytes: ptr.To[uint64](3), RxErrors: ptr.To[uint64](4), TxErrors: ptr.To[uint64](5)}
	lo := statsv1alpha1.InterfaceStats{Name: "lo", RxBytes: ptr.To[uint64](1), TxBytes: ptr.To[uint64](0), RxErrors: ptr.To[uint64](0), TxErrors: ptr.To[uint64](0)}
	full := func(avail, swapAvail *uint64) statsv1alpha1.NodeStats {
		return statsv1alpha1.NodeStats{
			NodeName: "n",
			CPU: &statsv1alpha1.CPUStats{Time: mts, UsageNanoCores: ptr.To[uint64](250_000_000), UsageCoreNanoSeconds: ptr.To[uint64](9_000_000_000),
				PSI: &statsv1alpha1.PSIStats{Some: statsv1alpha1.PSIData{Total: 5, Avg10: 1.5}, Full: statsv1alpha1.PSIData{Avg300: 0.25}}},
			IO: &statsv1alpha1.IOStats{Time: mts, PSI: &statsv1alpha1.PSIStats{Full: statsv1alpha1.PSIData{Total: 7}}},
			Memory: &statsv1alpha1.MemoryStats{Time: mts, AvailableBytes: avail, UsageBytes: ptr.To[uint64](3000), WorkingSetBytes: ptr.To[uint64](2000),
				RSSBytes: ptr.To[uint64](1500), PageFaults: ptr.To[uint64](11), MajorPageFaults: ptr.To[uint64](1),
				PSI: &statsv1alpha1.PSIStats{Some: statsv1alpha1.PSIData{Avg60: 2}}},
			Swap:    &statsv1alpha1.SwapStats{Time: mts, SwapUsageBytes: ptr.To[uint64](7), SwapAvailableBytes: swapAvail},
			Network: &statsv1alpha1.NetworkStats{Time: mts, InterfaceStats: eth0, Interfaces: []statsv1alpha1.InterfaceStats{lo, eth0}},
		}
	}
	for _, tc := range []struct {
		name string
		info cadvisorapi.ContainerInfo
		want statsv1alpha1.NodeStats
	}{
		{name: "no sample", info: cadvisorapi.ContainerInfo{Spec: spec(unlimited, unlimited)}, want: statsv1alpha1.NodeStats{NodeName: "n"}},
		{name: "unlimited memory and swap", info: cadvisorapi.ContainerInfo{Spec: spec(unlimited, unlimited), Stats: []*cadvisorapi.ContainerStats{{}, sample()}},
			want: full(nil, nil)},
		{name: "limited memory and swap", info: cadvisorapi.ContainerInfo{Spec: spec(10_000, 100), Stats: []*cadvisorapi.ContainerStats{sample()}},
			want: full(ptr.To[uint64](8000), ptr.To[uint64](93))},
		{name: "no cpu inst (one sample), no memory, no network", info: func() cadvisorapi.ContainerInfo {
			s := sample()
			s.CpuInst, s.Memory, s.DiskIo = nil, nil, nil
			return cadvisorapi.ContainerInfo{Spec: cadvisorapi.ContainerSpec{HasCpu: true}, Stats: []*cadvisorapi.ContainerStats{s}}
		}(), want: statsv1alpha1.NodeStats{NodeName: "n",
			CPU: &statsv1alpha1.CPUStats{Time: mts, UsageNanoCores: ptr.To[uint64](0), UsageCoreNanoSeconds: ptr.To[uint64](9_000_000_000),
				PSI: &statsv1alpha1.PSIStats{Some: statsv1alpha1.PSIData{Total: 5, Avg10: 1.5}, Full: statsv1alpha1.PSIData{Avg300: 0.25}}},
			Memory: &statsv1alpha1.MemoryStats{Time: mts, WorkingSetBytes: ptr.To[uint64](0)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeStatsFromCadvisor("n", &tc.info)
			if !apiequality.Semantic.DeepEqual(tc.want, got) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(tc.want, "", " ")
				t.Errorf("got\n%s\nwant\n%s", g, w)
			}
		})
	}
}
