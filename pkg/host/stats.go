package host

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/google/cadvisor/lib/cache/memory"
	cadvisormetrics "github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	"github.com/google/cadvisor/lib/metrics"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// The kubelet's cadvisor settings (pkg/kubelet/cadvisor/cadvisor_linux.go): housekeeping at most
// every 10 s, dynamic, two minutes of samples in memory.
const (
	maxHousekeepingInterval = 10 * time.Second
	statsCacheDuration      = 2 * time.Minute
)

// StatsConfig configures the host's Stats.
type StatsConfig struct {
	// NodeName is the Node's name in the Summary.
	NodeName string
	// RootDir is the agent's root directory; its filesystem is the Summary's node.fs (the
	// kubelet's RootFsStats of its --root-dir).
	RootDir string
	// Clock gives the boot time (now − uptime), the Summary's node.startTime.
	Clock clock.Clock
}

// Stats is the agent host's usage as the kubelet's summary provider reads it, from a cadvisor
// manager that watches the root cgroup only (DisableContainerDiscovery: the agent runs no pods, and
// no other cgroup is read): the Summary's node (CPU, memory, swap, network, fs, start time) and no
// pods. It also gives the collectors of the kubelet's /metrics/cadvisor. Build with NewStats, then
// Run it; safe for concurrent use.
type Stats struct {
	cfg StatsConfig
	m   manager.Manager
}

// includedMetrics are the kubelet's cadvisor metrics (cadvisor.New without PSI and disk usage).
var includedMetrics = cadvisormetrics.MetricSet{
	cadvisormetrics.CpuUsageMetrics:     struct{}{},
	cadvisormetrics.MemoryUsageMetrics:  struct{}{},
	cadvisormetrics.DiskIOMetrics:       struct{}{},
	cadvisormetrics.NetworkUsageMetrics: struct{}{},
	cadvisormetrics.ProcessMetrics:      struct{}{},
	cadvisormetrics.OOMMetrics:          struct{}{},
}

// NewStats builds the cadvisor manager as the kubelet's cadvisor.New does, with container
// discovery off. It errors (wrapping cadvisor's) when the manager cannot be made, or when NodeName
// or Clock is missing.
func NewStats(cfg StatsConfig) (*Stats, error) {
	if cfg.NodeName == "" || cfg.Clock == nil {
		return nil, errors.New("host stats: StatsConfig.NodeName and Clock are required")
	}
	interval := maxHousekeepingInterval
	m, err := manager.New(memory.New(statsCacheDuration, nil), sysfs.NewRealSysFs(),
		manager.HousekeepingConfig{Interval: &interval, AllowDynamic: ptr.To(true), DisableContainerDiscovery: true},
		includedMetrics, []string{"/"}, nil, "", 0)
	if err != nil {
		return nil, fmt.Errorf("cadvisor manager: %w", err)
	}
	return &Stats{cfg: cfg, m: m}, nil
}

// Run starts cadvisor's housekeeping and stops it when ctx ends. It errors when cadvisor cannot
// start (no readable root cgroup).
func (s *Stats) Run(ctx context.Context) error {
	if err := s.m.Start(); err != nil {
		return fmt.Errorf("cadvisor manager start: %w", err)
	}
	<-ctx.Done()
	return s.m.Stop()
}

// GetStatsSummary returns the host's Summary as the kubelet's summaryProviderImpl.Get does for its
// Node with no pods: node CPU (usageNanoCores from cadvisor's last two samples, usageCoreNanoSeconds
// cumulative), memory, swap and network of the root cgroup "/", fs of RootDir's filesystem,
// startTime the boot time. Differences, as the agent is no kubelet: no systemContainers (it has no
// pods cgroup nor --kubelet-cgroups/--runtime-cgroups), no runtime (image filesystem) and no rlimit;
// no fs when cadvisor cannot tell RootDir's filesystem (the kubelet then fails the whole Summary).
// It errors, wrapping cadvisor's error, while cadvisor has no sample of "/" yet.
func (s *Stats) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	infos, err := s.m.GetContainerInfoV2("/", cadvisorapi.RequestOptions{IdType: cadvisorapi.TypeName, Count: 2})
	if err != nil {
		return nil, fmt.Errorf("failed to get root cgroup stats: failed to get container info for %q: %w", "/", err)
	}
	info, ok := infos["/"]
	if !ok {
		return nil, fmt.Errorf("failed to get root cgroup stats: unexpected number of containers: %d", len(infos))
	}
	node := NodeStatsFromCadvisor(s.cfg.NodeName, &info)
	node.StartTime = metav1.NewTime(bootTime(s.cfg.Clock))
	if fsInfo, err := s.m.GetDirFsInfo(s.cfg.RootDir); err == nil && len(info.Stats) > 0 {
		node.Fs = fsStats(info.Stats[len(info.Stats)-1].Timestamp, fsInfo)
	} else if err != nil {
		// The kubelet fails the whole Summary here (and cadvisor cannot map some virtual disks, e.g.
		// /dev/vda, to a filesystem); the agent leaves node.fs out and serves the rest.
		klog.FromContext(ctx).V(2).Info("No root filesystem stats in the summary", "rootDir", s.cfg.RootDir, "err", err)
	}
	return &statsv1alpha1.Summary{Node: node, Pods: []statsv1alpha1.PodStats{}}, nil
}

// CadvisorCollectors returns cadvisor's Prometheus collectors as the kubelet registers them for
// /metrics/cadvisor: the machine collector and the container collector (the root cgroup only here;
// no pod labels, as no container is a pod's).
func (s *Stats) CadvisorCollectors() []prometheus.Collector {
	opts := cadvisorapi.RequestOptions{IdType: cadvisorapi.TypeName, Count: 1, Recursive: true}
	return []prometheus.Collector{
		metrics.NewPrometheusMachineCollector(s.m, includedMetrics),
		metrics.NewPrometheusCollector(s.m, func(*cadvisorapi.ContainerInfo) map[string]string { return map[string]string{} }, includedMetrics, clock.RealClock{}, opts),
	}
}

// NodeStatsFromCadvisor converts cadvisor's root container info to the Summary's NodeStats as the
// kubelet's cadvisorInfoToCPUandMemoryStats, cadvisorInfoToSwapStats, cadvisorInfoToIOStats and
// cadvisorInfoToNetworkStats (pkg/kubelet/stats/helper.go): from the last sample; CPU usage zero
// when cadvisor has no CPU; memory available = limit − working set when the limit is below 2^62;
// CPU, memory and disk I/O pressure (PSI) as cadvisor read them.
func NodeStatsFromCadvisor(nodeName string, info *cadvisorapi.ContainerInfo) statsv1alpha1.NodeStats {
	n := statsv1alpha1.NodeStats{NodeName: nodeName}
	if len(info.Stats) == 0 || info.Stats[len(info.Stats)-1] == nil {
		return n
	}
	cstat := info.Stats[len(info.Stats)-1]
	ts := metav1.NewTime(cstat.Timestamp)
	n.CPU = &statsv1alpha1.CPUStats{Time: ts, UsageNanoCores: ptr.To[uint64](0), UsageCoreNanoSeconds: ptr.To[uint64](0)}
	if info.Spec.HasCpu {
		if cstat.CpuInst != nil {
			n.CPU.UsageNanoCores = ptr.To(cstat.CpuInst.Usage.Total)
		}
		if cstat.Cpu != nil {
			n.CPU.UsageCoreNanoSeconds = ptr.To(cstat.Cpu.Usage.Total)
			n.CPU.PSI = psiStats(&cstat.Cpu.PSI)
		}
	}
	if info.Spec.HasMemory && cstat.Memory != nil {
		n.Memory = &statsv1alpha1.MemoryStats{
			Time:            ts,
			UsageBytes:      ptr.To(cstat.Memory.Usage),
			WorkingSetBytes: ptr.To(cstat.Memory.WorkingSet),
			RSSBytes:        ptr.To(cstat.Memory.RSS),
			PageFaults:      ptr.To(cstat.Memory.ContainerData.Pgfault),
			MajorPageFaults: ptr.To(cstat.Memory.ContainerData.Pgmajfault),
			PSI:             psiStats(&cstat.Memory.PSI),
		}
		if !memoryUnlimited(info.Spec.Memory.Limit) {
			n.Memory.AvailableBytes = ptr.To(info.Spec.Memory.Limit - cstat.Memory.WorkingSet)
		}
		n.Swap = &statsv1alpha1.SwapStats{Time: ts, SwapUsageBytes: ptr.To(cstat.Memory.Swap)}
		if !memoryUnlimited(info.Spec.Memory.SwapLimit) {
			n.Swap.SwapAvailableBytes = ptr.To(info.Spec.Memory.SwapLimit - cstat.Memory.Swap)
		}
	} else {
		n.Memory = &statsv1alpha1.MemoryStats{Time: ts, WorkingSetBytes: ptr.To[uint64](0)}
	}
	if info.Spec.HasDiskIo && cstat.DiskIo != nil { // the kubelet's cadvisorInfoToIOStats
		n.IO = &statsv1alpha1.IOStats{Time: ts, PSI: psiStats(&cstat.DiskIo.PSI)}
	}
	if info.Spec.HasNetwork && cstat.Network != nil {
		net := &statsv1alpha1.NetworkStats{Time: ts}
		for _, in := range cstat.Network.Interfaces {
			st := statsv1alpha1.InterfaceStats{Name: in.Name, RxBytes: ptr.To(in.RxBytes), RxErrors: ptr.To(in.RxErrors), TxBytes: ptr.To(in.TxBytes), TxErrors: ptr.To(in.TxErrors)}
			if in.Name == "eth0" { // the kubelet's defaultNetworkInterfaceName
				net.InterfaceStats = st
			}
			net.Interfaces = append(net.Interfaces, st)
		}
		n.Network = net
	}
	return n
}

// psiStats is the kubelet's cadvisorPSIToStatsPSI (its KubeletPSI feature is GA and locked on in
// 1.37: the Summary always has the pressure figures cadvisor read, zero where the kernel has none).
func psiStats(psi *cadvisorapi.PSIStats) *statsv1alpha1.PSIStats {
	return &statsv1alpha1.PSIStats{
		Full: statsv1alpha1.PSIData{Total: psi.Full.Total, Avg10: psi.Full.Avg10, Avg60: psi.Full.Avg60, Avg300: psi.Full.Avg300},
		Some: statsv1alpha1.PSIData{Total: psi.Some.Total, Avg10: psi.Some.Avg10, Avg60: psi.Some.Avg60, Avg300: psi.Some.Avg300},
	}
}

// memoryUnlimited is the kubelet's isMemoryUnlimited: above 2^62 (the kernel's rounding of "max").
func memoryUnlimited(v uint64) bool { return v > uint64(1<<62) }

// fsStats is the kubelet's RootFsStats: the filesystem's figures at the root container's last
// sample time.
func fsStats(ts time.Time, fs cadvisorapi.FsInfo) *statsv1alpha1.FsStats {
	out := &statsv1alpha1.FsStats{
		Time:           metav1.NewTime(ts),
		AvailableBytes: ptr.To(fs.Available),
		CapacityBytes:  ptr.To(fs.Capacity),
		UsedBytes:      ptr.To(fs.Usage),
		InodesFree:     fs.InodesFree,
		Inodes:         fs.Inodes,
	}
	if fs.Inodes != nil && fs.InodesFree != nil {
		out.InodesUsed = ptr.To(*fs.Inodes - *fs.InodesFree)
	}
	return out
}

// bootTime is the kubelet's util.GetBootTime on Linux: now − sysinfo's uptime, to the second.
func bootTime(clk clock.Clock) time.Time {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return time.Time{}
	}
	return clk.Now().Add(-time.Duration(si.Uptime) * time.Second).Truncate(time.Second)
}
