//go:build benchdevices

package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// benchDevicesTemplate is the 8-GPU Node of docs/simulation.md ("Devices"), one driver.
const benchDevicesTemplate = `apiVersion: v1
kind: Node
status:
  capacity: {cpu: "192", memory: 2Ti, pods: "110"}
devices:
  drivers:
  - driver: gpu.example.com
    env: NVIDIA_VISIBLE_DEVICES
    devices:
    - name: gpu-{index}
      count: 8
      attributes:
        model: {string: H100}
        resource.kubernetes.io/pcieRoot: {string: pci0000:00}
      capacity:
        memory: {value: 80Gi}
`

// TestBenchDevices measures what publishing the simulated Nodes' ResourceSlices costs (BENCHMARKS.md,
// "bench-devices"): BENCH_DEVICES_NODES Nodes (default 1000) without and with the 8-GPU template, each on
// a control plane of its own: the time from the start until every Node is Ready and (with devices)
// every slice is published, the API server's resourceslices requests by verb, and the simulator's RSS
// and CPU over a BENCH_DEVICES_WINDOW (default 60 s) after BENCH_DEVICES_SETTLE (default 30 s).
//
//	go test -tags benchdevices -run TestBenchDevices -v -timeout 30m ./test/integration/
func TestBenchDevices(t *testing.T) {
	nodes := envInt(t, "BENCH_DEVICES_NODES", 1000)
	window := envDuration(t, "BENCH_DEVICES_WINDOW", time.Minute)
	settle := envDuration(t, "BENCH_DEVICES_SETTLE", 30*time.Second)
	for _, withDevices := range []bool{false, true} {
		name := map[bool]string{false: "without", true: "with"}[withDevices]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(dir, "cp")})
			body := benchDevicesTemplate
			if !withDevices {
				body, _, _ = strings.Cut(body, "devices:\n")
			}
			tmpl := writeNodeTemplate(t, body)
			before := sliceRequests(ctx, t, cp.AdminClient)
			start := time.Now()
			sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes="+strconv.Itoa(nodes), "--node-name-prefix=bench-", "--node-template="+tmpl)
			var ready, published time.Duration
			err := framework.WaitFor(ctx, time.Second, func() (bool, error) {
				if ready == 0 {
					l, err := cp.AdminClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
					if err != nil {
						return false, err
					}
					n := 0
					for i := range l.Items {
						if framework.IsReady(&l.Items[i]) {
							n++
						}
					}
					if n == nodes {
						ready = time.Since(start)
					}
				}
				if withDevices && published == 0 {
					l, err := cp.AdminClient.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
					if err != nil {
						return false, err
					}
					if len(l.Items) == nodes {
						published = time.Since(start)
					}
				}
				return ready > 0 && (!withDevices || published > 0), nil
			})
			if err != nil {
				t.Fatalf("%d Nodes Ready after %v, slices after %v: %v", nodes, ready, published, err)
			}
			startup := sliceRequests(ctx, t, cp.AdminClient)
			time.Sleep(settle)
			cpu0, err := cpuSeconds(sim.pid)
			if err != nil {
				t.Fatal(err)
			}
			w0 := sliceRequests(ctx, t, cp.AdminClient)
			time.Sleep(window)
			cpu1, err := cpuSeconds(sim.pid)
			if err != nil {
				t.Fatal(err)
			}
			w1 := sliceRequests(ctx, t, cp.AdminClient)
			st, _ := framework.ReadProcStats(sim.pid)
			t.Logf("RESULT %s devices, %d Nodes: all Ready after %.1f s, all slices after %.1f s; resourceslices requests at start-up %v, over the window %v; RSS %.0f MiB, CPU %.2f s per minute",
				name, nodes, ready.Seconds(), published.Seconds(), diff(before, startup), diff(w0, w1), float64(st.RSS)/(1<<20), (cpu1-cpu0)*60/window.Seconds())
			if err := sim.stop(30 * time.Second); err != nil {
				t.Logf("stop: %v", err)
			}
		})
	}
}

// sliceRequests returns the API server's apiserver_request_total for resourceslices, by verb.
func sliceRequests(ctx context.Context, t *testing.T, c kubernetes.Interface) map[string]float64 {
	t.Helper()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := framework.ParseMetrics(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, verb := range []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "LIST", "WATCH", "GET"} {
		out[verb] = m.Sum("apiserver_request_total", map[string]string{"resource": "resourceslices", "verb": verb})
	}
	return out
}

func diff(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// TestBenchDeviceClaims measures pods with claims beside the same pods without (BENCHMARKS.md,
// "DRA devices on simulated Nodes"): BENCH_CLAIMS_NODES Nodes (default 1000) of the 8-GPU template and a
// Deployment of BENCH_CLAIMS_PODS replicas (default 4000), each taking one GPU through a
// ResourceClaimTemplate or none, with the real kube-scheduler and kube-controller-manager (deployment,
// replicaset, resourceclaim, nodeipam), a control plane per row: the time from the Deployment's creation
// until it is Available, and the simulator's CPU for it.
//
//	go test -tags benchdevices -run TestBenchDeviceClaims -v -timeout 60m ./test/integration/
func TestBenchDeviceClaims(t *testing.T) {
	nodes, pods := envInt(t, "BENCH_CLAIMS_NODES", 1000), envInt(t, "BENCH_CLAIMS_PODS", 4000)
	for _, withClaims := range []bool{false, true} {
		name := map[bool]string{false: "without", true: "with"}[withClaims]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{
				Dir: filepath.Join(dir, "cp"), ControllerManager: true,
				ExtraControllerManagerArgs: []string{"--kube-api-qps=1000", "--kube-api-burst=2000",
					"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
					"--controllers=deployment,replicaset,garbagecollector,resourceclaim-controller,nodeipam",
					"--allocate-node-cidrs=true", "--cluster-cidr=172.16.0.0/12", "--node-cidr-mask-size=24"},
			})
			if err := cp.StartScheduler(ctx, "--kube-api-qps=1000", "--kube-api-burst=2000"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cp.StopScheduler() })
			admin := cp.AdminClient
			const ns = "claims"
			if err := cp.CreateNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			tmpl := writeNodeTemplate(t, benchDevicesTemplate)
			sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes="+strconv.Itoa(nodes), "--node-name-prefix=claims-", "--node-template="+tmpl)
			waitNodesReady(ctx, t, admin, sim, nodes, 5*time.Minute)
			err := framework.WaitFor(ctx, time.Second, func() (bool, error) {
				l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
				return err == nil && len(l.Items) == nodes, err
			})
			if err != nil {
				t.Fatal(err)
			}
			root, err := framework.RepoRoot()
			if err != nil {
				t.Fatal(err)
			}
			if out, err := cp.Kubectl(ctx, "apply", "-f", filepath.Join(root, "deploy", "kubernetes", "devices", "deviceclass.yaml")); err != nil {
				t.Fatalf("kubectl apply deviceclass.yaml: %v\n%s", err, out)
			}
			spec := corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}
			if withClaims {
				if _, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
					ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: ns},
					Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
						Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}}},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
				spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
			}
			time.Sleep(10 * time.Second)
			cpu0, _ := cpuSeconds(sim.pid)
			labels := map[string]string{"app": "claims"}
			created := time.Now()
			if _, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "claims", Namespace: ns},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(pods)), Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var available int32
			err = framework.WaitFor(ctx, 2*time.Second, func() (bool, error) {
				d, err := admin.AppsV1().Deployments(ns).Get(ctx, "claims", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				available = d.Status.AvailableReplicas
				if time.Since(created) > 20*time.Minute {
					return false, fmt.Errorf("%d of %d available after 20 min: %w", available, pods, framework.ErrStop)
				}
				return available == int32(pods), nil
			})
			took := time.Since(created)
			cpu1, _ := cpuSeconds(sim.pid)
			st, _ := framework.ReadProcStats(sim.pid)
			t.Logf("RESULT %s claims: %d pods on %d Nodes: %d Available after %.1f s; simulator CPU %.1f s (%.2f CPU-s per 1000 pod starts), RSS %.0f MiB",
				name, pods, nodes, available, took.Seconds(), cpu1-cpu0, (cpu1-cpu0)*1000/float64(pods), float64(st.RSS)/(1<<20))
			if err != nil {
				t.Fatal(err)
			}
			if err := sim.stop(30 * time.Second); err != nil {
				t.Logf("stop: %v", err)
			}
		})
	}
}
