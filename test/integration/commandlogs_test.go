package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestCommandLogs (issue 46, item 3): a simulated container's interpreted command writes its log and
// its termination message, through the real API server and kubectl:
//   - kubectl logs of sh -c 'echo hello $POD_NAME; sleep 2; echo bye; exit 1' shows both lines, the
//     downward API's pod name expanded, --timestamps 2 s apart;
//   - a command writing /dev/termination-log has that message in its terminated state;
//   - a FallbackToLogsOnError container that fails has its log's tail as the message.
func TestCommandLogs(t *testing.T) {
	t.Parallel()
	const ns = "command-logs"
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := startSimulatedNode(sctx, t, ns, "cmd-")
	admin := cp.AdminClient

	pod := func(name, script string, policy corev1.TerminationMessagePolicy) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "cmd-0000", RestartPolicy: corev1.RestartPolicyNever,
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", script},
					TerminationMessagePolicy: policy,
					Env:                      []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}},
		}
	}
	for _, p := range []*corev1.Pod{
		pod("echo", `echo hello $POD_NAME; sleep 2; echo bye; exit 1`, ""),
		pod("termfile", `echo out; echo -n "written by the command" > /dev/termination-log; exit 0`, ""),
		pod("fallback", `echo first; echo last >&2; exit 3`, corev1.TerminationMessageFallbackToLogsOnError),
	} {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	terminated := map[string]*corev1.ContainerStateTerminated{}
	err := framework.WaitFor(sctx, 300*time.Millisecond, func() (bool, error) {
		for _, name := range []string{"echo", "termfile", "fallback"} {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
				return false, err
			}
			terminated[name] = p.Status.ContainerStatuses[0].State.Terminated
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := cp.Kubectl(cctx, append([]string{"-n", ns}, args...)...)
		if err != nil {
			t.Fatalf("kubectl %v: %v: %s", args, err, out)
		}
		return out
	}

	t.Run("logs", func(t *testing.T) {
		if got, want := kubectl("logs", "echo"), "hello echo\nbye\n"; got != want {
			t.Errorf("kubectl logs echo: %q, want %q", got, want)
		}
		out := kubectl("logs", "echo", "--timestamps")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 || !strings.HasSuffix(lines[0], " hello echo") || !strings.HasSuffix(lines[1], " bye") {
			t.Fatalf("kubectl logs --timestamps: %q", out)
		}
		t0, err0 := time.Parse(time.RFC3339Nano, strings.Fields(lines[0])[0])
		t1, err1 := time.Parse(time.RFC3339Nano, strings.Fields(lines[1])[0])
		if err0 != nil || err1 != nil || t1.Sub(t0) != 2*time.Second {
			t.Errorf("kubectl logs --timestamps: %q: lines %v apart (%v, %v), want 2s", out, t1.Sub(t0), err0, err1)
		}
		if got, want := kubectl("logs", "echo", "--tail=1"), "bye\n"; got != want {
			t.Errorf("kubectl logs --tail=1: %q, want %q", got, want)
		}
		if e := terminated["echo"]; e.ExitCode != 1 || e.FinishedAt.Sub(e.StartedAt.Time) < 2*time.Second || e.Message != "" {
			t.Errorf("echo: terminated %+v, want exit 1 after 2 s, no message", e)
		}
	})
	t.Run("termination message", func(t *testing.T) {
		if got := terminated["termfile"]; got.ExitCode != 0 || got.Message != "written by the command" {
			t.Errorf("termfile: terminated %+v, want its file's message", got)
		}
		if got := terminated["fallback"]; got.ExitCode != 3 || got.Message != "first\nlast\n" {
			t.Errorf("fallback: terminated %+v, want the log's tail as message", got)
		}
	})
}
