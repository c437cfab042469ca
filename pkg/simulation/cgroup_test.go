package simulation

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func resources(cpuReq, cpuLim, memReq, memLim string) v1.ResourceRequirements {
	var r v1.ResourceRequirements
	set := func(l *v1.ResourceList, name v1.ResourceName, q string) {
		if q == "" {
			return
		}
		if *l == nil {
			*l = v1.ResourceList{}
		}
		(*l)[name] = resource.MustParse(q)
	}
	set(&r.Requests, v1.ResourceCPU, cpuReq)
	set(&r.Limits, v1.ResourceCPU, cpuLim)
	set(&r.Requests, v1.ResourceMemory, memReq)
	set(&r.Limits, v1.ResourceMemory, memLim)
	return r
}

// TestCgroupFilesOfResources: a container's cpu.max, cpu.weight and memory.max as runc writes them from
// the resources the kubelet gives it (the in-place resize specs' expectations: cm.MilliCPUToQuota with
// its 1 ms floor, cm.MilliCPUToShares then runc's shares-to-weight conversion, the memory limit).
func TestCgroupFilesOfResources(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		r                         v1.ResourceRequirements
		cpuMax, weight, memoryMax string
	}{
		{name: "resize with equivalents, before", r: resources("2m", "10m", "", ""), cpuMax: "1000 100000", weight: "1", memoryMax: "max"},
		{name: "resize with equivalents, after: the quota's floor", r: resources("1m", "5m", "", ""), cpuMax: "1000 100000", weight: "1", memoryMax: "max"},
		{name: "one CPU, 128Mi", r: resources("1", "1", "128Mi", "128Mi"), cpuMax: "100000 100000", weight: "100", memoryMax: "134217728"},
		{name: "a limit only: shares of the limit", r: resources("", "250m", "", "200Mi"), cpuMax: "25000 100000", weight: "35", memoryMax: "209715200"},
		{name: "best effort", r: resources("", "", "", ""), cpuMax: "max 100000", weight: "1", memoryMax: "max"},
		{name: "a request only", r: resources("500m", "", "64Mi", ""), cpuMax: "max 100000", weight: "59", memoryMax: "max"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]string{"cpu.max": tc.cpuMax + "\n", "cpu.weight": tc.weight + "\n", "memory.max": tc.memoryMax + "\n"}
			if got := cgroupFiles(tc.r); !maps.Equal(got, want) {
				t.Errorf("cgroupFiles = %q, want %q", got, want)
			}
		})
	}
}

// TestExecCgroupAndUnknownLayer: kubectl exec into a container whose command is not interpreted (the
// resize specs' `grep Cpus_allowed_list /proc/self/status | cut -f2 && sleep 1d`, a pipeline) runs in
// the sandbox against a layer of which nothing is known, with the container's volumes and its cgroup
// files from the resources the runtime has now: after a resize is actuated (status.resources), a
// read sees the new values.
func TestExecCgroupAndUnknownLayer(t *testing.T) {
	s := newCommandSim()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "resize-test", Namespace: "ns", UID: types.UID("uid-resize")},
		Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyOnFailure,
			Volumes: []v1.Volume{{Name: "data", VolumeSource: emptyDir}},
			Containers: []v1.Container{{Name: "c1", Image: "busybox", Command: []string{"/bin/sh"},
				Args:         []string{"-c", "grep Cpus_allowed_list /proc/self/status | cut -f2 && sleep 1d"},
				Resources:    resources("2m", "10m", "", ""),
				VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}}
	ctx := context.Background()
	if err := s.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	s.clk.Step(time.Second)
	if _, err := s.GetPodStatus(ctx, p); err != nil {
		t.Fatal(err)
	}
	resized := p.DeepCopy()
	r := resources("1m", "5m", "", "64Mi")
	resized.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c1", Resources: &r}}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		script string
		stdout string
		errMsg string // ErrExecNotInterpreted with this text
	}{
		{name: "cgroup v2", pod: p, script: "mount -t cgroup2", stdout: "cgroup on /sys/fs/cgroup type cgroup2 (ro,nosuid,nodev,noexec,relatime)\n"},
		{name: "the spec's reads", pod: p, script: "head -n 1 /sys/fs/cgroup/cpu.max; head -n 1 /sys/fs/cgroup/memory.max; head -n 1 /sys/fs/cgroup/cpu.weight", stdout: "1000 100000\nmax\n1\n"},
		{name: "after the resize is actuated", pod: resized, script: "head -n 1 /sys/fs/cgroup/memory.max", stdout: "67108864\n"},
		{name: "its volumes and env", pod: p, script: "echo $HOSTNAME > /data/x; cat /data/x", stdout: "resize-test\n"},
		{name: "a file of its layer is not known", pod: p, script: "cat /tmp/health", errMsg: "reads /tmp/health, a file of the image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, err := s.execInContainer(ctx, tc.pod, "c1", []string{"/bin/sh", "-c", tc.script})
			if tc.errMsg != "" {
				if !errors.Is(err, ErrExecNotInterpreted) || !strings.Contains(err.Error(), tc.errMsg) {
					t.Fatalf("exec: %v, want not interpreted: %s", err, tc.errMsg)
				}
				return
			}
			if err != nil || string(res.Stdout) != tc.stdout || res.ExitCode != 0 {
				t.Errorf("exec: %q %q %d %v, want %q", res.Stdout, res.Stderr, res.ExitCode, err, tc.stdout)
			}
		})
	}
}
