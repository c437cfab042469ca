package integration_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utildiff "k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/simulation"
	"github.com/nodeagent/nodeagent/test/framework"
)

// slicesTemplate has three drivers: devicesTemplate's 2 GPUs with attributes and capacity, 2 NICs, and
// a partitionable GPU (shared counters, offered whole or as two halves that consume them: two slices per
// Node).
const slicesTemplate = devicesTemplate + `  - driver: nic.example.com
    devices:
    - name: nic-{index}
      count: 2
      attributes:
        resource.kubernetes.io/pcieRoot: {string: pci0000:01}
  - driver: mig.example.com
    sharedCounters:
    - name: gpu-0-counters
      counters: {memory: {value: 80Gi}}
    devices:
    - name: gpu-0
      consumesCounters: [{counterSet: gpu-0-counters, counters: {memory: {value: 80Gi}}}]
      capacity: {memory: {value: 80Gi}}
    - name: gpu-0-half-{index}
      count: 2
      consumesCounters: [{counterSet: gpu-0-counters, counters: {memory: {value: 40Gi}}}]
      capacity: {memory: {value: 40Gi}}
`

// TestResourceSlicesAsTheLibrary (issue 49, item 2) holds the simulated Nodes' ResourceSlices, written by
// server-side apply from one informer per driver, to k8s.io/dynamic-resource-allocation's resourceslice
// controller, the kubelet plugins' own: for a simulated Node and a Node of the same devices whose slices
// the library's controller publishes (Owner the Node, simulation.DriverResources), each driver's slices
// are equal field by field, in order (owner references, labels, annotations, finalizers and spec; the
// Node's name and UID, the slice's name after its index and server-set metadata aside): as published,
// after the control API narrows a Node's GPUs to gpu-1 (and the library's Controller.Update does the
// same), after it empties them, after it gives all of them back, and after it narrows the partitionable
// GPU to its halves. The partitionable driver's pool is two slices (the shared counters, the devices
// consuming them), both accepted by the API server.
func TestResourceSlicesAsTheLibrary(t *testing.T) {
	t.Parallel()
	const (
		simNode = "same-0000"
		libNode = "lib-0000"
	)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(t.TempDir(), "cp")})
	admin := cp.AdminClient
	tmplPath := writeNodeTemplate(t, slicesTemplate)
	tmpl, err := simulation.ParseTemplate([]byte(slicesTemplate))
	if err != nil {
		t.Fatal(err)
	}
	drivers := tmpl.Devices.Drivers

	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes=1", "--node-name-prefix=same-", "--node-template="+tmplPath)
	lib, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: libNode}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrls := map[string]*resourceslice.Controller{}
	for _, drv := range drivers {
		c, err := resourceslice.StartController(klog.NewContext(ctx, klog.Background().WithValues("driver", drv.Driver)), resourceslice.Options{
			DriverName: drv.Driver,
			KubeClient: admin,
			Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: libNode, UID: lib.UID},
			Resources:  simulation.DriverResources(libNode, drv, nil),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		ctrls[drv.Driver] = c
	}

	for _, step := range []struct {
		desc    string
		driver  string
		devices []string // the control API's and the library's; nil: all
		body    string
		want    map[string]int // by driver, the devices of its devices slice (the pool's last)
	}{
		{desc: "published", want: map[string]int{"gpu.example.com": 2, "mig.example.com": 3}},
		{desc: "narrowed to gpu-1", driver: "gpu.example.com", devices: []string{"gpu-1"}, body: `{"driver":"gpu.example.com","devices":["gpu-1"]}`,
			want: map[string]int{"gpu.example.com": 1, "mig.example.com": 3}},
		{desc: "emptied", driver: "gpu.example.com", devices: []string{}, body: `{"driver":"gpu.example.com","devices":[]}`,
			want: map[string]int{"gpu.example.com": 0, "mig.example.com": 3}},
		{desc: "all again", driver: "gpu.example.com", body: `{"driver":"gpu.example.com","devices":null}`,
			want: map[string]int{"gpu.example.com": 2, "mig.example.com": 3}},
		{desc: "partitionable narrowed to the halves", driver: "mig.example.com", devices: []string{"gpu-0-half-0", "gpu-0-half-1"},
			body: `{"driver":"mig.example.com","devices":["gpu-0-half-0","gpu-0-half-1"]}`, want: map[string]int{"gpu.example.com": 2, "mig.example.com": 2}},
	} {
		if step.body != "" {
			code, body, err := sim.postPath(ctx, "nodes/"+simNode+"/slices", step.body)
			if err != nil || code != 200 {
				t.Fatalf("%s: POST nodes/%s/slices: %d %s %v", step.desc, simNode, code, body, err)
			}
			for _, drv := range drivers {
				if drv.Driver == step.driver {
					ctrls[drv.Driver].Update(simulation.DriverResources(libNode, drv, step.devices))
				}
			}
		}
		for _, drv := range drivers {
			var got, want []resourcev1.ResourceSlice
			err := framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
				var err error
				if got, err = poolSlices(ctx, admin, drv.Driver, simNode); err != nil || got == nil {
					return false, err
				}
				if want, err = poolSlices(ctx, admin, drv.Driver, libNode); err != nil || want == nil {
					return false, err
				}
				n, ok := step.want[drv.Driver]
				return !ok || (len(got[len(got)-1].Spec.Devices) == n && len(want[len(want)-1].Spec.Devices) == n), nil
			})
			if err != nil {
				t.Fatalf("%s: %s's slices: simulated %+v, library %+v: %v", step.desc, drv.Driver, got, want, err)
			}
			if wantSlices := len(simulation.DriverResources(simNode, drv, nil).Pools[simNode].Slices); len(got) != wantSlices || len(want) != wantSlices {
				t.Fatalf("%s: %s: %d slices of the simulated Node, %d of the library's, want %d", step.desc, drv.Driver, len(got), len(want), wantSlices)
			}
			for i := range got {
				g, w := comparableSlice(&got[i], simNode), comparableSlice(&want[i], libNode)
				if !equality.Semantic.DeepEqual(g, w) {
					t.Errorf("%s: %s's slice %d of the simulated Node differs from the library's (- simulated, + library):\n%s", step.desc, drv.Driver, i, utildiff.Diff(g, w))
				}
			}
		}
	}
}

// poolSlices returns the ResourceSlices of driver on Node node, sorted by name (so by their index in
// the pool), once the pool is complete: as many as its resourceSliceCount, all of one generation (nil:
// not yet, or obsolete ones not yet gone).
func poolSlices(ctx context.Context, c kubernetes.Interface, driver, node string) ([]resourcev1.ResourceSlice, error) {
	l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		resourcev1.ResourceSliceSelectorDriver: driver, resourcev1.ResourceSliceSelectorNodeName: node}.String()})
	if err != nil || len(l.Items) == 0 {
		return nil, err
	}
	for _, s := range l.Items {
		if s.Spec.Pool != l.Items[0].Spec.Pool || s.Spec.Pool.ResourceSliceCount != int64(len(l.Items)) {
			return nil, nil
		}
	}
	slices.SortFunc(l.Items, func(a, b resourcev1.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	return l.Items, nil
}

// comparableSlice is s with what differs between two Nodes' slices by construction set aside: the
// Node's name and UID (spec.nodeName, the pool's name, the owner reference), the slice's name after its
// index (the library's "00001-<driver>-<node>-<random>", the simulation's "00001-<driver>-<node>") and
// the metadata the API server sets.
func comparableSlice(s *resourcev1.ResourceSlice, node string) *resourcev1.ResourceSlice {
	index, _, _ := strings.Cut(s.Name, "-")
	out := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: index,
		Labels: s.Labels, Annotations: s.Annotations, Finalizers: s.Finalizers,
	}, Spec: *s.Spec.DeepCopy()}
	for _, o := range s.OwnerReferences {
		if o.Kind == "Node" && o.Name == node {
			o.Name, o.UID = "NODE", "UID"
		}
		out.OwnerReferences = append(out.OwnerReferences, o)
	}
	if out.Spec.NodeName != nil && *out.Spec.NodeName == node {
		out.Spec.NodeName = new(string)
		*out.Spec.NodeName = "NODE"
	}
	if out.Spec.Pool.Name == node {
		out.Spec.Pool.Name = "NODE"
	}
	return out
}
