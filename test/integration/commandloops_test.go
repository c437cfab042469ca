package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestCommandLoopsAndCgroup (issue 46, h-loops): through the real API server, scheduler-free pods on one
// simulated Node and kubectl:
//   - the Ephemeral Containers specs' `while true; do echo polo; sleep 2; done` runs (a loop that sleeps
//     runs until stopped): its log has polo from its start, and exec answers in it;
//   - `tail -f /dev/null` runs, and exec writes and reads a file through the container's volume;
//   - the in-place resize specs' container, whose command is a pipeline (not interpreted), answers exec
//     `head -n 1 /sys/fs/cgroup/cpu.max` from its resources, and after a resize through the pods/resize
//     subresource, once the agent actuated it, from the new ones.
func TestCommandLoopsAndCgroup(t *testing.T) {
	t.Parallel()
	const ns = "command-loops"
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := startSimulatedNode(sctx, t, ns, "loops-")
	admin := cp.AdminClient

	pod := func(name string, command []string, res corev1.ResourceRequirements) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "loops-0000", RestartPolicy: corev1.RestartPolicyAlways,
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Volumes:     []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: command, Resources: res,
					VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/v"}}}}}}
	}
	cpu := func(req, lim string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req)},
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(lim)}}
	}
	for _, p := range []*corev1.Pod{
		pod("loop", []string{"/bin/sh", "-c", "while true; do echo polo; sleep 2; done"}, corev1.ResourceRequirements{}),
		pod("tail", []string{"sh", "-c", "tail -f /dev/null"}, corev1.ResourceRequirements{}),
		pod("resize", []string{"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status | cut -f2 && sleep 1d"}, cpu("100m", "200m")),
	} {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubectl := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return cp.Kubectl(cctx, append([]string{"-n", ns}, args...)...)
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		if err := framework.WaitFor(sctx, 300*time.Millisecond, func() (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	running := func(name string) bool {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}
	for _, name := range []string{"loop", "tail", "resize"} {
		wait(name+" running", func() bool { return running(name) })
	}

	t.Run("a loop that sleeps", func(t *testing.T) {
		var out string
		wait("two polo lines", func() bool { out, _ = kubectl("logs", "loop"); return strings.Count(out, "polo\n") >= 2 })
		if strings.Trim(strings.ReplaceAll(out, "polo\n", ""), "\n") != "" {
			t.Errorf("kubectl logs loop: %q, want polo lines only", out)
		}
		if out, err := kubectl("exec", "loop", "--", "/bin/echo", "marco"); err != nil || out != "marco\n" {
			t.Errorf("kubectl exec loop -- /bin/echo marco: %q (%v)", out, err)
		}
	})
	t.Run("tail -f /dev/null", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"touch", "/v/test.log"}, ""},
			{[]string{"test", "-f", "/v/test.log"}, ""},
			{[]string{"head", "-n", "1", "/dev/null"}, ""},
		} {
			if out, err := kubectl(append([]string{"exec", "tail", "--"}, tc.args...)...); err != nil || out != tc.want {
				t.Errorf("kubectl exec tail -- %q: %q (%v), want %q", tc.args, out, err, tc.want)
			}
		}
	})
	t.Run("cgroup files and a resize", func(t *testing.T) {
		cpuMax := func() string {
			out, _ := kubectl("exec", "resize", "--", "/bin/sh", "-c", "head -n 1 /sys/fs/cgroup/cpu.max")
			return out
		}
		if got := cpuMax(); got != "20000 100000\n" {
			t.Errorf("cpu.max %q, want 20000 100000 (200m)", got)
		}
		if out, err := kubectl("exec", "resize", "--", "/bin/sh", "-c", "mount -t cgroup2; head -n 1 /sys/fs/cgroup/cpu.weight"); err != nil ||
			out != "cgroup on /sys/fs/cgroup type cgroup2 (ro,nosuid,nodev,noexec,relatime)\n17\n" {
			t.Errorf("mount -t cgroup2 and cpu.weight: %q (%v), want the cgroup2 mount and 17 (102 shares)", out, err)
		}
		patch := `{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"100m"},"limits":{"cpu":"300m"}}}]}}`
		if _, err := admin.CoreV1().Pods(ns).Patch(ctx, "resize", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
			t.Fatal(err)
		}
		var got string
		wait("cpu.max after the resize", func() bool { got = cpuMax(); return got == "30000 100000\n" })
	})
}
