package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// devicesTemplate gives every simulated Node 2 GPUs of the simulated DRA driver gpu.example.com
// (docs/simulation.md, "Devices", with 2 GPUs instead of 8).
const devicesTemplate = `apiVersion: v1
kind: Node
devices:
  drivers:
  - driver: gpu.example.com
    devices:
    - name: gpu-{index}
      count: 2
      attributes:
        model: {string: H100}
        resource.kubernetes.io/pcieRoot: {string: pci0000:00}
      capacity:
        memory: {value: 80Gi}
`

// TestSimulateDevices (issue 49, items 1 and 2): with a template of 2 simulated GPUs per Node, each of 2
// simulated Nodes has one ResourceSlice of driver gpu.example.com published as a kubelet plugin publishes
// it (the slice k8s.io/dynamic-resource-allocation's resourceslice controller writes, applied): spec.nodeName and the pool are the
// Node's, generation 1 and resourceSliceCount 1, devices gpu-0 and gpu-1 with the template's attributes and
// capacity, owned by the Node (its UID). With the DeviceClass of deploy/kubernetes/devices and a
// ResourceClaimTemplate for 1 GPU, the real kube-scheduler allocates a GPU of the Node it binds the pod to
// (the resourceclaim controller makes the claim), the claim is reserved for the pod, and the pod runs. A
// Node stopped and deleted loses its slice (the garbage collector, by the owner reference); started again,
// it registers a new Node, whose slice is published and owned by the new Node. The simulation restarted with 3
// GPUs per Node updates the slices in place.
func TestSimulateDevices(t *testing.T) {
	t.Parallel()
	const (
		nodes  = 2
		prefix = "dev-"
		ns     = "sim-devices"
		driver = "gpu.example.com"
	)
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cp := startSchedulingControlPlane(sctx, t, framework.ControlPlaneOptions{}, []string{ns}, "garbage-collector-controller", "resourceclaim-controller")
	admin := cp.AdminClient
	tmpl := writeNodeTemplate(t, devicesTemplate)
	// Without access to ResourceSlices the start is refused, naming it.
	bare, err := cp.ServiceAccountKubeconfig(ctx, "nodeagent-devices-bare", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	code, out := runSimulateToExit(t, "--kubeconfig="+bare, "--nodes=2", "--node-name-prefix="+prefix, "--node-template="+tmpl)
	if want := "list resourceslices.resource.k8s.io, watch resourceslices.resource.k8s.io, patch resourceslices.resource.k8s.io, " +
		"delete resourceslices.resource.k8s.io, get resourceclaims.resource.k8s.io; the simulation needs"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("without RBAC for the slices: exit %d, output:\n%s\nwant exit 1 saying %q", code, out, want)
	}

	sim := startTemplatedNodes(ctx, t, cp, prefix, nodes, tmpl)

	// One slice per Node, owned by it.
	uids := map[string]string{}
	for _, name := range []string{"dev-0000", "dev-0001"} {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = string(n.UID)
	}
	bySelector := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorDriver, driver).String()}
	list := &resourcev1.ResourceSliceList{}
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		var err error
		list, err = admin.ResourceV1().ResourceSlices().List(ctx, bySelector)
		return err == nil && len(list.Items) == nodes, err
	})
	if err != nil {
		t.Fatalf("ResourceSlices of %s: %v (have %d)", driver, err, len(list.Items))
	}
	for _, s := range list.Items {
		node := ptr.Deref(s.Spec.NodeName, "")
		if _, ok := uids[node]; !ok {
			t.Errorf("slice %s: spec.nodeName %q, want one of the simulated Nodes", s.Name, node)
			continue
		}
		if s.Spec.Pool.Name != node || s.Spec.Pool.Generation != 1 || s.Spec.Pool.ResourceSliceCount != 1 {
			t.Errorf("slice %s: pool %+v, want name %s, generation 1, resourceSliceCount 1", s.Name, s.Spec.Pool, node)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].APIVersion != "v1" ||
			s.OwnerReferences[0].Name != node || string(s.OwnerReferences[0].UID) != uids[node] {
			t.Errorf("slice %s: ownerReferences %+v, want the Node %s (uid %s)", s.Name, s.OwnerReferences, node, uids[node])
		}
		var names []string
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
			if m := d.Attributes["model"].StringValue; m == nil || *m != "H100" {
				t.Errorf("slice %s device %s: model %v, want H100", s.Name, d.Name, m)
			}
			if r := d.Attributes["resource.kubernetes.io/pcieRoot"].StringValue; r == nil || *r != "pci0000:00" {
				t.Errorf("slice %s device %s: pcieRoot %v, want pci0000:00", s.Name, d.Name, r)
			}
			if q := d.Capacity["memory"].Value; q.String() != "80Gi" {
				t.Errorf("slice %s device %s: capacity memory %s, want 80Gi", s.Name, d.Name, q.String())
			}
		}
		if !slices.Equal(names, []string{"gpu-0", "gpu-1"}) {
			t.Errorf("slice %s: devices %v, want gpu-0 and gpu-1", s.Name, names)
		}
	}

	// The DeviceClass of deploy/, a claim template for 1 GPU, a pod using it.
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", filepath.Join(root, "deploy", "kubernetes", "devices", "deviceclass.yaml")); err != nil {
		t.Fatalf("kubectl apply deploy/kubernetes/devices/deviceclass.yaml: %v\n%s", err, out)
	}
	rct := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: driver}}},
		}}},
	}
	if _, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, rct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}},
			Containers: []corev1.Container{{Name: "train", Image: "example.com/train:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		var err error
		got, err = admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning && len(got.Status.ResourceClaimStatuses) == 1, err
	})
	if err != nil {
		t.Fatalf("pod %s not Running with its claim: %v (%+v)", pod.Name, err, got.Status)
	}
	claimName := ptr.Deref(got.Status.ResourceClaimStatuses[0].ResourceClaimName, "")
	claim, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := claim.Status.Allocation; a == nil || len(a.Devices.Results) != 1 || a.Devices.Results[0].Driver != driver ||
		a.Devices.Results[0].Pool != got.Spec.NodeName || !slices.Contains([]string{"gpu-0", "gpu-1"}, a.Devices.Results[0].Device) {
		t.Errorf("claim %s allocation %+v: want one GPU of %s's pool (the pod's Node)", claimName, a, got.Spec.NodeName)
	}
	if r := claim.Status.ReservedFor; len(r) != 1 || r[0].Name != pod.Name || r[0].UID != got.UID {
		t.Errorf("claim %s reservedFor %+v: want the pod %s", claimName, r, pod.Name)
	}
	t.Logf("pod %s on %s with claim %s: %+v", pod.Name, got.Spec.NodeName, claimName, claim.Status.Allocation.Devices.Results)

	// A Node stopped and deleted: its slice goes with it.
	const gone = "dev-0001"
	sim.mustPost(t, gone, `{"stopped":true}`)
	if err := admin.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		list, err := admin.ResourceV1().ResourceSlices().List(ctx, bySelector)
		if err != nil {
			return false, err
		}
		for _, s := range list.Items {
			if ptr.Deref(s.Spec.NodeName, "") == gone {
				return false, nil
			}
		}
		return len(list.Items) == nodes-1, nil
	})
	if err != nil {
		t.Fatalf("the slice of the deleted Node %s: %v", gone, err)
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, gone, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node %s after its deletion: %v, want NotFound", gone, err)
	}

	// Started again, it registers a new Node (another UID), whose slice is published and owned by it.
	sim.mustPost(t, gone, `{"stopped":false}`)
	var again *resourcev1.ResourceSlice
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, gone, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		list, err := admin.ResourceV1().ResourceSlices().List(ctx, bySelector)
		if err != nil {
			return false, err
		}
		for i, s := range list.Items {
			if ptr.Deref(s.Spec.NodeName, "") == gone && len(s.OwnerReferences) == 1 && s.OwnerReferences[0].UID == n.UID {
				again = &list.Items[i]
			}
		}
		return again != nil && string(n.UID) != uids[gone], nil
	})
	if err != nil {
		t.Fatalf("the slice of %s registered again: %v", gone, err)
	}
	if len(again.Spec.Devices) != 2 || again.Spec.Pool.Name != gone {
		t.Errorf("slice %s of %s registered again: pool %+v, %d devices, want its pool and 2", again.Name, gone, again.Spec.Pool, len(again.Spec.Devices))
	}

	// The simulation restarted with a template of 3 GPUs: the slices are updated in place (the library
	// keeps the generation when one update makes the change), still owned by their Nodes.
	if err := sim.stop(20 * time.Second); err != nil {
		t.Fatalf("nodeagent simulate: %v", err)
	}
	three := strings.Replace(devicesTemplate, "count: 2", "count: 3", 1)
	if err := os.WriteFile(tmpl, []byte(three), 0o600); err != nil {
		t.Fatal(err)
	}
	startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes=2", "--node-name-prefix="+prefix, "--node-template="+tmpl)
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		list, err = admin.ResourceV1().ResourceSlices().List(ctx, bySelector)
		if err != nil || len(list.Items) != nodes {
			return false, err
		}
		for _, s := range list.Items {
			if len(s.Spec.Devices) != 3 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("slices after the restart with 3 GPUs: %v (%d slices)", err, len(list.Items))
	}
	for _, s := range list.Items {
		if s.Spec.Devices[2].Name != "gpu-2" || s.Spec.Pool.Generation != 1 || s.Spec.Pool.ResourceSliceCount != 1 || len(s.OwnerReferences) != 1 {
			t.Errorf("slice %s after the restart: pool %+v, devices %d (third %s), owners %+v", s.Name, s.Spec.Pool, len(s.Spec.Devices), s.Spec.Devices[2].Name, s.OwnerReferences)
		}
	}
}
