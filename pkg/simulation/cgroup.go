package simulation

import (
	"strconv"

	"github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
)

// The kubelet's CPU constants (pkg/kubelet/cm helpers_linux.go).
const (
	quotaPeriod    = 100000 // cm.QuotaPeriod, µs
	minQuotaPeriod = 1000   // cm.MinQuotaPeriod, µs
	minShares      = 2      // cm.MinShares
	maxShares      = 262144 // cm.MaxShares
	sharesPerCPU   = 1024   // cm.SharesPerCPU
	milliCPUToCPU  = 1000   // cm.MilliCPUToCPU
)

// milliCPUToQuota is the kubelet's cm.MilliCPUToQuota with the default period (the CPUCFSQuotaPeriod
// gate off): the CFS quota in µs per quotaPeriod for milliCPU, at least minQuotaPeriod; 0 for 0.
func milliCPUToQuota(milliCPU int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*quotaPeriod/milliCPUToCPU, minQuotaPeriod)
}

// milliCPUToShares is the kubelet's cm.MilliCPUToShares: the CFS shares of milliCPU, within
// [minShares, maxShares] (minShares for 0).
func milliCPUToShares(milliCPU int64) uint64 {
	return uint64(min(max(milliCPU*sharesPerCPU/milliCPUToCPU, minShares), maxShares))
}

// cgroupFiles returns the files of a container's cgroup (v2) as runc writes them from the resources
// the kubelet gives the container (kuberuntime's calculateLinuxResources): cpu.max from the CPU limit
// ("QUOTA 100000", cm.MilliCPUToQuota; "max 100000" without a limit), cpu.weight from the CPU shares
// of the request (of the limit when only it is set; cm.MilliCPUToShares) by runc's
// ConvertCPUSharesToCgroupV2Value, memory.max the memory limit in bytes ("max" without one). r is
// what the runtime actuates: the container's status.resources once the kubelet reports them, else
// its spec's.
func cgroupFiles(r v1.ResourceRequirements) map[string]string {
	cpuLimit, cpuRequest := r.Limits.Cpu().MilliValue(), r.Requests.Cpu().MilliValue()
	cpuMax := "max " + strconv.Itoa(quotaPeriod)
	if q := milliCPUToQuota(cpuLimit); q > 0 {
		cpuMax = strconv.FormatInt(q, 10) + " " + strconv.Itoa(quotaPeriod)
	}
	shares := milliCPUToShares(cpuRequest)
	if cpuRequest == 0 && cpuLimit != 0 {
		shares = milliCPUToShares(cpuLimit)
	}
	memoryMax := "max"
	if m := r.Limits.Memory().Value(); m > 0 {
		memoryMax = strconv.FormatInt(m, 10)
	}
	return map[string]string{
		"cpu.max":    cpuMax + "\n",
		"cpu.weight": strconv.FormatUint(cgroups.ConvertCPUSharesToCgroupV2Value(shares), 10) + "\n",
		"memory.max": memoryMax + "\n",
	}
}

// actuatedResources returns the resources of container name of p as the runtime has them: its
// status.resources (the kubelet reports them from the runtime after a resize is actuated), else its
// spec's.
func actuatedResources(p *v1.Pod, name string) v1.ResourceRequirements {
	for _, l := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range l {
			if cs.Name == name && cs.Resources != nil {
				return *cs.Resources
			}
		}
	}
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if l[i].Name == name {
				return l[i].Resources
			}
		}
	}
	return v1.ResourceRequirements{}
}
