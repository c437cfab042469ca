package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/simulation"
	"github.com/nodeagent/nodeagent/test/framework"
)

// claimsTemplate gives every simulated Node 2 GPUs of gpu.example.com whose CDI spec names them in
// NVIDIA_VISIBLE_DEVICES.
const claimsTemplate = `apiVersion: v1
kind: Node
devices:
  drivers:
  - driver: gpu.example.com
    env: NVIDIA_VISIBLE_DEVICES
    devices:
    - name: gpu-{index}
      count: 2
      attributes:
        model: {string: H100}
`

// TestSimulateDeviceClaims (issue 49, item 3): the kubelet's side of claims on simulated Nodes, with the
// real kube-scheduler (its DynamicResources plugin) and kube-controller-manager (resourceclaim and
// device-taint-eviction controllers), 2 Nodes of 2 GPUs:
//   - a pod whose claim template asks for 2 GPUs runs with both in NVIDIA_VISIBLE_DEVICES (its command
//     writes the variable to its termination message) and its claim is released once it has exited;
//   - a pod with the prepare-error annotation waits ContainerCreating with the kubelet's Warning Event
//     FailedPrepareDynamicResources naming its claim; the annotation removed, it runs;
//   - one ResourceClaim shared by two pods: both run on the Node of its device, reserved for both;
//   - a Deployment of 2 pods of 2 GPUs each with 3 GPUs left: one runs, with allocatedResourcesStatus
//     claim:gpu Healthy for both devices, the other stays Pending with the scheduler's reason;
//   - a device marked Unhealthy through the control API flips the running pod's allocatedResourcesStatus;
//   - a DeviceTaintRule with NoExecute on that device has the device-taint eviction controller evict it;
//   - a Node's own devices through the control API (POST .../slices): its slice lists only those, then all.
func TestSimulateDeviceClaims(t *testing.T) {
	t.Parallel()
	const (
		prefix = "claim-"
		ns     = "sim-claims"
		driver = "gpu.example.com"
	)
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cp := startSchedulingControlPlane(sctx, t, framework.ControlPlaneOptions{}, []string{ns}, "garbage-collector-controller",
		"resourceclaim-controller", "device-taint-eviction-controller", "replicaset-controller", "deployment-controller")
	admin := cp.AdminClient
	sim := startTemplatedNodes(ctx, t, cp, prefix, 2, writeNodeTemplate(t, claimsTemplate))
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", filepath.Join(root, "deploy", "kubernetes", "devices", "deviceclass.yaml")); err != nil {
		t.Fatalf("kubectl apply deviceclass.yaml: %v\n%s", err, out)
	}
	gpus := func(n int64) resourcev1.ResourceClaimSpec {
		return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: driver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n}}}}}
	}
	if _, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "two-gpus", Namespace: ns}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: gpus(2)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podSpec := func(claim corev1.PodResourceClaim, script string) corev1.PodSpec {
		return corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{claim}, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "train", Image: "example.com/train:1", Command: []string{"sh", "-c", script},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim.Name}}}}},
		}
	}
	fromTemplate := corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("two-gpus")}
	waitPod := func(name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		var p *corev1.Pod
		err := framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
			var err error
			p, err = admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && ok(p), err
		})
		if err != nil {
			t.Fatalf("pod %s %s: %v (status %+v)", name, what, err, p.Status)
		}
		return p
	}
	claimsGone := func(what string) {
		t.Helper()
		err := framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
			l, err := admin.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, err
		})
		if err != nil {
			t.Fatalf("claims after %s: %v", what, err)
		}
	}

	// 1. Both GPUs in the environment.
	env := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "env", Namespace: ns},
		Spec: podSpec(fromTemplate, `echo -n "$NVIDIA_VISIBLE_DEVICES" > /dev/termination-log`)}
	env.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, env, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod("env", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
		!slices.Contains([]string{"gpu-0,gpu-1", "gpu-1,gpu-0"}, cs[0].State.Terminated.Message) {
		t.Errorf("env: container statuses %+v, want NVIDIA_VISIBLE_DEVICES=gpu-0,gpu-1 in the termination message", cs)
	}
	if err := admin.CoreV1().Pods(ns).Delete(ctx, "env", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	claimsGone("the env pod")

	// 2. A prepare failure: the kubelet's Event, the pod waits; without the annotation it runs.
	fail := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fail", Namespace: ns,
		Annotations: map[string]string{simulation.AnnotationPrepareError: "simulated XID 79"}},
		Spec: podSpec(fromTemplate, "sleep 100000")}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, fail, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = waitPod("fail", "bound with its claim", func(p *corev1.Pod) bool {
		return p.Spec.NodeName != "" && len(p.Status.ResourceClaimStatuses) == 1 && len(p.Status.ContainerStatuses) == 1
	})
	claimName := ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, "")
	wantMsg := "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim " + claimName + ": simulated XID 79"
	waitEvent(sctx, t, admin, ns, "fail", "FailedPrepareDynamicResources", wantMsg)
	p, err = admin.CoreV1().Pods(ns).Get(ctx, "fail", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := p.Status.ContainerStatuses; p.Status.Phase != corev1.PodPending || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("fail: phase %s, containers %+v, want Pending, ContainerCreating", p.Status.Phase, cs)
	}
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, "fail", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+simulation.AnnotationPrepareError+`":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod("fail", "Running without the annotation", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if err := admin.CoreV1().Pods(ns).Delete(ctx, "fail", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	claimsGone("the fail pod")

	// 3. One claim shared by two pods.
	if _, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns}, Spec: gpus(1)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shared := corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("shared")}
	for _, name := range []string{"share-a", "share-b"} {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: podSpec(shared, "sleep 100000")}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a := waitPod("share-a", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	b := waitPod("share-b", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	sc, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Spec.NodeName != b.Spec.NodeName || len(sc.Status.ReservedFor) != 2 || sc.Status.Allocation.Devices.Results[0].Pool != a.Spec.NodeName {
		t.Errorf("shared claim: pods on %s and %s, reservedFor %+v, allocation %+v; want both on the device's Node, reserved for both",
			a.Spec.NodeName, b.Spec.NodeName, sc.Status.ReservedFor, sc.Status.Allocation)
	}

	// 4. A Deployment of 2 pods of 2 GPUs with 3 left: one runs, one Pending.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "trainers", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "trainers"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "trainers"}},
			Spec: podSpec(fromTemplate, "sleep 100000")}}}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running, pending *corev1.Pod
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=trainers"})
		if err != nil {
			return false, err
		}
		running, pending = nil, nil
		for i := range l.Items {
			p := &l.Items[i]
			switch {
			case p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && len(p.Status.ContainerStatuses[0].AllocatedResourcesStatus) == 1:
				running = p
			case p.Status.Phase == corev1.PodPending && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
			}):
				pending = p
			}
		}
		return running != nil && pending != nil, nil
	})
	if err != nil {
		t.Fatalf("trainers: want one Running with its devices' health and one Pending Unschedulable: %v (running %v, pending %v)", err, running != nil, pending != nil)
	}
	for _, c := range pending.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			t.Logf("pending %s: %s: %s", pending.Name, c.Reason, c.Message)
			if !strings.Contains(c.Message, "claim") {
				t.Errorf("pending %s: PodScheduled message %q, want the scheduler's DRA reason (claims)", pending.Name, c.Message)
			}
		}
	}
	rs := running.Status.ContainerStatuses[0].AllocatedResourcesStatus[0]
	if rs.Name != "claim:gpu" || len(rs.Resources) != 2 || rs.Resources[0].Health != corev1.ResourceHealthStatusHealthy || rs.Resources[1].Health != corev1.ResourceHealthStatusHealthy {
		t.Errorf("running %s: allocatedResourcesStatus %+v, want claim:gpu with 2 Healthy devices", running.Name, rs)
	}
	device := strings.TrimPrefix(string(rs.Resources[0].ResourceID), driver+"/"+running.Spec.NodeName+"/")
	t.Logf("running %s on %s: %+v", running.Name, running.Spec.NodeName, rs)

	// 5. The device Unhealthy through the control API: the pod's status says so.
	code, body, err := sim.postPath(ctx, "nodes/"+running.Spec.NodeName+"/devices",
		fmt.Sprintf(`{"driver":%q,"device":%q,"health":"Unhealthy","message":"XID 79"}`, driver, device))
	if err != nil || code != http.StatusOK {
		t.Fatalf("POST devices: %d %s %v", code, body, err)
	}
	var answer struct{ Pods []string }
	if err := json.Unmarshal([]byte(body), &answer); err != nil || !slices.Equal(answer.Pods, []string{ns + "/" + running.Name}) {
		t.Errorf("POST devices answered %s (%v), want the pod %s", body, err, running.Name)
	}
	waitPod(running.Name, "with the device Unhealthy", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || len(cs[0].AllocatedResourcesStatus) != 1 {
			return false
		}
		for _, r := range cs[0].AllocatedResourcesStatus[0].Resources {
			if strings.HasSuffix(string(r.ResourceID), "/"+device) {
				return r.Health == corev1.ResourceHealthStatusUnhealthy && ptr.Deref(r.Message, "") == "XID 79"
			}
		}
		return false
	})

	// 6. A DeviceTaintRule NoExecute on the device: the device-taint eviction controller evicts the pod.
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "bad-gpu"}, Spec: resourcev1.DeviceTaintRuleSpec{
		DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(driver), Pool: ptr.To(running.Spec.NodeName), Device: ptr.To(device)},
		Taint:          resourcev1.DeviceTaint{Key: "example.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute}}}
	if _, err := admin.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, running.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("pod %s on the tainted device: %v, want evicted (gone)", running.Name, err)
	}

	// 7. A Node's own devices through the control API: its slice lists only gpu-1, then all again.
	sliceDevices := func(node string) []string {
		l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorNodeName, node).String()})
		if err != nil || len(l.Items) != 1 {
			return nil
		}
		var names []string
		for _, d := range l.Items[0].Spec.Devices {
			names = append(names, d.Name)
		}
		return names
	}
	for _, tc := range []struct{ body, want string }{
		{`{"driver":"gpu.example.com","devices":["gpu-1"]}`, "gpu-1"},
		{`{"driver":"gpu.example.com","devices":null}`, "gpu-0,gpu-1"},
	} {
		if code, body, err := sim.postPath(ctx, "nodes/"+prefix+"0001/slices", tc.body); err != nil || code != http.StatusOK {
			t.Fatalf("POST slices %s: %d %s %v", tc.body, code, body, err)
		}
		var got []string
		wctx, wcancel := context.WithTimeout(sctx, 30*time.Second)
		err := framework.WaitFor(wctx, 250*time.Millisecond, func() (bool, error) {
			got = sliceDevices(prefix + "0001")
			return strings.Join(got, ",") == tc.want, nil
		})
		wcancel()
		if err != nil {
			t.Errorf("after POST slices %s: devices %q, want %s", tc.body, got, tc.want)
		}
	}
}

// waitEvent waits up to a minute for a Warning Event of pod name with reason and message.
func waitEvent(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name, reason, message string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sel := fields.OneTermEqualSelector("involvedObject.name", name).String()
	var seen []string
	err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		l, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range l.Items {
			seen = append(seen, e.Type+" "+e.Reason+" "+e.Message)
			if e.Reason == reason && e.Type == corev1.EventTypeWarning && e.Message == message {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Event %s %q of %s: %v; have %q", reason, message, name, err, seen)
	}
}
