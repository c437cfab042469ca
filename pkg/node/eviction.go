package node

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/pod"
)

// EvictionMonitoringPeriod is how often the eviction manager looks at a Node under pressure and evicts
// at most one pod (the kubelet's evictionMonitoringPeriod, 10 s).
const EvictionMonitoringPeriod = 10 * time.Second

// evictionManagerKey is the pod work queue's item of a Node's eviction manager (evictionStep); a pod's
// key is namespace/name, never without a slash.
const evictionManagerKey = "eviction-manager"

// evictionGracePeriod is the eviction manager's grace period for a hard threshold
// (immediateEvictionGracePeriodSeconds, 1 s).
var evictionGracePeriod = int64(1)

// pressureConditions returns the pressure conditions the Node's host reports, as the eviction
// manager's nodeConditions: MemoryPressure, DiskPressure, PIDPressure.
func (c *Controller) pressureConditions() []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, p := range []struct {
		t  v1.NodeConditionType
		on func() bool
	}{{v1.NodeMemoryPressure, c.cfg.Host.IsUnderMemoryPressure}, {v1.NodeDiskPressure, c.cfg.Host.IsUnderDiskPressure},
		{v1.NodePIDPressure, c.cfg.Host.IsUnderPIDPressure}} {
		if p.on() {
			out = append(out, p.t)
		}
	}
	return out
}

// wakeEvictionManager queues the eviction manager of a Node that runs pods when its host reports
// pressure (a status sync saw it, as the kubelet's eviction manager sees its thresholds met).
func (c *Controller) wakeEvictionManager() {
	if c.pods != nil && len(c.pressureConditions()) > 0 {
		c.addPod(evictionManagerKey)
	}
}

// evictionStep is one synchronize of the kubelet's eviction manager for a Node that runs pods: while
// its host reports pressure, evict one active pod, the first pod.RankForEviction gives for the resource
// of the first pressure condition (a Warning Event Evicted "The node was low on resource: <resource>. ";
// the pod's worker then kills it with a 1 s grace period, and fails it, Evicted, with the
// DisruptionTarget condition), and look again after EvictionMonitoringPeriod; without pressure, stop
// until a status sync sees it again. Usage is not measured: see pod.RankForEviction.
func (c *Controller) evictionStep(ctx context.Context) result {
	conds := c.pressureConditions()
	if len(conds) == 0 {
		return result{after: never}
	}
	now := c.deps.Clock.Now()
	if wait := c.pods.nextEviction(now); wait > 0 {
		return result{after: wait} // at most one eviction per monitoring period, whoever queued this step
	}
	resource := pod.PressureResource(conds[0])
	all, err := c.deps.Pods.OnNode(c.cfg.NodeName)
	if err != nil {
		return result{after: EvictionMonitoringPeriod}
	}
	active := make([]*v1.Pod, 0, len(all))
	for _, p := range all {
		key := p.Namespace + "/" + p.Name
		if p.Status.StartTime == nil || p.DeletionTimestamp != nil || isTerminalPhase(p.Status.Phase) || c.pods.evicting(key) {
			continue
		}
		active = append(active, p)
	}
	ranked := pod.RankForEviction(active, resource)
	if len(ranked) == 0 {
		return result{after: EvictionMonitoringPeriod}
	}
	victim := ranked[0]
	msg := fmt.Sprintf(pod.NodeLowMessageFmt, resource)
	klog.FromContext(ctx).Info("Eviction manager: evicting pod", "pod", klog.KObj(victim), "resource", resource)
	c.deps.Recorder.Event(victim, v1.EventTypeWarning, pod.ReasonEvicted, msg)
	key := victim.Namespace + "/" + victim.Name
	c.pods.requestEviction(key, &evictResponse{reason: pod.ReasonEvicted, message: msg, gracePeriod: &evictionGracePeriod, disruptionTarget: true})
	c.pods.evicted(now)
	c.addPod(key)
	return result{after: EvictionMonitoringPeriod}
}
