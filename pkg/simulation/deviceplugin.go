package simulation

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/pod"
)

// MaxPluginDevices bounds the devices of one device-plugin resource of a Node: an extended resource
// of a larger capacity is reported and admitted, but no device IDs are handed out for it (as the
// kubelet admits an extended resource no device plugin registered), and a devices.plugins entry for
// it is refused.
const MaxPluginDevices = 1024

// DevicePlugin is one entry of the template's devices.plugins: the devices a simulated device plugin
// reports for an extended resource of status.capacity (every Node's own), and what its Allocate
// response gives a container.
type DevicePlugin struct {
	// Resource is the extended resource (e.g. nvidia.com/gpu); it must be in status.capacity.
	Resource v1.ResourceName `json:"resource"`
	// IDs are its device IDs, as many as the capacity, unique; default <name>-0 ... <name>-(N-1),
	// <name> the resource's name after its domain (nvidia.com/gpu: gpu-0 ... gpu-7).
	IDs []string `json:"ids,omitempty"`
	// Env, if set, is the environment variable the plugin's Allocate response sets in a container
	// given devices: their IDs, sorted, comma-separated (NVIDIA_VISIBLE_DEVICES=gpu-0,gpu-1).
	Env string `json:"env,omitempty"`
}

// pluginResource is a device-plugin resource of every Node: its healthy device IDs, sorted as strings
// (the order the allocator takes them in), and its Env.
type pluginResource struct {
	name v1.ResourceName
	ids  []string
	env  string
}

// defaultDeviceIDs returns resource's default device IDs for capacity n: <name>-0 ... <name>-(n-1).
func defaultDeviceIDs(resource v1.ResourceName, n int) []string {
	name := string(resource)
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = name + "-" + strconv.Itoa(i)
	}
	return ids
}

// validatePlugins checks the template's devices.plugins against its extended resources (capacity),
// returning every problem naming the field and the value.
func validatePlugins(plugins []DevicePlugin, extended v1.ResourceList) []error {
	var errs []error
	add := func(path string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %q: %s", path, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}
	seen := map[v1.ResourceName]int{}
	for i, pl := range plugins {
		path := fmt.Sprintf("devices.plugins[%d]", i)
		if j, dup := seen[pl.Resource]; dup {
			add(path+".resource", pl.Resource, "same resource as devices.plugins[%d]", j)
		}
		seen[pl.Resource] = i
		q, ok := extended[pl.Resource]
		switch {
		case !ok:
			add(path+".resource", pl.Resource, "must be an extended resource of status.capacity")
		case q.Value() > MaxPluginDevices:
			add(path+".resource", pl.Resource, "capacity %d: a device plugin's resource has at most %d devices", q.Value(), MaxPluginDevices)
		case pl.IDs != nil && int64(len(pl.IDs)) != q.Value():
			add(path+".ids", len(pl.IDs), "must list as many device IDs as status.capacity[%s], %s", pl.Resource, q.String())
		}
		ids := map[string]int{}
		for j, id := range pl.IDs {
			if id == "" || strings.ContainsAny(id, ", \t\n") || len(id) > 256 {
				add(fmt.Sprintf("%s.ids[%d]", path, j), id, "must be 1 to 256 characters without commas or blanks")
			}
			if k, dup := ids[id]; dup {
				add(fmt.Sprintf("%s.ids[%d]", path, j), id, "same device ID as ids[%d]", k)
			}
			ids[id] = j
		}
		if msgs := validation.IsEnvVarName(pl.Env); pl.Env != "" && len(msgs) > 0 {
			add(path+".env", pl.Env, "must be an environment variable name: %s", strings.Join(msgs, "; "))
		}
	}
	return errs
}

// devicePlugins returns the template's device-plugin resources: each extended resource of capacity
// 1 to MaxPluginDevices, with the IDs and Env of its devices.plugins entry (default IDs without one),
// sorted by name.
func (t *Template) devicePlugins() []pluginResource {
	var out []pluginResource
	for name, q := range t.extendedResources() {
		n := q.Value()
		if n <= 0 || n > MaxPluginDevices {
			continue
		}
		r := pluginResource{name: name}
		if t.Devices != nil {
			if i := slices.IndexFunc(t.Devices.Plugins, func(p DevicePlugin) bool { return p.Resource == name }); i >= 0 {
				r.ids, r.env = slices.Clone(t.Devices.Plugins[i].IDs), t.Devices.Plugins[i].Env
			}
		}
		if r.ids == nil {
			r.ids = defaultDeviceIDs(name, int(n))
		}
		slices.Sort(r.ids)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b pluginResource) int { return strings.Compare(string(a.name), string(b.name)) })
	return out
}

// deviceAllocator is the kubelet's device manager (pkg/kubelet/cm/devicemanager, ManagerImpl) for the
// device-plugin resources of every simulated Node: per Node, the devices allocated to each container
// of each pod (podDevices) and so in use (allocatedDevices). Nodes with no allocation cost nothing.
type deviceAllocator struct {
	resources []pluginResource
	// active reports whether a pod holding devices still counts (the kubelet's activePods: the pod
	// is still in the API under that UID, not terminal and not being deleted); nil: all do.
	active func(namespace, name string, uid types.UID) bool

	mu    sync.Mutex
	nodes map[string]*nodeDevices
}

// nodeDevices is one Node's podDevices.
type nodeDevices struct {
	pods map[types.UID]*podDevices
}

// podDevices are a pod's devices: per container, per resource, the IDs, sorted.
type podDevices struct {
	namespace, name string
	containers      map[string]map[v1.ResourceName][]string
}

// newDeviceAllocator returns the allocator of the template's device-plugin resources, nil without any.
func newDeviceAllocator(resources []pluginResource, active func(namespace, name string, uid types.UID) bool) *deviceAllocator {
	if len(resources) == 0 {
		return nil
	}
	return &deviceAllocator{resources: resources, active: active, nodes: map[string]*nodeDevices{}}
}

// allocate gives each container of pod p (on Node p.Spec.NodeName) the devices of its limits of
// every device-plugin resource, as the kubelet's ManagerImpl.Allocate does for each container at the
// pod's admission, init containers first: a container that has devices already keeps them (a
// restart, or p allocated again: devicesToAllocate's pre-allocated devices); otherwise the devices
// of the pod's init containers not taken by an app or restartable init container are reused first
// (devicesToReuse), then free healthy ones, in sorted order (the kubelet takes them in a map's order).
// Before, as UpdateAllocatedDevices, the devices of pods no longer active are freed. The error is the
// kubelet's ("requested number of devices unavailable for nvidia.com/gpu. Requested: 2, Available:
// 1"); the pod then holds nothing.
func (a *deviceAllocator) allocate(p *v1.Pod) error {
	if a == nil || !requestsAny(p, a.resources) {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	nd := a.nodes[p.Spec.NodeName]
	if nd == nil {
		nd = &nodeDevices{pods: map[types.UID]*podDevices{}}
		a.nodes[p.Spec.NodeName] = nd
	}
	a.updateAllocated(nd, p.UID)
	pd := nd.pods[p.UID]
	isNew := pd == nil
	if isNew {
		pd = &podDevices{namespace: p.Namespace, name: p.Name, containers: map[string]map[v1.ResourceName][]string{}}
	}
	inUse := map[v1.ResourceName]sets.Set[string]{} // allocatedDevices, this pod's too
	nd.pods[p.UID] = pd                             // counted below; taken out again on an error
	for _, o := range nd.pods {
		for _, byRes := range o.containers {
			for r, ids := range byRes {
				if inUse[r] == nil {
					inUse[r] = sets.New[string]()
				}
				inUse[r].Insert(ids...)
			}
		}
	}
	reuse := map[v1.ResourceName]sets.Set[string]{}
	take := func(c *v1.Container) error {
		for _, res := range a.resources {
			q, ok := c.Resources.Limits[res.name]
			if !ok || q.Value() <= 0 {
				continue
			}
			needed := int(q.Value())
			if have := pd.containers[c.Name][res.name]; have != nil {
				if len(have) != needed {
					return fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", p.UID, c.Name, res.name, len(have), needed)
				}
				continue
			}
			var got []string
			for _, id := range sets.List(reuse[res.name]) {
				if len(got) == needed {
					break
				}
				got = append(got, id)
			}
			if len(got) < needed {
				var avail []string
				for _, id := range res.ids {
					if !inUse[res.name].Has(id) && !slices.Contains(got, id) {
						avail = append(avail, id)
					}
				}
				if len(avail) < needed-len(got) {
					return fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", res.name, needed-len(got), len(avail))
				}
				got = append(got, avail[:needed-len(got)]...)
			}
			slices.Sort(got)
			if pd.containers[c.Name] == nil {
				pd.containers[c.Name] = map[v1.ResourceName][]string{}
			}
			pd.containers[c.Name][res.name] = got
			if inUse[res.name] == nil {
				inUse[res.name] = sets.New[string]()
			}
			inUse[res.name].Insert(got...)
		}
		return nil
	}
	fail := func(err error) error {
		if isNew { // nothing held while the pod waits (the kubelet rejects it)
			delete(nd.pods, p.UID)
		}
		return err
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		if err := take(c); err != nil {
			return fail(err)
		}
		// addContainerAllocatedResources / removeContainerAllocatedResources on devicesToReuse
		for r, ids := range pd.containers[c.Name] {
			if reuse[r] == nil {
				reuse[r] = sets.New[string]()
			}
			if pod.IsRestartableInitContainer(c) {
				reuse[r].Delete(ids...)
			} else {
				reuse[r].Insert(ids...)
			}
		}
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if err := take(c); err != nil {
			return fail(err)
		}
		for r, ids := range pd.containers[c.Name] {
			reuse[r].Delete(ids...)
		}
	}
	return nil
}

// updateAllocated is the kubelet's UpdateAllocatedDevices: the devices of the Node's pods no longer
// active (but the one allocating, uid) are freed. mu held.
func (a *deviceAllocator) updateAllocated(nd *nodeDevices, uid types.UID) {
	if a.active == nil {
		return
	}
	for u, pd := range nd.pods {
		if u != uid && !a.active(pd.namespace, pd.name, u) {
			delete(nd.pods, u)
		}
	}
}

// release frees the devices of pod p (its deletion: the kubelet's activePods leave out a pod whose
// termination was requested).
func (a *deviceAllocator) release(p *v1.Pod) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if nd := a.nodes[p.Spec.NodeName]; nd != nil {
		delete(nd.pods, p.UID)
		if len(nd.pods) == 0 {
			delete(a.nodes, p.Spec.NodeName)
		}
	}
}

// containerDevices returns the IDs of resource allocated to container ctr of pod p (nil: none).
func (a *deviceAllocator) containerDevices(p *v1.Pod, ctr string, resource v1.ResourceName) []string {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if nd := a.nodes[p.Spec.NodeName]; nd != nil {
		if pd := nd.pods[p.UID]; pd != nil {
			return slices.Clone(pd.containers[ctr][resource])
		}
	}
	return nil
}

// env returns the environment the device plugins' Allocate responses give container ctr of pod p:
// NAME=<IDs, comma-separated> per resource with an Env, in resource order.
func (a *deviceAllocator) env(p *v1.Pod, ctr *v1.Container) []string {
	if a == nil || len(ctr.Resources.Limits) == 0 {
		return nil
	}
	var env []string
	for _, r := range a.resources {
		if r.env == "" {
			continue
		}
		if ids := a.containerDevices(p, ctr.Name, r.name); len(ids) > 0 {
			env = append(env, r.env+"="+strings.Join(ids, ","))
		}
	}
	return env
}

// NodePluginDevices is a device-plugin resource's devices on a Node as the control API shows them:
// the IDs allocated to each container (namespace/pod/container), and how many are free.
type NodePluginDevices struct {
	Resource  v1.ResourceName     `json:"resource"`
	Allocated map[string][]string `json:"allocated,omitempty"`
	Free      int                 `json:"free"`
}

// nodeDevices returns Node name's device-plugin devices, in resource order.
func (a *deviceAllocator) nodeDevices(name string) []NodePluginDevices {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	nd := a.nodes[name]
	out := make([]NodePluginDevices, 0, len(a.resources))
	for _, r := range a.resources {
		d := NodePluginDevices{Resource: r.name, Free: len(r.ids)}
		used := sets.New[string]()
		if nd != nil {
			for _, pd := range nd.pods {
				for c, byRes := range pd.containers {
					if ids := byRes[r.name]; len(ids) > 0 {
						if d.Allocated == nil {
							d.Allocated = map[string][]string{}
						}
						d.Allocated[pd.namespace+"/"+pd.name+"/"+c] = ids
						used.Insert(ids...)
					}
				}
			}
		}
		d.Free -= used.Len()
		out = append(out, d)
	}
	return out
}

// requestsAny reports whether a container of p has a limit of one of resources.
func requestsAny(p *v1.Pod, resources []pluginResource) bool {
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			for _, r := range resources {
				if _, ok := l[i].Resources.Limits[r.name]; ok {
					return true
				}
			}
		}
	}
	return false
}

// podActive returns the allocator's active check over the pod informer (the kubelet's activePods,
// which read the status manager's phase): the pod is there under that UID, not terminal, not being
// deleted. nil without a lister.
func podActive(pods node.PodLister) func(namespace, name string, uid types.UID) bool {
	if pods == nil {
		return nil
	}
	return func(namespace, name string, uid types.UID) bool {
		p, err := pods.Get(namespace, name)
		if err != nil || p.UID != uid || p.DeletionTimestamp != nil {
			return false
		}
		return p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed
	}
}
