// Package nodestatus holds the node-status setters: each is a Setter, a func(ctx, *v1.Node) error
// built from the few small funcs it needs, mirroring pkg/kubelet/nodestatus/setters.go. The status
// syncer runs them in order on a copy of the Node; one setter's error is logged and the rest still run.
package nodestatus

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"net"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
)

// Setter modifies the node in place and returns an error if the modification failed.
// Setters may partially mutate the node before returning an error.
type Setter func(ctx context.Context, node *v1.Node) error

// MaxNamesPerImageInNodeStatus is the most names reported per image (kubernetes#32908).
const MaxNamesPerImageInNodeStatus = 5

// annotationProvidedIPAddr is cloudproviderapi.AnnotationAlphaProvidedIPAddr.
const annotationProvidedIPAddr = "alpha.kubernetes.io/provided-node-ip"

// RecordEventFunc records an event on the Node with the given type and reason (e.g. Normal, NodeReady).
type RecordEventFunc func(eventType, reason string)

// NodeAddress returns a Setter that sets status.addresses: InternalIP(s) and Hostname. The IP is, in
// order: nodeIPs (validated by validateNodeIP), the hostname if it is an IP, a DNS lookup of the node
// name, then resolveAddress (the default route's interface). With externalCloudProvider, existing
// addresses are kept. Mirrors nodestatus.NodeAddress.
func NodeAddress(nodeIPs []net.IP, // from --node-ip
	validateNodeIP func(net.IP) error, // typically ValidateNodeIP
	hostname string, // the node's hostname
	externalCloudProvider bool, // --cloud-provider=external
	resolveAddress func(net.IP) (net.IP, error), // typically k8s.io/apimachinery/pkg/util/net.ResolveBindAddress
	lookupIP func(host string) ([]net.IP, error), // typically net.LookupIP
) Setter {
	var nodeIP, secondaryNodeIP net.IP
	if len(nodeIPs) > 0 {
		nodeIP = nodeIPs[0]
	}
	if len(nodeIPs) > 1 {
		secondaryNodeIP = nodeIPs[1]
	}
	preferIPv4 := nodeIP == nil || nodeIP.To4() != nil
	isPreferredIPFamily := func(ip net.IP) bool { return (ip.To4() != nil) == preferIPv4 }
	nodeIPSpecified := nodeIP != nil && !nodeIP.IsUnspecified()
	secondaryNodeIPSpecified := secondaryNodeIP != nil && !secondaryNodeIP.IsUnspecified()

	return func(ctx context.Context, node *v1.Node) error {
		if nodeIPSpecified {
			if err := validateNodeIP(nodeIP); err != nil {
				return fmt.Errorf("failed to validate nodeIP: %w", err)
			}
		}
		if secondaryNodeIPSpecified {
			if err := validateNodeIP(secondaryNodeIP); err != nil {
				return fmt.Errorf("failed to validate secondaryNodeIP: %w", err)
			}
		}
		if externalCloudProvider && nodeIPSpecified {
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			a := nodeIP.String()
			if secondaryNodeIPSpecified {
				a += "," + secondaryNodeIP.String()
			}
			node.Annotations[annotationProvidedIPAddr] = a
		} else if node.Annotations != nil {
			delete(node.Annotations, annotationProvidedIPAddr)
		}
		if externalCloudProvider {
			if len(node.Status.Addresses) > 0 {
				return nil
			}
			if nodeIP == nil {
				node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeHostName, Address: hostname}}
				return nil
			}
		}
		if nodeIPSpecified && secondaryNodeIPSpecified {
			node.Status.Addresses = []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: nodeIP.String()},
				{Type: v1.NodeInternalIP, Address: secondaryNodeIP.String()},
				{Type: v1.NodeHostName, Address: hostname},
			}
			return nil
		}
		var ipAddr net.IP
		var err error
		switch {
		case nodeIPSpecified:
			ipAddr = nodeIP
		case netutils.ParseIPSloppy(hostname) != nil:
			ipAddr = netutils.ParseIPSloppy(hostname)
		default:
			addrs, _ := lookupIP(node.Name)
			for _, addr := range addrs {
				if err = validateNodeIP(addr); err == nil {
					if isPreferredIPFamily(addr) {
						ipAddr = addr
						break
					} else if ipAddr == nil {
						ipAddr = addr
					}
				}
			}
			if ipAddr == nil {
				ipAddr, err = resolveAddress(nodeIP)
			}
		}
		if ipAddr == nil {
			return fmt.Errorf("can't get ip address of node %s: %w", node.Name, err)
		}
		node.Status.Addresses = []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: ipAddr.String()},
			{Type: v1.NodeHostName, Address: hostname},
		}
		return nil
	}
}

// ValidateNodeIP checks that ip is a usable node IP present on one of the host's interfaces,
// as the kubelet's validateNodeIP. The error says what is wrong with it.
func ValidateNodeIP(ip net.IP) error {
	switch {
	case ip.To4() == nil && ip.To16() == nil:
		return fmt.Errorf("nodeIP must be a valid IP address")
	case ip.IsLoopback():
		return fmt.Errorf("nodeIP can't be loopback address")
	case ip.IsMulticast():
		return fmt.Errorf("nodeIP can't be a multicast address")
	case ip.IsLinkLocalUnicast():
		return fmt.Errorf("nodeIP can't be a link-local unicast address")
	case ip.IsUnspecified():
		return fmt.Errorf("nodeIP can't be an all zeros address")
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("listing interface addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return nil
		}
	}
	return fmt.Errorf("node IP: %q not found in the host's network interfaces", ip.String())
}

// MachineInfo returns a Setter that sets capacity (cpu, memory, hugepages-*, ephemeral-storage, pods),
// allocatable (capacity − reservation, never negative; hugepages also come off memory), machineID,
// systemUUID, bootID, nodeInfo.swap.capacity (bytes, only when the machine has swap: NodeSwap is GA)
// and nodeInfo.runningInUserNamespace (KubeletInUserNamespace, beta and on by default since 1.37). If
// machine info cannot be read, cpu and memory are 0 and the error is logged, as the kubelet does. A
// changed bootID records a NodeRebooted warning event, once. Mirrors nodestatus.MachineInfo (1.37).
func MachineInfo(nodeName string,
	maxPods int, // --max-pods
	machineInfoFunc func() (*cadvisorapi.MachineInfo, error), // cached cadvisor machine info
	ephemeralStorageCapacityFunc func() (resource.Quantity, error), // capacity of --root-dir's filesystem
	reservationFunc func(capacity v1.ResourceList) v1.ResourceList, // system + kube reserved + eviction hard
	recordEventFunc func(eventType, reason, message string),
	runningInUserNSFunc func() *bool, // typically userns.RunningInUserNS, as the kubelet's runningInUserNS
) Setter {
	// Only one reboot event, as the kubelet's rebootEvent: a retried or repeated status update starts
	// again from the Node as the API server last had it and would record the reboot again.
	var rebootEvent sync.Once
	return func(ctx context.Context, node *v1.Node) error {
		logger := klog.FromContext(ctx)
		if node.Status.Capacity == nil {
			node.Status.Capacity = v1.ResourceList{}
		}
		info, err := machineInfoFunc()
		if err != nil {
			node.Status.Capacity[v1.ResourceCPU] = *resource.NewMilliQuantity(0, resource.DecimalSI)
			node.Status.Capacity[v1.ResourceMemory] = resource.MustParse("0Gi")
			node.Status.Capacity[v1.ResourcePods] = *resource.NewQuantity(int64(maxPods), resource.DecimalSI)
			logger.Error(err, "Error getting machine info")
		} else {
			node.Status.NodeInfo.MachineID = info.MachineID
			node.Status.NodeInfo.SystemUUID = info.SystemUUID
			for name, q := range CapacityFromMachineInfo(info) {
				node.Status.Capacity[name] = q
			}
			node.Status.Capacity[v1.ResourcePods] = *resource.NewQuantity(int64(maxPods), resource.DecimalSI)
			if node.Status.NodeInfo.BootID != "" && node.Status.NodeInfo.BootID != info.BootID {
				rebootEvent.Do(func() {
					recordEventFunc(v1.EventTypeWarning, "NodeRebooted",
						fmt.Sprintf("Node %s has been rebooted, boot id: %s", nodeName, info.BootID))
				})
			}
			node.Status.NodeInfo.BootID = info.BootID
			if q, err := ephemeralStorageCapacityFunc(); err != nil {
				logger.Error(err, "Error getting ephemeral-storage capacity")
			} else {
				node.Status.Capacity[v1.ResourceEphemeralStorage] = q
			}
			if info.SwapCapacity != 0 {
				node.Status.NodeInfo.Swap = &v1.NodeSwapStatus{Capacity: ptr.To(int64(info.SwapCapacity))}
			}
			node.Status.NodeInfo.RunningInUserNamespace = runningInUserNSFunc()
		}

		if node.Status.Allocatable == nil {
			node.Status.Allocatable = v1.ResourceList{}
		}
		for k := range node.Status.Allocatable {
			if _, found := node.Status.Capacity[k]; !found && IsExtendedResourceName(k) {
				delete(node.Status.Allocatable, k)
			}
		}
		reservation := reservationFunc(node.Status.Capacity)
		for k, v := range node.Status.Capacity {
			value := v.DeepCopy()
			if r, ok := reservation[k]; ok {
				value.Sub(r)
			}
			if value.Sign() < 0 {
				value.Set(0)
			}
			node.Status.Allocatable[k] = value
		}
		for k, v := range node.Status.Capacity {
			if strings.HasPrefix(string(k), v1.ResourceHugePagesPrefix) {
				mem := node.Status.Allocatable[v1.ResourceMemory]
				mem.Sub(v)
				if mem.Sign() < 0 {
					mem.Set(0)
				}
				node.Status.Allocatable[v1.ResourceMemory] = mem
			}
		}
		return nil
	}
}

// CapacityFromMachineInfo returns cpu (millicores), memory (bytes) and hugepages-<size> (bytes)
// from cadvisor machine info, as the kubelet's cadvisor.CapacityFromMachineInfo. Unlike the kubelet's
// int64(NumCores*1000) and int64(PageSize*1024)*int64(NumPages), it never overflows: a value beyond
// int64 (in millicores for cpu) is returned exact, as a larger Quantity, never negative or wrapped.
func CapacityFromMachineInfo(info *cadvisorapi.MachineInfo) v1.ResourceList {
	cpu := resource.NewQuantity(int64(info.NumCores), resource.DecimalSI)
	if info.NumCores >= 0 && int64(info.NumCores) <= math.MaxInt64/1000 {
		cpu = resource.NewMilliQuantity(int64(info.NumCores)*1000, resource.DecimalSI)
	}
	c := v1.ResourceList{
		v1.ResourceCPU:    *cpu,
		v1.ResourceMemory: bigQuantity(new(big.Int).SetUint64(info.MemoryCapacity), resource.BinarySI),
	}
	for _, hp := range info.HugePages {
		pageSize := new(big.Int).Mul(new(big.Int).SetUint64(hp.PageSize), big.NewInt(1024))
		q := bigQuantity(pageSize, resource.BinarySI)
		name := v1.ResourceName(v1.ResourceHugePagesPrefix + q.String())
		c[name] = bigQuantity(pageSize.Mul(pageSize, new(big.Int).SetUint64(hp.NumPages)), resource.BinarySI)
	}
	return c
}

// bigQuantity returns v as a Quantity: an int64 one when it fits, else parsed from its decimal digits
// (exact, whatever its size).
func bigQuantity(v *big.Int, format resource.Format) resource.Quantity {
	if v.IsInt64() {
		return *resource.NewQuantity(v.Int64(), format)
	}
	q := resource.MustParse(v.String())
	q.Format = format
	return q
}

// IsExtendedResourceName mirrors v1helper.IsExtendedResourceName: a fully qualified resource name
// outside the kubernetes.io domain, e.g. "example.com/gpu".
func IsExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	if strings.HasPrefix(s, "requests.") || !strings.Contains(s, "/") {
		return false
	}
	return !strings.Contains(s, "kubernetes.io/")
}

// VersionInfo returns a Setter that sets kernelVersion, osImage, containerRuntimeVersion
// ("containerd://1.6.20", or "<type>://Unknown" when the runtime does not answer) and kubeletVersion
// (agentVersion). Mirrors nodestatus.VersionInfo, except that the runtime's type and version come from
// one func (one CRI Version answer) instead of two, so neither depends on the other being called first.
func VersionInfo(kernelVersionFunc func() string, // typically cadvisor machine.KernelVersion
	osImageFunc func() string, // typically cadvisor machine.ContainerOsVersion
	runtimeVersionFunc func(ctx context.Context) (runtimeType, version string, err error), // typically criruntime.VersionSource.Version
	agentVersion string,
) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		node.Status.NodeInfo.KernelVersion = kernelVersionFunc()
		node.Status.NodeInfo.OSImage = osImageFunc()
		runtimeType, runtimeVersion, err := runtimeVersionFunc(ctx)
		if err != nil {
			runtimeVersion = "Unknown"
		}
		node.Status.NodeInfo.ContainerRuntimeVersion = fmt.Sprintf("%s://%s", runtimeType, runtimeVersion)
		node.Status.NodeInfo.KubeletVersion = agentVersion
		return nil
	}
}

// DaemonEndpoints returns a Setter that sets status.daemonEndpoints to the given value.
func DaemonEndpoints(endpoints *v1.NodeDaemonEndpoints) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		node.Status.DaemonEndpoints = *endpoints
		return nil
	}
}

// Image is one image on the node, as kubecontainer.Image: Size in bytes.
type Image struct {
	RepoTags    []string
	RepoDigests []string
	Size        int64
}

// Images returns a Setter that sets status.images: the largest maxImages images (all when -1), each
// with at most MaxNamesPerImageInNodeStatus names, digests first. On error the list is emptied and the
// error returned. Mirrors nodestatus.Images.
func Images(maxImages int32, imageListFunc func(ctx context.Context) ([]Image, error)) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		images, err := imageListFunc(ctx)
		if err != nil {
			node.Status.Images = nil
			return fmt.Errorf("error getting image list: %w", err)
		}
		sort.SliceStable(images, func(i, j int) bool { return images[i].Size > images[j].Size })
		if maxImages > -1 && int(maxImages) < len(images) {
			images = images[:maxImages]
		}
		var out []v1.ContainerImage
		for _, img := range images {
			names := append(append([]string{}, img.RepoDigests...), img.RepoTags...)
			if len(names) > MaxNamesPerImageInNodeStatus {
				names = names[:MaxNamesPerImageInNodeStatus]
			}
			out = append(out, v1.ContainerImage{Names: names, SizeBytes: img.Size})
		}
		node.Status.Images = out
		return nil
	}
}

// GoRuntime returns a Setter that sets operatingSystem and architecture from GOOS and GOARCH.
func GoRuntime() Setter {
	return func(ctx context.Context, node *v1.Node) error {
		node.Status.NodeInfo.OperatingSystem = goruntime.GOOS
		node.Status.NodeInfo.Architecture = goruntime.GOARCH
		return nil
	}
}

// RuntimeHandlers returns a Setter that sets status.runtimeHandlers from the runtime's handlers.
func RuntimeHandlers(fn func() []criruntime.Handler) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		handlers := fn()
		node.Status.RuntimeHandlers = make([]v1.NodeRuntimeHandler, len(handlers))
		for i, h := range handlers {
			node.Status.RuntimeHandlers[i] = v1.NodeRuntimeHandler{
				Name: h.Name,
				Features: &v1.NodeRuntimeHandlerFeatures{
					RecursiveReadOnlyMounts: &h.SupportsRecursiveReadOnlyMounts,
					UserNamespaces:          &h.SupportsUserNamespaces,
				},
			}
		}
		return nil
	}
}

// NodeFeatures returns a Setter that sets status.features when the runtime reported features.
func NodeFeatures(fn func() *criruntime.Features) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		f := fn()
		if f == nil {
			return nil
		}
		node.Status.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: &f.SupplementalGroupsPolicy}
		return nil
	}
}

// pressure describes one pressure NodeCondition's reasons and messages.
type pressure struct {
	condType                      v1.NodeConditionType
	trueReason, trueMessage       string
	falseReason, falseMessage     string
	trueEventReason, falseEventRs string
}

// pressureCondition is the shared body of MemoryPressureCondition, DiskPressureCondition and
// PIDPressureCondition in the kubelet: refresh the heartbeat, flip status, reason, message and
// transition time when the pressure changes, and record the event on a flip.
func pressureCondition(p pressure, nowFunc func() time.Time, pressureFunc func() bool, recordEventFunc RecordEventFunc) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		now := metav1.NewTime(nowFunc())
		var cond *v1.NodeCondition
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == p.condType {
				cond = &node.Status.Conditions[i]
			}
		}
		isNew := cond == nil
		if isNew {
			cond = &v1.NodeCondition{Type: p.condType, Status: v1.ConditionUnknown}
		}
		cond.LastHeartbeatTime = now
		if pressureFunc() {
			if cond.Status != v1.ConditionTrue {
				cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = v1.ConditionTrue, p.trueReason, p.trueMessage, now
				recordEventFunc(v1.EventTypeNormal, p.trueEventReason)
			}
		} else if cond.Status != v1.ConditionFalse {
			cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = v1.ConditionFalse, p.falseReason, p.falseMessage, now
			recordEventFunc(v1.EventTypeNormal, p.falseEventRs)
		}
		if isNew {
			node.Status.Conditions = append(node.Status.Conditions, *cond)
		}
		return nil
	}
}

// MemoryPressureCondition returns a Setter for the MemoryPressure condition. Mirrors nodestatus.MemoryPressureCondition.
func MemoryPressureCondition(nowFunc func() time.Time, pressureFunc func() bool, recordEventFunc RecordEventFunc) Setter {
	return pressureCondition(pressure{
		condType:   v1.NodeMemoryPressure,
		trueReason: "KubeletHasInsufficientMemory", trueMessage: "kubelet has insufficient memory available",
		falseReason: "KubeletHasSufficientMemory", falseMessage: "kubelet has sufficient memory available",
		trueEventReason: "NodeHasInsufficientMemory", falseEventRs: "NodeHasSufficientMemory",
	}, nowFunc, pressureFunc, recordEventFunc)
}

// DiskPressureCondition returns a Setter for the DiskPressure condition. Mirrors nodestatus.DiskPressureCondition.
func DiskPressureCondition(nowFunc func() time.Time, pressureFunc func() bool, recordEventFunc RecordEventFunc) Setter {
	return pressureCondition(pressure{
		condType:   v1.NodeDiskPressure,
		trueReason: "KubeletHasDiskPressure", trueMessage: "kubelet has disk pressure",
		falseReason: "KubeletHasNoDiskPressure", falseMessage: "kubelet has no disk pressure",
		trueEventReason: "NodeHasDiskPressure", falseEventRs: "NodeHasNoDiskPressure",
	}, nowFunc, pressureFunc, recordEventFunc)
}

// PIDPressureCondition returns a Setter for the PIDPressure condition. Mirrors nodestatus.PIDPressureCondition.
func PIDPressureCondition(nowFunc func() time.Time, pressureFunc func() bool, recordEventFunc RecordEventFunc) Setter {
	return pressureCondition(pressure{
		condType:   v1.NodePIDPressure,
		trueReason: "KubeletHasInsufficientPID", trueMessage: "kubelet has insufficient PID available",
		falseReason: "KubeletHasSufficientPID", falseMessage: "kubelet has sufficient PID available",
		trueEventReason: "NodeHasInsufficientPID", falseEventRs: "NodeHasSufficientPID",
	}, nowFunc, pressureFunc, recordEventFunc)
}

// ReadyCondition returns a Setter for the Ready condition: True "KubeletReady" "kubelet is posting
// ready status", or False "KubeletNotReady" with the aggregated runtime, network and storage errors and
// any missing capacity (cpu, memory, pods, ephemeral-storage). The transition time moves and a
// NodeReady/NodeNotReady event is recorded only when the status flips. Mirrors nodestatus.ReadyCondition.
func ReadyCondition(nowFunc func() time.Time,
	runtimeErrorsFunc func() error, // typically State.RuntimeErrors
	networkErrorsFunc func() error, // typically State.NetworkErrors
	storageErrorsFunc func() error, // typically State.StorageErrors
	recordEventFunc RecordEventFunc,
) Setter {
	return func(ctx context.Context, node *v1.Node) error {
		now := metav1.NewTime(nowFunc())
		newCond := v1.NodeCondition{
			Type: v1.NodeReady, Status: v1.ConditionTrue,
			Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now,
		}
		errs := []error{runtimeErrorsFunc(), networkErrorsFunc(), storageErrorsFunc()}
		var missing []string
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods, v1.ResourceEphemeralStorage} {
			if _, ok := node.Status.Capacity[r]; !ok {
				missing = append(missing, string(r))
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("missing node capacity for resources: %s", strings.Join(missing, ", ")))
		}
		if agg := utilerrors.NewAggregate(errs); agg != nil {
			newCond = v1.NodeCondition{
				Type: v1.NodeReady, Status: v1.ConditionFalse,
				Reason: "KubeletNotReady", Message: agg.Error(), LastHeartbeatTime: now,
			}
		}
		updated, flipped := false, false
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type != v1.NodeReady {
				continue
			}
			if node.Status.Conditions[i].Status == newCond.Status {
				newCond.LastTransitionTime = node.Status.Conditions[i].LastTransitionTime
			} else {
				newCond.LastTransitionTime = now
				flipped = true
			}
			node.Status.Conditions[i] = newCond
			updated = true
			break
		}
		if !updated {
			newCond.LastTransitionTime = now
			node.Status.Conditions = append(node.Status.Conditions, newCond)
		}
		if flipped {
			if newCond.Status == v1.ConditionTrue {
				recordEventFunc(v1.EventTypeNormal, "NodeReady")
			} else {
				recordEventFunc(v1.EventTypeNormal, "NodeNotReady")
				klog.FromContext(ctx).Info("Node became not ready", "node", klog.KObj(node), "condition", newCond)
			}
		}
		return nil
	}
}

// SchedulableEvent returns a Setter that records NodeSchedulable/NodeNotSchedulable when
// spec.unschedulable changes, as the kubelet's recordNodeSchedulableEvent. It changes nothing.
func SchedulableEvent(recordEventFunc RecordEventFunc) Setter {
	var last *bool
	return func(ctx context.Context, node *v1.Node) error {
		u := node.Spec.Unschedulable
		if last != nil && *last == u {
			return nil
		}
		if last != nil || u {
			if u {
				recordEventFunc(v1.EventTypeNormal, "NodeNotSchedulable")
			} else {
				recordEventFunc(v1.EventTypeNormal, "NodeSchedulable")
			}
		}
		last = &u
		return nil
	}
}
