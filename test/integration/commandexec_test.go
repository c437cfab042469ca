package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestCommandExec (issue 46, item 2): a simulated container's run as the kubelet makes and serves it,
// through the real API server and kubectl:
//   - its env from a ConfigMap and a Secret (valueFrom and envFrom with a prefix) and a resource field,
//     and ConfigMap and Secret volumes, as its command prints them to its log;
//   - kubectl exec runs in its sandbox against the files its command wrote, with its env, and an
//     exec's rm is seen by the next exec;
//   - an exec liveness probe `cat /tmp/health` restarts the container once its command removed the file
//     (the conformance spec);
//   - a container whose env names a ConfigMap that does not exist waits with CreateContainerConfigError
//     and the kubelet's message, and starts once the ConfigMap is created;
//   - a preStop exec hook `sleep 3` delays the SIGTERM of a pod deleted with a grace period of 30 s: it
//     is gone after 3 s and well before 30 s; one that exits non-zero is told (FailedPreStopHook).
func TestCommandExec(t *testing.T) {
	t.Parallel()
	const ns = "command-exec"
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := startSimulatedNode(sctx, t, ns, "exec-")
	admin := cp.AdminClient
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
		Data: map[string]string{"a": "from-cm", "b": "bee"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Data: map[string][]byte{"pw": []byte("hunter2")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cmKey := func(name, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
	}
	pod := func(name, script string, change func(*corev1.Container)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "exec-0000", RestartPolicy: corev1.RestartPolicyAlways,
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Volumes: []corev1.Volume{
					{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
					{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", script}}}},
		}
		if change != nil {
			change(&p.Spec.Containers[0])
		}
		return p
	}
	files := pod("files", `echo A=$A PW=$PW B=$P_b MEM=$MEM; cat /etc/cm/a; echo; cat /etc/sec/pw; echo; echo ok > /tmp/health; sleep 3600`, func(c *corev1.Container) {
		c.Env = []corev1.EnvVar{{Name: "A", ValueFrom: cmKey("cm", "a")},
			{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "pw"}}},
			{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}}}
		c.EnvFrom = []corev1.EnvFromSource{{Prefix: "P_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "cm", MountPath: "/etc/cm"}, {Name: "sec", MountPath: "/etc/sec"}}
	})
	liveness := pod("liveness", "echo ok >/tmp/health; sleep 10; rm -rf /tmp/health; sleep 600", func(c *corev1.Container) {
		c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/health"}}},
			InitialDelaySeconds: 15, FailureThreshold: 1, PeriodSeconds: 5}
	})
	missing := pod("missing", `echo $LATE; sleep 3600`, func(c *corev1.Container) {
		c.Env = []corev1.EnvVar{{Name: "LATE", ValueFrom: cmKey("late", "k")}}
	})
	for _, p := range []*corev1.Pod{files, liveness, missing} {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string) corev1.ContainerStatus {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			return corev1.ContainerStatus{}
		}
		return p.Status.ContainerStatuses[0]
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		if err := framework.WaitFor(sctx, 300*time.Millisecond, func() (bool, error) { return cond(), nil }); err != nil {
			pods, _ := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			for _, p := range pods.Items {
				t.Logf("pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			}
			events, _ := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
			for _, e := range events.Items {
				t.Logf("event %s %s %s: %s", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
			}
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	kubectl := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return cp.Kubectl(cctx, append([]string{"-n", ns}, args...)...)
	}

	t.Run("env and volumes", func(t *testing.T) {
		wait("files running", func() bool { return status("files").State.Running != nil })
		out, err := kubectl("logs", "files")
		if want := "A=from-cm PW=hunter2 B=bee MEM=64\nfrom-cm\nhunter2\n"; err != nil || out != want {
			t.Errorf("kubectl logs files: %q (%v), want %q", out, err, want)
		}
	})
	t.Run("exec", func(t *testing.T) {
		for _, tc := range []struct {
			args    []string
			want    string
			wantErr bool
		}{
			{[]string{"cat", "/tmp/health"}, "ok\n", false},
			{[]string{"ls", "/etc/cm"}, "a\nb\n", false},
			{[]string{"sh", "-c", "rm /tmp/health && echo removed $A"}, "removed from-cm\n", false},
			{[]string{"cat", "/tmp/health"}, "cat: /tmp/health: No such file or directory\ncommand terminated with exit code 1\n", true}, // kubectl's own line
		} {
			out, err := kubectl(append([]string{"exec", "files", "--"}, tc.args...)...)
			if out != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("kubectl exec %q: %q (%v), want %q (error %v)", tc.args, out, err, tc.want, tc.wantErr)
			}
		}
	})
	t.Run("exec liveness probe", func(t *testing.T) {
		wait("liveness restarted", func() bool { return status("liveness").RestartCount >= 1 })
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "liveness", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := p.Status.ContainerStatuses[0]
		last := cs.LastTerminationState.Terminated
		if last == nil || last.ExitCode != 137 || last.FinishedAt.Sub(last.StartedAt.Time) < 14*time.Second {
			t.Errorf("last termination %+v, want killed (137) at the probe after 15 s", last)
		}
	})
	t.Run("CreateContainerConfigError", func(t *testing.T) {
		wait("missing waiting", func() bool {
			w := status("missing").State.Waiting
			return w != nil && w.Reason == "CreateContainerConfigError"
		})
		if w := status("missing").State.Waiting; w.Message != `configmap "late" not found` {
			t.Errorf("waiting %+v", w)
		}
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"},
			Data: map[string]string{"k": "arrived"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		wait("missing running", func() bool { return status("missing").State.Running != nil })
		if out, err := kubectl("logs", "missing"); err != nil || out != "arrived\n" {
			t.Errorf("kubectl logs missing: %q (%v)", out, err)
		}
		events, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=missing,reason=Failed"})
		if err != nil || len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, `Error: configmap "late" not found`) {
			t.Errorf("Failed Events %v (%v)", events, err)
		}
	})
	t.Run("preStop exec", func(t *testing.T) {
		preStop := func(name string, hook ...string) *corev1.Pod {
			p := pod(name, "sleep 3600", func(c *corev1.Container) {
				c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: hook}}}
			})
			p.Spec.ShareProcessNamespace = ptr.To(true) // the shell is not PID 1: the SIGTERM ends it
			return p
		}
		for _, p := range []*corev1.Pod{preStop("prestop", "sleep", "3"), preStop("prestop-fails", "sh", "-c", "echo secret; exit 1")} {
			if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		wait("prestop running", func() bool {
			return status("prestop").State.Running != nil && status("prestop-fails").State.Running != nil
		})
		gone := func(name string) bool {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}
		deleted := time.Now()
		for _, name := range []string{"prestop", "prestop-fails"} {
			if err := admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
				t.Fatal(err)
			}
		}
		wait("prestop gone", func() bool { return gone("prestop") })
		took := time.Since(deleted)
		t.Logf("the pod with a preStop sleep 3 was gone %v after its deletion (grace 30 s)", took)
		if took < 3*time.Second || took > 15*time.Second {
			t.Errorf("the pod with a preStop sleep 3 was gone %v after its deletion (grace 30 s), want 3 s to 15 s", took)
		}
		wait("prestop-fails gone", func() bool { return gone("prestop-fails") })
		events, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=prestop-fails,reason=FailedPreStopHook"})
		if err != nil || len(events.Items) != 1 || events.Items[0].Message != "PreStopHook failed" || events.Items[0].Type != corev1.EventTypeWarning {
			t.Errorf("FailedPreStopHook Events %+v (%v), want one Warning \"PreStopHook failed\"", events, err)
		}
	})
}
