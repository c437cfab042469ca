package dra

import (
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

const (
	driver = "gpu.example.com"
	node   = "sim-0000"
)

// testPod has claim "gpu" of template "two-gpus", made as claim "trainer-gpu" (status), used by
// container "train" (request "gpus") and "side" (the whole claim).
func testPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "ns", UID: "pod-uid"},
		Spec: v1.PodSpec{
			NodeName:       node,
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("two-gpus")}},
			Containers: []v1.Container{
				{Name: "train", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu", Request: "gpus"}}}},
				{Name: "side", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}},
				{Name: "none"},
			},
		},
		Status: v1.PodStatus{ResourceClaimStatuses: []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("trainer-gpu")}}},
	}
}

// testClaim is the pod's claim, owned by it, allocated gpu-0 and gpu-1 (request gpus) and nic-0 (request
// nic) of node's pool, reserved for the pod.
func testClaim() *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer-gpu", Namespace: "ns", UID: "claim-uid",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "trainer", UID: "pod-uid", Controller: ptr.To(true)}}},
		Status: resourcev1.ResourceClaimStatus{
			Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
				{Request: "gpus", Driver: driver, Pool: node, Device: "gpu-0"},
				{Request: "gpus", Driver: driver, Pool: node, Device: "gpu-1"},
				{Request: "nic", Driver: "nic.example.com", Pool: node, Device: "nic-0"},
			}}},
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer", UID: "pod-uid"}},
		},
	}
}

// TestPrepareResources: the kubelet's checks and error messages before a pod's claims are prepared,
// and the driver's failure; nothing is prepared after an error.
func TestPrepareResources(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     func(*v1.Pod)
		claim   func(*resourcev1.ResourceClaim) // nil claim: none in the API
		noClaim bool
		prepare string // the driver's answer
		wantErr string
	}{
		{name: "prepared"},
		{name: "claim not made yet", pod: func(p *v1.Pod) { p.Status.ResourceClaimStatuses = nil },
			wantErr: `prepare dynamic resources: pod "ns/trainer": ResourceClaim not created yet`},
		{name: "claim missing", noClaim: true,
			wantErr: `prepare dynamic resources: fetch ResourceClaim trainer-gpu: resourceclaims.resource.k8s.io "trainer-gpu" not found`},
		{name: "claim of another pod", claim: func(c *resourcev1.ResourceClaim) { c.OwnerReferences[0].UID = "other" },
			wantErr: `prepare dynamic resources: ResourceClaim ns/trainer-gpu was not created for Pod ns/trainer (Pod is not owner)`},
		{name: "not reserved", claim: func(c *resourcev1.ResourceClaim) { c.Status.ReservedFor = nil },
			wantErr: "prepare dynamic resources: pod trainer (pod-uid) is not allowed to use ResourceClaim trainer-gpu (claim-uid)"},
		{name: "not allocated", claim: func(c *resourcev1.ResourceClaim) { c.Status.Allocation = nil },
			wantErr: "prepare dynamic resources: ResourceClaim trainer-gpu: not allocated"},
		{name: "driver not registered", claim: func(c *resourcev1.ResourceClaim) { c.Status.Allocation.Devices.Results[2].Driver = "fpga.example.com" },
			wantErr: "prepare dynamic resources: DRA driver fpga.example.com is not registered"},
		{name: "driver fails", prepare: "device busy",
			wantErr: "prepare dynamic resources: NodePrepareResources failed for ResourceClaim trainer-gpu: device busy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := testPod(), testClaim()
			if tc.pod != nil {
				tc.pod(p)
			}
			if tc.claim != nil {
				tc.claim(c)
			}
			var objs []runtime.Object
			if !tc.noClaim {
				objs = append(objs, c)
			}
			var calls []string
			m := NewManager(Options{Client: fake.NewClientset(objs...), Drivers: []string{driver, "nic.example.com"},
				Prepare: func(_ *v1.Pod, claim *resourcev1.ResourceClaim, drv string, devs []Device) string {
					calls = append(calls, claim.Name+" "+drv+" "+EnvValue(devs))
					return tc.prepare
				}})
			err := m.PrepareResources(t.Context(), p)
			if got := errString(err); got != tc.wantErr {
				t.Fatalf("error %q, want %q", got, tc.wantErr)
			}
			claims, refs := m.Prepared()
			if tc.wantErr != "" {
				if claims != 0 || refs != 0 {
					t.Errorf("after the error: %d claims prepared for %d pods, want none", claims, refs)
				}
				return
			}
			if want := []string{"trainer-gpu gpu.example.com gpu-0,gpu-1", "trainer-gpu nic.example.com nic-0"}; !slices.Equal(calls, want) {
				t.Errorf("driver calls %q, want %q", calls, want)
			}
			// Prepared once: a second pass calls no driver.
			if err := m.PrepareResources(t.Context(), p); err != nil || len(calls) != 2 {
				t.Errorf("again: %v, %d driver calls, want none more", err, len(calls))
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestContainerDevicesAndHealth: each container sees its claims' devices (a request's only), its
// allocatedResourcesStatus names them claim:<claim>[/<request>] with each device's health, a health
// change names the pods to write again, and unprepared, the pod has neither.
func TestContainerDevicesAndHealth(t *testing.T) {
	p := testPod()
	m := NewManager(Options{Client: fake.NewClientset(testClaim()), Drivers: []string{driver, "nic.example.com"}})
	ctr := func(name string) *v1.Container {
		return &p.Spec.Containers[slices.IndexFunc(p.Spec.Containers, func(c v1.Container) bool { return c.Name == name })]
	}
	if d := m.ContainerDevices(p, ctr("train")); d != nil {
		t.Errorf("before prepare: devices %v, want none", d)
	}
	if err := m.PrepareResources(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1, nic0 := Device{driver, node, "gpu-0"}, Device{driver, node, "gpu-1"}, Device{"nic.example.com", node, "nic-0"}
	for _, tc := range []struct {
		container string
		want      []Device
	}{
		{"train", []Device{gpu0, gpu1}},
		{"side", []Device{gpu0, gpu1, nic0}},
		{"none", nil},
	} {
		if got := m.ContainerDevices(p, ctr(tc.container)); !slices.Equal(got, tc.want) {
			t.Errorf("container %s: devices %v, want %v", tc.container, got, tc.want)
		}
	}
	healthy := func(d Device) v1.ResourceHealth {
		return v1.ResourceHealth{ResourceID: v1.ResourceID(d.String()), Health: v1.ResourceHealthStatusHealthy}
	}
	want := []v1.ResourceStatus{{Name: "claim:gpu/gpus", Resources: []v1.ResourceHealth{healthy(gpu0), healthy(gpu1)}}}
	if got := m.AllocatedResourcesStatus(p, ctr("train")); !reflect.DeepEqual(got, want) {
		t.Errorf("train's allocatedResourcesStatus %+v, want %+v", got, want)
	}
	if pods := m.SetHealth(gpu1, Health{Health: v1.ResourceHealthStatusUnhealthy, Message: "XID 79"}); !slices.Equal(pods, []string{"ns/trainer"}) {
		t.Errorf("gpu-1 unhealthy: pods %q, want ns/trainer", pods)
	}
	if pods := m.SetHealth(Device{driver, "sim-0001", "gpu-1"}, Health{Health: v1.ResourceHealthStatusUnhealthy}); len(pods) != 0 {
		t.Errorf("another Node's gpu-1 unhealthy: pods %q, want none", pods)
	}
	want[0].Resources[1] = v1.ResourceHealth{ResourceID: v1.ResourceID(gpu1.String()), Health: v1.ResourceHealthStatusUnhealthy, Message: ptr.To("XID 79")}
	if got := m.AllocatedResourcesStatus(p, ctr("train")); !reflect.DeepEqual(got, want) {
		t.Errorf("train's allocatedResourcesStatus after gpu-1 unhealthy %+v, want %+v", got, want)
	}
	if got := m.AllocatedResourcesStatus(p, ctr("side")); len(got) != 1 || got[0].Name != "claim:gpu" || len(got[0].Resources) != 3 {
		t.Errorf("side's allocatedResourcesStatus %+v, want claim:gpu with 3 devices", got)
	}
	if err := m.UnprepareResources(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if c, r := m.Prepared(); c != 0 || r != 0 || m.ContainerDevices(p, ctr("side")) != nil || m.AllocatedResourcesStatus(p, ctr("side")) != nil {
		t.Errorf("unprepared: %d claims for %d pods, devices or status left", c, r)
	}
}
