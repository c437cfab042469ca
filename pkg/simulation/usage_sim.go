package simulation

import (
	"context"
	"fmt"
	"net/http"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodeagent/nodeagent/pkg/probemetrics"
	"github.com/nodeagent/nodeagent/pkg/resourcemetrics"
)

// StatsSummary returns the simulated Node's resourcemetrics.StatsSummaryGetter (Virtual Kubelet's
// GetStatsSummary): Usage.Summary of the Node (from the Node informer's lister; while it is not in
// it, a Node of that name with no capacity) and its pods in the pod informer. It errors with
// ErrUnknownNode for a name that is none of this simulator's Nodes.
func (s *Simulator) StatsSummary(name string) (resourcemetrics.StatsSummaryGetter, error) {
	if _, ok := s.lookup(name); !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownNode, name)
	}
	return resourcemetrics.StatsSummaryFunc(func(context.Context) (*statsv1alpha1.Summary, error) {
		return s.summary(name)
	}), nil
}

// ProbeCounts returns the simulated Node's probemetrics.Getter (its /metrics/probes): the probes the
// containers of its pods ran, as the kubelet's prober workers count them (prober_probe_total), computed
// from the simulated probes' times and answers (simulateProbes) when read, since this process made
// each pod's record. Nil when the Nodes run no pods (the kubelet's registry with no prober worker). It
// errors with ErrUnknownNode for a name that is none of this simulator's Nodes.
func (s *Simulator) ProbeCounts(name string) (probemetrics.Getter, error) {
	if _, ok := s.lookup(name); !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownNode, name)
	}
	if s.pods == nil || s.cfg.Dependencies.Pods == nil {
		return nil, nil
	}
	return probemetrics.GetterFunc(func(ctx context.Context) ([]probemetrics.Count, error) {
		pods, err := s.cfg.Dependencies.Pods.OnNode(name)
		if err != nil {
			return nil, fmt.Errorf("pods on node %q: %w", name, err)
		}
		var out []probemetrics.Count
		for _, p := range pods {
			out = append(out, s.pods.probeCounts(ctx, p)...)
		}
		return out, nil
	}), nil
}

func (s *Simulator) summary(name string) (*statsv1alpha1.Summary, error) {
	n := &v1.Node{}
	n.Name = name
	if l := s.cfg.Dependencies.NodeLister; l != nil {
		if got, err := l.Get(name); err == nil {
			n = got
		}
	}
	var pods []*v1.Pod
	if s.pods != nil && s.cfg.Dependencies.Pods != nil {
		var err error
		if pods, err = s.cfg.Dependencies.Pods.OnNode(name); err != nil {
			return nil, fmt.Errorf("pods on node %q: %w", name, err)
		}
	}
	return s.usage.Summary(n, pods), nil
}

// PodUsageState is the control API's answer about a pod's simulated usage: each running container's
// CPU (cores) and memory working set now, as quantities.
type PodUsageState struct {
	Namespace  string                `json:"namespace"`
	Name       string                `json:"name"`
	Node       string                `json:"node"`
	Containers []ContainerUsageState `json:"containers"`
}

// ContainerUsageState is one running container's usage now.
type ContainerUsageState struct {
	Name   string            `json:"name"`
	CPU    resource.Quantity `json:"cpu"`
	Memory resource.Quantity `json:"memory"`
}

// NodeUsageState is the control API's answer about a Node's simulated base usage (besides its pods).
type NodeUsageState struct {
	Name       string            `json:"name"`
	BaseCPU    resource.Quantity `json:"baseCPU"`
	BaseMemory resource.Quantity `json:"baseMemory"`
}

// SetPodUsage applies c to the pod namespace/name, bound to one of this simulator's Nodes, and returns
// its usage now. Errors wrap ErrUnknownPod (not found, or another Node's) or ErrBadUsage.
func (s *Simulator) SetPodUsage(namespace, name string, c UsageChange) (PodUsageState, error) {
	p, err := s.simulatedPod(namespace, name)
	if err != nil {
		return PodUsageState{}, err
	}
	if c.Container != "" && specContainer(p, c.Container) == nil {
		return PodUsageState{}, fmt.Errorf("%w: pod %s/%s has no container %q", ErrBadUsage, namespace, name, c.Container)
	}
	if err := s.usage.SetPod(namespace, name, c); err != nil {
		return PodUsageState{}, err
	}
	return s.podUsage(p), nil
}

// PodUsage returns the usage now of the pod namespace/name; errors wrap ErrUnknownPod.
func (s *Simulator) PodUsage(namespace, name string) (PodUsageState, error) {
	p, err := s.simulatedPod(namespace, name)
	if err != nil {
		return PodUsageState{}, err
	}
	return s.podUsage(p), nil
}

func (s *Simulator) simulatedPod(namespace, name string) (*v1.Pod, error) {
	if s.pods == nil || s.cfg.Dependencies.Pods == nil {
		return nil, fmt.Errorf("%w: this simulator runs no pods", ErrUnknownPod)
	}
	p, err := s.cfg.Dependencies.Pods.Get(namespace, name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s: %v", ErrUnknownPod, namespace, name, err)
	}
	if _, ok := s.lookup(p.Spec.NodeName); !ok {
		return nil, fmt.Errorf("%w: %s/%s is bound to %q", ErrUnknownPod, namespace, name, p.Spec.NodeName)
	}
	return p, nil
}

func (s *Simulator) podUsage(p *v1.Pod) PodUsageState {
	st := PodUsageState{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Containers: []ContainerUsageState{}}
	ps, _ := s.usage.Pod(p)
	for _, c := range ps.Containers {
		st.Containers = append(st.Containers, ContainerUsageState{Name: c.Name,
			CPU:    *resource.NewScaledQuantity(int64(*c.CPU.UsageNanoCores), resource.Nano),
			Memory: *resource.NewQuantity(int64(*c.Memory.WorkingSetBytes), resource.BinarySI)})
	}
	return st
}

// SetNodeUsage sets the Node's base usage (besides its pods) from now on. Errors wrap ErrUnknownNode
// or ErrBadUsage.
func (s *Simulator) SetNodeUsage(name string, c UsageChange) (NodeUsageState, error) {
	if _, ok := s.lookup(name); !ok {
		return NodeUsageState{}, fmt.Errorf("%w %q", ErrUnknownNode, name)
	}
	if err := s.usage.SetNode(name, c); err != nil {
		return NodeUsageState{}, err
	}
	return s.nodeUsage(name), nil
}

func (s *Simulator) nodeUsage(name string) NodeUsageState {
	cpu, memory := s.usage.Node(name)
	return NodeUsageState{Name: name, BaseCPU: *resource.NewScaledQuantity(cpu, resource.Nano), BaseMemory: *resource.NewQuantity(memory, resource.BinarySI)}
}

// installUsage adds the control API's usage paths:
//
//	GET  /simulation/usage/nodes/{name}              the Node's Summary (as its /stats/summary)
//	POST /simulation/usage/nodes/{name}              UsageChange: its base usage → NodeUsageState
//	GET  /simulation/usage/pods/{namespace}/{name}   PodUsageState
//	POST /simulation/usage/pods/{namespace}/{name}   UsageChange → PodUsageState
func (s *Simulator) installUsage(mux *http.ServeMux) {
	mux.HandleFunc("GET "+Path+"usage/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, ok := s.lookup(name); !ok {
			answer(w, nil, fmt.Errorf("%w %q", ErrUnknownNode, name))
			return
		}
		sum, err := s.summary(name)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, sum)
	})
	mux.HandleFunc("POST "+Path+"usage/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if c, ok := decodeBody[UsageChange](w, r, `UsageChange {"container": NAME, "cpu": QUANTITY, "memory": QUANTITY}`); ok {
			st, err := s.SetNodeUsage(r.PathValue("name"), c)
			answer(w, st, err)
		}
	})
	mux.HandleFunc("GET "+Path+"usage/pods/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.PodUsage(r.PathValue("namespace"), r.PathValue("name"))
		answer(w, st, err)
	})
	mux.HandleFunc("POST "+Path+"usage/pods/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		if c, ok := decodeBody[UsageChange](w, r, `UsageChange {"container": NAME, "cpu": QUANTITY, "memory": QUANTITY}`); ok {
			st, err := s.SetPodUsage(r.PathValue("namespace"), r.PathValue("name"), c)
			answer(w, st, err)
		}
	})
}
