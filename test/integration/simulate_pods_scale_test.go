//go:build scale

package integration_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestSimulatePodsScale measures `nodeagent simulate` running pods: $SIMULATE_PODS_NODES Nodes (default
// 100) and a Deployment of $SIMULATE_PODS (default 10000) replicas, with the real kube-scheduler and
// kube-controller-manager (deployment, replicaset, nodeipam with pod CIDRs): the time from the
// Deployment's creation until it is Available; then, with every pod running, the simulator's heap after
// GC and its RSS against the same process without pods, per pod, and its CPU over $SIMULATE_SCALE_WINDOW
// (default 60s); then the time from the scale to 0 until every pod is gone, and the simulator's CPU
// seconds per 1000 pod starts and deletes. Run it alone with make bench-sim-pods (build tag scale, not
// part of make test).
func TestSimulatePodsScale(t *testing.T) {
	nodes, pods := envInt(t, "SIMULATE_PODS_NODES", 100), envInt(t, "SIMULATE_PODS", 10000)
	window := envDuration(t, "SIMULATE_SCALE_WINDOW", 60*time.Second)
	ctx := t.Context()
	cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(t.TempDir(), "cp"), ControllerManager: true,
		ExtraControllerManagerArgs: []string{"--kube-api-qps=1000", "--kube-api-burst=2000",
			"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
			"--controllers=deployment,replicaset,podgc,garbagecollector",
			"--allocate-node-cidrs=true", "--cluster-cidr=172.16.0.0/12", "--node-cidr-mask-size=24"},
	})
	if err := cp.StartScheduler(ctx, "--kube-api-qps=1000", "--kube-api-burst=2000"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.StopScheduler() })
	admin := cp.AdminClient
	const ns = "scale"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes="+strconv.Itoa(nodes), "--node-name-prefix=scale-",
		"--enable-profiling-handler", "-v=1")
	waitNodesReady(ctx, t, admin, sim, nodes, 5*time.Minute)
	time.Sleep(20 * time.Second)
	idle, err := readMemStats(ctx, sim.base)
	if err != nil {
		t.Fatal(err)
	}
	idleProc, _ := framework.ReadProcStats(sim.pid)
	cpuStart, _ := cpuSeconds(sim.pid)

	labels := map[string]string{"app": "scale"}
	created := time.Now()
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(pods)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers:                   []corev1.Container{{Name: "c", Image: "registry.example/app:1"}},
			}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, 2*time.Second, func() (bool, error) {
		d, err := admin.AppsV1().Deployments(ns).Get(ctx, "scale", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if time.Since(created) > 15*time.Minute {
			return false, fmt.Errorf("%d of %d available after 15 min: %w", d.Status.AvailableReplicas, pods, framework.ErrStop)
		}
		return d.Status.AvailableReplicas == int32(pods), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	available := time.Since(created)
	cpuUp, _ := cpuSeconds(sim.pid)
	t.Logf("%d pods on %d Nodes: Deployment Available %v after its creation; simulator CPU %.1f s for the starts (%.2f CPU-s per 1000 pod starts)",
		pods, nodes, available.Round(100*time.Millisecond), cpuUp-cpuStart, (cpuUp-cpuStart)*1000/float64(pods))
	time.Sleep(20 * time.Second)
	loaded, err := readMemStats(ctx, sim.base)
	if err != nil {
		t.Fatal(err)
	}
	loadedProc, _ := framework.ReadProcStats(sim.pid)
	c0, _ := cpuSeconds(sim.pid)
	time.Sleep(window)
	c1, _ := cpuSeconds(sim.pid)
	t.Logf("%d pods running: heap after GC %.1f MiB (%.1f without pods: %.2f KiB per pod), %s (without pods: %s), CPU %.3f cores over %v (steady state)",
		pods, float64(loaded.heapAlloc)/(1<<20), float64(idle.heapAlloc)/(1<<20), float64(loaded.heapAlloc-idle.heapAlloc)/float64(pods)/1024,
		loadedProc, idleProc, (c1-c0)/window.Seconds(), window)

	scale, err := admin.AppsV1().Deployments(ns).GetScale(ctx, "scale", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 0
	if _, err := admin.AppsV1().Deployments(ns).UpdateScale(ctx, "scale", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	scaled := time.Now()
	cpuDown0, _ := cpuSeconds(sim.pid)
	err = framework.WaitFor(ctx, 2*time.Second, func() (bool, error) {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0", LabelSelector: "app=scale"})
		if err != nil {
			return false, err
		}
		if time.Since(scaled) > 15*time.Minute {
			return false, fmt.Errorf("%d pods left 15 min after the scale to 0: %w", len(l.Items), framework.ErrStop)
		}
		return len(l.Items) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cpuDown1, _ := cpuSeconds(sim.pid)
	t.Logf("scaled to 0: every pod gone %v after; simulator CPU %.1f s (%.2f CPU-s per 1000 pod deletes)",
		time.Since(scaled).Round(100*time.Millisecond), cpuDown1-cpuDown0, (cpuDown1-cpuDown0)*1000/float64(pods))
}
