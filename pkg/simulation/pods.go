package simulation

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/pod"
)

// simPods is the simulated Nodes' node.PodProvider, one for the whole process: each pod's containers
// are pod.Simulate over the pod's start, its behaviour (pod.PodBehaviour: the nodeagent.io/
// annotations over the simulation's default) and the control API's overrides. It holds, per pod
// created and not yet forgotten, its start time and overrides; nothing runs in the background: the
// view at any time is computed when asked, with the time of its next change.
type simPods struct {
	defaults    pod.Behaviour
	runtimeName string
	recorder    record.EventRecorder
	clock       clock.Clock

	mu   sync.Mutex
	pods map[types.UID]*simPod
}

type simPod struct {
	start     time.Time
	stopping  bool // DeletePod was called with a deletionTimestamp
	overrides pod.Overrides
}

var _ node.PodProvider = (*simPods)(nil)

func newSimPods(defaults pod.Behaviour, runtimeName string, recorder record.EventRecorder, clk clock.Clock) *simPods {
	return &simPods{defaults: defaults, runtimeName: runtimeName, recorder: recorder, clock: clk, pods: map[types.UID]*simPod{}}
}

// CreatePod starts the pod's simulated containers: from its status.startTime when an earlier run of
// the simulator started it, else now. An annotation that does not parse is told in a Warning Event
// (InvalidAnnotation, naming the key and the value) and its default used.
func (s *simPods) CreatePod(_ context.Context, p *v1.Pod) error {
	if _, err := pod.PodBehaviour(p, s.defaults); err != nil {
		s.recorder.Event(p, v1.EventTypeWarning, "InvalidAnnotation", err.Error())
	}
	s.entry(p)
	return nil
}

// UpdatePod changes nothing: the simulated containers follow the spec as Simulate reads it.
func (s *simPods) UpdatePod(context.Context, *v1.Pod) error { return nil }

// DeletePod marks the pod stopping (Simulate stops its containers after the stop delay, within the
// grace period) the first time, with a deletionTimestamp; forgets it otherwise.
func (s *simPods) DeletePod(_ context.Context, p *v1.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp := s.pods[p.UID]; sp != nil && p.DeletionTimestamp != nil && !sp.stopping {
		sp.stopping = true
		return nil
	}
	delete(s.pods, p.UID)
	return nil
}

// GetPodStatus returns Simulate's view of the pod now and the time to its next change.
func (s *simPods) GetPodStatus(_ context.Context, p *v1.Pod) (node.PodRuntimeStatus, error) {
	sp := s.entry(p)
	b, _ := pod.PodBehaviour(p, s.defaults)
	s.mu.Lock()
	in := pod.SimInput{StartTime: sp.start, RuntimeName: s.runtimeName, Overrides: sp.overrides}
	s.mu.Unlock()
	now := s.clock.Now()
	rt, next := pod.Simulate(p, &b, &in, now)
	r := node.PodRuntimeStatus{Status: rt}
	if !next.IsZero() {
		r.RecheckAfter = max(next.Sub(now), time.Millisecond)
	}
	return r, nil
}

// entry returns the pod's record, made at its start (status.startTime, or now) when absent.
func (s *simPods) entry(p *v1.Pod) *simPod {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.pods[p.UID]
	if sp == nil {
		start := s.clock.Now()
		if p.Status.StartTime != nil {
			start = p.Status.StartTime.Time
		}
		sp = &simPod{start: start}
		s.pods[p.UID] = sp
	}
	return sp
}

// trimPod is the pod informer's transform: a pod bound to one of this shard's Nodes is kept without
// its managedFields (never read); a pod of any other Node is cut down to its name, namespace, UID and
// spec.nodeName, so that a shard holds whole only its own Nodes' pods.
func trimPod(prefix string, shard Shard, nodes int) func(any) (any, error) {
	first := shard.First(nodes)
	return func(obj any) (any, error) {
		p, ok := obj.(*v1.Pod)
		if !ok {
			return obj, nil
		}
		if ownNode(p.Spec.NodeName, prefix, first, nodes) {
			p.ManagedFields = nil
			return p, nil
		}
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
			Spec:       v1.PodSpec{NodeName: p.Spec.NodeName},
		}, nil
	}
}

// ownNode reports whether name is NodeName(prefix, i) for an i in [first, first+nodes).
func ownNode(name, prefix string, first, nodes int) bool {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok || len(digits) < 4 {
		return false
	}
	i, err := strconv.Atoi(digits)
	return err == nil && i >= first && i < first+nodes && NodeName(prefix, i) == name
}
