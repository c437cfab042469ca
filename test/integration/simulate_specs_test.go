package integration_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestSimulateServiceLinksSubPathReadOnly is issue 46's last sig-node specs on a real control plane
// (the simulator with its admin identity): a pod's env has the service links of its namespace's
// Service and of default/kubernetes (LISTed from the API server: the field selector of the master
// service); a subPathExpr expanding to an absolute path keeps the container in
// CreateContainerConfigError with the kubelet's message; with readOnlyRootFilesystem a redirection
// into the container's layer fails with busybox's "Read-only file system" line.
func TestSimulateServiceLinksSubPathReadOnly(t *testing.T) {
	t.Parallel()
	const (
		prefix = "specs-"
		ns     = "sim-specs"
		node   = prefix + "0000"
	)
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(t.TempDir(), "cp"), ControllerManager: true,
		ExtraControllerManagerArgs: []string{"--controllers=nodeipam",
			"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24"},
	})
	admin := cp.AdminClient
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	svc, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "fooservice"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8765, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var master *corev1.Service
	if err := framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
		master, err = admin.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes=1", "--node-name-prefix="+prefix)
	waitNodesReady(ctx, t, admin, sim, 1, 2*time.Minute)

	pod := func(name string, ctr corev1.Container) *corev1.Pod {
		ctr.Name, ctr.Image = "c", "busybox:1.37"
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{ctr},
				Volumes: []corev1.Volume{{Name: "workdir1", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
	}
	for _, tc := range []struct {
		pod *corev1.Pod
		// done tells the container's state wanted.
		want string
		done func(cs corev1.ContainerStatus) (string, bool)
	}{
		{pod: pod("links", corev1.Container{Command: []string{"sh", "-c",
			"printenv FOOSERVICE_SERVICE_HOST FOOSERVICE_PORT_8765_TCP KUBERNETES_SERVICE_HOST > /dev/termination-log"}}),
			want: fmt.Sprintf("%s\ntcp://%s:8765\n%s\n", svc.Spec.ClusterIP, svc.Spec.ClusterIP, master.Spec.ClusterIP),
			done: terminatedMessage},
		{pod: pod("subpath", corev1.Container{Command: []string{"sh", "-c", "true"},
			Env:          []corev1.EnvVar{{Name: "POD_NAME", Value: "/tmp"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "workdir1", MountPath: "/logscontainer", SubPathExpr: "$(POD_NAME)"}}}),
			want: "CreateContainerConfigError: error SubPath `/tmp` must not be an absolute path",
			done: func(cs corev1.ContainerStatus) (string, bool) {
				if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" {
					return w.Reason + ": " + w.Message, true
				}
				return "", false
			}},
		{pod: pod("readonly", corev1.Container{Command: []string{"/bin/sh", "-c", "{ echo test > /file; } 2> /dev/termination-log"},
			SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}}),
			want: "/bin/sh: can't create /file: Read-only file system\n", done: terminatedMessage},
	} {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, tc.pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got string
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		err := framework.WaitFor(wctx, 250*time.Millisecond, func() (bool, error) {
			p, err := admin.CoreV1().Pods(ns).Get(wctx, tc.pod.Name, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 {
				return false, nil
			}
			var ok bool
			got, ok = tc.done(p.Status.ContainerStatuses[0])
			return ok, nil
		})
		wcancel()
		if err != nil {
			t.Fatalf("pod %s: %v", tc.pod.Name, err)
		}
		if got != tc.want {
			t.Errorf("pod %s: %q, want %q", tc.pod.Name, got, tc.want)
		}
	}
}

// terminatedMessage is a terminated container's termination message.
func terminatedMessage(cs corev1.ContainerStatus) (string, bool) {
	if term := cs.State.Terminated; term != nil {
		return term.Message, true
	}
	return "", false
}
