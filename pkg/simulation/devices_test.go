package simulation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// gpuTemplate is docs/simulation.md's 8-GPU example, shortened to 2 GPUs and a partitionable device.
const gpuTemplate = `apiVersion: v1
kind: Node
status:
  capacity: {nvidia.com/gpu: "8"}
devices:
  drivers:
  - driver: gpu.example.com
    devices:
    - name: gpu-{index}
      count: 2
      attributes:
        model: {string: H100}
        resource.kubernetes.io/pcieRoot: {string: pci0000:00}
        driverVersion: {version: 1.2.3}
      capacity:
        memory: {value: 80Gi}
  - driver: mig.example.com
    sharedCounters:
    - name: gpu-0-counters
      counters: {memory: {value: 80Gi}}
    devices:
    - name: whole
      consumesCounters: [{counterSet: gpu-0-counters, counters: {memory: {value: 80Gi}}}]
    - name: half-{index}
      count: 2
      consumesCounters: [{counterSet: gpu-0-counters, counters: {memory: {value: 40Gi}}}]
`

func TestParseTemplateDevices(t *testing.T) {
	tmpl, err := ParseTemplate([]byte(gpuTemplate))
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Devices == nil || len(tmpl.Devices.Drivers) != 2 {
		t.Fatalf("devices %+v: want 2 drivers", tmpl.Devices)
	}
	gpu := resourcev1.Device{
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"model":                           {StringValue: ptr.To("H100")},
			"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:00")},
			"driverVersion":                   {VersionValue: ptr.To("1.2.3")},
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
	}
	gpu0, gpu1 := *gpu.DeepCopy(), *gpu.DeepCopy()
	gpu0.Name, gpu1.Name = "gpu-0", "gpu-1"
	res := driverResources("sim-0003", tmpl.Devices.Drivers[0], nil)
	want := []resourcev1.Device{gpu0, gpu1}
	if got := res.Pools["sim-0003"].Slices[0].Devices; !equality.Semantic.DeepEqual(want, got) || len(res.Pools) != 1 {
		t.Errorf("gpu.example.com's pools %v, devices\n%+v\nwant\n%+v", res.Pools, got, want)
	}
	// A Node of its own devices (the control API's SetNodeDevices): only those named.
	if got := driverResources("sim-0003", tmpl.Devices.Drivers[0], []string{"gpu-1"}).Pools["sim-0003"].Slices[0].Devices; !equality.Semantic.DeepEqual([]resourcev1.Device{gpu1}, got) {
		t.Errorf("gpu.example.com's devices with only gpu-1: %+v", got)
	}
	if got := driverResources("sim-0003", tmpl.Devices.Drivers[0], []string{}).Pools["sim-0003"].Slices[0].Devices; len(got) != 0 {
		t.Errorf("gpu.example.com's devices with none: %+v", got)
	}
	// A partitionable device: two slices, as the API server refuses shared counters and devices in one.
	migSlices := driverResources("sim-0003", tmpl.Devices.Drivers[1], nil).Pools["sim-0003"].Slices
	if len(migSlices) != 2 {
		t.Fatalf("mig.example.com's slices %+v: want 2 (the shared counters, the devices)", migSlices)
	}
	counters, mig := migSlices[0], migSlices[1]
	var names []string
	for _, d := range mig.Devices {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "whole,half-0,half-1" || mig.SharedCounters != nil || len(mig.Devices[2].ConsumesCounters) != 1 {
		t.Errorf("mig.example.com's devices slice %+v: want whole, half-0, half-1 consuming gpu-0-counters, no shared counters", mig)
	}
	if len(counters.SharedCounters) != 1 || counters.SharedCounters[0].Name != "gpu-0-counters" || counters.Devices != nil {
		t.Errorf("mig.example.com's counters slice %+v: want gpu-0-counters and no devices", counters)
	}
	if q := tmpl.Allocatable["nvidia.com/gpu"]; q.Value() != 8 {
		t.Errorf("allocatable nvidia.com/gpu %s, want 8 (a device plugin's extended resource)", q.String())
	}
	if DefaultTemplate().Devices != nil {
		t.Error("the default template has devices")
	}
}

func TestParseTemplateDevicesErrors(t *testing.T) {
	const head = "apiVersion: v1\nkind: Node\ndevices:\n"
	for _, tc := range []struct {
		name, devices string
		want          []string // each in the error
	}{
		{"unknown field", "  drivers: [{driver: a.example.com, devices: [{name: a, colour: red}]}]", []string{`devices: strict decoding error: unknown field "drivers[0].devices[0].colour"`}},
		{"mis-cased", "  Drivers: []", []string{`unknown field "Drivers"`}},
		{"no drivers", "  drivers: []", []string{`devices.drivers "": must list at least one driver`}},
		{"bad driver", "  drivers: [{driver: GPU_vendor, devices: [{name: a}]}]", []string{`devices.drivers[0].driver "GPU_vendor": must be a lowercase DNS subdomain`}},
		{"duplicate driver", "  drivers: [{driver: a.example.com, devices: [{name: a}]}, {driver: a.example.com, devices: [{name: a}]}]",
			[]string{`devices.drivers[1].driver "a.example.com": same driver as devices.drivers[0]`}},
		{"no devices", "  drivers: [{driver: a.example.com, devices: []}]", []string{`devices.drivers[0].devices "0": must make 1 to 128 devices`}},
		{"too many", "  drivers: [{driver: a.example.com, devices: [{name: 'g-{index}', count: 100}, {name: 'h-{index}', count: 29}]}]",
			[]string{`devices.drivers[0].devices "129": must make 1 to 128 devices`}},
		{"count without index", "  drivers: [{driver: a.example.com, devices: [{name: gpu, count: 8}]}]",
			[]string{`devices.drivers[0].devices[0].name "gpu": must contain {index} with count 8`}},
		{"index without count", "  drivers: [{driver: a.example.com, devices: [{name: 'gpu-{index}'}]}]",
			[]string{`devices.drivers[0].devices[0].name "gpu-{index}": {index} needs count`}},
		{"negative count", "  drivers: [{driver: a.example.com, devices: [{name: 'gpu-{index}', count: -1}]}]",
			[]string{`devices.drivers[0].devices[0].count "-1": must be between 0 (one device) and 128`}},
		{"bad name", "  drivers: [{driver: a.example.com, devices: [{name: 'GPU-{index}', count: 2}]}]",
			[]string{`devices.drivers[0].devices[0].name "GPU-{index}": makes device name "GPU-0"`}},
		{"duplicate name", "  drivers: [{driver: a.example.com, devices: [{name: 'gpu-{index}', count: 2}, {name: gpu-1}]}]",
			[]string{`devices.drivers[0].devices[1].name "gpu-1": same device name as devices.drivers[0].devices[0]`}},
		{"node selection", "  drivers: [{driver: a.example.com, devices: [{name: a, allNodes: true}]}]",
			[]string{`devices.drivers[0].devices[0] "a": nodeName, nodeSelector and allNodes must not be set`}},
		{"attribute name", "  drivers: [{driver: a.example.com, devices: [{name: a, attributes: {'bad-name': {int: 1}}}]}]",
			[]string{`devices.drivers[0].devices[0].attributes[bad-name] "bad-name": must be a C identifier`}},
		{"attribute domain", "  drivers: [{driver: a.example.com, devices: [{name: a, attributes: {'Bad_Domain/x': {int: 1}}}]}]",
			[]string{`devices.drivers[0].devices[0].attributes[Bad_Domain/x] "Bad_Domain/x": domain must be a DNS subdomain`}},
		{"two values", "  drivers: [{driver: a.example.com, devices: [{name: a, attributes: {x: {int: 1, bool: true}}}]}]",
			[]string{`devices.drivers[0].devices[0].attributes[x] "2": must have exactly one of int, bool`}},
		{"no value", "  drivers: [{driver: a.example.com, devices: [{name: a, attributes: {x: {}}}]}]",
			[]string{`devices.drivers[0].devices[0].attributes[x] "0": must have exactly one of`}},
		{"long string", "  drivers: [{driver: a.example.com, devices: [{name: a, attributes: {x: {string: " + strings.Repeat("s", 65) + "}}}]}]",
			[]string{`devices.drivers[0].devices[0].attributes[x] "` + strings.Repeat("s", 65) + `": a string of at most 64 characters`}},
		{"bad version", "  drivers: [{driver: a.example.com, devices: [{name: a, attributes: {v: {version: '1.2'}}}]}]",
			[]string{`devices.drivers[0].devices[0].attributes[v] "1.2": must be a semantic version 2.0.0`}},
		{"negative capacity", "  drivers: [{driver: a.example.com, devices: [{name: a, capacity: {memory: {value: -1Gi}}}]}]",
			[]string{`devices.drivers[0].devices[0].capacity[memory].value "-1Gi": must not be negative`}},
		{"unknown counter set", "  drivers: [{driver: a.example.com, devices: [{name: a, consumesCounters: [{counterSet: nope, counters: {m: {value: 1}}}]}]}]",
			[]string{`devices.drivers[0].devices[0].consumesCounters[0].counterSet "nope": not in the driver's sharedCounters`}},
		{"unknown counter", "  drivers: [{driver: a.example.com, sharedCounters: [{name: cs, counters: {m: {value: 1}}}], devices: [{name: a, consumesCounters: [{counterSet: cs, counters: {other: {value: 1}}}]}]}]",
			[]string{`devices.drivers[0].devices[0].consumesCounters[0].counters "other": not a counter of shared counter set cs`}},
		{"too many consuming counters", "  drivers: [{driver: a.example.com, sharedCounters: [{name: cs, counters: {m: {value: 65}}}], devices: [{name: 'g-{index}', count: 65, consumesCounters: [{counterSet: cs, counters: {m: {value: 1}}}]}]}]",
			[]string{`devices.drivers[0].devices "65": must make 1 to 128 devices (one ResourceSlice per Node; 64 with consumed counters or taints)`}},
		{"counters without devices", "  drivers: [{driver: a.example.com, sharedCounters: [{name: cs, counters: {m: {value: 1}}}], devices: []}]",
			[]string{`devices.drivers[0].devices "0": must make 1 to 128 devices`}},
		{"bad env", "  drivers: [{driver: a.example.com, env: '1GPU=', devices: [{name: a}]}]",
			[]string{`devices.drivers[0].env "1GPU=": must be an environment variable name`}},
		{"with a Node error too", "  drivers: []\nstatus: {capacity: {cpu: 1500m}}",
			[]string{`status.capacity[cpu] "1500m": must be a whole number`, `devices.drivers "": must list at least one driver`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(head + tc.devices))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestParseTemplateDevicesAccepted holds the checks to the API server's limits where a template is
// valid: the shared counters are a slice of their own, so devices that consume none may number 128
// beside them (64 only when one consumes counters or has taints).
func TestParseTemplateDevicesAccepted(t *testing.T) {
	const head = "apiVersion: v1\nkind: Node\ndevices:\n"
	for _, tc := range []struct{ name, devices string }{
		{"128 devices", "  drivers: [{driver: a.example.com, devices: [{name: 'g-{index}', count: 128}]}]"},
		{"128 devices beside shared counters", "  drivers: [{driver: a.example.com, sharedCounters: [{name: cs, counters: {m: {value: 1}}}], devices: [{name: 'g-{index}', count: 128}]}]"},
		{"64 consuming counters", "  drivers: [{driver: a.example.com, sharedCounters: [{name: cs, counters: {m: {value: 64}}}], devices: [{name: 'g-{index}', count: 64, consumesCounters: [{counterSet: cs, counters: {m: {value: 1}}}]}]}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseTemplate([]byte(head + tc.devices)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDocsDeviceTemplates parses the templates of docs/simulation.md's "Devices" section (the 8-GPU Node,
// the partitionable device): each is valid and makes the devices the text says.
func TestDocsDeviceTemplates(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "simulation.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Devices\n")
	end := strings.Index(doc[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("no Devices section in docs/simulation.md")
	}
	section := doc[start : start+1+end]
	var templates []string
	for _, block := range strings.Split(section, "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		switch {
		case strings.HasPrefix(block, "apiVersion: v1\nkind: Node\n"):
			templates = append(templates, block)
		case strings.HasPrefix(block, "devices:\n"):
			templates = append(templates, "apiVersion: v1\nkind: Node\n"+block)
		}
	}
	for i, want := range []struct {
		driver  string
		devices []string
	}{
		{"gpu.example.com", []string{"gpu-0", "gpu-1", "gpu-0-r1", "gpu-1-r1", "gpu-0-r2", "gpu-1-r2", "gpu-0-r3", "gpu-1-r3"}},
		{"mig.example.com", []string{"gpu-0", "gpu-0-half-0", "gpu-0-half-1"}},
	} {
		if i >= len(templates) {
			t.Fatalf("%d templates in the Devices section, want 2", len(templates))
		}
		tmpl, err := ParseTemplate([]byte(templates[i]))
		if err != nil {
			t.Fatalf("template %d:\n%s\n%v", i, templates[i], err)
		}
		drv := tmpl.Devices.Drivers[0]
		var names []string
		for _, d := range drv.sliceDevices() {
			names = append(names, d.Name)
		}
		if drv.Driver != want.driver || strings.Join(names, ",") != strings.Join(want.devices, ",") {
			t.Errorf("template %d: driver %s devices %v, want %s %v", i, drv.Driver, names, want.driver, want.devices)
		}
	}
}

// TestNewResourceSlices holds the slices written for a Node (server-side apply) to those that
// k8s.io/dynamic-resource-allocation's resourceslice controller (Controller.syncPool) writes for a Node
// owner: owned by the Node (controller), spec.nodeName and the pool's name the Node's, one slice per
// slice of driverResources (two for a driver with shared counters: the counters, then the devices),
// named by index ("00000-", "00001-"), resourceSliceCount their number, and the generation the highest
// of the pool's existing slices, bumped by one when a slice is new or more than one changes (kept when
// at most one changes); a slice of another name or an older generation is obsolete.
// test/integration's TestResourceSlicesAsTheLibrary compares the slices written with the library's,
// field by field.
func TestNewResourceSlices(t *testing.T) {
	tmpl, err := ParseTemplate([]byte(gpuTemplate))
	if err != nil {
		t.Fatal(err)
	}
	gpu, mig := tmpl.Devices.Drivers[0], tmpl.Devices.Drivers[1]
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-0003", UID: "u-3"}}
	const (
		gpu0 = "00000-gpu.example.com-sim-0003"
		lib0 = "00000-gpu.example.com-sim-0003-x7k2p" // the library's, of an earlier run
		mig0 = "00000-mig.example.com-sim-0003"
		mig1 = "00001-mig.example.com-sim-0003"
	)
	// published is the slice of drv named name as published at generation, changed by change.
	published := func(drv DeviceDriver, name string, generation int64, change func(*resourcev1.ResourceSlice)) *resourcev1.ResourceSlice {
		want, _, err := newResourceSlices(drv.Driver, node, driverResources(node.Name, drv, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		s := want[0].DeepCopy()
		for _, w := range want {
			if w.Name == name {
				s = w.DeepCopy()
			}
		}
		s.Name, s.Spec.Pool.Generation = name, generation
		if change != nil {
			change(s)
		}
		return s
	}
	oneSlicePool := func(s *resourcev1.ResourceSlice) { s.Spec.Pool.ResourceSliceCount = 1 }
	fewerDevices := func(s *resourcev1.ResourceSlice) { s.Spec.Devices = s.Spec.Devices[:1] }
	for _, tc := range []struct {
		desc       string
		drv        DeviceDriver
		existing   []*resourcev1.ResourceSlice
		names      []string // the slices, in order
		generation int64
		obsolete   []string
	}{
		{"new", gpu, nil, []string{gpu0}, 1, nil},
		{"an update", gpu, []*resourcev1.ResourceSlice{published(gpu, gpu0, 1, fewerDevices)}, []string{gpu0}, 1, nil},
		{"an update at generation 4", gpu, []*resourcev1.ResourceSlice{published(gpu, gpu0, 4, nil)}, []string{gpu0}, 4, nil},
		{"replacing the library's slice of an earlier run", gpu, []*resourcev1.ResourceSlice{published(gpu, lib0, 1, nil)}, []string{gpu0}, 2, []string{lib0}},
		{"older than another of the pool", gpu, []*resourcev1.ResourceSlice{published(gpu, gpu0, 1, nil), published(gpu, lib0, 3, nil)}, []string{gpu0}, 4, []string{gpu0, lib0}},
		{"partitionable: new", mig, nil, []string{mig0, mig1}, 1, nil},
		{"partitionable: published", mig, []*resourcev1.ResourceSlice{published(mig, mig0, 3, nil), published(mig, mig1, 3, nil)}, []string{mig0, mig1}, 3, nil},
		{"partitionable: the devices changed", mig, []*resourcev1.ResourceSlice{published(mig, mig0, 3, nil), published(mig, mig1, 3, fewerDevices)}, []string{mig0, mig1}, 3, nil},
		{"partitionable: both changed", mig, []*resourcev1.ResourceSlice{published(mig, mig0, 3, oneSlicePool), published(mig, mig1, 3, oneSlicePool)}, []string{mig0, mig1}, 4, nil},
		{"partitionable: the devices missing", mig, []*resourcev1.ResourceSlice{published(mig, mig0, 3, nil)}, []string{mig0, mig1}, 4, nil},
		{"partitionable: the devices of an older generation", mig, []*resourcev1.ResourceSlice{published(mig, mig0, 3, nil), published(mig, mig1, 2, nil)}, []string{mig0, mig1}, 4, []string{mig1}},
		{"partitionable: replacing the one slice of an earlier run", mig, []*resourcev1.ResourceSlice{published(mig, mig0, 1, func(s *resourcev1.ResourceSlice) {
			oneSlicePool(s)
			s.Spec.Devices = published(mig, mig1, 1, nil).Spec.Devices
		})}, []string{mig0, mig1}, 2, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got, obsolete, err := newResourceSlices(tc.drv.Driver, node, driverResources(node.Name, tc.drv, nil), tc.existing)
			if err != nil {
				t.Fatal(err)
			}
			res := driverResources(node.Name, tc.drv, nil).Pools[node.Name].Slices
			if len(got) != len(tc.names) || len(res) != len(tc.names) {
				t.Fatalf("%d slices, %d of driverResources, want %d", len(got), len(res), len(tc.names))
			}
			for i, name := range tc.names {
				want := &resourcev1.ResourceSlice{
					TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
					ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{
						{APIVersion: "v1", Kind: "Node", Name: "sim-0003", UID: "u-3", Controller: ptr.To(true)}}},
					Spec: resourcev1.ResourceSliceSpec{
						Driver: tc.drv.Driver, NodeName: ptr.To("sim-0003"),
						Pool:    resourcev1.ResourcePool{Name: "sim-0003", Generation: tc.generation, ResourceSliceCount: int64(len(tc.names))},
						Devices: res[i].Devices, SharedCounters: res[i].SharedCounters,
					},
				}
				if !equality.Semantic.DeepEqual(got[i], want) {
					t.Errorf("slice %d\n%+v\nwant\n%+v", i, got[i], want)
				}
				if !sliceUpToDate(got[i], want) {
					t.Errorf("sliceUpToDate(slice %d, want) is false", i)
				}
			}
			var names []string
			for _, s := range obsolete {
				names = append(names, s.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.obsolete, ",") {
				t.Errorf("obsolete %v, want %v", names, tc.obsolete)
			}
		})
	}
	if _, _, err := newResourceSlices(mig.Driver, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", 240), UID: "u"}}, driverResources(strings.Repeat("n", 240), mig, nil), nil); err == nil ||
		!strings.Contains(err.Error(), "ResourceSlice name \"00000-mig.example.com-nnn") {
		t.Errorf("a Node name too long for the slice's name: %v", err)
	}
}
