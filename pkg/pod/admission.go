package pod

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// The reasons a pod is rejected with, the kubelet's words (pkg/kubelet/lifecycle/predicate.go, and the
// scheduler plugin names pkg/scheduler/framework/plugins/names for the predicate failures).
const (
	ReasonPodOSSelectorNodeLabelDoesNotMatch   = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported                    = "PodOSNotSupported"
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
	// ReasonOutOfPrefix + resource name: OutOfcpu, OutOfmemory, OutOfephemeral-storage, OutOfpods,
	// OutOfexample.com/gpu.
	ReasonOutOfPrefix       = "OutOf"
	ReasonOutOfCPU          = "OutOfcpu"
	ReasonOutOfMemory       = "OutOfmemory"
	ReasonOutOfEphemeral    = "OutOfephemeral-storage"
	ReasonOutOfPods         = "OutOfpods"
	ReasonNodeAffinity      = "NodeAffinity"
	ReasonNodeName          = "NodeName"
	ReasonNodePorts         = "NodePorts"
	ReasonTaintToleration   = "TaintToleration"
	RejectedMessagePrefix   = "Pod was rejected: "
	errReasonNodeAffinity   = "node(s) didn't match Pod's node affinity/selector"
	errReasonNodeName       = "node(s) didn't match the requested node name"
	errReasonNodePorts      = "node(s) didn't have free ports for the requested pod ports"
	errReasonTaintsNotMatch = "node(s) had taints that the pod didn't tolerate"
	// configSourceAnnotation marks a static pod (value other than "api"); the kubelet skips the taint
	// check for those (pkg/kubelet/types.IsStaticPod).
	configSourceAnnotation = "kubernetes.io/config.source"
)

// AdmitResult is the outcome of Admit, the kubelet's lifecycle.PodAdmitResult: Admit true, or false with
// the Reason (one of the Reason* constants, or ReasonOutOfPrefix+resource) and the Message the kubelet
// gives, e.g. "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000". The
// pod's status and its Event carry the Message behind RejectedMessagePrefix (see RejectedStatus).
type AdmitResult struct {
	Admit   bool
	Reason  string
	Message string
}

// Admit decides whether node admits pod, as the kubelet's predicate admission does
// (pkg/kubelet/lifecycle/predicate.go predicateAdmitHandler.Admit and generalFilter, which calls the
// scheduler's AdmissionCheck: noderesources.Fits, node affinity, node name, node ports, then the
// NoExecute taints). others are the pods already admitted to node and not terminal (the kubelet's
// active pods), without pod itself. The checks, in the kubelet's order and the first failure winning:
//
//  1. the pod's kubernetes.io/os label (its label, not its nodeSelector, as the kubelet reads it)
//     against the node's OS (PodOSSelectorNodeLabelDoesNotMatch), then spec.os (PodOSNotSupported);
//     the node's OS is its kubernetes.io/os label, "linux" when absent: a simulated Node's OS, where
//     the kubelet uses runtime.GOOS;
//  2. spec.securityContext.supplementalGroupsPolicy Strict on a node whose status.features does not
//     support it (the feature is GA in 1.37);
//  3. resources (requests by component-helpers' PodRequests: init containers, sidecars, overhead and
//     pod-level resources as the scheduler counts them; others' requests with their resized status as
//     the kubelet's NodeInfo counts them): pods count, cpu (millicores), memory, ephemeral-storage
//     (bytes), then extended resources in name order (the kubelet's map order is random); extended
//     resources the node does not list at all are ignored, as the kubelet's removeMissingExtendedResources;
//  4. required node affinity and nodeSelector (component-helpers nodeaffinity), spec.nodeName, host
//     ports against others' (and sidecars') host ports, untolerated NoExecute taints (NoSchedule ones
//     are the scheduler's business) except for static pods.
//
// Not mirrored: the kubelet's other admit handlers (eviction under node pressure, sysctls, CPU and
// topology managers, shutdown), DRA-backed extended resources, and the re-read of the Node the kubelet
// does when node affinity alone fails: pass the freshest Node. Admit does not modify its arguments.
func Admit(node *v1.Node, pod *v1.Pod, others []*v1.Pod) AdmitResult {
	var used Usage
	for _, o := range others {
		used.Add(o)
	}
	return AdmitWith(node, pod, &used)
}

// Usage is what the active pods of a Node hold, as the kubelet's admission sums them from its active
// pods on every admission (the scheduler's NodeInfo that generalFilter is given): their count, their
// requests (with their resized status, as NodeInfo counts them) and their host ports. Kept
// incrementally (Add when a pod is admitted, Remove with what Add returned when it turns terminal or
// leaves), so that one admission costs O(1) in the pods already on the Node where the kubelet's costs
// O(n): the kubelet has at most 110 pods, a simulated Node may have 10 000. The zero Usage is empty.
// Not safe for concurrent use.
type Usage struct {
	pods  int64
	used  resourceSum
	ports map[hostPort]int
	// anyIP counts the host ports by protocol and port, whatever their IP: a wanted 0.0.0.0 port
	// conflicts with any of them.
	anyIP map[hostPort]int
}

// UsageEntry is one pod's part of a Usage, returned by Add for Remove.
type UsageEntry struct {
	req   resourceSum
	ports []hostPort
}

// Add counts p as an active pod and returns its part, for Remove.
func (u *Usage) Add(p *v1.Pod) UsageEntry {
	var e UsageEntry
	e.req.add(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{
		UseStatusResources: true, InPlacePodLevelResourcesVerticalScalingEnabled: true}))
	e.ports = podHostPorts(p)
	u.pods++
	u.used.addSum(&e.req, 1)
	if len(e.ports) > 0 && u.ports == nil {
		u.ports, u.anyIP = map[hostPort]int{}, map[hostPort]int{}
	}
	for _, hp := range e.ports {
		u.ports[hp]++
		u.anyIP[hostPort{protocol: hp.protocol, port: hp.port}]++
	}
	return e
}

// Remove takes back a part Add returned: the pod is no longer active.
func (u *Usage) Remove(e UsageEntry) {
	u.pods--
	u.used.addSum(&e.req, -1)
	for _, hp := range e.ports {
		if u.ports[hp]--; u.ports[hp] <= 0 {
			delete(u.ports, hp)
		}
		k := hostPort{protocol: hp.protocol, port: hp.port}
		if u.anyIP[k]--; u.anyIP[k] <= 0 {
			delete(u.anyIP, k)
		}
	}
}

// Pods is the number of active pods counted.
func (u *Usage) Pods() int { return int(u.pods) }

// AdmitWith is Admit with the other active pods given as their Usage: the same checks, results and
// messages (see Admit).
func AdmitWith(node *v1.Node, pod *v1.Pod, used *Usage) AdmitResult {
	nodeOS := node.Labels[v1.LabelOSStable]
	if nodeOS == "" {
		nodeOS = "linux"
	}
	if want, ok := pod.Labels[v1.LabelOSStable]; ok && want != nodeOS {
		return AdmitResult{Reason: ReasonPodOSSelectorNodeLabelDoesNotMatch,
			Message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != nodeOS {
		return AdmitResult{Reason: ReasonPodOSNotSupported,
			Message: "Failed to admit pod as the OS field doesn't match node OS"}
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SupplementalGroupsPolicy != nil &&
		*sc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict &&
		(node.Status.Features == nil || node.Status.Features.SupplementalGroupsPolicy == nil || !*node.Status.Features.SupplementalGroupsPolicy) {
		return AdmitResult{Reason: ReasonSupplementalGroupsPolicyNotSupported,
			Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", v1.SupplementalGroupsPolicyStrict)}
	}

	if r := fitsResources(node, pod, used); r != nil {
		return AdmitResult{Reason: r.reason(), Message: r.Error()}
	}
	predicate := func(name, desc string) AdmitResult {
		return AdmitResult{Reason: name, Message: fmt.Sprintf("Predicate %s failed: %s", name, desc)}
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return predicate(ReasonNodeAffinity, errReasonNodeAffinity)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return predicate(ReasonNodeName, errReasonNodeName)
	}
	if hostPortsConflict(pod, used) {
		return predicate(ReasonNodePorts, errReasonNodePorts)
	}
	if src, ok := pod.Annotations[configSourceAnnotation]; !ok || src == "api" {
		_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
			func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }, false)
		if untolerated {
			return predicate(ReasonTaintToleration, errReasonTaintsNotMatch)
		}
	}
	return AdmitResult{Admit: true}
}

// RejectedStatus is the status the kubelet writes for a pod it rejects (pkg/kubelet/kubelet.go
// rejectPod): phase Failed, the reason, the message behind "Pod was rejected: ", and the pod's QoS
// class kept. Written through the same merge and patch as any status (the API server keeps the
// conditions the kubelet does not own).
func RejectedStatus(pod *v1.Pod, r AdmitResult) v1.PodStatus {
	return v1.PodStatus{
		QOSClass: PodQOS(pod),
		Phase:    v1.PodFailed,
		Reason:   r.Reason,
		Message:  RejectedMessagePrefix + r.Message,
	}
}

// insufficientResource is the kubelet's lifecycle.InsufficientResourceError. Units: millicores for
// cpu, bytes for memory and ephemeral-storage, a count for pods and extended resources.
type insufficientResource struct {
	name                      v1.ResourceName
	requested, used, capacity int64
}

func (e *insufficientResource) Error() string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
		e.name, e.requested, e.used, e.capacity)
}

func (e *insufficientResource) reason() string {
	return ReasonOutOfPrefix + string(e.name)
}

// resourceSum is the scheduler's framework.Resource: cpu in millicores, the rest in units.
type resourceSum struct {
	milliCPU, memory, ephemeral int64
	pods                        int64
	scalar                      map[v1.ResourceName]int64
}

// add mirrors the scheduler's Resource.Add: only cpu, memory, ephemeral-storage, pods and the scalar
// resources (extended, hugepages, attachable volumes, prefixed native) count.
func (r *resourceSum) add(list v1.ResourceList) {
	for name, q := range list {
		switch name {
		case v1.ResourceCPU:
			r.milliCPU += q.MilliValue()
		case v1.ResourceMemory:
			r.memory += q.Value()
		case v1.ResourceEphemeralStorage:
			r.ephemeral += q.Value()
		case v1.ResourcePods:
			r.pods += q.Value()
		default:
			if isScalarResourceName(name) {
				if r.scalar == nil {
					r.scalar = map[v1.ResourceName]int64{}
				}
				r.scalar[name] += q.Value()
			}
		}
	}
}

// addSum adds sign × o to r.
func (r *resourceSum) addSum(o *resourceSum, sign int64) {
	r.milliCPU += sign * o.milliCPU
	r.memory += sign * o.memory
	r.ephemeral += sign * o.ephemeral
	r.pods += sign * o.pods
	for name, v := range o.scalar {
		if r.scalar == nil {
			r.scalar = map[v1.ResourceName]int64{}
		}
		if r.scalar[name] += sign * v; r.scalar[name] == 0 {
			delete(r.scalar, name)
		}
	}
}

// fitsResources mirrors noderesources.fitsRequest as AdmissionCheck calls it (no ignored resources,
// no DRA) over the active pods' usage, and returns the first insufficiency, nil when the pod fits.
func fitsResources(node *v1.Node, pod *v1.Pod, u *Usage) *insufficientResource {
	var alloc resourceSum
	alloc.add(node.Status.Allocatable)
	if u.pods+1 > alloc.pods {
		return &insufficientResource{name: v1.ResourcePods, requested: 1, used: u.pods, capacity: alloc.pods}
	}
	var req resourceSum
	req.add(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
	for name := range req.scalar {
		if isExtendedResourceName(name) {
			if _, ok := alloc.scalar[name]; !ok {
				delete(req.scalar, name) // removeMissingExtendedResources
			}
		}
	}
	if req.milliCPU == 0 && req.memory == 0 && req.ephemeral == 0 && len(req.scalar) == 0 {
		return nil
	}
	used := &u.used
	check := func(name v1.ResourceName, r, u, a int64) *insufficientResource {
		if r > 0 && r > a-u {
			return &insufficientResource{name: name, requested: r, used: u, capacity: a}
		}
		return nil
	}
	if e := check(v1.ResourceCPU, req.milliCPU, used.milliCPU, alloc.milliCPU); e != nil {
		return e
	}
	if e := check(v1.ResourceMemory, req.memory, used.memory, alloc.memory); e != nil {
		return e
	}
	if e := check(v1.ResourceEphemeralStorage, req.ephemeral, used.ephemeral, alloc.ephemeral); e != nil {
		return e
	}
	names := make([]v1.ResourceName, 0, len(req.scalar))
	for name := range req.scalar {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if e := check(name, req.scalar[name], used.scalar[name], alloc.scalar[name]); e != nil {
			return e
		}
	}
	return nil
}

// isExtendedResourceName mirrors pkg/apis/core/v1/helper.IsExtendedResourceName: a qualified name
// outside the kubernetes.io domain and not a quota "requests." name.
func isExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, "kubernetes.io/") {
		return false
	}
	return !strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix)
}

// isScalarResourceName mirrors pkg/scheduler/util.IsScalarResourceName: extended, hugepages,
// prefixed native (kubernetes.io/...) and attachable-volumes-* resources.
func isScalarResourceName(name v1.ResourceName) bool {
	s := string(name)
	return isExtendedResourceName(name) || strings.HasPrefix(s, v1.ResourceHugePagesPrefix) ||
		strings.Contains(s, "kubernetes.io/") || strings.HasPrefix(s, v1.ResourceAttachableVolumesPrefix)
}

// hostPort is one (ip, protocol, port) a pod binds on its node, sanitized as the scheduler's
// HostPortInfo does: empty IP is 0.0.0.0, empty protocol TCP.
type hostPort struct {
	ip, protocol string
	port         int32
}

// podHostPorts mirrors pkg/scheduler/util.GetHostPorts: host ports of sidecars and regular containers
// (regular init containers end before the pod runs).
func podHostPorts(pod *v1.Pod) []hostPort {
	var ports []hostPort
	add := func(c *v1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			hp := hostPort{ip: p.HostIP, protocol: string(p.Protocol), port: p.HostPort}
			if hp.ip == "" {
				hp.ip = "0.0.0.0"
			}
			if hp.protocol == "" {
				hp.protocol = string(v1.ProtocolTCP)
			}
			ports = append(ports, hp)
		}
	}
	for i := range pod.Spec.InitContainers {
		if IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			add(&pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return ports
}

// hostPortsConflict mirrors nodeports.Fits with HostPortInfo.CheckConflict: a wanted 0.0.0.0 port
// conflicts with the same protocol and port on any IP; a specific IP conflicts with itself and 0.0.0.0.
func hostPortsConflict(pod *v1.Pod, u *Usage) bool {
	for _, w := range podHostPorts(pod) {
		if w.ip == "0.0.0.0" {
			if u.anyIP[hostPort{protocol: w.protocol, port: w.port}] > 0 {
				return true
			}
			continue
		}
		if u.ports[w] > 0 || u.ports[hostPort{ip: "0.0.0.0", protocol: w.protocol, port: w.port}] > 0 {
			return true
		}
	}
	return false
}

// IsRestartableInitContainer mirrors podutil.IsRestartableInitContainer: a sidecar, an init container with restartPolicy Always.
func IsRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}
