package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// The kubelet's cadvisor settings (pkg/kubelet/cadvisor/cadvisor_linux.go): samples at most 10 s
// old, two minutes of samples in memory.
const (
	maxHousekeepingInterval = 10 * time.Second
	statsCacheDuration      = 2 * time.Minute
	// periodicHousekeepingInterval is the root cgroup's periodic housekeeping: in effect none. Its
	// samples are taken on demand (maxSampleAge), when something reads the stats.
	periodicHousekeepingInterval = 24 * time.Hour
)

// maxSampleAge is how old a sample a request may be answered with before cadvisor takes a new one
// (cadvisor's RequestOptions.MaxAge, its on-demand housekeeping): the kubelet's housekeeping interval,
// so that the figures are as fresh as the kubelet's.
var maxSampleAge = maxHousekeepingInterval

// StatsConfig configures the host's Stats.
type StatsConfig struct {
	// NodeName is the Node's name in the Summary.
	NodeName string
	// RootDir is the agent's root directory; its filesystem is the Summary's node.fs (the
	// kubelet's RootFsStats of its --root-dir).
	RootDir string
	// Clock gives the boot time (now − uptime), the Summary's node.startTime, and the timestamps of
	// /metrics/cadvisor's samples.
	Clock clock.Clock
}

// statsManager is what Stats reads of cadvisor's manager.Manager (the methods its collectors and
// the Summary use, and its start and stop).
type statsManager interface {
	Start() error
	Stop() error
	GetContainerInfoV2(containerName string, options cadvisorapi.RequestOptions) (map[string]cadvisorapi.ContainerInfo, error)
	GetRequestedContainersInfo(containerName string, options cadvisorapi.RequestOptions) (map[string]*cadvisorapi.ContainerInfo, error)
	GetVersionInfo() (*cadvisorapi.VersionInfo, error)
	GetMachineInfo() (*cadvisorapi.MachineInfo, error)
	GetDirFsInfo(dir string) (cadvisorapi.FsInfo, error)
}

// Stats is the agent host's usage as the kubelet's summary provider reads it, from a cadvisor
// manager that watches the root cgroup only (DisableContainerDiscovery: the agent runs no pods, and
// no other cgroup is read): the Summary's node (CPU, memory, swap, network, fs, start time) and no
// pods. It also gives the collectors of the kubelet's /metrics/cadvisor. Build with NewStats, then
// Run it; safe for concurrent use.
//
// The agent pays only for what its Node serves: cadvisor's manager is made and started on the
// first request (GetStatsSummary, or a scrape of the collectors), not before, and it samples the
// root cgroup only when a request finds its last sample older than 10 s (cadvisor's on-demand
// housekeeping), not every second or ten as the kubelet's housekeeping does. Nobody asking costs
// nothing; a scraper every 15 s costs one read of the cgroup files per scrape. The manager is not
// stopped between requests: cadvisor's Manager.Stop leaves the root container's housekeeping
// goroutine running and a second Start registers its raw factory (and an inotify descriptor) again,
// so a stop and restart would leak both; idle, it is two goroutines asleep.
type Stats struct {
	cfg        StatsConfig
	newManager func() (statsManager, error)

	mu sync.Mutex
	m  statsManager // nil until the first request
	// stopped is set by Run's end: no manager is started after it.
	stopped bool
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

// NewStats checks cfg; cadvisor's manager (as the kubelet's cadvisor.New builds it, with container
// discovery off and no periodic housekeeping) is made on the first request. It errors when NodeName
// or Clock is missing.
func NewStats(cfg StatsConfig) (*Stats, error) {
	if cfg.NodeName == "" || cfg.Clock == nil {
		return nil, errors.New("host stats: StatsConfig.NodeName and Clock are required")
	}
	return &Stats{cfg: cfg, newManager: newCadvisorManager}, nil
}

// newCadvisorManager is cadvisor's manager of the root cgroup, started: its first sample taken.
func newCadvisorManager() (statsManager, error) {
	interval := periodicHousekeepingInterval
	m, err := manager.New(memory.New(statsCacheDuration, nil), sysfs.NewRealSysFs(),
		manager.HousekeepingConfig{Interval: &interval, AllowDynamic: ptr.To(false), DisableContainerDiscovery: true},
		includedMetrics, []string{"/"}, nil, "", 0)
	if err != nil {
		return nil, fmt.Errorf("cadvisor manager: %w", err)
	}
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("cadvisor manager start: %w", err)
	}
	return m, nil
}

// manager returns cadvisor's manager, making and starting it on the first call. It errors (wrapping
// cadvisor's) when the manager cannot be made or started (no readable root cgroup), and then tries
// again on the next call; or once Run has ended.
func (s *Stats) manager() (statsManager, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, errors.New("host stats: stopped")
	}
	if s.m == nil {
		m, err := s.newManager()
		if err != nil {
			return nil, err
		}
		s.m = m
	}
	return s.m, nil
}

// Run waits for ctx to end, then stops cadvisor's manager if a request started it. It starts
// nothing: the manager starts on the first request.
func (s *Stats) Run(ctx context.Context) error {
	<-ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.m == nil {
		return nil
	}
	return s.m.Stop()
}

// GetStatsSummary returns the host's Summary as the kubelet's summaryProviderImpl.Get does for its
// Node with no pods: node CPU (usageNanoCores from cadvisor's last two samples, usageCoreNanoSeconds
// cumulative), memory, swap and network of the root cgroup "/", fs of RootDir's filesystem,
// startTime the boot time. Differences, as the agent is no kubelet: no systemContainers (it has no
// pods cgroup nor --kubelet-cgroups/--runtime-cgroups), no runtime (image filesystem) and no rlimit;
// no fs when cadvisor cannot tell RootDir's filesystem (the kubelet then fails the whole Summary);
// the samples are taken on request (at most 10 s old), so usageNanoCores is the rate since the
// previous request's sample (within the 2 minutes cadvisor keeps; 0 on the first request, or after
// a longer pause) where the kubelet's is over its last housekeeping interval.
// It errors, wrapping cadvisor's error, when cadvisor cannot start or has no sample of "/".
func (s *Stats) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	m, err := s.manager()
	if err != nil {
		return nil, fmt.Errorf("failed to get root cgroup stats: %w", err)
	}
	infos, err := m.GetContainerInfoV2("/", cadvisorapi.RequestOptions{IdType: cadvisorapi.TypeName, Count: 2, MaxAge: &maxSampleAge})
	if err != nil {
		return nil, fmt.Errorf("failed to get root cgroup stats: failed to get container info for %q: %w", "/", err)
	}
	info, ok := infos["/"]
	if !ok {
		return nil, fmt.Errorf("failed to get root cgroup stats: unexpected number of containers: %d", len(infos))
	}
	node := NodeStatsFromCadvisor(s.cfg.NodeName, &info)
	node.StartTime = metav1.NewTime(bootTime(s.cfg.Clock))
	if fsInfo, err := m.GetDirFsInfo(s.cfg.RootDir); err == nil && len(info.Stats) > 0 {
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
// no pod labels, as no container is a pod's). A scrape starts cadvisor's manager if no request has
// yet, and its samples are at most 10 s old (maxSampleAge).
func (s *Stats) CadvisorCollectors() []prometheus.Collector {
	opts := cadvisorapi.RequestOptions{IdType: cadvisorapi.TypeName, Count: 1, Recursive: true, MaxAge: &maxSampleAge}
	info := onDemandInfo{s}
	return []prometheus.Collector{
		metrics.NewPrometheusMachineCollector(info, includedMetrics),
		metrics.NewPrometheusCollector(info, func(*cadvisorapi.ContainerInfo) map[string]string { return map[string]string{} }, includedMetrics, s.cfg.Clock, opts),
	}
}

// onDemandInfo is cadvisor's manager as its Prometheus collectors read it (their infoProvider),
// started by the first scrape.
type onDemandInfo struct{ s *Stats }

// GetRequestedContainersInfo is the manager's, or the error starting it.
func (i onDemandInfo) GetRequestedContainersInfo(name string, options cadvisorapi.RequestOptions) (map[string]*cadvisorapi.ContainerInfo, error) {
	m, err := i.s.manager()
	if err != nil {
		return nil, err
	}
	return m.GetRequestedContainersInfo(name, options)
}

// GetVersionInfo is the manager's, or the error starting it.
func (i onDemandInfo) GetVersionInfo() (*cadvisorapi.VersionInfo, error) {
	m, err := i.s.manager()
	if err != nil {
		return nil, err
	}
	return m.GetVersionInfo()
}

// GetMachineInfo is the manager's, or the error starting it.
func (i onDemandInfo) GetMachineInfo() (*cadvisorapi.MachineInfo, error) {
	m, err := i.s.manager()
	if err != nil {
		return nil, err
	}
	return m.GetMachineInfo()
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
