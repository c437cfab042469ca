package simulation

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/node"
)

const gpu = v1.ResourceName("nvidia.com/gpu")

// gpuPod is a pod on node of the given containers: name=N GPUs (an init container's name starts with
// "init", "side" a restartable one).
func gpuPod(uid, node string, ctrs ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)}, Spec: v1.PodSpec{NodeName: node}}
	always := v1.ContainerRestartPolicyAlways
	for _, c := range ctrs {
		name, n, _ := strings.Cut(c, "=")
		ctr := v1.Container{Name: name}
		if n != "0" {
			ctr.Resources.Limits = v1.ResourceList{gpu: resource.MustParse(n)}
		}
		switch {
		case strings.HasPrefix(name, "init"):
			p.Spec.InitContainers = append(p.Spec.InitContainers, ctr)
		case strings.HasPrefix(name, "side"):
			ctr.RestartPolicy = &always
			p.Spec.InitContainers = append(p.Spec.InitContainers, ctr)
		default:
			p.Spec.Containers = append(p.Spec.Containers, ctr)
		}
	}
	return p
}

func TestDeviceAllocator(t *testing.T) {
	type step struct {
		op   string // allocate, release, inactive (the pod no longer active), restart (a new allocator of capacity n)
		pod  *v1.Pod
		n    int
		err  string
		want map[string]string // container -> IDs comma-joined, after the step
	}
	tests := []struct {
		name  string
		n     int
		steps []step
	}{
		{name: "sorted free devices", n: 4, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=2", "d=1"), want: map[string]string{"c": "gpu-0,gpu-1", "d": "gpu-2"}},
		}},
		{name: "init container's devices reused by the app containers", n: 4, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "init=2", "c=1", "d=2"), want: map[string]string{"init": "gpu-0,gpu-1", "c": "gpu-0", "d": "gpu-1,gpu-2"}},
			{op: "allocate", pod: gpuPod("b", "n0", "c=1"), want: map[string]string{"c": "gpu-3"}},
		}},
		{name: "restartable init container's devices not reused", n: 4, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "side=1", "c=1"), want: map[string]string{"side": "gpu-0", "c": "gpu-1"}},
			{op: "allocate", pod: gpuPod("b", "n1", "init=1", "side=1", "c=1"), want: map[string]string{"init": "gpu-0", "side": "gpu-0", "c": "gpu-1"}},
		}},
		{name: "restarts keep the IDs", n: 4, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=2")},
			{op: "allocate", pod: gpuPod("b", "n0", "c=1")},
			{op: "allocate", pod: gpuPod("a", "n0", "c=2"), want: map[string]string{"c": "gpu-0,gpu-1"}},
			{op: "allocate", pod: gpuPod("b", "n0", "c=1"), want: map[string]string{"c": "gpu-2"}},
		}},
		{name: "no double allocation across pods", n: 3, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=2")},
			{op: "allocate", pod: gpuPod("b", "n0", "c=2"), err: "requested number of devices unavailable for nvidia.com/gpu. Requested: 2, Available: 1"},
			{op: "allocate", pod: gpuPod("c", "n0", "c=1"), want: map[string]string{"c": "gpu-2"}},
			{op: "allocate", pod: gpuPod("d", "n1", "c=3"), want: map[string]string{"c": "gpu-0,gpu-1,gpu-2"}},
		}},
		{name: "a pod that cannot have all holds none", n: 3, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=1")},
			{op: "allocate", pod: gpuPod("b", "n0", "init=1", "c=1", "d=2"), err: "Requested: 2, Available: 1"},
			{op: "allocate", pod: gpuPod("c", "n0", "c=2"), want: map[string]string{"c": "gpu-1,gpu-2"}},
		}},
		{name: "freed when the pod is deleted", n: 2, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=2")},
			{op: "release", pod: gpuPod("a", "n0")},
			{op: "allocate", pod: gpuPod("b", "n0", "c=2"), want: map[string]string{"c": "gpu-0,gpu-1"}},
		}},
		{name: "freed when the pod is terminal (UpdateAllocatedDevices)", n: 2, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=1")},
			{op: "allocate", pod: gpuPod("b", "n0", "c=1")},
			{op: "inactive", pod: gpuPod("a", "n0")},
			{op: "allocate", pod: gpuPod("c", "n0", "c=1"), want: map[string]string{"c": "gpu-0"}},
		}},
		{name: "capacity change: rebuilt from the pods taken up", n: 4, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=2")},
			{op: "allocate", pod: gpuPod("b", "n0", "c=2")},
			{op: "restart", n: 3},
			{op: "allocate", pod: gpuPod("a", "n0", "c=2"), want: map[string]string{"c": "gpu-0,gpu-1"}},
			{op: "allocate", pod: gpuPod("b", "n0", "c=2"), err: "Requested: 2, Available: 1"},
		}},
		{name: "changed request", n: 4, steps: []step{
			{op: "allocate", pod: gpuPod("a", "n0", "c=1")},
			{op: "allocate", pod: gpuPod("a", "n0", "c=2"), err: `changed request for resource "nvidia.com/gpu" from 1 to 2`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inactive := map[types.UID]bool{}
			active := func(_, _ string, uid types.UID) bool { return !inactive[uid] }
			res := func(n int) []pluginResource {
				return []pluginResource{{name: gpu, ids: defaultDeviceIDs(gpu, n), env: "NVIDIA_VISIBLE_DEVICES"}}
			}
			a := newDeviceAllocator(res(tt.n), active)
			for i, st := range tt.steps {
				var err error
				switch st.op {
				case "allocate":
					err = a.allocate(st.pod)
				case "release":
					a.release(st.pod)
				case "inactive":
					inactive[st.pod.UID] = true
				case "restart":
					a = newDeviceAllocator(res(st.n), active)
				}
				if (err == nil) != (st.err == "") || err != nil && !strings.Contains(err.Error(), st.err) {
					t.Fatalf("step %d: error %v, want %q", i, err, st.err)
				}
				for ctr, want := range st.want {
					var got []string
					for _, e := range a.env(st.pod, &v1.Container{Name: ctr, Resources: v1.ResourceRequirements{Limits: v1.ResourceList{gpu: resource.MustParse("1")}}}) {
						got = append(got, e)
					}
					if w := []string{"NVIDIA_VISIBLE_DEVICES=" + want}; !slices.Equal(got, w) {
						t.Errorf("step %d: container %s env %q, want %q", i, ctr, got, w)
					}
				}
			}
		})
	}
}

func TestDevicePluginsTemplate(t *testing.T) {
	const node = "apiVersion: v1\nkind: Node\nstatus:\n  capacity: {nvidia.com/gpu: \"2\", example.com/big: \"5000\"}\n"
	tests := []struct {
		name    string
		devices string
		want    []pluginResource
		err     string
	}{
		{name: "default IDs, no section", want: []pluginResource{{name: gpu, ids: []string{"gpu-0", "gpu-1"}}}},
		{name: "IDs and env", devices: "devices:\n  plugins:\n  - {resource: nvidia.com/gpu, env: NVIDIA_VISIBLE_DEVICES, ids: [GPU-b, GPU-a]}\n",
			want: []pluginResource{{name: gpu, ids: []string{"GPU-a", "GPU-b"}, env: "NVIDIA_VISIBLE_DEVICES"}}},
		{name: "not in capacity", devices: "devices:\n  plugins:\n  - {resource: example.com/fpga}\n",
			err: `devices.plugins[0].resource "example.com/fpga": must be an extended resource of status.capacity`},
		{name: "too many devices", devices: "devices:\n  plugins:\n  - {resource: example.com/big}\n",
			err: `devices.plugins[0].resource "example.com/big": capacity 5000: a device plugin's resource has at most 1024 devices`},
		{name: "IDs not the capacity", devices: "devices:\n  plugins:\n  - {resource: nvidia.com/gpu, ids: [a]}\n",
			err: `devices.plugins[0].ids "1": must list as many device IDs as status.capacity[nvidia.com/gpu], 2`},
		{name: "duplicate ID", devices: "devices:\n  plugins:\n  - {resource: nvidia.com/gpu, ids: [a, a]}\n",
			err: `devices.plugins[0].ids[1] "a": same device ID as ids[0]`},
		{name: "comma in ID", devices: "devices:\n  plugins:\n  - {resource: nvidia.com/gpu, ids: [a, \"b,c\"]}\n",
			err: `devices.plugins[0].ids[1] "b,c": must be 1 to 256 characters without commas or blanks`},
		{name: "bad env", devices: "devices:\n  plugins:\n  - {resource: nvidia.com/gpu, env: 1X}\n",
			err: `devices.plugins[0].env "1X": must be an environment variable name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := ParseTemplate([]byte(node + tt.devices))
			if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			if err != nil {
				return
			}
			got := tmpl.devicePlugins()
			if len(got) != len(tt.want) {
				t.Fatalf("plugins %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i].name != tt.want[i].name || got[i].env != tt.want[i].env || !slices.Equal(got[i].ids, tt.want[i].ids) {
					t.Errorf("plugin %d: %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestPodActive: the allocator's activePods over the informer.
func TestPodActive(t *testing.T) {
	now := metav1.Now()
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, node.PodIndexers())
	for _, p := range []*v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "running", UID: "u1"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending", UID: "u2"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "succeeded", UID: "u3"}, Status: v1.PodStatus{Phase: v1.PodSucceeded}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "failed", UID: "u4"}, Status: v1.PodStatus{Phase: v1.PodFailed}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "deleting", UID: "u5", DeletionTimestamp: &now}, Status: v1.PodStatus{Phase: v1.PodRunning}},
	} {
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	active := podActive(node.IndexedPodLister{Indexer: pods})
	tests := []struct {
		name string
		uid  types.UID
		want bool
	}{
		{"running", "u1", true},
		{"pending", "u2", true},
		{"succeeded", "u3", false},
		{"failed", "u4", false},
		{"deleting", "u5", false},
		{"running", "other", false}, // another pod under the name
		{"gone", "u6", false},
	}
	for _, tt := range tests {
		if got := active("ns", tt.name, tt.uid); got != tt.want {
			t.Errorf("active(%s, %s) = %v, want %v", tt.name, tt.uid, got, tt.want)
		}
	}
}
