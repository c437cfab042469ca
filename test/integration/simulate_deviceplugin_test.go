package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/simulation"
	"github.com/nodeagent/nodeagent/test/framework"
)

// pluginTemplate gives every simulated Node 4 nvidia.com/gpu of a device plugin whose Allocate
// response sets NVIDIA_VISIBLE_DEVICES.
const pluginTemplate = `apiVersion: v1
kind: Node
status:
  capacity: {nvidia.com/gpu: "4"}
devices:
  plugins:
  - resource: nvidia.com/gpu
    env: NVIDIA_VISIBLE_DEVICES
`

// TestSimulateDevicePlugin (issue 49, item 1): device-plugin resources on a simulated Node, with the
// real kube-scheduler, allocated by the kubelet's device manager's rules:
//   - a pod whose init container takes 1 GPU and whose container takes 2 sees gpu-0 and gpu-0,gpu-1 (the
//     init container's device reused), in NVIDIA_VISIBLE_DEVICES, echoed to its log;
//   - while it runs, the Node's state in the control API shows its container's devices and 2 free;
//   - a second pod of 2 GPUs gets the 2 others; the first deleted, a third gets its devices back.
func TestSimulateDevicePlugin(t *testing.T) {
	t.Parallel()
	const (
		prefix = "plugin-"
		ns     = "sim-plugin"
	)
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cp := startSchedulingControlPlane(sctx, t, framework.ControlPlaneOptions{}, []string{ns})
	admin := cp.AdminClient
	sim := startTemplatedNodes(ctx, t, cp, prefix, 1, writeNodeTemplate(t, pluginTemplate),
		kubeletAPIArgs(cp, hostAddress(t), framework.FreePort())...) // the kubelet API: kubectl logs
	node := prefix + "0000"

	gpus := func(n string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}
	}
	newPod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			InitContainers: []corev1.Container{{Name: "init", Image: "example.com/init:1", Resources: gpus("1"),
				Command: []string{"sh", "-c", `echo "init $NVIDIA_VISIBLE_DEVICES"`}}},
			Containers: []corev1.Container{{Name: "train", Image: "example.com/train:1", Resources: gpus("2"),
				Command: []string{"sh", "-c", `echo "train $NVIDIA_VISIBLE_DEVICES"; sleep 100000`}}},
		}}
	}
	running := func(name string) {
		t.Helper()
		err := framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
		if err != nil {
			t.Fatalf("pod %s Running: %v", name, err)
		}
	}
	logOf := func(name, ctr, want string) {
		t.Helper()
		out, err := cp.Kubectl(ctx, "logs", "-n", ns, name, "-c", ctr)
		if err != nil || string(out) != want {
			t.Errorf("kubectl logs %s -c %s: %q (%v), want %q", name, ctr, out, err, want)
		}
	}

	// 1. The init container's device reused, in the env.
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, newPod("first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running("first")
	logOf("first", "init", "init gpu-0\n")
	logOf("first", "train", "train gpu-0,gpu-1\n")

	// 2. The Node's state shows the allocation.
	resp, err := http.Get(sim.base + simulation.Path + "nodes/" + node)
	if err != nil {
		t.Fatal(err)
	}
	var st simulation.NodeState
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if d := st.DevicePlugins; len(d) != 1 || d[0].Free != 2 || len(d[0].Allocated) != 2 ||
		len(d[0].Allocated[ns+"/first/train"]) != 2 || len(d[0].Allocated[ns+"/first/init"]) != 1 {
		t.Errorf("node state devicePlugins %+v, want first/init gpu-0, first/train gpu-0,gpu-1, 2 free", d)
	}

	// 3. The others to a second pod; the first's back to a third once it is deleted.
	second := newPod("second")
	second.Spec.InitContainers = nil
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running("second")
	logOf("second", "train", "train gpu-2,gpu-3\n")
	if err := admin.CoreV1().Pods(ns).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("first pod gone: %v", err)
	}
	third := newPod("third")
	third.Spec.InitContainers = nil
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, third, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running("third")
	logOf("third", "train", "train gpu-0,gpu-1\n")
}
