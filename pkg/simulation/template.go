package simulation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// Default capacity of a simulated Node when the template gives none of a resource.
var (
	DefaultCPU              = resource.MustParse("4")
	DefaultMemory           = resource.MustParse("16Gi")
	DefaultPods             = resource.MustParse("110")
	DefaultEphemeralStorage = resource.MustParse("100Gi")
)

// The largest quantities a template may give (setResources), so that nothing overflows on the way to
// the API server: MaxQuantity for every resource but cpu (Quantity.Value() is an int64; its largest
// value, 8Ei - 1, is excluded because resource.ParseQuantity caps a larger binary quantity such as
// 64Ei at it, silently), MaxCPU for cpu, whose millicores (Quantity.MilliValue(), the MachineInfo
// setter's NumCores*1000) are an int64.
var (
	MaxQuantity = *resource.NewQuantity(math.MaxInt64-1, resource.DecimalSI)
	MaxCPU      = *resource.NewQuantity(math.MaxInt64/1000, resource.DecimalSI)
)

// Default node info of a simulated Node when the template gives none. The runtime's is what the CRI
// fake (k8s.io/cri-api/pkg/apis/testing) answers to Version.
const (
	DefaultKernelVersion  = "simulated"
	DefaultOSImage        = "nodeagent simulated node"
	DefaultRuntimeName    = "fakeRuntime"
	DefaultRuntimeVersion = "0.1.0"
)

// kubeletConditions are the condition types the kubelet's setters compute: a template's are ignored.
var kubeletConditions = []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}

// Template is what every simulated Node is made of, read from a Node manifest (LoadTemplate,
// ParseTemplate) or DefaultTemplate. It is read-only once built: every simulated Node shares it.
//
// From the manifest it takes metadata.labels (but kubernetes.io/hostname, which is each Node's name),
// spec.taints and spec.unschedulable; status.capacity and status.allocatable; status.nodeInfo's
// kernelVersion, osImage, containerRuntimeVersion and kubeletVersion; status.conditions of types other
// than the kubelet's four (Ready and the pressures, which the setters compute); status.images,
// status.runtimeHandlers and status.features. Everything else (name, addresses, machine and boot IDs,
// architecture) is each Node's own or the simulator's.
type Template struct {
	// Labels and Taints are added to every Node at registration; Unschedulable registers it cordoned.
	Labels        map[string]string
	Taints        []v1.Taint
	Unschedulable bool
	// Capacity and Allocatable are complete: cpu, memory, pods and ephemeral-storage are always set
	// (defaults above), and Allocatable holds every resource of Capacity.
	Capacity, Allocatable v1.ResourceList
	// KernelVersion, OSImage: nodeInfo's; RuntimeName and RuntimeVersion are what each Node's CRI fake
	// answers to Version (nodeInfo.containerRuntimeVersion is "<name>://<version>"); KubeletVersion,
	// when set, replaces the agent's version in nodeInfo.kubeletVersion.
	KernelVersion, OSImage, RuntimeName, RuntimeVersion, KubeletVersion string
	// Conditions are the extra conditions every Node reports.
	Conditions []v1.NodeCondition
	// Images are the images every Node's CRI fake lists.
	Images []v1.ContainerImage
	// RuntimeHandlers and Features are what every Node's CRI fake reports in Status.
	RuntimeHandlers []v1.NodeRuntimeHandler
	Features        *v1.NodeFeatures
	// Devices are the simulated DRA drivers of every Node (the file's top-level devices section,
	// devices.go); nil without one.
	Devices *Devices
}

// DefaultTemplate is the template used without --node-template: 4 CPUs, 16 GiB, 110 pods, 100 GiB
// of ephemeral storage, allocatable equal to capacity, no labels, taints or extra conditions.
func DefaultTemplate() *Template {
	t, err := ParseTemplate([]byte("apiVersion: v1\nkind: Node\n"))
	if err != nil {
		panic(err) // the empty manifest is valid
	}
	return t
}

// MaxTemplateBytes bounds the --node-template file: a Node manifest is a few KiB, and even one with
// thousands of images is far below 4 MiB.
const MaxTemplateBytes = config.MaxFileSize

// LoadTemplate reads (at most MaxTemplateBytes: /dev/zero or a huge file is refused, never read
// whole; the error wraps config.ErrFileTooLarge) and parses a Node manifest file. The error names the
// flag and the file, and the limit when it is over.
func LoadTemplate(path string) (*Template, error) {
	data, err := config.ReadFileLimited(path, MaxTemplateBytes)
	if err != nil {
		return nil, fmt.Errorf("--node-template %q: %w", path, err)
	}
	t, err := ParseTemplate(data)
	if err != nil {
		return nil, fmt.Errorf("--node-template %q: %w", path, err)
	}
	return t, nil
}

// ParseTemplate strictly decodes a Node manifest (YAML or JSON: unknown, duplicate or mis-cased
// fields are errors), checks what the simulation takes from it and fills the defaults. The error lists
// every problem, each naming the field and the value.
func ParseTemplate(data []byte) (*Template, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	js, devicesJS, err := cutDevices(js)
	if err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	var n v1.Node
	if err := config.UnmarshalStrict(js, &n); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	// The quantities as written, for the errors: the quantity parser caps a binary quantity beyond
	// int64 (64Ei) at 9223372036854775807, so the decoded value no longer says what the file says.
	var raw struct {
		Status struct {
			Capacity, Allocatable map[v1.ResourceName]json.RawMessage
		} `json:"status"`
	}
	_ = json.Unmarshal(js, &raw) // decoded strictly above
	t, err := templateFromNode(&n, quantityTexts(raw.Status.Capacity), quantityTexts(raw.Status.Allocatable))
	if devicesJS == nil {
		return t, err
	}
	devices, devErrs := parseDevices(devicesJS)
	if devices != nil && t != nil {
		devErrs = append(devErrs, validatePlugins(devices.Plugins, t.extendedResources())...)
	}
	if err != nil || len(devErrs) > 0 {
		return nil, errors.Join(append([]error{err}, devErrs...)...)
	}
	t.Devices = devices
	return t, nil
}

// quantityTexts returns each quantity as written in the manifest (a JSON string or number).
func quantityTexts(m map[v1.ResourceName]json.RawMessage) map[v1.ResourceName]string {
	out := make(map[v1.ResourceName]string, len(m))
	for name, v := range m {
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		out[name] = s
	}
	return out
}

// templateFromNode checks n and builds the Template; capacityText and allocatableText are the
// quantities as written, named in the errors (nil: as decoded).
func templateFromNode(n *v1.Node, capacityText, allocatableText map[v1.ResourceName]string) (*Template, error) {
	var errs []error
	add := func(path string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %q: %s", path, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}
	if n.APIVersion != "v1" || n.Kind != "Node" {
		add("apiVersion/kind", n.APIVersion+"/"+n.Kind, "must be v1/Node")
	}
	t := &Template{Labels: map[string]string{}, Unschedulable: n.Spec.Unschedulable}

	for _, e := range metav1validation.ValidateLabels(n.Labels, field.NewPath("metadata", "labels")) {
		errs = append(errs, errors.New(e.Error()))
	}
	for k, v := range n.Labels {
		if k != v1.LabelHostname {
			t.Labels[k] = v
		}
	}
	for i, taint := range n.Spec.Taints {
		path := fmt.Sprintf("spec.taints[%d]", i)
		if msgs := validation.IsQualifiedName(taint.Key); len(msgs) > 0 {
			add(path+".key", taint.Key, "%s", strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(taint.Value); len(msgs) > 0 {
			add(path+".value", taint.Value, "%s", strings.Join(msgs, "; "))
		}
		switch taint.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			add(path+".effect", taint.Effect, "must be NoSchedule, PreferNoSchedule or NoExecute")
		}
		for j, o := range n.Spec.Taints[:i] {
			if o.Key == taint.Key && o.Effect == taint.Effect {
				add(path, taint.Key+":"+string(taint.Effect), "same key and effect as spec.taints[%d]", j)
			}
		}
		taint.TimeAdded = nil
		t.Taints = append(t.Taints, taint)
	}

	errs = append(errs, t.setResources(n.Status.Capacity, n.Status.Allocatable, capacityText, allocatableText)...)

	info := n.Status.NodeInfo
	t.KernelVersion, t.OSImage, t.KubeletVersion = info.KernelVersion, info.OSImage, info.KubeletVersion
	if t.KernelVersion == "" {
		t.KernelVersion = DefaultKernelVersion
	}
	if t.OSImage == "" {
		t.OSImage = DefaultOSImage
	}
	t.RuntimeName, t.RuntimeVersion = DefaultRuntimeName, DefaultRuntimeVersion
	if info.ContainerRuntimeVersion != "" {
		name, version, ok := strings.Cut(info.ContainerRuntimeVersion, "://")
		if !ok || name == "" || version == "" {
			add("status.nodeInfo.containerRuntimeVersion", info.ContainerRuntimeVersion, "must be <runtime>://<version>, e.g. containerd://1.7.24")
		}
		t.RuntimeName, t.RuntimeVersion = name, version
	}

	for i, c := range n.Status.Conditions {
		path := fmt.Sprintf("status.conditions[%d]", i)
		if slices.Contains(kubeletConditions, c.Type) {
			continue // computed by the setters
		}
		if msgs := validation.IsQualifiedName(string(c.Type)); len(msgs) > 0 {
			add(path+".type", c.Type, "%s", strings.Join(msgs, "; "))
		}
		switch c.Status {
		case v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown:
		default:
			add(path+".status", c.Status, "must be True, False or Unknown")
		}
		for j, o := range t.Conditions {
			if o.Type == c.Type {
				add(path+".type", c.Type, "duplicate of condition %d", j)
			}
		}
		t.Conditions = append(t.Conditions, v1.NodeCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	for i, img := range n.Status.Images {
		if len(img.Names) == 0 {
			add(fmt.Sprintf("status.images[%d].names", i), "", "must name the image")
		}
		if img.SizeBytes < 0 {
			add(fmt.Sprintf("status.images[%d].sizeBytes", i), img.SizeBytes, "must not be negative")
		}
	}
	t.Images = n.Status.Images
	t.RuntimeHandlers = n.Status.RuntimeHandlers
	t.Features = n.Status.Features
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// setResources fills Capacity and Allocatable from the manifest's, with the defaults, and returns
// every problem: a resource the simulation cannot report, a quantity above MaxQuantity (MaxCPU for cpu),
// a CPU count that is not whole, hugepages that are not a multiple of their page size, allocatable above
// capacity.
func (t *Template) setResources(capacity, allocatable v1.ResourceList, capacityText, allocatableText map[v1.ResourceName]string) []error {
	var errs []error
	add := func(path string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %q: %s", path, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}
	text := func(texts map[v1.ResourceName]string, name v1.ResourceName, q resource.Quantity) string {
		if s, ok := texts[name]; ok {
			return s
		}
		return q.String()
	}
	t.Capacity = v1.ResourceList{
		v1.ResourceCPU: DefaultCPU.DeepCopy(), v1.ResourceMemory: DefaultMemory.DeepCopy(),
		v1.ResourcePods: DefaultPods.DeepCopy(), v1.ResourceEphemeralStorage: DefaultEphemeralStorage.DeepCopy(),
	}
	for _, name := range slices.Sorted(maps.Keys(capacity)) {
		q := capacity[name]
		path := fmt.Sprintf("status.capacity[%s]", name)
		switch {
		case q.Sign() < 0:
			add(path, text(capacityText, name, q), "must not be negative")
		case name == v1.ResourceCPU && q.Cmp(MaxCPU) > 0:
			add(path, text(capacityText, name, q), "must be at most %s CPUs (the API server, the scheduler and the kubelet's setters count cpu in millicores, in an int64)", MaxCPU.String())
		case name != v1.ResourceCPU && q.Cmp(MaxQuantity) > 0:
			add(path, text(capacityText, name, q), "must be at most %s (the API server, the scheduler and the kubelet's setters read it as an int64, and the quantity parser caps larger binary quantities such as 64Ei at %d)",
				MaxQuantity.String(), int64(math.MaxInt64))
		case name == v1.ResourceCPU:
			if q.MilliValue()%1000 != 0 {
				add(path, text(capacityText, name, q), "must be a whole number of CPUs (the MachineInfo setter counts cores)")
			}
		case name == v1.ResourceMemory, name == v1.ResourcePods, name == v1.ResourceEphemeralStorage:
		case strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix):
			size, err := resource.ParseQuantity(strings.TrimPrefix(string(name), v1.ResourceHugePagesPrefix))
			if err != nil || size.Cmp(MaxQuantity) > 0 || size.Value() < 1024 || size.Value()%1024 != 0 {
				add(path, name, "hugepages size must be a quantity in KiB or more, e.g. hugepages-2Mi")
			} else if q.Value()%size.Value() != 0 {
				add(path, text(capacityText, name, q), "must be a multiple of the page size %s", size.String())
			}
		case nodestatus.IsExtendedResourceName(name):
		default:
			add(path, name, "the simulation reports cpu, memory, pods, ephemeral-storage, hugepages-<size> and extended resources (example.com/name) only")
		}
		t.Capacity[name] = q.DeepCopy()
	}
	t.Allocatable = t.Capacity.DeepCopy()
	for _, name := range slices.Sorted(maps.Keys(allocatable)) {
		q := allocatable[name]
		path := fmt.Sprintf("status.allocatable[%s]", name)
		c, ok := t.Capacity[name]
		switch {
		case !ok:
			add(path, name, "not in status.capacity")
		case q.Sign() < 0:
			add(path, text(allocatableText, name, q), "must not be negative")
		case q.Cmp(c) > 0:
			add(path, text(allocatableText, name, q), "must not exceed capacity %s", c.String())
		}
		t.Allocatable[name] = q.DeepCopy()
	}
	hugePages := t.hugePagesTotal()
	if _, ok := allocatable[v1.ResourceMemory]; !ok {
		// As the kubelet's: hugepages are taken out of allocatable memory.
		mem := t.Allocatable.Memory().DeepCopy()
		mem.Sub(hugePages)
		if mem.Sign() < 0 {
			add("status.capacity[memory]", t.Capacity.Memory().String(), "must hold the hugepages (%s)", hugePages.String())
			mem.Set(0)
		}
		t.Allocatable[v1.ResourceMemory] = mem
	} else if hugePages.Sign() > 0 && allocatable.Memory().Cmp(*t.Capacity.Memory()) <= 0 {
		mem := t.Allocatable.Memory().DeepCopy()
		mem.Add(hugePages)
		if mem.Cmp(*t.Capacity.Memory()) > 0 {
			add("status.allocatable[memory]", allocatable.Memory().String(), "with the hugepages (%s), must not exceed capacity %s",
				hugePages.String(), t.Capacity.Memory().String())
		}
	}
	return errs
}

func (t *Template) hugePagesTotal() resource.Quantity {
	total := resource.NewQuantity(0, resource.BinarySI)
	for name, q := range t.Capacity {
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			total.Add(q)
		}
	}
	return *total
}

// reservation is what the MachineInfo setter subtracts from capacity for allocatable, so that
// allocatable comes out as the template's: capacity - allocatable, and for memory the hugepages too
// (which the setter subtracts itself).
func (t *Template) reservation() v1.ResourceList {
	r := v1.ResourceList{}
	for name, c := range t.Capacity {
		q := c.DeepCopy()
		q.Sub(t.Allocatable[name])
		if name == v1.ResourceMemory {
			q.Sub(t.hugePagesTotal())
		}
		r[name] = q
	}
	return r
}

// hugePages returns the template's hugepages as cadvisor reports them (page size in KiB, count).
func (t *Template) hugePages() []cadvisorapi.HugePagesInfo {
	var out []cadvisorapi.HugePagesInfo
	for name, q := range t.Capacity {
		if !strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			continue
		}
		size := resource.MustParse(strings.TrimPrefix(string(name), v1.ResourceHugePagesPrefix))
		out = append(out, cadvisorapi.HugePagesInfo{PageSize: uint64(size.Value() / 1024), NumPages: uint64(q.Value() / size.Value())})
	}
	slices.SortFunc(out, func(a, b cadvisorapi.HugePagesInfo) int { return int(a.PageSize) - int(b.PageSize) })
	return out
}

// extendedResources returns the template's extended resources (capacity), which no kubelet setter
// reports (the kubelet's device plugins do).
func (t *Template) extendedResources() v1.ResourceList {
	out := v1.ResourceList{}
	for name, q := range t.Capacity {
		if nodestatus.IsExtendedResourceName(name) {
			out[name] = q
		}
	}
	return out
}

// conditionsSetter sets the template's extra conditions, as the kubelet's pressure setters set theirs:
// the heartbeat on every sync, the transition time when the status changes.
func conditionsSetter(now func() time.Time, conditions []v1.NodeCondition) nodestatus.Setter {
	return func(_ context.Context, n *v1.Node) error {
		t := metav1.NewTime(now())
		for _, want := range conditions {
			i := -1
			for j := range n.Status.Conditions {
				if n.Status.Conditions[j].Type == want.Type {
					i = j
					break
				}
			}
			if i < 0 {
				c := want
				c.LastHeartbeatTime, c.LastTransitionTime = t, t
				n.Status.Conditions = append(n.Status.Conditions, c)
				continue
			}
			have := &n.Status.Conditions[i]
			if have.Status != want.Status {
				have.LastTransitionTime = t
			}
			have.Status, have.Reason, have.Message, have.LastHeartbeatTime = want.Status, want.Reason, want.Message, t
		}
		return nil
	}
}

// extendedResourcesSetter sets the template's extended resources in capacity and allocatable, which
// the kubelet's device plugin manager would report.
func extendedResourcesSetter(capacity, allocatable v1.ResourceList) nodestatus.Setter {
	return func(_ context.Context, n *v1.Node) error {
		if n.Status.Capacity == nil {
			n.Status.Capacity = v1.ResourceList{}
		}
		if n.Status.Allocatable == nil {
			n.Status.Allocatable = v1.ResourceList{}
		}
		for name, q := range capacity {
			n.Status.Capacity[name] = q.DeepCopy()
			n.Status.Allocatable[name] = allocatable[name].DeepCopy()
		}
		return nil
	}
}
