package simulation

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ResourceSliceAccess is what the simulation's identity needs when the template has devices: one
// informer per driver lists and watches the driver's ResourceSlices, and every simulated Node's slice is
// written by server-side apply (patch); a slice left by an earlier run under another name (the
// resourceslice controller's generated names, or obsolete) is deleted.
var ResourceSliceAccess = []authorizationv1.ResourceAttributes{
	{Verb: "list", Group: resourcev1.GroupName, Resource: "resourceslices"},
	{Verb: "watch", Group: resourcev1.GroupName, Resource: "resourceslices"},
	{Verb: "patch", Group: resourcev1.GroupName, Resource: "resourceslices"},
	{Verb: "delete", Group: resourcev1.GroupName, Resource: "resourceslices"},
}

// SliceFieldManager is the field manager of the simulated Nodes' ResourceSlices (server-side apply).
const SliceFieldManager = "nodeagent-simulate-devices"

// deviceSlices publishes the template's devices of every registered simulated Node, as the Node's
// kubelet plugins publish theirs through k8s.io/dynamic-resource-allocation's resourceslice controller,
// but without a controller (and its informer) per Node and driver: one ResourceSlice informer per
// driver for all Nodes, and per Node and driver the slices written by server-side apply, those the
// library's controller would create (newResourceSlices: owner the Node, so spec.nodeName is the Node's
// and the garbage collector deletes the slices with the Node; one pool named after the Node, of one
// slice, or two when the driver shares counters; generation and resourceSliceCount as the library
// computes them). It follows the Node informer (a Node
// seen with a UID, registered, gets its slices; one recreated with another UID has them re-owned) and
// the slice informers (a slice changed or deleted by another is written again).
type deviceSlices struct {
	client  kubernetes.Interface
	drivers []DeviceDriver
	nodes   corelisters.NodeLister
	ours    func(name string) bool
	queue   workqueue.TypedRateLimitingInterface[string]
	// informers are the ResourceSlice informers, one per driver (field selector spec.driver), indexed
	// by spec.nodeName.
	informers []cache.SharedIndexInformer
	// mutations are the informers' indexers with the slices this process applied and their informer
	// has not seen yet (the library's sliceStore, a client-go MutationCache), so that a sync right after
	// an apply finds the slices it wrote (else a pool of two slices, one seen, would look as if the
	// other were new, and its generation be bumped again). Set by Run before the workers start.
	mutations []cache.MutationCache

	mu sync.Mutex
	// only are the Nodes' own device lists, set through the control API (SetNodeDevices): by Node
	// name and driver, the names of the template's devices the Node's slice lists (absent: all).
	only map[string]map[string][]string
}

// sliceNodeIndex indexes the slice informers by spec.nodeName.
const sliceNodeIndex = "nodeName"

// newDeviceSlices publishes drivers for the Nodes of nodes for which ours is true, through client.
func newDeviceSlices(client kubernetes.Interface, drivers []DeviceDriver, nodes corelisters.NodeLister, ours func(string) bool) *deviceSlices {
	d := &deviceSlices{
		client: client, drivers: drivers, nodes: nodes, ours: ours,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "simulated_device_slices"}),
	}
	for _, drv := range drivers {
		inf := resourceinformers.NewFilteredResourceSliceInformer(client, 0, cache.Indexers{
			sliceNodeIndex: func(obj any) ([]string, error) {
				if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.NodeName != nil {
					return []string{*s.Spec.NodeName}, nil
				}
				return nil, nil
			},
		}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorDriver, drv.Driver).String()
		})
		d.informers = append(d.informers, inf)
	}
	return d
}

// Handler is the Node informer's event handler: it queues the Node's name.
func (d *deviceSlices) Handler() cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if n, ok := obj.(*v1.Node); ok && d.ours(n.Name) {
			d.queue.Add(n.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
}

// sliceHandler is the event handler of driver i's slice informer: it tells the mutation cache what the
// informer has seen (as the library's controller does) and queues the slice's Node, if simulated here.
func (d *deviceSlices) sliceHandler(i int) cache.ResourceEventHandler {
	enqueue := func(obj any, deleted bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		s, ok := obj.(*resourcev1.ResourceSlice)
		if !ok {
			return
		}
		if deleted {
			d.mutations[i].OnDelete(s)
		} else {
			d.mutations[i].OnAddOrUpdate(s)
		}
		if s.Spec.NodeName != nil && d.ours(*s.Spec.NodeName) {
			d.queue.Add(*s.Spec.NodeName)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { enqueue(obj, false) },
		UpdateFunc: func(_, obj any) { enqueue(obj, false) },
		DeleteFunc: func(obj any) { enqueue(obj, true) },
	}
}

// sliceMutationCacheTTL is how long an applied slice is kept in the mutation cache at most: the
// library's default (Options.MutationCacheTTL).
const sliceMutationCacheTTL = time.Minute

// sliceMutationCacheSize is how many applied slices not yet seen by their informer the mutation cache
// keeps (least recently used out): more than the library's 100 (one pool per controller), as one cache
// serves every simulated Node of a driver; the informer's events remove them as they arrive.
const sliceMutationCacheSize = 10000

// sliceWorkers is how many Nodes' slices deviceSlices writes at once.
const sliceWorkers = 16

// Run starts the slice informers, waits for them to sync and then syncs the queued Nodes with
// sliceWorkers workers until ctx ends (the slices stay, as the Nodes and their Leases do). It returns
// once the workers and informers have stopped.
func (d *deviceSlices) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		d.queue.ShutDown()
	}()
	var synced []cache.InformerSynced
	for _, inf := range d.informers {
		d.mutations = append(d.mutations, cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.FromContext(ctx), inf.GetStore(),
			cache.MutationCacheOptions{TTL: sliceMutationCacheTTL, Indexer: inf.GetIndexer(), IncludeAdds: true, MaxCacheSize: sliceMutationCacheSize}))
	}
	for i, inf := range d.informers {
		h, err := inf.AddEventHandler(d.sliceHandler(i))
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot watch the simulated nodes' ResourceSlices")
			return
		}
		synced = append(synced, h.HasSynced)
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	for range sliceWorkers {
		wg.Go(func() {
			for {
				name, shutdown := d.queue.Get()
				if shutdown {
					return
				}
				if err := d.sync(ctx, name); err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).Error(err, "Cannot publish the simulated node's ResourceSlices", "node", name)
					d.queue.AddRateLimited(name)
				} else {
					d.queue.Forget(name)
				}
				d.queue.Done(name)
			}
		})
	}
}

// sync writes the slices of Node name, as the informers and the Node's devices require. A Node absent
// or being deleted is left to the garbage collector. The queue never syncs one name in two workers at
// once.
func (d *deviceSlices) sync(ctx context.Context, name string) error {
	n, err := d.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if n.DeletionTimestamp != nil || n.UID == "" {
		return nil
	}
	d.mu.Lock()
	only := maps.Clone(d.only[name])
	d.mu.Unlock()
	for i, drv := range d.drivers {
		if err := d.syncDriver(ctx, n, i, driverResources(name, drv, only[drv.Driver])); err != nil {
			return fmt.Errorf("driver %s: %w", drv.Driver, err)
		}
	}
	return nil
}

// syncDriver makes the pool of Node n and driver i hold res's slices (one, or two with shared
// counters): the pool's slices the library's controller would find obsolete (another name, or an older
// generation) are deleted first, as it deletes them, and each desired slice is applied unless the
// informer's copy already has the desired owner, pool and contents.
func (d *deviceSlices) syncDriver(ctx context.Context, n *v1.Node, i int, res *resourceslice.DriverResources) error {
	drv := d.drivers[i].Driver
	objs, err := d.mutations[i].ByIndex(sliceNodeIndex, n.Name)
	if err != nil {
		return err
	}
	var existing []*resourcev1.ResourceSlice
	for _, o := range objs {
		if s, ok := o.(*resourcev1.ResourceSlice); ok && s.Spec.Pool.Name == n.Name {
			existing = append(existing, s)
		}
	}
	want, obsolete, err := newResourceSlices(drv, n, res, existing)
	if err != nil {
		return err
	}
	for _, s := range obsolete {
		err := d.client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete obsolete ResourceSlice %s: %w", s.Name, err)
		}
	}
	for _, w := range want {
		if j := slices.IndexFunc(existing, func(s *resourcev1.ResourceSlice) bool { return s.Name == w.Name }); j >= 0 && sliceUpToDate(existing[j], w) {
			continue
		}
		body, err := json.Marshal(w)
		if err != nil {
			return fmt.Errorf("ResourceSlice %s: %w", w.Name, err)
		}
		applied, err := d.client.ResourceV1().ResourceSlices().Patch(ctx, w.Name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: SliceFieldManager, Force: ptr.To(true)})
		if err != nil {
			return fmt.Errorf("apply ResourceSlice %s: %w", w.Name, err)
		}
		d.mutations[i].Mutation(applied)
	}
	return nil
}

// sliceIndexMinLength is the resourceslice controller's resourceSliceIndexMinLength: the fewest hex
// digits of a slice's index in its name.
const sliceIndexMinLength = 5

// sliceName is the name of slice index of the count slices of Node node's pool of driver: the library's
// prefix for a Node owner ("<index>-<driver>-<node>-", the index in hex of at least 5 digits, as
// getIndexLength and encodeIndex make it, first so that the allocator sorts the slices as the
// library's), without the trailing separator and the API server's random suffix, so that the slice can
// be applied.
func sliceName(driver, node string, index, count int) (string, error) {
	digits := max(sliceIndexMinLength, len(strconv.FormatInt(int64(count-1), 16)))
	name := fmt.Sprintf("%0*x-%s-%s", digits, index, driver, node)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("ResourceSlice name %q of Node %q: %s", name, node, strings.Join(errs, "; "))
	}
	return name, nil
}

// newResourceSlices returns the ResourceSlices that k8s.io/dynamic-resource-allocation's resourceslice
// controller (v0.37.2, Controller.syncPool) writes for res's pool of Node n (one per res's slice, in
// order; owner the Node), and which of existing (the pool's slices) it deletes as obsolete. Each slice
// has the owner reference (controller), spec.nodeName, the pool (name the Node's, resourceSliceCount
// the number of slices) and the slice's fields. The generation is the highest of existing; a slice of
// existing is matched to a desired one if it has its name and that generation, else it is obsolete; the
// generation is bumped by one when a desired slice is unmatched (new) or more than one matched slice
// changes (the library keeps it when at most one update call is needed). Unlike the library, a slice is
// matched by its whole name (ours have no random suffix), so a slice of an earlier run by the library is
// obsolete and replaced. Errors name a slice name the API server would refuse.
func newResourceSlices(driver string, n *v1.Node, res *resourceslice.DriverResources, existing []*resourcev1.ResourceSlice) (want, obsolete []*resourcev1.ResourceSlice, err error) {
	pool, ok := res.Pools[n.Name]
	if !ok || len(pool.Slices) == 0 {
		return nil, nil, fmt.Errorf("pool %s: no slices", n.Name)
	}
	var generation int64
	for _, s := range existing {
		generation = max(generation, s.Spec.Pool.Generation)
	}
	matched := map[string]*resourcev1.ResourceSlice{}
	for i, s := range pool.Slices {
		name, err := sliceName(driver, n.Name, i, len(pool.Slices))
		if err != nil {
			return nil, nil, err
		}
		want = append(want, &resourcev1.ResourceSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{
				Name:            name,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID, Controller: ptr.To(true)}},
			},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:                 driver,
				Pool:                   resourcev1.ResourcePool{Name: n.Name, Generation: generation, ResourceSliceCount: int64(len(pool.Slices))},
				NodeName:               ptr.To(n.Name),
				NodeSelector:           pool.NodeSelector,
				Devices:                s.Devices,
				SharedCounters:         s.SharedCounters,
				PerDeviceNodeSelection: s.PerDeviceNodeSelection,
				PartitionTypeAttribute: s.PartitionTypeAttribute,
				SkipNodeOperations:     s.SkipNodeOperations,
			},
		})
	}
	for _, s := range existing {
		if s.Spec.Pool.Generation == generation && matched[s.Name] == nil &&
			slices.ContainsFunc(want, func(w *resourcev1.ResourceSlice) bool { return w.Name == s.Name }) {
			matched[s.Name] = s
			continue
		}
		obsolete = append(obsolete, s)
	}
	changed := 0
	for _, w := range want {
		if s := matched[w.Name]; s != nil && !sliceUpToDate(s, w) {
			changed++
		}
	}
	if len(matched) < len(want) || changed > 1 {
		for _, w := range want {
			w.Spec.Pool.Generation = generation + 1
		}
	}
	return want, obsolete, nil
}

// sliceUpToDate reports whether current has want's owner references, node, pool and contents, compared
// as the library's controller compares a slice with the desired one (resourceslice.DevicesDeepEqual for
// the devices).
func sliceUpToDate(current, want *resourcev1.ResourceSlice) bool {
	return apiequality.Semantic.DeepEqual(current.OwnerReferences, want.OwnerReferences) &&
		apiequality.Semantic.DeepEqual(current.Spec.NodeName, want.Spec.NodeName) &&
		apiequality.Semantic.DeepEqual(current.Spec.Pool, want.Spec.Pool) &&
		apiequality.Semantic.DeepEqual(current.Spec.NodeSelector, want.Spec.NodeSelector) &&
		current.Spec.AllNodes == nil &&
		resourceslice.DevicesDeepEqual(current.Spec.Devices, want.Spec.Devices) &&
		apiequality.Semantic.DeepEqual(current.Spec.SharedCounters, want.Spec.SharedCounters) &&
		apiequality.Semantic.DeepEqual(current.Spec.PerDeviceNodeSelection, want.Spec.PerDeviceNodeSelection) &&
		apiequality.Semantic.DeepEqual(current.Spec.PartitionTypeAttribute, want.Spec.PartitionTypeAttribute) &&
		apiequality.Semantic.DeepEqual(current.Spec.SkipNodeOperations, want.Spec.SkipNodeOperations)
}

// DriverResources is what the simulated driver drv publishes for Node name (only: the names of the
// template's devices the Node lists, nil for all), in the terms of k8s.io/dynamic-resource-allocation's
// resourceslice controller (what a kubelet plugin would give it): one pool named after the Node, with
// one slice of the devices, or, when the driver shares counters, two: the shared counters first, then
// the devices that consume them (the API server refuses a slice with both).
func DriverResources(name string, drv DeviceDriver, only []string) *resourceslice.DriverResources {
	return driverResources(name, drv, only)
}

// driverResources is what drv publishes for Node name: one pool named after the Node, with a slice of
// the driver's shared counters if any, and a slice of the template's devices (those named in only, if
// not nil).
func driverResources(name string, drv DeviceDriver, only []string) *resourceslice.DriverResources {
	devices := drv.sliceDevices()
	if only != nil {
		devices = slices.DeleteFunc(devices, func(d resourcev1.Device) bool { return !slices.Contains(only, d.Name) })
	}
	var pool resourceslice.Pool
	if len(drv.SharedCounters) > 0 {
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: drv.SharedCounters})
	}
	pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devices})
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{name: pool}}
}

// setNodeDevices makes Node name's slice of driver list only the template's devices named (nil: all
// of them again), and queues the Node so that its slice is written at once. Errors wrap
// ErrBadDeviceChange, naming a driver or device not in the template.
func (d *deviceSlices) setNodeDevices(name, driver string, devices []string) error {
	i := slices.IndexFunc(d.drivers, func(drv DeviceDriver) bool { return drv.Driver == driver })
	if i < 0 {
		return fmt.Errorf("%w: driver %q is not in the template's devices", ErrBadDeviceChange, driver)
	}
	for _, n := range devices {
		if !slices.ContainsFunc(d.drivers[i].sliceDevices(), func(dev resourcev1.Device) bool { return dev.Name == n }) {
			return fmt.Errorf("%w: device %q is not a device of driver %s", ErrBadDeviceChange, n, driver)
		}
	}
	d.mu.Lock()
	if devices == nil {
		delete(d.only[name], driver)
	} else {
		if d.only == nil {
			d.only = map[string]map[string][]string{}
		}
		if d.only[name] == nil {
			d.only[name] = map[string][]string{}
		}
		d.only[name][driver] = slices.Clone(devices)
	}
	d.mu.Unlock()
	d.queue.Add(name)
	return nil
}

// newDeviceSlices, when the template has devices, sets up the publishing of every simulated Node's
// ResourceSlices on the Node informer (before it starts).
func (p *Process) newDeviceSlices() error {
	t := p.Simulator.cfg.Template
	if t.Devices == nil || len(t.Devices.Drivers) == 0 {
		return nil
	}
	nodes := p.set.Informers.Core().V1().Nodes()
	p.devices = newDeviceSlices(p.set.Client, t.Devices.Drivers, nodes.Lister(), func(name string) bool {
		_, ok := p.Simulator.byName[name]
		return ok
	})
	p.Simulator.slices = p.devices
	if _, err := nodes.Informer().AddEventHandler(p.devices.Handler()); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	return nil
}

// runDeviceSlices runs the publishing of the ResourceSlices until ctx ends; the channel is closed once
// its workers and slice informers have stopped (at once without devices).
func (p *Process) runDeviceSlices(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if p.devices == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		p.devices.Run(ctx)
	}()
	return done
}
