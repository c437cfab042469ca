package simulation

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// fullTemplate uses every part of a Node manifest the simulation takes.
const fullTemplate = `apiVersion: v1
kind: Node
metadata:
  name: ignored
  labels: {topology.kubernetes.io/zone: a, kubernetes.io/hostname: ignored}
spec:
  taints: [{key: example.com/t, value: v, effect: NoSchedule, timeAdded: "2024-01-01T00:00:00Z"}]
status:
  capacity: {cpu: "8", memory: 32Gi, hugepages-2Mi: 1Gi, example.com/gpu: "2", pods: "50"}
  allocatable: {cpu: 7500m, memory: 28Gi, example.com/gpu: "1"}
  nodeInfo: {kernelVersion: 6.1.0, osImage: Debian, containerRuntimeVersion: containerd://1.7.24, kubeletVersion: v1.36.3, machineID: ignored}
  conditions:
  - {type: Ready, status: "False", reason: Whatever}
  - {type: KernelDeadlock, status: "False", reason: KernelHasNoDeadlock, message: fine}
  images:
  - {names: [a:1], sizeBytes: 1000}
  - {names: ["b@sha256:1", "b:2"], sizeBytes: 2000}
  runtimeHandlers:
  - {name: runc, features: {recursiveReadOnlyMounts: true, userNamespaces: true}}
  addresses: [{type: InternalIP, address: 10.0.0.1}]
`

func TestParseTemplate(t *testing.T) {
	tmpl, err := ParseTemplate([]byte(fullTemplate))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tmpl.Labels[v1.LabelHostname]; ok || tmpl.Labels["topology.kubernetes.io/zone"] != "a" {
		t.Errorf("labels %v: want the zone, not the hostname", tmpl.Labels)
	}
	if len(tmpl.Taints) != 1 || tmpl.Taints[0].TimeAdded != nil {
		t.Errorf("taints %+v: want one, without timeAdded", tmpl.Taints)
	}
	if len(tmpl.Conditions) != 1 || tmpl.Conditions[0].Type != "KernelDeadlock" {
		t.Errorf("conditions %+v: want KernelDeadlock only (Ready is the setters')", tmpl.Conditions)
	}
	if tmpl.RuntimeName != "containerd" || tmpl.RuntimeVersion != "1.7.24" {
		t.Errorf("runtime %q %q", tmpl.RuntimeName, tmpl.RuntimeVersion)
	}
	r := tmpl.reservation()
	for res, want := range map[v1.ResourceName]string{"cpu": "500m", "memory": "3Gi", "hugepages-2Mi": "0", "example.com/gpu": "1", "pods": "0"} {
		if q := r[res]; q.String() != want {
			t.Errorf("reservation[%s] = %s, want %s (memory: capacity - allocatable - hugepages)", res, q.String(), want)
		}
	}
	if hp := tmpl.hugePages(); len(hp) != 1 || hp[0].PageSize != 2048 || hp[0].NumPages != 512 {
		t.Errorf("hugepages %+v, want 512 pages of 2048 KiB", hp)
	}
}

func TestDefaultTemplate(t *testing.T) {
	tmpl := DefaultTemplate()
	for res, want := range map[v1.ResourceName]string{"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"} {
		if c, a := tmpl.Capacity[res], tmpl.Allocatable[res]; c.String() != want || a.String() != want {
			t.Errorf("%s: capacity %s allocatable %s, want %s", res, c.String(), a.String(), want)
		}
	}
	if tmpl.RuntimeName != DefaultRuntimeName || tmpl.KernelVersion != DefaultKernelVersion || len(tmpl.Labels) != 0 || len(tmpl.Taints) != 0 {
		t.Errorf("default template %+v", tmpl)
	}
}

// TestParseTemplateRefuses: every problem is reported at once, each naming the field and the value.
func TestParseTemplateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, manifest string
		want           []string
	}{
		{"not YAML", "apiVersion: [", []string{"decoding"}},
		{"unknown field", "apiVersion: v1\nkind: Node\nstatus: {capcity: {}}", []string{`unknown field "status.capcity"`}},
		{"mis-cased field", "apiVersion: v1\nkind: Node\nStatus: {}", []string{`unknown field "Status"`}},
		{"duplicate field", "apiVersion: v1\nkind: Node\nkind: Node", []string{"decoding"}},
		{"not a Node", "apiVersion: v1\nkind: Pod", []string{`apiVersion/kind "v1/Pod": must be v1/Node`}},
		{"no kind", "metadata: {}", []string{`apiVersion/kind "/"`}},
		{"bad quantity", "apiVersion: v1\nkind: Node\nstatus: {capacity: {cpu: lots}}", []string{"decoding", "quantities must match"}},
		{"every problem at once", `apiVersion: v1
kind: Node
metadata: {labels: {"bad key!": x}}
spec: {taints: [{key: a, effect: Never}, {key: b, value: "bad value!", effect: NoSchedule}, {key: a, effect: Never}]}
status:
  capacity: {cpu: 1500m, memory: 1Gi, hugepages-2Mi: 3Mi, hugepages-x: 1, attachable-volumes-foo: "1", pods: "-1"}
  allocatable: {cpu: "2", nvidia.com/gpu: "1"}
  nodeInfo: {containerRuntimeVersion: containerd-1.7}
  conditions: [{type: Foo, status: Maybe}, {type: Foo, status: "True"}]
  images: [{names: [], sizeBytes: -1}]
`, []string{
			`metadata.labels: Invalid value: "bad key!"`,
			`spec.taints[0].effect "Never": must be NoSchedule, PreferNoSchedule or NoExecute`,
			`spec.taints[1].value "bad value!"`,
			`spec.taints[2] "a:Never": same key and effect as spec.taints[0]`,
			`status.capacity[cpu] "1500m": must be a whole number of CPUs`,
			`status.capacity[hugepages-2Mi] "3Mi": must be a multiple of the page size 2Mi`,
			`status.capacity[hugepages-x] "hugepages-x": hugepages size must be a quantity`,
			`status.capacity[attachable-volumes-foo] "attachable-volumes-foo": the simulation reports`,
			`status.capacity[pods] "-1": must not be negative`,
			`status.allocatable[cpu] "2": must not exceed capacity 1500m`,
			`status.allocatable[nvidia.com/gpu] "nvidia.com/gpu": not in status.capacity`,
			`status.nodeInfo.containerRuntimeVersion "containerd-1.7": must be <runtime>://<version>`,
			`status.conditions[0].status "Maybe": must be True, False or Unknown`,
			`status.conditions[1].type "Foo": duplicate of condition 0`,
			`status.images[0].names "": must name the image`,
			`status.images[0].sizeBytes "-1": must not be negative`,
		}},
		// Issue 27, item 2: quantities whose int64 (millicores for cpu) would overflow on the way to the
		// API server are refused, for every resource, naming the field and the value.
		{"cpu beyond int64 millicores", "apiVersion: v1\nkind: Node\nstatus: {capacity: {cpu: \"9223372036854775807\"}}",
			[]string{`status.capacity[cpu] "9223372036854775807": must be at most 9223372036854775 CPUs`}},
		{"cpu one above the bound", "apiVersion: v1\nkind: Node\nstatus: {capacity: {cpu: \"9223372036854776\"}}",
			[]string{`status.capacity[cpu] "9223372036854776": must be at most 9223372036854775 CPUs`}},
		{"every resource beyond int64", `apiVersion: v1
kind: Node
status:
  capacity: {memory: 64Ei, pods: 9223372036854775808, ephemeral-storage: 8Ei, example.com/gpu: "1e19", hugepages-1Gi: 16Ei, hugepages-64Ei: 64Ei}
`, []string{
			`status.capacity[memory] "64Ei": must be at most 9223372036854775806`,
			`status.capacity[pods] "9223372036854775808": must be at most 9223372036854775806`,
			`status.capacity[ephemeral-storage] "8Ei": must be at most 9223372036854775806`,
			`status.capacity[example.com/gpu] "1e19": must be at most 9223372036854775806`,
			`status.capacity[hugepages-1Gi] "16Ei": must be at most 9223372036854775806`,
			`status.capacity[hugepages-64Ei] "64Ei": must be at most`,
		}},
		{"hugepages above memory", "apiVersion: v1\nkind: Node\nstatus: {capacity: {memory: 1Gi, hugepages-1Gi: 2Gi}}",
			[]string{`status.capacity[memory] "1Gi": must hold the hugepages (2Gi)`}},
		{"allocatable with hugepages above capacity", "apiVersion: v1\nkind: Node\nstatus: {capacity: {memory: 2Gi, hugepages-1Gi: 1Gi}, allocatable: {memory: 2Gi}}",
			[]string{`status.allocatable[memory] "2Gi": with the hugepages (1Gi), must not exceed capacity 2Gi`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(tc.manifest))
			if err == nil {
				t.Fatal("ParseTemplate: nil error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
		})
	}
}

// TestParseTemplateBounds: the largest quantities the bounds admit are accepted and reach the MachineInfo
// setter without overflow.
func TestParseTemplateBounds(t *testing.T) {
	tmpl, err := ParseTemplate([]byte("apiVersion: v1\nkind: Node\nstatus: {capacity: {cpu: \"9223372036854775\", memory: \"9223372036854775806\", pods: \"9223372036854775806\"}}"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := newHost(tmpl, "sim-0000").MachineInfo()
	c := nodestatus.CapacityFromMachineInfo(info)
	if cpu, mem := c[v1.ResourceCPU], c[v1.ResourceMemory]; cpu.Cmp(MaxCPU) != 0 || mem.Cmp(MaxQuantity) != 0 {
		t.Errorf("capacity from the template's machine info: cpu %s memory %s, want %s and %s", cpu.String(), mem.String(), MaxCPU.String(), MaxQuantity.String())
	}
}

func TestLoadTemplateNamesTheFile(t *testing.T) {
	_, err := LoadTemplate("/does/not/exist.yaml")
	if err == nil || !strings.HasPrefix(err.Error(), `--node-template "/does/not/exist.yaml": `) {
		t.Errorf("LoadTemplate: %v, want the flag and file named", err)
	}
}

func TestValidateNamePrefix(t *testing.T) {
	for prefix, ok := range map[string]bool{
		"sim-": true, "a.b-": true, "x": true, "": false, "Sim-": false, "sim_": false, "-sim": false,
		strings.Repeat("a", 59): true, strings.Repeat("a", 60): false, // 63 characters with the 4 digits
	} {
		if err := ValidateNamePrefix(prefix, MaxNodes); (err == nil) != ok {
			t.Errorf("ValidateNamePrefix(%q) = %v, want ok=%v", prefix, err, ok)
		}
	}
	for n, ok := range map[int]bool{-1: false, 0: false, 1: true, MaxNodes: true, MaxNodes + 1: false} {
		if err := ValidateNodes(n); (err == nil) != ok {
			t.Errorf("ValidateNodes(%d) = %v, want ok=%v", n, err, ok)
		}
	}
	if got := NodeName("sim-", 42); got != "sim-0042" {
		t.Errorf("NodeName = %q", got)
	}
}

// TestLoadTemplateBounded: a template file larger than MaxTemplateBytes, or endless (/dev/zero), is
// refused with an error naming the flag, the file and the limit, after reading at most the limit.
func TestLoadTemplateBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, append([]byte("apiVersion: v1\nkind: Node\n#"), bytes.Repeat([]byte("x"), int(MaxTemplateBytes))...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", big} {
		_, err := LoadTemplate(path)
		if !errors.Is(err, config.ErrFileTooLarge) || !strings.Contains(err.Error(), `--node-template "`+path+`"`) ||
			!strings.Contains(err.Error(), "4194304 bytes") {
			t.Errorf("LoadTemplate(%s) = %v, want the flag, the file and the limit", path, err)
		}
	}
}
