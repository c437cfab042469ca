package simulation

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Annotations that set a simulated container's resource usage, served as the kubelet's
// /stats/summary and /metrics/resource (metrics-server, kubectl top, the HorizontalPodAutoscaler). A
// key with a ".<container>" suffix sets it for that container only, over the pod-wide key, as the
// behaviour annotations. The value is a Kubernetes quantity, constant for as long as the container
// runs (the choice: a constant makes the cumulative CPU counter exact, a line in time, and what an
// HPA computes from it predictable; a load that changes is driven at run time instead, by the control
// API and `nodeagent simulate ctl --pod NS/NAME --cpu 800m --memory 300Mi`).
//
//	nodeagent.io/cpu-usage: 250m       the container's CPU use in cores (250m: a quarter of a core)
//	nodeagent.io/memory-usage: 100Mi   its memory working set in bytes
//
// Without them a container uses DefaultUsageFraction of its requests (its limits when it has no
// requests, as the API server defaults requests from limits), at least MinCPUUsage and
// MinMemoryUsage: never zero, as metrics-server drops a pod or Node whose CPU or memory is 0.
const (
	AnnotationCPUUsage    = "nodeagent.io/cpu-usage"
	AnnotationMemoryUsage = "nodeagent.io/memory-usage"
)

// IsUsageAnnotation reports whether key is a usage annotation (AnnotationCPUUsage or
// AnnotationMemoryUsage, pod-wide or ".<container>"): read by ContainerUsage and told of by
// UsageAnnotationsError, not by PodBehaviour.
func IsUsageAnnotation(key string) bool {
	for _, f := range []string{AnnotationCPUUsage, AnnotationMemoryUsage} {
		if key == f || strings.HasPrefix(key, f+".") {
			return true
		}
	}
	return false
}

// The simulated usage's defaults.
const (
	// DefaultUsageFraction of a container's requests is its usage without an annotation.
	DefaultUsageFraction = 0.1
	// MinCPUUsage (nanocores) and MinMemoryUsage (bytes): the least a running container uses, 1m
	// and 1 MiB.
	MinCPUUsage    = int64(1_000_000)
	MinMemoryUsage = int64(1 << 20)
	// DefaultNodeBaseCPU (nanocores) and DefaultNodeBaseMemory (bytes) are what a simulated Node
	// uses besides its pods (the kubelet, the runtime and the system daemons of a small Node):
	// 100m and 256 MiB, until `simulate ctl NODE --cpu/--memory` sets them.
	DefaultNodeBaseCPU    = int64(100_000_000)
	DefaultNodeBaseMemory = int64(256 << 20)
	// maxUsageChanges bounds the run-time changes kept per pod.
	maxUsageChanges = 1000
)

// Usage is the simulated resource usage of a process's Nodes and their pods. A container's usage is
// computed from time alone: its rate (annotation, default, then the run-time changes in the order
// they were made) integrated from the container's start (its status's running.startedAt) to now, so
// that its cumulative CPU counter grows monotonically while it runs and starts again from 0 when it
// restarts (a new startedAt), as the kubelet's. A Node's usage is its running containers' plus its
// base; its cumulative CPU counter (and its pods system container's) is kept monotonic by an anchor
// moved at each read: the counter at the last read plus the current rate times the time since.
// Safe for concurrent use.
type Usage struct {
	clock clock.Clock

	mu      sync.Mutex
	pods    map[string][]usageChange // by namespace/name
	nodes   map[string]nodeBase
	anchors map[string]anchor // by Node name, and Node name + "/pods"
}

type usageChange struct {
	at        time.Time
	container string // "": every container
	cpu       *int64 // nanocores
	memory    *int64 // bytes
}

type nodeBase struct{ cpu, memory int64 }

type anchor struct {
	at  time.Time
	cum uint64
}

// NewUsage returns an empty Usage reading clk.
func NewUsage(clk clock.Clock) *Usage {
	return &Usage{clock: clk, pods: map[string][]usageChange{}, nodes: map[string]nodeBase{}, anchors: map[string]anchor{}}
}

// UsageChange is a run-time change of simulated usage (the control API's POST
// /simulation/usage/pods/{namespace}/{name} and /simulation/usage/nodes/{name}): for a pod, the usage
// of Container (every container when empty) from now on; for a Node, its base usage besides its pods.
// CPU and Memory are quantities ("800m", "300Mi"); at least one is given.
type UsageChange struct {
	Container string `json:"container,omitempty"`
	CPU       string `json:"cpu,omitempty"`
	Memory    string `json:"memory,omitempty"`
}

// ErrBadUsage is wrapped by the errors of a UsageChange that cannot be applied.
var ErrBadUsage = errors.New("bad usage change")

// parse returns the change's CPU in nanocores and memory in bytes; errors wrap ErrBadUsage and name
// the field and the value.
func (c UsageChange) parse() (cpu, memory *int64, err error) {
	if c.CPU == "" && c.Memory == "" {
		return nil, nil, fmt.Errorf("%w: give cpu, memory or both", ErrBadUsage)
	}
	if c.CPU != "" {
		q, err := resource.ParseQuantity(c.CPU)
		if err != nil || q.Sign() <= 0 {
			return nil, nil, fmt.Errorf("%w: cpu %q is not a positive quantity such as 800m or 2", ErrBadUsage, c.CPU)
		}
		cpu = ptr.To(q.ScaledValue(resource.Nano))
	}
	if c.Memory != "" {
		q, err := resource.ParseQuantity(c.Memory)
		if err != nil || q.Sign() <= 0 {
			return nil, nil, fmt.Errorf("%w: memory %q is not a positive quantity such as 300Mi or 1G", ErrBadUsage, c.Memory)
		}
		memory = ptr.To(q.Value())
	}
	return cpu, memory, nil
}

// SetPod applies c to the pod namespace/name from now on (kept by name, for the pod and any later
// pod of that name, until the process ends). Errors wrap ErrBadUsage.
func (u *Usage) SetPod(namespace, name string, c UsageChange) error {
	cpu, memory, err := c.parse()
	if err != nil {
		return err
	}
	key := namespace + "/" + name
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.pods[key]) >= maxUsageChanges {
		return fmt.Errorf("%w: pod %s has had %d usage changes, the most kept", ErrBadUsage, key, maxUsageChanges)
	}
	// To the millisecond, as the reads (Summary): a change is in force at a read in its millisecond.
	u.pods[key] = append(u.pods[key], usageChange{at: u.clock.Now().Truncate(time.Millisecond), container: c.Container, cpu: cpu, memory: memory})
	return nil
}

// SetNode sets the Node's base usage (besides its pods) from now on; c.Container must be empty.
// Errors wrap ErrBadUsage.
func (u *Usage) SetNode(name string, c UsageChange) error {
	if c.Container != "" {
		return fmt.Errorf("%w: container %q: a Node's usage has no container", ErrBadUsage, c.Container)
	}
	cpu, memory, err := c.parse()
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	b := u.nodeBaseLocked(name)
	if cpu != nil {
		b.cpu = *cpu
	}
	if memory != nil {
		b.memory = *memory
	}
	u.nodes[name] = b
	return nil
}

func (u *Usage) nodeBaseLocked(name string) nodeBase {
	if b, ok := u.nodes[name]; ok {
		return b
	}
	return nodeBase{cpu: DefaultNodeBaseCPU, memory: DefaultNodeBaseMemory}
}

// ContainerUsage returns the usage the container c of pod p has without run-time changes: CPU in
// nanocores and memory working set in bytes, from the pod's annotations (AnnotationCPUUsage,
// AnnotationMemoryUsage, per container over pod-wide) else DefaultUsageFraction of its requests (else
// limits), at least MinCPUUsage and MinMemoryUsage. An annotation that does not parse is an error
// (wrapping ErrBadAnnotation, naming the key and the value) and its default is returned with it.
func ContainerUsage(p *v1.Pod, c *v1.Container) (cpu, memory int64, err error) {
	cpu = max(MinCPUUsage, int64(float64(request(c, v1.ResourceCPU).ScaledValue(resource.Nano))*DefaultUsageFraction))
	memory = max(MinMemoryUsage, int64(float64(request(c, v1.ResourceMemory).Value())*DefaultUsageFraction))
	var errs []error
	for _, f := range []struct {
		key  string
		into *int64
		cpu  bool
	}{{AnnotationCPUUsage, &cpu, true}, {AnnotationMemoryUsage, &memory, false}} {
		key := f.key + "." + c.Name
		v, ok := p.Annotations[key]
		if !ok {
			key = f.key
			v, ok = p.Annotations[key]
		}
		if !ok {
			continue
		}
		q, perr := resource.ParseQuantity(strings.TrimSpace(v))
		if perr != nil || q.Sign() <= 0 {
			errs = append(errs, fmt.Errorf("%w %s: %q is not a positive quantity such as 250m or 100Mi", ErrBadAnnotation, key, v))
			continue
		}
		if f.cpu {
			*f.into = q.ScaledValue(resource.Nano)
		} else {
			*f.into = q.Value()
		}
	}
	return cpu, memory, errors.Join(errs...)
}

// UsageAnnotationsError returns the errors of p's usage annotations (ContainerUsage's, for every
// container once, and for a ".<container>" key naming no container), nil when all parse.
func UsageAnnotationsError(p *v1.Pod) error {
	var errs []error
	seen := map[string]bool{}
	names := map[string]bool{}
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			names[l[i].Name] = true
			_, _, err := ContainerUsage(p, &l[i])
			for _, e := range unjoin(err) {
				if !seen[e.Error()] {
					seen[e.Error()] = true
					errs = append(errs, e)
				}
			}
		}
	}
	keys := make([]string, 0, len(p.Annotations))
	for k := range p.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, f := range []string{AnnotationCPUUsage, AnnotationMemoryUsage} {
			if c, ok := strings.CutPrefix(k, f+"."); ok && !names[c] {
				errs = append(errs, fmt.Errorf("%w %s: %q: the pod has no container %q", ErrBadAnnotation, k, p.Annotations[k], c))
			}
		}
	}
	return errors.Join(errs...)
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// request is the container's request of r, else its limit, else zero.
func request(c *v1.Container, r v1.ResourceName) *resource.Quantity {
	if q, ok := c.Resources.Requests[r]; ok {
		return &q
	}
	if q, ok := c.Resources.Limits[r]; ok {
		return &q
	}
	return resource.NewQuantity(0, resource.DecimalSI)
}

// coreNanoSeconds is rate (nanocores) × d in core-nanoseconds.
func coreNanoSeconds(rate int64, d time.Duration) uint64 {
	if rate <= 0 || d <= 0 {
		return 0
	}
	return uint64(rate)*uint64(d/time.Second) + uint64(rate)*uint64(d%time.Second)/uint64(time.Second)
}

// containerNow is one running container's usage now.
type containerNow struct {
	rate, memory int64
	cum          uint64
}

// containerAt integrates the container's rate from start to now over changes (in the order made):
// the base rate, replaced by the last change made at or before start, then by each made after.
func containerAt(start, now time.Time, cpu, memory int64, container string, changes []usageChange) containerNow {
	t, cum := start, uint64(0)
	for _, ch := range changes {
		if ch.container != "" && ch.container != container {
			continue
		}
		if ch.at.After(now) {
			break
		}
		if ch.at.After(t) {
			cum += coreNanoSeconds(cpu, ch.at.Sub(t))
			t = ch.at
		}
		if ch.cpu != nil {
			cpu = *ch.cpu
		}
		if ch.memory != nil {
			memory = *ch.memory
		}
	}
	if now.After(t) {
		cum += coreNanoSeconds(cpu, now.Sub(t))
	}
	return containerNow{rate: cpu, memory: memory, cum: cum}
}

// Summary returns node's Summary now, as the kubelet's summary provider shapes it: the Node (CPU,
// memory, swap 0, start time its creation, the "pods" system container) and every pod of pods bound
// to it with a running container (its running containers: start time, CPU, memory, swap 0; the pod:
// their sums). Memory: usage = working set = RSS; available = the Node's memory capacity − working
// set. A usage annotation that does not parse counts as absent (the pod's CreatePod told of it in an
// Event: UsageAnnotationsError).
func (u *Usage) Summary(node *v1.Node, pods []*v1.Pod) *statsv1alpha1.Summary {
	// To the millisecond, the precision of /metrics/resource's sample timestamps: a counter read at
	// its sample's time exactly, so that a scraper's rate (Δcounter / Δtimestamp) is the simulated
	// rate exactly (kubectl top rounds 10.0007m up to 11m).
	now := u.clock.Now().Truncate(time.Millisecond)
	ts := metav1.NewTime(now)
	u.mu.Lock()
	defer u.mu.Unlock()
	out := &statsv1alpha1.Summary{Pods: []statsv1alpha1.PodStats{}}
	var podsRate, podsMemory int64
	for _, p := range pods {
		if p.Spec.NodeName != node.Name {
			continue
		}
		ps, rate, memory, ok := u.podStatsLocked(p, now)
		if !ok {
			continue
		}
		out.Pods = append(out.Pods, ps)
		podsRate, podsMemory = podsRate+rate, podsMemory+memory
	}
	base := u.nodeBaseLocked(node.Name)
	var capacity *int64
	if q, ok := node.Status.Capacity[v1.ResourceMemory]; ok {
		capacity = ptr.To(q.Value())
	}
	nodeRate, nodeMemory := base.cpu+podsRate, base.memory+podsMemory
	out.Node = statsv1alpha1.NodeStats{
		NodeName:  node.Name,
		StartTime: node.CreationTimestamp,
		CPU:       cpuStats(ts, nodeRate, u.advanceLocked(node.Name, node.CreationTimestamp.Time, now, nodeRate)),
		Memory:    memoryStats(ts, nodeMemory, capacity),
		Swap:      &statsv1alpha1.SwapStats{Time: ts, SwapUsageBytes: ptr.To[uint64](0)},
		SystemContainers: []statsv1alpha1.ContainerStats{{
			Name: statsv1alpha1.SystemContainerPods, StartTime: node.CreationTimestamp,
			CPU:    cpuStats(ts, podsRate, u.advanceLocked(node.Name+"/pods", node.CreationTimestamp.Time, now, podsRate)),
			Memory: memoryStats(ts, podsMemory, nil),
			Swap:   &statsv1alpha1.SwapStats{Time: ts, SwapUsageBytes: ptr.To[uint64](0)},
		}},
	}
	return out
}

// podStatsLocked returns the pod's stats at now (false when no container of it runs) and its CPU
// rate (nanocores) and memory (bytes).
func (u *Usage) podStatsLocked(p *v1.Pod, now time.Time) (ps statsv1alpha1.PodStats, rate, memory int64, ok bool) {
	ts := metav1.NewTime(now)
	changes := u.pods[p.Namespace+"/"+p.Name]
	ps = statsv1alpha1.PodStats{PodRef: statsv1alpha1.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)}}
	if p.Status.StartTime != nil {
		ps.StartTime = *p.Status.StartTime
	}
	var cum uint64
	podLimit := int64(0) // the sum of the running containers' memory limits; -1: one has none
	for _, st := range append(append([]v1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if st.State.Running == nil {
			continue
		}
		c := specContainer(p, st.Name)
		if c == nil {
			continue
		}
		cpu0, mem0, _ := ContainerUsage(p, c)
		cn := containerAt(st.State.Running.StartedAt.Time, now, cpu0, mem0, c.Name, changes)
		limit := int64(0)
		if q := c.Resources.Limits.Memory(); q != nil {
			limit = q.Value()
		}
		if limit > 0 && podLimit >= 0 {
			podLimit += limit
		} else {
			podLimit = -1
		}
		ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{
			Name: c.Name, StartTime: st.State.Running.StartedAt,
			CPU:    cpuStats(ts, cn.rate, cn.cum),
			Memory: limitedMemoryStats(ts, cn.memory, limit),
			Swap:   &statsv1alpha1.SwapStats{Time: ts, SwapUsageBytes: ptr.To[uint64](0), SwapAvailableBytes: ptr.To[uint64](0)},
		})
		rate, memory, cum = rate+cn.rate, memory+cn.memory, cum+cn.cum
	}
	if len(ps.Containers) == 0 {
		return ps, 0, 0, false
	}
	ps.CPU = cpuStats(ts, rate, cum)
	ps.Memory = limitedMemoryStats(ts, memory, max(podLimit, 0))
	ps.Swap = &statsv1alpha1.SwapStats{Time: ts, SwapUsageBytes: ptr.To[uint64](0), SwapAvailableBytes: ptr.To[uint64](0)}
	return ps, rate, memory, true
}

// Pod returns the pod's stats now (its running containers'; false when none runs), without moving
// any Node's counter.
func (u *Usage) Pod(p *v1.Pod) (statsv1alpha1.PodStats, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ps, _, _, ok := u.podStatsLocked(p, u.clock.Now().Truncate(time.Millisecond))
	return ps, ok
}

// Node returns the Node's base usage besides its pods: CPU in nanocores, memory in bytes.
func (u *Usage) Node(name string) (cpu, memory int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	b := u.nodeBaseLocked(name)
	return b.cpu, b.memory
}

// advanceLocked returns the counter key at now: its anchor's plus rate times the time since (from
// start, 0, the first time), and moves the anchor there.
func (u *Usage) advanceLocked(key string, start, now time.Time, rate int64) uint64 {
	a, ok := u.anchors[key]
	if !ok {
		a = anchor{at: start}
		if start.IsZero() || start.After(now) {
			a.at = now
		}
	}
	if now.After(a.at) {
		a = anchor{at: now, cum: a.cum + coreNanoSeconds(rate, now.Sub(a.at))}
	}
	u.anchors[key] = a
	return a.cum
}

func specContainer(p *v1.Pod, name string) *v1.Container {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if l[i].Name == name {
				return &l[i]
			}
		}
	}
	return nil
}

func cpuStats(ts metav1.Time, rate int64, cum uint64) *statsv1alpha1.CPUStats {
	return &statsv1alpha1.CPUStats{Time: ts, UsageNanoCores: ptr.To(uint64(rate)), UsageCoreNanoSeconds: ptr.To(cum), PSI: &statsv1alpha1.PSIStats{}}
}

func memoryStats(ts metav1.Time, workingSet int64, capacity *int64) *statsv1alpha1.MemoryStats {
	m := &statsv1alpha1.MemoryStats{Time: ts, UsageBytes: ptr.To(uint64(workingSet)), WorkingSetBytes: ptr.To(uint64(workingSet)),
		RSSBytes: ptr.To(uint64(workingSet)), PageFaults: ptr.To[uint64](0), MajorPageFaults: ptr.To[uint64](0), PSI: &statsv1alpha1.PSIStats{}}
	if capacity != nil && *capacity >= workingSet {
		m.AvailableBytes = ptr.To(uint64(*capacity - workingSet))
	}
	return m
}

// limitedMemoryStats is memoryStats of a container or pod whose memory limit is limit (0: none), its
// availableBytes as containerd's CRI reports a container's (getAvailableBytes): the limit − the
// working set, 0 without a limit.
func limitedMemoryStats(ts metav1.Time, workingSet, limit int64) *statsv1alpha1.MemoryStats {
	m := memoryStats(ts, workingSet, nil)
	m.AvailableBytes = ptr.To[uint64](0)
	if limit > workingSet {
		m.AvailableBytes = ptr.To(uint64(limit - workingSet))
	}
	return m
}
