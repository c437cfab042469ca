package node

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// DefaultNodeStatusFuncs returns the Node's setters in the kubelet's order, each named after its
// kubelet constructor: the kubelet's defaultNodeStatusFuncs (pkg/kubelet/kubelet_node_status.go).
// Registration's initial Node and every status update apply this one list.
func (c *Controller) DefaultNodeStatusFuncs() []nodestatus.Func {
	clk, host := c.deps.Clock, c.cfg.Host
	versions := criruntime.NewVersionSource(c.cfg.Runtime, c.cfg.RuntimeEndpoint, StatusCallTimeout)
	reservation := c.cfg.Reservation
	if reservation == nil {
		reservation = func(v1.ResourceList) v1.ResourceList { return nil }
	}
	return []nodestatus.Func{
		{Name: "NodeAddress", Setter: nodestatus.NodeAddress(c.cfg.NodeIPs, host.ValidateNodeIP, c.cfg.Hostname,
			c.cfg.ExternalCloudProvider, host.ResolveAddress, host.LookupIP)},
		{Name: "MachineInfo", Setter: nodestatus.MachineInfo(c.cfg.NodeName, c.cfg.MaxPods, host.MachineInfo,
			host.EphemeralStorageCapacity, reservation, c.recordEvent, host.RunningInUserNamespace)},
		{Name: "VersionInfo", Setter: nodestatus.VersionInfo(host.KernelVersion, host.OSImage,
			c.runtimeVersion(versions), c.cfg.AgentVersion)},
		{Name: "DaemonEndpoints", Setter: nodestatus.DaemonEndpoints(&v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: c.cfg.KubeletPort}})},
		{Name: "Images", Setter: nodestatus.Images(c.cfg.NodeStatusMaxImages, c.listImages)},
		{Name: "GoRuntime", Setter: nodestatus.GoRuntime()},
		{Name: "RuntimeHandlers", Setter: nodestatus.RuntimeHandlers(c.runtimeState.RuntimeHandlers)},
		{Name: "NodeFeatures", Setter: nodestatus.NodeFeatures(c.runtimeState.RuntimeFeatures)},
		{Name: "MemoryPressureCondition", Setter: nodestatus.MemoryPressureCondition(clk.Now, host.IsUnderMemoryPressure, c.recordNodeStatusEvent)},
		{Name: "DiskPressureCondition", Setter: nodestatus.DiskPressureCondition(clk.Now, host.IsUnderDiskPressure, c.recordNodeStatusEvent)},
		{Name: "PIDPressureCondition", Setter: nodestatus.PIDPressureCondition(clk.Now, host.IsUnderPIDPressure, c.recordNodeStatusEvent)},
		{Name: "ReadyCondition", Setter: nodestatus.ReadyCondition(clk.Now, c.runtimeState.RuntimeErrors,
			c.runtimeState.NetworkErrors, c.runtimeState.StorageErrors, c.recordNodeStatusEvent)},
		{Name: "SchedulableEvent", Setter: nodestatus.SchedulableEvent(c.recordNodeStatusEvent)},
	}
}

// runtimeVersion serves the VersionInfo setter: CRI Version, skipped while the last CRI Status call
// failed (runtime gone or hung), so a sync does not wait StatusCallTimeout for an answer that will
// not come; the type is then the last known one.
func (c *Controller) runtimeVersion(versions *criruntime.VersionSource) func(context.Context) (string, string, error) {
	return func(ctx context.Context) (string, string, error) {
		if err := c.runtimeState.StatusError(); err != nil {
			return versions.Type(), "", err
		}
		return versions.Version(ctx)
	}
}

// listImages returns the runtime's images (CRI ListImages, bounded by StatusCallTimeout) for the
// Images setter, or the last Status error while the runtime cannot be reached.
func (c *Controller) listImages(ctx context.Context) ([]nodestatus.Image, error) {
	if err := c.runtimeState.StatusError(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, StatusCallTimeout)
	defer cancel()
	images, err := c.cfg.Runtime.ListImages(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]nodestatus.Image, 0, len(images))
	for _, img := range images {
		out = append(out, nodestatus.Image{RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: int64(img.GetSize())})
	}
	return out, nil
}
