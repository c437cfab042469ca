package simulation

import (
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestSimulatedDriverPrepare: the simulated drivers prepare a claim whose devices are in the pod's
// Node's pool, fail with the pod's AnnotationPrepareError (cut at MaxPrepareErrorBytes) or for a device
// of another Node; a prepared pod's container gets each driver's env.
func TestSimulatedDriverPrepare(t *testing.T) {
	devices := &Devices{Drivers: []DeviceDriver{
		{Driver: "gpu.example.com", Env: "NVIDIA_VISIBLE_DEVICES"},
		{Driver: "nic.example.com"},
	}}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		pool        string
		wantErr     string
		wantEnv     []string
	}{
		{name: "prepared", pool: "sim-0000", wantEnv: []string{"NVIDIA_VISIBLE_DEVICES=gpu-1,gpu-0"}},
		{name: "annotation", pool: "sim-0000", annotations: map[string]string{AnnotationPrepareError: "XID 79"},
			wantErr: "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: XID 79"},
		{name: "long annotation", pool: "sim-0000", annotations: map[string]string{AnnotationPrepareError: strings.Repeat("x", 2000)},
			wantErr: "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: " + strings.Repeat("x", MaxPrepareErrorBytes)},
		{name: "another Node's device", pool: "sim-0001",
			wantErr: "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: device gpu-1 of driver gpu.example.com is in pool sim-0001, not on node sim-0000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "cu"},
				Status: resourcev1.ResourceClaimStatus{
					Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
						{Request: "r", Driver: "gpu.example.com", Pool: tc.pool, Device: "gpu-1"},
						{Request: "r", Driver: "gpu.example.com", Pool: tc.pool, Device: "gpu-0"},
						{Request: "n", Driver: "nic.example.com", Pool: tc.pool, Device: "nic-0"},
					}}},
					ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pu"}},
				}}
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pu", Annotations: tc.annotations},
				Spec: v1.PodSpec{NodeName: "sim-0000", ResourceClaims: []v1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To("c")}},
					Containers: []v1.Container{{Name: "a", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "c"}}}}}}}
			s := &simPods{dra: newDRA(fake.NewClientset(claim), devices), driverEnv: devices.driverEnv()}
			err := s.PrepareDynamicResources(t.Context(), p)
			if got := errText(err); got != tc.wantErr {
				t.Fatalf("error %q, want %q", got, tc.wantErr)
			}
			if env := s.deviceEnv(p, &p.Spec.Containers[0]); !slices.Equal(env, tc.wantEnv) {
				t.Errorf("env %q, want %q", env, tc.wantEnv)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSetDeviceHealthRefuses: the control API refuses, naming why, a device change it cannot apply.
func TestSetDeviceHealthRefuses(t *testing.T) {
	s := &Simulator{byName: map[string]*simNode{"sim-0000": {}}, pods: &simPods{dra: newDRA(fake.NewClientset(), nil)}}
	s.cfg.Template = &Template{Devices: &Devices{Drivers: []DeviceDriver{{Driver: "gpu.example.com", Devices: []TemplateDevice{{Count: 2, Device: resourcev1.Device{Name: "gpu-{index}"}}}}}}}
	for _, tc := range []struct {
		name, node string
		change     DeviceHealthChange
		want       string
		is         error
	}{
		{"unknown node", "sim-9", DeviceHealthChange{Driver: "gpu.example.com", Device: "gpu-0", Health: "Unhealthy"}, `no such simulated node: "sim-9"`, ErrUnknownNode},
		{"unknown driver", "sim-0000", DeviceHealthChange{Driver: "x.example.com", Device: "gpu-0", Health: "Unhealthy"}, `driver "x.example.com" is not in the template's devices`, ErrBadDeviceChange},
		{"unknown device", "sim-0000", DeviceHealthChange{Driver: "gpu.example.com", Device: "gpu-2", Health: "Unhealthy"}, `device "gpu-2" is not a device of driver gpu.example.com`, ErrBadDeviceChange},
		{"bad health", "sim-0000", DeviceHealthChange{Driver: "gpu.example.com", Device: "gpu-0", Health: "Sick"}, `health "Sick": one of Healthy, Unhealthy, Unknown`, ErrBadDeviceChange},
		{"applied", "sim-0000", DeviceHealthChange{Driver: "gpu.example.com", Device: "gpu-1", Health: "Unknown"}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.SetDeviceHealth(tc.node, tc.change)
			if !strings.Contains(errText(err), tc.want) || !errors.Is(err, tc.is) || (tc.want == "") != (err == nil) {
				t.Errorf("error %v, want one containing %q (%v)", err, tc.want, tc.is)
			}
		})
	}
}
