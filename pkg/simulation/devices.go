package simulation

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// DeviceIndex is the placeholder of a device name repeated Count times: "gpu-{index}" with count 8
// makes gpu-0 ... gpu-7.
const DeviceIndex = "{index}"

// Devices is the template's devices section (the top-level "devices" key of the --node-template file,
// beside the Node's fields): the simulated DRA drivers of every Node.
type Devices struct {
	// Drivers are the simulated DRA drivers: each publishes, for every simulated Node, a pool named
	// after the Node, as a kubelet plugin does: one ResourceSlice (resource.k8s.io/v1) of the devices,
	// or two with shared counters (the counters in one, the devices in the other: the API server
	// refuses a slice with both).
	Drivers []DeviceDriver `json:"drivers,omitempty"`
	// Plugins are the simulated device plugins' device IDs and env of the extended resources of
	// status.capacity (deviceplugin.go); an extended resource without an entry has default IDs.
	Plugins []DevicePlugin `json:"plugins,omitempty"`
}

// DeviceDriver is one simulated DRA driver of every Node.
type DeviceDriver struct {
	// Driver is the ResourceSlice's spec.driver: a lowercase DNS subdomain of at most 63 characters
	// (e.g. gpu.example.com), unique in the template.
	Driver string `json:"driver"`
	// SharedCounters are the pool's first slice's spec.sharedCounters (resource.k8s.io/v1 CounterSet),
	// which partitionable devices (of the second slice) consume (Device.consumesCounters).
	SharedCounters []resourcev1.CounterSet `json:"sharedCounters,omitempty"`
	// Devices are the devices slice's spec.devices, in order; each entry with Count makes Count devices.
	Devices []TemplateDevice `json:"devices"`
	// Env, if set, is the environment variable the driver's CDI spec sets in a container given its
	// devices: their names, comma-separated, in allocation order (NVIDIA_VISIBLE_DEVICES=gpu-0,gpu-1).
	Env string `json:"env,omitempty"`
}

// driverEnvName is a driver's Env.
type driverEnvName struct{ driver, env string }

// driverEnv returns the drivers that name an Env, in order (none for nil).
func (d *Devices) driverEnv() []driverEnvName {
	if d == nil {
		return nil
	}
	var out []driverEnvName
	for _, drv := range d.Drivers {
		if drv.Env != "" {
			out = append(out, driverEnvName{drv.Driver, drv.Env})
		}
	}
	return out
}

// TemplateDevice is a resource.k8s.io/v1 Device (name, attributes, capacity, consumesCounters, taints,
// ... as a ResourceSlice carries them), with Count: 0 makes one device named Name; N >= 1 makes N
// devices, Name's DeviceIndex replaced by 0 ... N-1. The per-device node selection fields (nodeName,
// nodeSelector, allNodes) are refused: every simulated Node's slice is its own (spec.nodeName).
type TemplateDevice struct {
	Count             int `json:"count,omitempty"`
	resourcev1.Device `json:",inline"`
}

// parseDevices strictly decodes the devices section (JSON) and checks it, returning every problem,
// each naming the field (devices.drivers[i]...) and the value.
func parseDevices(js []byte) (*Devices, []error) {
	var d Devices
	if err := config.UnmarshalStrict(js, &d); err != nil {
		return nil, []error{fmt.Errorf("devices: %w", err)}
	}
	return &d, d.validate()
}

// validate checks what the API server checks of a ResourceSlice's driver, shared counters and devices
// (and the resourceslice controller of the pool), so that a template never makes a slice the API server
// refuses: the shared counters are checked as their own slice's, the devices as theirs (the limit of
// 64 devices applies when a device consumes counters or has taints, as haveConsumesCounters and
// haveDeviceTaints of k8s.io/kubernetes pkg/apis/resource/validation decide it).
func (d *Devices) validate() []error {
	var errs []error
	add := func(path string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %q: %s", path, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}
	if len(d.Drivers) == 0 && len(d.Plugins) == 0 {
		add("devices.drivers", "", "must list at least one driver (or devices.plugins at least one plugin)")
	}
	for i, drv := range d.Drivers {
		path := fmt.Sprintf("devices.drivers[%d]", i)
		if msgs := validation.IsDNS1123Subdomain(drv.Driver); len(msgs) > 0 || len(drv.Driver) > resourcev1.DriverNameMaxLength {
			add(path+".driver", drv.Driver, "must be a lowercase DNS subdomain of at most %d characters (ResourceSlice spec.driver)", resourcev1.DriverNameMaxLength)
		}
		for j, o := range d.Drivers[:i] {
			if o.Driver == drv.Driver {
				add(path+".driver", drv.Driver, "same driver as devices.drivers[%d]", j)
			}
		}
		if msgs := validation.IsEnvVarName(drv.Env); drv.Env != "" && len(msgs) > 0 {
			add(path+".env", drv.Env, "must be an environment variable name: %s", strings.Join(msgs, "; "))
		}
		if len(drv.SharedCounters) > resourcev1.ResourceSliceMaxCounterSets {
			add(path+".sharedCounters", len(drv.SharedCounters), "at most %d counter sets", resourcev1.ResourceSliceMaxCounterSets)
		}
		counterSets := map[string]resourcev1.CounterSet{}
		for j, cs := range drv.SharedCounters {
			cpath := fmt.Sprintf("%s.sharedCounters[%d]", path, j)
			if msgs := validation.IsDNS1123Label(cs.Name); len(msgs) > 0 {
				add(cpath+".name", cs.Name, "%s", strings.Join(msgs, "; "))
			}
			if _, dup := counterSets[cs.Name]; dup {
				add(cpath+".name", cs.Name, "duplicate counter set")
			}
			if len(cs.Counters) == 0 || len(cs.Counters) > resourcev1.ResourceSliceMaxCountersPerCounterSet {
				add(cpath+".counters", len(cs.Counters), "must hold 1 to %d counters", resourcev1.ResourceSliceMaxCountersPerCounterSet)
			}
			for name := range cs.Counters {
				if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
					add(cpath+".counters", name, "%s", strings.Join(msgs, "; "))
				}
			}
			counterSets[cs.Name] = cs
		}
		names := map[string]string{}
		total, advanced := 0, false
		for j, dev := range drv.Devices {
			dpath := fmt.Sprintf("%s.devices[%d]", path, j)
			errs = append(errs, validateTemplateDevice(dpath, dev, counterSets)...)
			if dev.Count < 0 || dev.Count > resourcev1.ResourceSliceMaxDevices {
				continue // reported
			}
			for _, name := range dev.names() {
				if o, dup := names[name]; dup {
					add(dpath+".name", name, "same device name as %s", o)
				}
				names[name] = dpath
			}
			total += max(dev.Count, 1)
			advanced = advanced || len(dev.ConsumesCounters) > 0 || len(dev.Taints) > 0
		}
		limit := resourcev1.ResourceSliceMaxDevices
		if advanced {
			limit = resourcev1.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
		if total == 0 || total > limit {
			add(path+".devices", total, "must make 1 to %d devices (one ResourceSlice per Node; %d with consumed counters or taints)",
				resourcev1.ResourceSliceMaxDevices, resourcev1.ResourceSliceMaxDevicesWithAdvancedFeatures)
		}
	}
	return errs
}

// validateTemplateDevice checks one device entry: its name (each name it makes), count, attributes,
// capacities and counter consumptions.
func validateTemplateDevice(path string, dev TemplateDevice, counterSets map[string]resourcev1.CounterSet) []error {
	var errs []error
	add := func(path string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %q: %s", path, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}
	switch {
	case dev.Count < 0 || dev.Count > resourcev1.ResourceSliceMaxDevices:
		add(path+".count", dev.Count, "must be between 0 (one device) and %d", resourcev1.ResourceSliceMaxDevices)
	case dev.Count > 0 && !strings.Contains(dev.Name, DeviceIndex):
		add(path+".name", dev.Name, "must contain %s with count %d (each device's index, 0 to %d)", DeviceIndex, dev.Count, dev.Count-1)
	case dev.Count == 0 && strings.Contains(dev.Name, DeviceIndex):
		add(path+".name", dev.Name, "%s needs count", DeviceIndex)
	default:
		for _, name := range []string{dev.name(0), dev.name(max(dev.Count, 1) - 1)} {
			if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
				add(path+".name", dev.Name, "makes device name %q: %s", name, strings.Join(msgs, "; "))
				break
			}
		}
	}
	if dev.NodeName != nil || dev.NodeSelector != nil || dev.AllNodes != nil {
		add(path, dev.Name, "nodeName, nodeSelector and allNodes must not be set: the device is on the simulated Node whose slice lists it")
	}
	if n := len(dev.Attributes) + len(dev.Capacity); n > resourcev1.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		add(path, n, "at most %d attributes and capacities together", resourcev1.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	for _, name := range slices.Sorted(maps.Keys(dev.Attributes)) {
		apath := fmt.Sprintf("%s.attributes[%s]", path, name)
		if err := validateQualifiedName(name); err != "" {
			add(apath, name, "%s", err)
		}
		a := dev.Attributes[name]
		set := 0
		for _, isSet := range []bool{a.IntValue != nil, a.BoolValue != nil, a.StringValue != nil, a.VersionValue != nil,
			a.IntValues != nil, a.BoolValues != nil, a.StringValues != nil, a.VersionValues != nil} {
			if isSet {
				set++
			}
		}
		if set != 1 {
			add(apath, set, "must have exactly one of int, bool, string, version, ints, bools, strings, versions")
		}
		strs := a.StringValues
		if a.StringValue != nil {
			strs = append(strs, *a.StringValue)
		}
		for _, s := range strs {
			if len(s) > resourcev1.DeviceAttributeMaxValueLength {
				add(apath, s, "a string of at most %d characters", resourcev1.DeviceAttributeMaxValueLength)
			}
		}
		versions := a.VersionValues
		if a.VersionValue != nil {
			versions = append(versions, *a.VersionValue)
		}
		for _, v := range versions {
			if _, err := semver.Parse(v); err != nil || len(v) > resourcev1.DeviceAttributeMaxValueLength {
				add(apath, v, "must be a semantic version 2.0.0 of at most %d characters", resourcev1.DeviceAttributeMaxValueLength)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(dev.Capacity)) {
		cpath := fmt.Sprintf("%s.capacity[%s]", path, name)
		if err := validateQualifiedName(name); err != "" {
			add(cpath, name, "%s", err)
		}
		if q := dev.Capacity[name].Value; q.Sign() < 0 {
			add(cpath+".value", q.String(), "must not be negative")
		}
	}
	for k, c := range dev.ConsumesCounters {
		kpath := fmt.Sprintf("%s.consumesCounters[%d]", path, k)
		cs, ok := counterSets[c.CounterSet]
		if !ok {
			add(kpath+".counterSet", c.CounterSet, "not in the driver's sharedCounters")
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(c.Counters)) {
			if _, ok := cs.Counters[name]; !ok {
				add(kpath+".counters", name, "not a counter of shared counter set %s", c.CounterSet)
			}
		}
	}
	return errs
}

// validateQualifiedName checks an attribute or capacity name as the API server does: a C identifier of
// at most DeviceMaxIDLength characters, optionally after a DNS subdomain of at most
// DeviceMaxDomainLength and a slash (resource.kubernetes.io/pcieRoot). It returns the problem or "".
func validateQualifiedName(name resourcev1.QualifiedName) string {
	domain, id, ok := strings.Cut(string(name), "/")
	if !ok {
		domain, id = "", domain
	} else if msgs := validation.IsDNS1123Subdomain(domain); len(msgs) > 0 || len(domain) > resourcev1.DeviceMaxDomainLength {
		return fmt.Sprintf("domain must be a DNS subdomain of at most %d characters", resourcev1.DeviceMaxDomainLength)
	}
	if msgs := validation.IsCIdentifier(id); len(msgs) > 0 || len(id) > resourcev1.DeviceMaxIDLength {
		return fmt.Sprintf("must be a C identifier of at most %d characters, optionally after a domain and a slash", resourcev1.DeviceMaxIDLength)
	}
	return ""
}

// name is the name of the device of index i.
func (d TemplateDevice) name(i int) string {
	return strings.ReplaceAll(d.Name, DeviceIndex, strconv.Itoa(i))
}

// names are the names of the devices the entry makes.
func (d TemplateDevice) names() []string {
	out := make([]string, max(d.Count, 1))
	for i := range out {
		out[i] = d.name(i)
	}
	return out
}

// expand returns the resource.k8s.io/v1 Devices the entry makes.
func (d TemplateDevice) expand() []resourcev1.Device {
	out := make([]resourcev1.Device, 0, max(d.Count, 1))
	for _, name := range d.names() {
		dev := *d.Device.DeepCopy()
		dev.Name = name
		out = append(out, dev)
	}
	return out
}

// sliceDevices returns the driver's devices as every Node's ResourceSlice lists them.
func (drv DeviceDriver) sliceDevices() []resourcev1.Device {
	var out []resourcev1.Device
	for _, d := range drv.Devices {
		out = append(out, d.expand()...)
	}
	return out
}

// cutDevices takes the top-level "devices" key out of a template's JSON: it returns the rest (the
// Node manifest) and the devices section, nil without one.
func cutDevices(js []byte) (node, devices []byte, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return js, nil, nil // not an object: the Node's strict decoding says why
	}
	devices, ok := top["devices"]
	if !ok {
		return js, nil, nil
	}
	delete(top, "devices")
	node, err = json.Marshal(top)
	if err != nil {
		return nil, nil, fmt.Errorf("devices: %w", err)
	}
	return node, devices, nil
}
