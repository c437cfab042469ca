// Package dra is the kubelet's DRA manager (k8s.io/kubernetes pkg/kubelet/cm/dra/manager.go) for Nodes
// whose DRA drivers run inside the process (nodeagent simulate's simulated drivers, or a pkg/node
// library user's): it prepares a pod's ResourceClaims before its containers start and unprepares them
// once they have stopped, with the kubelet's checks and error messages, gives each container the
// devices of its claims (for the environment a driver's CDI spec sets), and reports each device's
// health in containerStatuses[].allocatedResourcesStatus (KEP-4680) as the kubelet's
// UpdateAllocatedResourcesStatus does.
//
// What a driver's NodePrepareResources would do is left to the caller (Options.Prepare): the manager
// only checks what the kubelet checks and remembers what is prepared for which pods (the kubelet's
// claim info cache, in memory: a process restarted prepares its running pods' claims again).
package dra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// ReasonFailedPrepareDynamicResources is the kubelet's Warning Event reason when a pod's claims could
// not be prepared (pkg/kubelet/events), with the message "Failed to prepare dynamic resources: <err>".
const ReasonFailedPrepareDynamicResources = "FailedPrepareDynamicResources"

// Device names one allocated device: its driver, pool and name in the pool (a ResourceClaim's
// status.allocation.devices.results[] entry).
type Device struct {
	Driver, Pool, Device string
}

// String is the device as the kubelet names it in allocatedResourcesStatus without a CDI device ID:
// "<driver>/<pool>/<device>".
func (d Device) String() string { return d.Driver + "/" + d.Pool + "/" + d.Device }

// Health is a device's health as a driver's NodeWatchResources stream reports it.
type Health struct {
	// Health is Healthy, Unhealthy or Unknown (v1.ResourceHealthStatus).
	Health v1.ResourceHealthStatus
	// Message is shown in allocatedResourcesStatus (the ResourceHealthStatusMessage feature, beta and
	// on in 1.37); "" for none.
	Message string
}

// Options configure a Manager.
type Options struct {
	// Client reads the pods' ResourceClaims (GET, as the kubelet reads each claim when it prepares it).
	Client kubernetes.Interface
	// Drivers are the DRA drivers registered on the Nodes (by name); a claim allocated a device of
	// another driver is not prepared ("DRA driver X is not registered").
	Drivers []string
	// Prepare, if set, is each driver's NodePrepareResources for one claim of pod on its Node (devices:
	// the claim's devices of that driver): a non-empty answer is the driver's per-claim error.
	Prepare func(pod *v1.Pod, claim *resourcev1.ResourceClaim, driver string, devices []Device) string
}

// Manager is the kubelet's DRA manager for in-process drivers; safe for concurrent use. Its zero value
// is not usable: use NewManager.
type Manager struct {
	opts Options

	mu sync.Mutex
	// claims are the prepared claims by namespace/name (the kubelet's claim info cache).
	claims map[string]*claimInfo
	// health is each device's health that differs from Healthy (the default of a driver that reports it).
	health map[Device]Health
}

type claimInfo struct {
	uid     types.UID
	results []resourcev1.DeviceRequestAllocationResult
	// pods are the pods the claim is prepared for, by UID, with their namespace/name.
	pods map[types.UID]string
}

// NewManager returns a Manager with opts.
func NewManager(opts Options) *Manager {
	return &Manager{opts: opts, claims: map[string]*claimInfo{}, health: map[Device]Health{}}
}

// podClaims returns the names of pod's ResourceClaims (spec.resourceClaims, resolved through
// status.resourceClaimStatuses for those of a template; and status.extendedResourceClaimStatus) with
// whether the claim must be checked to be the pod's own; nil names are claims not to be made.
func podClaims(pod *v1.Pod) ([]*string, []bool, error) {
	claims := pod.Spec.ResourceClaims
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		claims = append(slices.Clip(claims), v1.PodResourceClaim{ResourceClaimName: &s.ResourceClaimName})
	}
	names, owned := make([]*string, 0, len(claims)), make([]bool, 0, len(claims))
	for i := range claims {
		name, mustCheckOwner, err := resourceclaim.Name(pod, &claims[i])
		if err != nil {
			return nil, nil, err
		}
		names, owned = append(names, name), append(owned, mustCheckOwner)
	}
	return names, owned, nil
}

// HasClaims reports whether pod uses ResourceClaims (the kubelet prepares dynamic resources only then).
func HasClaims(pod *v1.Pod) bool {
	return len(pod.Spec.ResourceClaims) > 0 || pod.Status.ExtendedResourceClaimStatus != nil
}

// PrepareResources is the kubelet's PrepareResources (manager.go) for pod: each of its claims is read
// from the API server and must be the pod's (IsForPod, for a claim of a template), reserved for it
// (status.reservedFor names the pod: "pod P (UID) is not allowed to use ResourceClaim C (UID)") and
// allocated ("not allocated"), its devices' drivers registered; then each driver's Prepare is called
// for the claims not prepared yet. An error is returned as the kubelet's, wrapped in "prepare dynamic
// resources: ", and nothing is remembered for the pod: the caller records the kubelet's Warning Event
// (ReasonFailedPrepareDynamicResources) and tries again later.
func (m *Manager) PrepareResources(ctx context.Context, pod *v1.Pod) error {
	if err := m.prepare(ctx, pod); err != nil {
		return fmt.Errorf("prepare dynamic resources: %w", err)
	}
	return nil
}

func (m *Manager) prepare(ctx context.Context, pod *v1.Pod) error {
	names, owned, err := podClaims(pod)
	if err != nil {
		return err
	}
	claims := make([]*resourcev1.ResourceClaim, 0, len(names))
	for i, name := range names {
		if name == nil {
			continue
		}
		claim, err := m.opts.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("fetch ResourceClaim %s: %w", *name, err)
		}
		if owned[i] {
			if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
				return err
			}
		}
		if !resourceclaim.IsReservedForPod(pod, claim, false) {
			return fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, *name, claim.UID)
		}
		if claim.Status.Allocation == nil {
			return fmt.Errorf("ResourceClaim %s: %w", claim.Name, errors.New("not allocated"))
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if !slices.Contains(m.opts.Drivers, r.Driver) {
				return fmt.Errorf("DRA driver %s is not registered", r.Driver)
			}
		}
		claims = append(claims, claim)
	}
	m.mu.Lock()
	for _, claim := range claims {
		if info := m.claims[key(claim.Namespace, claim.Name)]; info != nil && info.uid != claim.UID {
			m.mu.Unlock()
			return fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", claim.Name, info.uid)
		}
	}
	m.mu.Unlock()
	for _, claim := range claims {
		m.mu.Lock()
		_, prepared := m.claims[key(claim.Namespace, claim.Name)]
		m.mu.Unlock()
		if prepared || m.opts.Prepare == nil {
			continue
		}
		for _, driver := range drivers(claim.Status.Allocation.Devices.Results) {
			if msg := m.opts.Prepare(pod, claim, driver, devicesOf(claim.Status.Allocation.Devices.Results, driver, "")); msg != "" {
				return fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", claim.Name, msg)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, claim := range claims {
		k := key(claim.Namespace, claim.Name)
		info := m.claims[k]
		if info == nil {
			info = &claimInfo{uid: claim.UID, results: claim.Status.Allocation.Devices.Results, pods: map[types.UID]string{}}
			m.claims[k] = info
		}
		info.pods[pod.UID] = key(pod.Namespace, pod.Name)
	}
	return nil
}

// UnprepareResources is the kubelet's UnprepareResources for pod, once its containers have stopped:
// the pod's claims are no longer prepared for it, and a claim prepared for no other pod is forgotten
// (the driver's NodeUnprepareResources). It never fails and may be called again.
func (m *Manager) UnprepareResources(_ context.Context, pod *v1.Pod) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, info := range m.claims {
		if _, ok := info.pods[pod.UID]; !ok {
			continue
		}
		delete(info.pods, pod.UID)
		if len(info.pods) == 0 {
			delete(m.claims, k)
		}
	}
	return nil
}

// Prepared reports how many claims are prepared, for how many pod references in all.
func (m *Manager) Prepared() (claims, podRefs int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, info := range m.claims {
		claims++
		podRefs += len(info.pods)
	}
	return claims, podRefs
}

// ContainerDevices returns the devices of container ctr of pod, prepared for the pod: those of each
// claim in ctr.resources.claims (only the request's when the entry names one), in the claims' and
// allocation results' order, each once (the kubelet's GetResources gives them to the runtime as CDI
// devices). None before the pod's claims are prepared.
func (m *Manager) ContainerDevices(pod *v1.Pod, ctr *v1.Container) []Device {
	var out []Device
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range ctr.Resources.Claims {
		info := m.podClaim(pod, c.Name)
		if info == nil {
			continue
		}
		for _, d := range devicesOf(info.results, "", c.Request) {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// AllocatedResourcesStatus is the kubelet's UpdateAllocatedResourcesStatus for one container: per entry
// of ctr.resources.claims whose claim is prepared for pod, a v1.ResourceStatus named "claim:<name>" or
// "claim:<name>/<request>" with each of its devices' health (ResourceID "<driver>/<pool>/<device>", as
// the kubelet names a device without CDI device IDs), sorted by name; nil when there is none.
func (m *Manager) AllocatedResourcesStatus(pod *v1.Pod, ctr *v1.Container) []v1.ResourceStatus {
	var out []v1.ResourceStatus
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range ctr.Resources.Claims {
		info := m.podClaim(pod, c.Name)
		if info == nil {
			continue
		}
		name := v1.ResourceName("claim:" + c.Name)
		if c.Request != "" {
			name = v1.ResourceName("claim:" + c.Name + "/" + c.Request)
		}
		st := v1.ResourceStatus{Name: name}
		for _, d := range devicesOf(info.results, "", c.Request) {
			h, ok := m.health[d]
			if !ok {
				h.Health = v1.ResourceHealthStatusHealthy
			}
			rh := v1.ResourceHealth{ResourceID: v1.ResourceID(d.String()), Health: h.Health}
			if h.Message != "" {
				rh.Message = &h.Message
			}
			if !slices.ContainsFunc(st.Resources, func(o v1.ResourceHealth) bool { return o.ResourceID == rh.ResourceID }) {
				st.Resources = append(st.Resources, rh)
			}
		}
		if len(st.Resources) > 0 && !slices.ContainsFunc(out, func(o v1.ResourceStatus) bool { return o.Name == st.Name }) {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b v1.ResourceStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// SetHealth sets device d's health, as its driver's NodeWatchResources stream would report it, and
// returns the pods (namespace/name, sorted) whose prepared claims hold d: their status is to be
// written again. Health Healthy with no message is the default.
func (m *Manager) SetHealth(d Device, h Health) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.Health == v1.ResourceHealthStatusHealthy && h.Message == "" {
		delete(m.health, d)
	} else {
		m.health[d] = h
	}
	var pods []string
	for _, info := range m.claims {
		if !slices.Contains(devicesOf(info.results, "", ""), d) {
			continue
		}
		for _, p := range info.pods {
			if !slices.Contains(pods, p) {
				pods = append(pods, p)
			}
		}
	}
	slices.Sort(pods)
	return pods
}

// podClaim returns the prepared claim of pod's claim podClaimName, if it is prepared for pod. mu held.
func (m *Manager) podClaim(pod *v1.Pod, podClaimName string) *claimInfo {
	i := slices.IndexFunc(pod.Spec.ResourceClaims, func(c v1.PodResourceClaim) bool { return c.Name == podClaimName })
	if i < 0 {
		return nil
	}
	name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
	if err != nil || name == nil {
		return nil
	}
	info := m.claims[key(pod.Namespace, *name)]
	if info == nil {
		return nil
	}
	if _, ok := info.pods[pod.UID]; !ok {
		return nil
	}
	return info
}

// devicesOf returns the devices of results, of driver (all: "") and request (all: ""; a subrequest's
// results count for their request).
func devicesOf(results []resourcev1.DeviceRequestAllocationResult, driver, request string) []Device {
	var out []Device
	for _, r := range results {
		if (driver != "" && r.Driver != driver) || (request != "" && resourceclaim.BaseRequestRef(r.Request) != resourceclaim.BaseRequestRef(request)) {
			continue
		}
		out = append(out, Device{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
	}
	return out
}

// drivers returns the drivers of results, in their first appearance's order.
func drivers(results []resourcev1.DeviceRequestAllocationResult) []string {
	var out []string
	for _, r := range results {
		if !slices.Contains(out, r.Driver) {
			out = append(out, r.Driver)
		}
	}
	return out
}

func key(namespace, name string) string { return namespace + "/" + name }

// EnvValue joins device names as a driver's CDI spec lists them in one environment variable
// (NVIDIA_VISIBLE_DEVICES=gpu-0,gpu-1).
func EnvValue(devices []Device) string {
	names := make([]string, len(devices))
	for i, d := range devices {
		names[i] = d.Device
	}
	return strings.Join(names, ",")
}
