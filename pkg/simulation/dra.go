package simulation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/pkg/dra"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/pod"
)

// AnnotationPrepareError makes the simulated drivers' NodePrepareResources fail for each of the pod's
// claims with the annotation's value (its first MaxPrepareErrorBytes) as the driver's error: the pod
// waits ContainerCreating with the kubelet's Warning Event FailedPrepareDynamicResources "Failed to
// prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim
// <claim>: <value>", tried again every node.DynamicResourcesRetry and at once when the pod changes (the
// annotation removed: the claims are prepared and the pod starts).
const AnnotationPrepareError = "nodeagent.io/prepare-dynamic-resources-error"

// MaxPrepareErrorBytes bounds AnnotationPrepareError's message, as MaxImagePullErrorBytes bounds a
// simulated pull error's: it is written in the pod's Events.
const MaxPrepareErrorBytes = 1024

// ResourceClaimAccess is what the simulation's identity needs to run pods with claims: the kubelet's DRA
// manager reads each claim of a pod before it prepares it.
var ResourceClaimAccess = []authorizationv1.ResourceAttributes{
	{Verb: "get", Group: resourcev1.GroupName, Resource: "resourceclaims"},
}

// newDRA returns the simulated Nodes' DRA manager: the template's drivers registered on every Node,
// each preparing a claim's devices when they are in the pod's Node's pool (the driver's own devices)
// and the pod has no AnnotationPrepareError.
func newDRA(client kubernetes.Interface, devices *Devices) *dra.Manager {
	var drivers []string
	if devices != nil {
		for _, d := range devices.Drivers {
			drivers = append(drivers, d.Driver)
		}
	}
	return dra.NewManager(dra.Options{Client: client, Drivers: drivers, Prepare: simulatedPrepare})
}

// simulatedPrepare is a simulated driver's NodePrepareResources for one claim: it fails with the pod's
// AnnotationPrepareError, or when a device is not in the pool of the pod's Node.
func simulatedPrepare(p *v1.Pod, _ *resourcev1.ResourceClaim, driver string, devices []dra.Device) string {
	if msg, ok := p.Annotations[AnnotationPrepareError]; ok {
		if len(msg) > MaxPrepareErrorBytes {
			msg = msg[:MaxPrepareErrorBytes]
		}
		if msg == "" {
			msg = "simulated failure"
		}
		return msg
	}
	for _, d := range devices {
		if d.Pool != p.Spec.NodeName {
			return fmt.Sprintf("device %s of driver %s is in pool %s, not on node %s", d.Device, driver, d.Pool, p.Spec.NodeName)
		}
	}
	return ""
}

var _ node.DynamicResourcesProvider = (*simPods)(nil)

// PrepareDynamicResources prepares the pod's claims (pkg/dra: the kubelet's checks, then the simulated
// drivers).
func (s *simPods) PrepareDynamicResources(ctx context.Context, p *v1.Pod) error {
	if s.dra == nil {
		return errors.New("prepare dynamic resources: the simulated Nodes have no client to read ResourceClaims")
	}
	return s.dra.PrepareResources(ctx, p)
}

// UnprepareDynamicResources unprepares the pod's claims.
func (s *simPods) UnprepareDynamicResources(ctx context.Context, p *v1.Pod) error {
	if s.dra == nil {
		return nil
	}
	return s.dra.UnprepareResources(ctx, p)
}

// deviceEnv returns the environment the device plugins' Allocate responses (deviceplugin.go: NAME=<its
// device IDs, comma-separated>, per resource with an env) and then the simulated drivers' CDI specs give
// container ctr of pod p: for each driver with an env name, NAME=<its devices' names, comma-separated>,
// in the template's driver order.
func (s *simPods) deviceEnv(p *v1.Pod, ctr *v1.Container) []string {
	env := s.plugins.env(p, ctr)
	if s.dra == nil || len(ctr.Resources.Claims) == 0 || len(s.driverEnv) == 0 {
		return env
	}
	devs := s.dra.ContainerDevices(p, ctr)
	for _, de := range s.driverEnv {
		mine := slices.DeleteFunc(slices.Clone(devs), func(d dra.Device) bool { return d.Driver != de.driver })
		if len(mine) > 0 {
			env = append(env, de.env+"="+dra.EnvValue(mine))
		}
	}
	return env
}

// setAllocatedResourcesStatus sets each container's allocatedResourcesStatus from the DRA manager.
func (s *simPods) setAllocatedResourcesStatus(p *v1.Pod, rt *pod.RuntimeStatus) {
	if s.dra == nil || len(p.Spec.ResourceClaims) == 0 {
		return
	}
	for i := range rt.Containers {
		c := &rt.Containers[i]
		j := slices.IndexFunc(p.Spec.Containers, func(sc v1.Container) bool { return sc.Name == c.Name })
		if j >= 0 && len(p.Spec.Containers[j].Resources.Claims) > 0 {
			c.AllocatedResourcesStatus = s.dra.AllocatedResourcesStatus(p, &p.Spec.Containers[j])
		}
	}
}

// DeviceHealthChange is the body of POST /simulation/nodes/{name}/devices: a device of the Node's pool
// turns Healthy, Unhealthy or Unknown, as its driver's NodeWatchResources stream would report it; the
// pods using it have their allocatedResourcesStatus written again.
type DeviceHealthChange struct {
	Driver  string                  `json:"driver"`
	Device  string                  `json:"device"`
	Health  v1.ResourceHealthStatus `json:"health"`
	Message string                  `json:"message,omitempty"`
}

// NodeDevicesChange is the body of POST /simulation/nodes/{name}/slices: the Node's ResourceSlice of
// Driver lists only the template's devices named in Devices (null: all of them again), as a Node whose
// GPUs differ from the template's, or one that lost a device.
type NodeDevicesChange struct {
	Driver  string   `json:"driver"`
	Devices []string `json:"devices"`
}

// SetNodeDevices applies c to Node name's slice (updated at once if published, else published so).
// Errors wrap ErrUnknownNode, or ErrBadDeviceChange (the simulation has no devices, or a driver or
// device not in the template), naming the value.
func (s *Simulator) SetNodeDevices(name string, c NodeDevicesChange) error {
	if _, ok := s.lookup(name); !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	if s.slices == nil {
		return fmt.Errorf("%w: the template has no devices", ErrBadDeviceChange)
	}
	return s.slices.setNodeDevices(name, c.Driver, c.Devices)
}

// ErrBadDeviceChange is the error of SetDeviceHealth for a change it cannot apply.
var ErrBadDeviceChange = errors.New("bad device change")

// SetDeviceHealth applies c to Node name's device and returns the pods (namespace/name) whose status it
// queued for a write. Errors wrap ErrUnknownNode, or ErrBadDeviceChange (no such driver or device in
// the template, a health other than Healthy, Unhealthy, Unknown, a message over MaxPrepareErrorBytes, or
// the Nodes run no pods), naming the value.
func (s *Simulator) SetDeviceHealth(name string, c DeviceHealthChange) ([]string, error) {
	n, ok := s.lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	if s.pods == nil || s.pods.dra == nil {
		return nil, fmt.Errorf("%w: this simulator runs no pods", ErrBadDeviceChange)
	}
	devs := s.cfg.Template.Devices
	var drv *DeviceDriver
	if devs != nil {
		if i := slices.IndexFunc(devs.Drivers, func(d DeviceDriver) bool { return d.Driver == c.Driver }); i >= 0 {
			drv = &devs.Drivers[i]
		}
	}
	if drv == nil {
		return nil, fmt.Errorf("%w: driver %q is not in the template's devices", ErrBadDeviceChange, c.Driver)
	}
	if !slices.ContainsFunc(drv.sliceDevices(), func(d resourcev1.Device) bool { return d.Name == c.Device }) {
		return nil, fmt.Errorf("%w: device %q is not a device of driver %s", ErrBadDeviceChange, c.Device, c.Driver)
	}
	switch c.Health {
	case v1.ResourceHealthStatusHealthy, v1.ResourceHealthStatusUnhealthy, v1.ResourceHealthStatusUnknown:
	default:
		return nil, fmt.Errorf("%w: health %q: one of Healthy, Unhealthy, Unknown", ErrBadDeviceChange, c.Health)
	}
	if len(c.Message) > MaxPrepareErrorBytes {
		return nil, fmt.Errorf("%w: message of %d bytes: at most %d", ErrBadDeviceChange, len(c.Message), MaxPrepareErrorBytes)
	}
	pods := s.pods.dra.SetHealth(dra.Device{Driver: c.Driver, Pool: name, Device: c.Device}, dra.Health{Health: c.Health, Message: c.Message})
	n.mu.Lock()
	ctrl := n.ctrl
	n.mu.Unlock()
	if ctrl != nil {
		for _, key := range pods {
			ns, pname, _ := strings.Cut(key, "/")
			ctrl.NotifyPod(ns, pname)
		}
	}
	return pods, nil
}
