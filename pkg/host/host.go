// Package host is the real machine behind the agent's Node: cadvisor's machine and filesystem info,
// the kernel and OS image, and the network lookups of the NodeAddress setter. Together with the
// eviction manager's pressure answers it is the node.Host of a nodeagent running on a machine.
package host

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/google/cadvisor/lib/fs"
	"github.com/google/cadvisor/lib/machine"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/moby/sys/userns"
	"k8s.io/apimachinery/pkg/api/resource"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// Machine reads the host through cadvisor. Build with New; safe for concurrent use.
type Machine struct {
	fsInfo  fs.FsInfo
	rootDir string

	mu     sync.Mutex
	cached *cadvisorapi.MachineInfo
}

// New returns the Machine whose nodefs is rootDir's filesystem. It errors when cadvisor cannot list
// the host's filesystems.
func New(rootDir string) (*Machine, error) {
	fsInfo, err := fs.NewFsInfo(fs.Context{})
	if err != nil {
		return nil, fmt.Errorf("cadvisor filesystem info: %w", err)
	}
	return &Machine{fsInfo: fsInfo, rootDir: rootDir}, nil
}

// FsInfo returns cadvisor's filesystem info (for the eviction manager's observer).
func (m *Machine) FsInfo() fs.FsInfo { return m.fsInfo }

// MachineInfo reads cadvisor's machine info until it succeeds once, then serves that copy, as the
// kubelet's GetCachedMachineInfo. The error wraps cadvisor's.
func (m *Machine) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cached != nil {
		return m.cached, nil
	}
	info, err := machine.Info(sysfs.NewRealSysFs(), m.fsInfo, true)
	if err != nil {
		return nil, fmt.Errorf("cadvisor machine info: %w", err)
	}
	m.cached = info
	return info, nil
}

// EphemeralStorageCapacity returns the capacity in bytes of the root dir's filesystem (the nodefs), in
// decimal format ("270553174016", not "264212084Ki") as the 1.37 kubelet's
// cadvisor.EphemeralStorageCapacityFromFsInfo.
func (m *Machine) EphemeralStorageCapacity() (resource.Quantity, error) {
	f, err := eviction.DirFs(m.fsInfo, m.rootDir)
	if err != nil {
		return resource.Quantity{}, err
	}
	return *resource.NewQuantity(int64(f.Capacity), resource.DecimalSI), nil
}

// KernelVersion returns the running kernel's release (cadvisor machine.KernelVersion).
func (m *Machine) KernelVersion() string { return machine.KernelVersion() }

// OSImage returns the OS's pretty name (cadvisor machine.ContainerOsVersion).
func (m *Machine) OSImage() string { return machine.ContainerOsVersion() }

// RunningInUserNamespace reports whether this process runs in a user namespace (a rootless or nested
// container), read once from /proc/self/uid_map by userns.RunningInUserNS, as the kubelet's runningInUserNS.
func (m *Machine) RunningInUserNamespace() *bool { return ptr.To(userns.RunningInUserNS()) }

// ValidateNodeIP is nodestatus.ValidateNodeIP: the IP must be on one of the host's interfaces.
func (m *Machine) ValidateNodeIP(ip net.IP) error { return nodestatus.ValidateNodeIP(ip) }

// LookupIP is net.LookupIP.
func (m *Machine) LookupIP(host string) ([]net.IP, error) { return net.LookupIP(host) }

// ResolveAddress is utilnet.ResolveBindAddress: the default route's interface address.
func (m *Machine) ResolveAddress(ip net.IP) (net.IP, error) { return utilnet.ResolveBindAddress(ip) }

// ImageFsDir returns the mount point of the runtime's image filesystem (CRI ImageFsInfo, bounded by
// timeout), or "" when the runtime does not say; for the eviction manager's imagefs signals.
func ImageFsDir(runtime criruntime.Runtime, timeout time.Duration) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := runtime.ImageFsInfo(ctx)
		if err != nil {
			return ""
		}
		for _, f := range resp.GetImageFilesystems() {
			if mp := f.GetFsId().GetMountpoint(); mp != "" {
				return mp
			}
		}
		return ""
	}
}
