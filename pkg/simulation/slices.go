package simulation

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// ResourceSliceAccess is what the simulation's identity needs when the template has devices: the
// resourceslice controller of each simulated Node lists and watches its Node's ResourceSlices and
// creates, updates and deletes them (as a kubelet plugin's identity may for its Node).
var ResourceSliceAccess = []authorizationv1.ResourceAttributes{
	{Verb: "list", Group: resourcev1.GroupName, Resource: "resourceslices"},
	{Verb: "watch", Group: resourcev1.GroupName, Resource: "resourceslices"},
	{Verb: "create", Group: resourcev1.GroupName, Resource: "resourceslices"},
	{Verb: "update", Group: resourcev1.GroupName, Resource: "resourceslices"},
	{Verb: "delete", Group: resourcev1.GroupName, Resource: "resourceslices"},
}

// deviceSlices publishes the template's devices of every registered simulated Node, as the Node's
// kubelet plugins publish theirs: per Node and driver one k8s.io/dynamic-resource-allocation
// resourceslice controller (Owner: the Node, so spec.nodeName is the Node's and the garbage collector
// deletes the slices with the Node; one pool named after the Node, one slice). It follows the Node
// informer: a Node seen with a UID (registered) gets its controllers; a Node gone, or recreated with
// another UID, has them stopped (and restarted for the new UID). Run stops them all when it returns.
type deviceSlices struct {
	client  kubernetes.Interface
	drivers []DeviceDriver
	nodes   corelisters.NodeLister
	ours    func(name string) bool
	queue   workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	running map[string]*nodeSlices // by Node name
	// only are the Nodes' own device lists, set through the control API (SetNodeDevices): by Node
	// name and driver, the names of the template's devices the Node's slice lists (absent: all).
	only map[string]map[string][]string
}

type nodeSlices struct {
	uid   types.UID
	ctrls []*resourceslice.Controller
}

// newDeviceSlices publishes drivers for the Nodes of nodes for which ours is true, through client.
func newDeviceSlices(client kubernetes.Interface, drivers []DeviceDriver, nodes corelisters.NodeLister, ours func(string) bool) *deviceSlices {
	return &deviceSlices{
		client: client, drivers: drivers, nodes: nodes, ours: ours, running: map[string]*nodeSlices{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "simulated_device_slices"}),
	}
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

// sliceWorkers is how many Nodes' controllers deviceSlices starts at once: StartController returns
// once its ResourceSlice informer has synced, which it checks once a second, so each start takes a
// second or more.
const sliceWorkers = 64

// Run syncs the queued Nodes with sliceWorkers workers until ctx ends, then stops every controller
// (the slices stay, as the Nodes and their Leases do) and returns.
func (d *deviceSlices) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		d.queue.ShutDown()
	}()
	var wg sync.WaitGroup
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
	wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, ns := range d.running {
		ns.stop()
		delete(d.running, name)
	}
}

// sync starts, restarts or stops the controllers of Node name to match the informer. The queue never
// syncs one name in two workers at once.
func (d *deviceSlices) sync(ctx context.Context, name string) error {
	n, err := d.nodes.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var uid types.UID
	if n != nil && n.DeletionTimestamp == nil {
		uid = n.UID
	}
	d.mu.Lock()
	have := d.running[name]
	if have != nil && have.uid == uid {
		d.mu.Unlock()
		return nil
	}
	delete(d.running, name)
	d.mu.Unlock()
	if have != nil {
		have.stop()
	}
	if uid == "" {
		return nil
	}
	ns := &nodeSlices{uid: uid}
	d.mu.Lock()
	only := maps.Clone(d.only[name])
	d.mu.Unlock()
	for _, drv := range d.drivers {
		c, err := resourceslice.StartController(klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", name, "driver", drv.Driver)), resourceslice.Options{
			DriverName: drv.Driver,
			KubeClient: d.client,
			Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: name, UID: uid},
			Resources:  driverResources(name, drv, only[drv.Driver]),
		})
		if err != nil {
			ns.stop()
			return fmt.Errorf("driver %s: %w", drv.Driver, err)
		}
		ns.ctrls = append(ns.ctrls, c)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ctx.Err() != nil { // Run is stopping them all (or has)
		ns.stop()
		return nil
	}
	d.running[name] = ns
	if now := d.only[name]; !maps.EqualFunc(only, now, slices.Equal) { // changed while they started
		for i, c := range ns.ctrls {
			c.Update(driverResources(name, d.drivers[i], now[d.drivers[i].Driver]))
		}
	}
	return nil
}

func (ns *nodeSlices) stop() {
	for _, c := range ns.ctrls {
		c.Stop()
	}
}

// driverResources is what drv publishes for Node name: one pool named after the Node, with one
// slice of the template's devices (those named in only, if not nil) and shared counters.
func driverResources(name string, drv DeviceDriver, only []string) *resourceslice.DriverResources {
	devices := drv.sliceDevices()
	if only != nil {
		devices = slices.DeleteFunc(devices, func(d resourcev1.Device) bool { return !slices.Contains(only, d.Name) })
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		name: {Slices: []resourceslice.Slice{{Devices: devices, SharedCounters: drv.SharedCounters}}},
	}}
}

// setNodeDevices makes Node name's slice of driver list only the template's devices named (nil: all
// of them again), and updates a running controller's slice at once. Errors wrap ErrBadDeviceChange,
// naming a driver or device not in the template.
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
	defer d.mu.Unlock()
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
	if ns := d.running[name]; ns != nil && i < len(ns.ctrls) {
		ns.ctrls[i].Update(driverResources(name, d.drivers[i], devices))
	}
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
// every controller has stopped (at once without devices).
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
