package integration_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/test/framework"
)

// TestResourceMetrics (issue 37): an unmodified metrics-server v0.8.0, registered through the
// aggregation layer (kubeadm's front-proxy flags, the APIService v1beta1.metrics.k8s.io), scrapes
// the agent's Node (its host's usage from cadvisor) and the simulated Nodes of two shards:
//   - kubectl top nodes lists the three and a library Node (pkg/node in this process, its provider's
//     GetStatsSummary: libStatsProvider) with non-zero CPU and memory, kubectl top pods every
//     simulated pod and the library Node's at its provider's figures;
//   - the shapes against the reference kubelet (on the same host, its own containerd): the Node's
//     /metrics/resource, /metrics/cadvisor and Summary against the agent's; a pod's /metrics/resource
//     series and its Summary element against the same pod on a simulated Node, the reference kubelet
//     running it in a real container (podMetricsIntendedDifferences, podSummaryIntendedDifferences);
//   - /metrics/probes: the simulated Node's families those of the reference kubelet probing the real
//     container, its count of the simulated readiness probes what the time since the container started
//     gives; the agent's the kubelet's empty registry, 401 without credentials;
//   - a pod whose usage annotation does not parse gets a Warning Event InvalidAnnotation naming it;
//   - a real HorizontalPodAutoscaler (kube-controller-manager's horizontalpodautoscaling
//     controller, downscale stabilization shortened to 20 s by its flag) at 50 % CPU on a Deployment
//     of 2 whose pods use 10 % of their request: two pods raised to 135m through the control API
//     scale it out to ceil(2 × (2×135 + 0×10)/(2×50)) ... = 6, where it stays (the six pods at
//     (2×135 + 4×10)/600 = 51 %, within the 10 % tolerance); lowered to 10m again, it scales in to
//     ceil(6 × 10/50) = 2.
func TestResourceMetrics(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	dir := t.TempDir()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	frontProxy, err := framework.FrontProxyArgs(filepath.Join(dir, "front-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	const agentNode, refNode, libNode = "metrics-agent", "metrics-kubelet", "metrics-library"
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "cp"), NodeNames: []string{agentNode, refNode, libNode}, ControllerManager: true,
		ExtraAPIServerArgs: frontProxy,
		ExtraControllerManagerArgs: []string{"--controllers=nodelifecycle,ttl,deployment,replicaset,horizontalpodautoscaling",
			"--horizontal-pod-autoscaler-sync-period=5s", "--horizontal-pod-autoscaler-downscale-stabilization=20s"},
	})
	if err := cp.StartScheduler(sctx); err != nil {
		t.Fatal(err)
	}
	admin := cp.AdminClient
	const ns = "metrics"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	ip := hostAddress(t)
	agentPort := framework.FreePort()
	startAgent(t, cp, agentNode, e.ctrd, kubeletAPIArgs(cp, ip, agentPort)...)
	// The reference kubelet on the same host (anonymous, AlwaysAllow: its /metrics/resource and
	// /stats/summary read without credentials). A short directory: its unix sockets must fit 108 bytes.
	kdir, err := os.MkdirTemp("", "kms-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(kdir) })
	// Its own containerd, with the test image a real pod of the shapes' comparison runs.
	imported := time.Now()
	kctrd := startContainerd(t, true)
	if err := kctrd.ImportPodImages(sctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Logf("the reference kubelet's containerd with the test image in %v", time.Since(imported).Round(10*time.Millisecond))
	ref := framework.StartTestKubelet(sctx, t, framework.KubeletOptions{Dir: kdir, NodeName: refNode,
		Kubeconfig: cp.KubeconfigFor(refNode), RuntimeEndpoint: kctrd.Endpoint})
	shards := make([]*shardProcess, 2)
	simPorts := make([]int, len(shards)) // each shard's one Node's kubelet API
	for i := range shards {
		ctl := framework.FreePort()
		simPorts[i] = framework.FreePort()
		shards[i] = startShard(t, i, append([]string{"simulate", "--kubeconfig=" + cp.AdminKubeconfig, "--nodes=1", "--shards=2",
			"--shard-index=" + strconv.Itoa(i), "--node-name-prefix=ms-", "--healthz-bind-address=127.0.0.1",
			"--healthz-port=" + strconv.Itoa(ctl)}, kubeletAPIArgs(cp, ip, simPorts[i])...), nil, ctl)
	}
	// A library Node (pkg/node in this process) whose provider implements GetStatsSummary.
	libStarted := time.Now()
	startLibraryNode(sctx, t, cp, libNode, newLibStatsProvider())
	t.Logf("the library Node Ready in %v", time.Since(libStarted).Round(10*time.Millisecond))
	nodes := []string{agentNode, "ms-0000", "ms-0001", libNode}
	for _, n := range nodes {
		framework.WaitReady(sctx, t, admin, n, 2*time.Minute)
	}
	ms, err := framework.StartMetricsServer(sctx, cp, filepath.Join(dir, "metrics-server"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Stop)

	// The workload: 2 pods requesting 100m, using 10m (the annotation), spread over the two
	// simulated Nodes; one more pod with a usage annotation that does not parse.
	labels := map[string]string{"app": "web"}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"nodeagent.io/cpu-usage": "10m", "nodeagent.io/memory-usage": "20Mi"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
			Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			NodeSelector: map[string]string{"nodeagent.io/simulated": "true"},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
				WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
		},
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns, Annotations: map[string]string{"nodeagent.io/memory-usage": "lots"}},
		Spec: corev1.PodSpec{NodeName: "ms-0001", Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The library Node's pod; the same pod with a readiness probe on the reference kubelet (a real
	// container) and on a simulated Node, for the shapes of the pod's series.
	const libNS, refNS, simNS = "metrics-lib", "metrics-ref", "metrics-sim"
	for _, n := range []string{libNS, refNS, simNS} {
		if err := cp.CreateNamespace(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	lib := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lib", Namespace: libNS},
		Spec: corev1.PodSpec{NodeName: libNode, Containers: []corev1.Container{{Name: "c", Image: "example"}}}}
	if _, err := admin.CoreV1().Pods(libNS).Create(ctx, lib, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct{ ns, node string }{{refNS, refNode}, {simNS, "ms-0000"}} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "shape", Namespace: side.ns},
			Spec: corev1.PodSpec{NodeName: side.node, AutomountServiceAccountToken: ptr.To(false),
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "app", Image: framework.PodImage, ImagePullPolicy: corev1.PullIfNotPresent,
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 2, ProbeHandler: corev1.ProbeHandler{
						Exec: &corev1.ExecAction{Command: []string{"/podimage", "--exit-after=1ms", "--exit-code=0"}}}}}}}}
		if _, err := admin.CoreV1().Pods(side.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	kubectl := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return cp.Kubectl(cctx, args...)
	}
	// top returns kubectl top's rows by name: CPU in millicores and memory in bytes.
	top := func(args ...string) (map[string][2]int64, error) {
		out, err := kubectl(append(append([]string{"top"}, args...), "--no-headers")...)
		if err != nil {
			return nil, fmt.Errorf("kubectl top %v: %w: %s", args, err, out)
		}
		rows := map[string][2]int64{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[1] == "<unknown>" { // the reference kubelet listens on loopback only
				continue
			}
			memCol := 2
			if len(f) >= 5 { // nodes: NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)
				memCol = 3
			}
			cpu, err1 := resource.ParseQuantity(f[1])
			mem, err2 := resource.ParseQuantity(f[memCol])
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("kubectl top %v: row %q", args, line)
			}
			rows[f[0]] = [2]int64{cpu.MilliValue(), mem.Value()}
		}
		return rows, nil
	}

	t.Run("kubectl top", func(t *testing.T) {
		var last string
		err := framework.WaitFor(sctx, 2*time.Second, func() (bool, error) {
			rows, err := top("nodes")
			if err != nil {
				return false, err
			}
			last = fmt.Sprint(rows)
			for _, n := range nodes {
				if r, ok := rows[n]; !ok || r[0] <= 0 || r[1] <= 0 {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("kubectl top nodes: %v (last %s; metrics-server log: %s)", err, last, ms.LogPath)
		}
		t.Logf("kubectl top nodes: %s", last)
		err = framework.WaitFor(sctx, 2*time.Second, func() (bool, error) {
			rows, err := top("pods", "-n", ns)
			if err != nil {
				return false, err
			}
			last = fmt.Sprint(rows)
			pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(pods.Items) != 3 {
				return false, err
			}
			for _, p := range pods.Items {
				r, ok := rows[p.Name]
				if !ok || r[0] <= 0 || r[1] <= 0 {
					return false, nil
				}
				if p.Name != "bad" && (r[0] != 10 || r[1] != 20<<20) {
					return false, fmt.Errorf("pod %s: %dm %d bytes, want the annotation's 10m 20Mi", p.Name, r[0], r[1])
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("kubectl top pods: %v (last %s)", err, last)
		}
		t.Logf("kubectl top pods: %s", last)
		// The library Node's pod: its provider's 40m and 32Mi.
		err = framework.WaitFor(sctx, 2*time.Second, func() (bool, error) {
			rows, err := top("pods", "-n", libNS)
			if err != nil {
				return false, err
			}
			last = fmt.Sprint(rows)
			r, ok := rows["lib"]
			return ok && r[0] >= 39 && r[0] <= 41 && r[1] == libPodMemory, nil
		})
		if err != nil {
			t.Fatalf("kubectl top pods -n %s: %v (last %s), want lib at 40m and 32Mi", libNS, err, last)
		}
		t.Logf("kubectl top pods -n %s: %s", libNS, last)
	})

	// get reads a kubelet API path, with token as a bearer token unless empty.
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url string, token string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := insecure.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
		}
		return b, err
	}
	refBase := "https://127.0.0.1:" + strconv.Itoa(ref.Port)
	agentBase := "https://" + net.JoinHostPort(ip, strconv.Itoa(agentPort))
	simBase := "https://" + net.JoinHostPort(ip, strconv.Itoa(simPorts[0])) // ms-0000
	token := cp.AdminConfig.BearerToken

	t.Run("shapes against the reference kubelet", func(t *testing.T) {
		// /metrics/resource: the same families (name, help, type), label names, and timestamps on
		// the same samples.
		shape := func(body []byte) (map[string]string, error) {
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
			if err != nil {
				return nil, err
			}
			out := map[string]string{}
			for name, f := range fams {
				var labels []string
				ts := false
				for _, m := range f.Metric {
					for _, l := range m.Label {
						labels = append(labels, l.GetName())
					}
					ts = ts || m.TimestampMs != nil
				}
				out[name] = fmt.Sprintf("%s | %s | labels %v | timestamp %v", f.GetHelp(), f.GetType(), labels, ts)
			}
			return out, nil
		}
		var refShape, agentShape map[string]string
		err := framework.WaitFor(sctx, time.Second, func() (bool, error) {
			rb, err := get(refBase+"/metrics/resource", "")
			if err != nil {
				return false, err
			}
			ab, err := get(agentBase+"/metrics/resource", token)
			if err != nil {
				return false, err
			}
			if refShape, err = shape(rb); err != nil {
				return false, err
			}
			if agentShape, err = shape(ab); err != nil {
				return false, err
			}
			// The kubelet's cadvisor needs a housekeeping pass before its Node figures.
			return refShape["node_cpu_usage_seconds_total"] != "" && agentShape["node_cpu_usage_seconds_total"] != "", nil
		})
		if err != nil {
			t.Fatalf("/metrics/resource: %v", err)
		}
		// The reference kubelet runs a pod (compared with a simulated Node's below), the agent none.
		podFamily := func(name string) bool {
			return strings.HasPrefix(name, "container_") || strings.HasPrefix(name, "pod_")
		}
		for name, want := range refShape {
			if podFamily(name) {
				continue
			}
			if got := agentShape[name]; got != want {
				t.Errorf("/metrics/resource %s: agent %q, reference kubelet %q", name, got, want)
			}
		}
		for name := range agentShape {
			if _, ok := refShape[name]; !ok {
				t.Errorf("/metrics/resource %s: the agent's, not the reference kubelet's", name)
			}
		}
		t.Logf("/metrics/resource families, the same on both: %d", len(refShape))

		// /metrics/cadvisor: cadvisor's collectors; the agent's families (of the root cgroup) are
		// the kubelet's (of every cgroup it watches), with the same help and type.
		rb, err := get(refBase+"/metrics/cadvisor", "")
		if err != nil {
			t.Fatal(err)
		}
		ab, err := get(agentBase+"/metrics/cadvisor", token)
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		refFams, err := parser.TextToMetricFamilies(strings.NewReader(string(rb)))
		if err != nil {
			t.Fatal(err)
		}
		parser = expfmt.NewTextParser(model.UTF8Validation)
		agentFams, err := parser.TextToMetricFamilies(strings.NewReader(string(ab)))
		if err != nil {
			t.Fatal(err)
		}
		for name, f := range agentFams {
			r, ok := refFams[name]
			if !ok || r.GetHelp() != f.GetHelp() || r.GetType() != f.GetType() {
				t.Errorf("/metrics/cadvisor %s (%q %s): not the reference kubelet's", name, f.GetHelp(), f.GetType())
			}
		}
		for _, name := range []string{"machine_cpu_cores", "machine_memory_bytes", "container_cpu_usage_seconds_total", "container_memory_working_set_bytes"} {
			if _, ok := agentFams[name]; !ok {
				t.Errorf("/metrics/cadvisor: no %s", name)
			}
		}
		t.Logf("/metrics/cadvisor families: kubelet %d, agent %d", len(refFams), len(agentFams))

		// /stats/summary?only_cpu_and_memory=true (the full Summary fails on this host's kubelet:
		// cadvisor cannot map its disk to a filesystem): the same fields, but the Node's system
		// containers (the kubelet's pods cgroup; the agent runs no pods).
		paths := func(body []byte) (map[string]bool, error) {
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				return nil, err
			}
			return jsonLeafPaths(v), nil
		}
		rb, err = get(refBase+"/stats/summary?only_cpu_and_memory=true", "")
		if err != nil {
			t.Fatal(err)
		}
		ab, err = get(agentBase+"/stats/summary?only_cpu_and_memory=true", token)
		if err != nil {
			t.Fatal(err)
		}
		refPaths, err := paths(rb)
		if err != nil {
			t.Fatal(err)
		}
		agentPaths, err := paths(ab)
		if err != nil {
			t.Fatal(err)
		}
		for p := range refPaths {
			if !agentPaths[p] && !strings.HasPrefix(p, ".node.systemContainers[]") && !strings.HasPrefix(p, ".pods[]") {
				t.Errorf("/stats/summary: the reference kubelet has %s, the agent not", p)
			}
		}
		for p := range agentPaths {
			if !refPaths[p] {
				t.Errorf("/stats/summary: the agent has %s, the reference kubelet not", p)
			}
		}
		t.Logf("/stats/summary?only_cpu_and_memory=true fields: kubelet %d, agent %d", len(refPaths), len(agentPaths))
	})

	t.Run("pod shapes against the reference kubelet", func(t *testing.T) {
		// The pod "shape" Ready on both Nodes: its readiness probe passed.
		for _, n := range []string{refNS, simNS} {
			err := framework.WaitFor(sctx, time.Second, func() (bool, error) {
				p, err := admin.CoreV1().Pods(n).Get(ctx, "shape", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						return true, nil
					}
				}
				return false, nil
			})
			if err != nil {
				t.Fatalf("pod %s/shape not Ready: %v", n, err)
			}
		}
		// /metrics/resource: the pod_* and container_* families of the pod's series: help, type, label
		// names, timestamps.
		var refS, simS map[string]string
		err := framework.WaitFor(sctx, time.Second, func() (bool, error) {
			rb, err := get(refBase+"/metrics/resource", "")
			if err != nil {
				return false, err
			}
			sb, err := get(simBase+"/metrics/resource", token)
			if err != nil {
				return false, err
			}
			if refS, err = podSeriesShapes(rb, refNS, "shape"); err != nil {
				return false, err
			}
			if simS, err = podSeriesShapes(sb, simNS, "shape"); err != nil {
				return false, err
			}
			// The kubelet's stats need a housekeeping pass after the container started.
			return refS["container_cpu_usage_seconds_total"] != "" && refS["pod_cpu_usage_seconds_total"] != "" && simS["container_cpu_usage_seconds_total"] != "", nil
		})
		if err != nil {
			t.Fatalf("/metrics/resource of the pods: %v (kubelet %v, simulated %v)", err, refS, simS)
		}
		compareShapes(t, "/metrics/resource", refS, simS, podMetricsIntendedDifferences)
		t.Logf("/metrics/resource pod and container families: kubelet %d, simulated %d", len(refS), len(simS))

		// /stats/summary?only_cpu_and_memory=true: the fields of the pod's element of pods[].
		rb, err := get(refBase+"/stats/summary?only_cpu_and_memory=true", "")
		if err != nil {
			t.Fatal(err)
		}
		sb, err := get(simBase+"/stats/summary?only_cpu_and_memory=true", token)
		if err != nil {
			t.Fatal(err)
		}
		refP, err := summaryPodPaths(rb, refNS, "shape")
		if err != nil {
			t.Fatal(err)
		}
		simP, err := summaryPodPaths(sb, simNS, "shape")
		if err != nil {
			t.Fatal(err)
		}
		compareShapes(t, "/stats/summary pods[]", refP, simP, podSummaryIntendedDifferences)
		t.Logf("/stats/summary?only_cpu_and_memory=true pod fields: kubelet %d, simulated %d", len(refP), len(simP))
	})

	t.Run("probe metrics", func(t *testing.T) {
		// The simulated Node counts what its simulated prober ran; its families are the reference
		// kubelet's (whose prober ran the real pod's exec probe).
		var refS, simS map[string]string
		var simBody []byte
		err := framework.WaitFor(sctx, time.Second, func() (bool, error) {
			rb, err := get(refBase+"/metrics/probes", "")
			if err != nil {
				return false, err
			}
			if simBody, err = get(simBase+"/metrics/probes", token); err != nil {
				return false, err
			}
			if refS, err = podSeriesShapes(rb, refNS, "shape"); err != nil {
				return false, err
			}
			if simS, err = podSeriesShapes(simBody, simNS, "shape"); err != nil {
				return false, err
			}
			return refS["prober_probe_total"] != "" && simS["prober_probe_total"] != "", nil
		})
		if err != nil {
			t.Fatalf("/metrics/probes: %v (kubelet %v, simulated %v)", err, refS, simS)
		}
		compareShapes(t, "/metrics/probes", refS, simS, nil)
		// Every 2 s since the container started, all successful: at least one, and as many as the
		// periods since (the scrape within the last one).
		p, err := admin.CoreV1().Pods(simNS).Get(ctx, "shape", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`prober_probe_total{container="app",namespace=%q,pod="shape",pod_uid=%q,probe_type="Readiness",result="successful"} `, simNS, p.UID)
		var n int
		for _, l := range strings.Split(string(simBody), "\n") {
			if v, ok := strings.CutPrefix(l, want); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
		if max := int(time.Since(started)/(2*time.Second)) + 2; n < 1 || n > max {
			t.Errorf("simulated readiness probes: %d successful, want 1 to %d (%s since the container started): %s", n, max, time.Since(started), simBody)
		}
		// The agent runs no pods: the kubelet's registry with no prober worker, authorized as
		// nodes/metrics.
		ab, err := get(agentBase+"/metrics/probes", token)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(ab), "process_start_time_seconds") || strings.Contains(string(ab), "prober_") {
			t.Errorf("the agent's /metrics/probes: %s, want process_start_time_seconds only", ab)
		}
		if _, err := get(agentBase+"/metrics/probes", ""); err == nil || !strings.Contains(err.Error(), ": 401 ") {
			t.Errorf("the agent's /metrics/probes without credentials: %v, want 401", err)
		}
		t.Logf("/metrics/probes: the simulated Node's %d readiness probes of shape; families the kubelet's: %v", n, simS)
	})

	t.Run("bad annotation", func(t *testing.T) {
		want := `bad annotation nodeagent.io/memory-usage: "lots" is not a positive quantity`
		err := framework.WaitFor(sctx, time.Second, func() (bool, error) {
			evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad,reason=InvalidAnnotation"})
			if err != nil {
				return false, err
			}
			for _, ev := range evs.Items {
				if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, want) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("no Warning InvalidAnnotation %q on pod bad: %v", want, err)
		}
	})

	t.Run("HorizontalPodAutoscaler", func(t *testing.T) {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
				MinReplicas:    ptr.To[int32](2), MaxReplicas: 10,
				Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
					Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}}}},
			}}
		if _, err := admin.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		hctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		// The HPA reads 10 % (2 pods at 10m of 100m): ceil(2 × 10/50) = 1, held at minReplicas 2.
		utilization := func() (int32, int32, error) {
			h, err := admin.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return 0, 0, err
			}
			for _, m := range h.Status.CurrentMetrics {
				if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
					return *m.Resource.Current.AverageUtilization, h.Status.DesiredReplicas, nil
				}
			}
			return -1, h.Status.DesiredReplicas, nil
		}
		if err := framework.WaitFor(hctx, 2*time.Second, func() (bool, error) {
			u, _, err := utilization()
			return err == nil && u == 10, err
		}); err != nil {
			t.Fatalf("the HPA never read 10 %%: %v", err)
		}
		webPods := func() []corev1.Pod {
			l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				t.Fatal(err)
			}
			return l.Items
		}
		setCPU := func(p corev1.Pod, cpu string) {
			shard := shards[0]
			if p.Spec.NodeName == "ms-0001" {
				shard = shards[1]
			}
			code, body, err := shard.postPath(ctx, "usage/pods/"+ns+"/"+p.Name, `{"cpu":"`+cpu+`"}`)
			if err != nil || code != 200 {
				t.Fatalf("raise %s: %d %s %v", p.Name, code, body, err)
			}
		}
		raised := webPods()
		if len(raised) != 2 {
			t.Fatalf("%d web pods, want 2", len(raised))
		}
		for _, p := range raised {
			setCPU(p, "135m")
		}
		// The HPA's formula (its replica calculator): utilization is the pods' usage over their
		// requests, in whole percent; within 10 % of the target (the controller's default
		// tolerance) the count stays, else desired = ceil(current × utilization/target).
		want := func(n, raisedMilli int) int32 {
			u := (2*raisedMilli + (n-2)*10) * 100 / (n * 100)
			if ratio := float64(u) / 50; math.Abs(ratio-1) > 0.1 {
				return int32(math.Ceil(float64(n) * ratio))
			}
			return int32(n)
		}
		if got := want(2, 135); got != 6 {
			t.Fatalf("the formula gives %d from 2", got)
		}
		if got := want(6, 135); got != 6 {
			t.Fatalf("the formula gives %d from 6: not a fixed point", got)
		}
		replicas := func() (int32, error) {
			d, err := admin.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return 0, err
			}
			return *d.Spec.Replicas, nil
		}
		// Out: 6, held for two of the HPA's sync periods after the new pods' metrics count.
		var seen []int32
		stableSince := time.Time{}
		err := framework.WaitFor(hctx, time.Second, func() (bool, error) {
			r, err := replicas()
			if err != nil {
				return false, err
			}
			if len(seen) == 0 || seen[len(seen)-1] != r {
				seen, stableSince = append(seen, r), time.Now()
			}
			u, _, err := utilization()
			return r == 6 && u == 51 && time.Since(stableSince) > 10*time.Second, err
		})
		if err != nil {
			t.Fatalf("scale out: replicas went %v, want 6 held at 51 %%: %v", seen, err)
		}
		for _, r := range seen {
			if r > 6 {
				t.Errorf("scale out: replicas went %v, beyond the formula's 6", seen)
			}
		}
		t.Logf("scale out: replicas went %v", seen)

		// In: every pod at 10m again: ceil(6 × 10/50) = 2, after the 20 s stabilization window.
		for _, p := range raised {
			setCPU(p, "10m")
		}
		lowered := time.Now()
		seen = nil
		err = framework.WaitFor(hctx, time.Second, func() (bool, error) {
			r, err := replicas()
			if err != nil {
				return false, err
			}
			if len(seen) == 0 || seen[len(seen)-1] != r {
				seen = append(seen, r)
			}
			return r == 2, nil
		})
		if err != nil {
			t.Fatalf("scale in: replicas went %v, want 2: %v", seen, err)
		}
		if d := time.Since(lowered); d < 20*time.Second {
			t.Errorf("scaled in %v after the load went down, within the 20 s stabilization window", d)
		}
		t.Logf("scale in: replicas went %v, %v after the load went down", seen, time.Since(lowered).Round(time.Second))
	})
}

// podMetricsIntendedDifferences and podSummaryIntendedDifferences are the pod's /metrics/resource
// families and /stats/summary fields where a simulated Node's differ from the reference kubelet's on
// purpose, with the reason (docs/simulation.md "Metrics" lists the same); TestResourceMetrics fails on
// any other difference and on one listed that no longer shows.
// A key ending in "*" stands for every key with that prefix.
var (
	podMetricsIntendedDifferences = map[string]string{}
	podSummaryIntendedDifferences = map[string]string{
		".cpu.psi.*": summaryPSIReason, ".memory.psi.*": summaryPSIReason,
		".containers[].cpu.psi.*": summaryPSIReason, ".containers[].memory.psi.*": summaryPSIReason,
	}
)

const summaryPSIReason = "pressure stall information: a simulated pod reports it (0) as the kubelet does on cgroup v2 " +
	"(KubeletPSI, on by default since v1.34); the reference kubelet here runs on cgroup v1, which has no PSI"

// podSeriesShapes returns, per metric family of a Prometheus text body with a series labelled
// namespace ns and pod name, "help | type | label names | timestamp": the shape of the pod's series.
func podSeriesShapes(body []byte, ns, name string) (map[string]string, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for fname, f := range fams {
		for _, m := range f.Metric {
			labels := map[string]string{}
			var names []string
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
				names = append(names, l.GetName())
			}
			if labels["namespace"] != ns || labels["pod"] != name {
				continue
			}
			sort.Strings(names)
			out[fname] = fmt.Sprintf("%s | %s | labels %v | timestamp %v", f.GetHelp(), f.GetType(), names, m.TimestampMs != nil)
		}
	}
	return out, nil
}

// jsonLeafPaths returns the paths of the leaves of v, a decoded JSON value: "." and the key for an
// object's member, "[]" for an array's elements (".pods[].podRef.name").
func jsonLeafPaths(v any) map[string]bool {
	out := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				walk(prefix+"."+k, c)
			}
		case []any:
			for _, c := range x {
				walk(prefix+"[]", c)
			}
		default:
			out[prefix] = true
		}
	}
	walk("", v)
	return out
}

// summaryPodPaths returns the JSON paths of the leaves of the pods[] element of a Summary whose
// podRef is ns/name ("[]" for an array's elements).
func summaryPodPaths(body []byte, ns, name string) (map[string]string, error) {
	var sum struct {
		Pods []map[string]any `json:"pods"`
	}
	if err := json.Unmarshal(body, &sum); err != nil {
		return nil, err
	}
	for _, p := range sum.Pods {
		if ref, ok := p["podRef"].(map[string]any); ok && ref["namespace"] == ns && ref["name"] == name {
			out := map[string]string{}
			for path := range jsonLeafPaths(p) {
				out[path] = "present"
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("no pod %s/%s in the Summary: %.500s", ns, name, body)
}

// compareShapes fails t on every key whose value differs between the reference kubelet's shapes
// (ref) and the simulated Node's (sim), unless intended lists it with its reason; and on a key of
// intended that shows no difference (the list is stale).
func compareShapes(t *testing.T, what string, ref, sim map[string]string, intended map[string]string) {
	t.Helper()
	keys := map[string]bool{}
	for k := range ref {
		keys[k] = true
	}
	for k := range sim {
		keys[k] = true
	}
	listed := func(k string) (string, bool) {
		for i := range intended {
			if i == k || strings.HasSuffix(i, "*") && strings.HasPrefix(k, strings.TrimSuffix(i, "*")) {
				return i, true
			}
		}
		return "", false
	}
	shown := map[string]bool{}
	for k := range keys {
		r, s := ref[k], sim[k]
		i, ok := listed(k)
		switch {
		case r != s && !ok:
			t.Errorf("%s %s: simulated %q, reference kubelet %q", what, k, s, r)
		case r != s:
			shown[i] = true
		case ok && !strings.HasSuffix(i, "*"):
			t.Errorf("%s %s: listed as an intended difference, but the same on both (%q)", what, k, r)
		}
	}
	for i := range intended {
		if !shown[i] {
			t.Errorf("%s %s: listed as an intended difference, but none shows", what, i)
		}
	}
}

// The library Node's usage: libNodeCPU and libNodeMemory besides its pods, each running container
// libPodCPU (nanocores, whole millicores) and libPodMemory.
const (
	libNodeCPU, libNodeMemory = 100_000_000, 256 << 20
	libPodCPU, libPodMemory   = 40_000_000, 32 << 20
)

// libStatsProvider is libProvider (TestKubeletAPILibrary's) with Virtual Kubelet's GetStatsSummary, as a
// library user writes one: the pods it was given (CreatePod, DeletePod), each container running since
// the provider's start, cumulative CPU counters growing at the constant rates since then.
type libStatsProvider struct {
	*libProvider
	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod
}

var _ node.StatsSummaryGetter = (*libStatsProvider)(nil)

func newLibStatsProvider() *libStatsProvider {
	return &libStatsProvider{libProvider: &libProvider{started: time.Now()}, pods: map[types.UID]*corev1.Pod{}}
}

func (p *libStatsProvider) CreatePod(_ context.Context, v *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[v.UID] = v
	return nil
}

func (p *libStatsProvider) DeletePod(_ context.Context, v *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, v.UID)
	return nil
}

// GetStatsSummary is the Node's Summary now: the kubelet's shape with CPU and memory only (what
// metrics-server reads through /metrics/resource).
func (p *libStatsProvider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	now := time.Now().Truncate(time.Millisecond) // the precision of /metrics/resource's timestamps
	ts, since := metav1.NewTime(now), uint64(now.Sub(p.started))
	cpu := func(rate uint64) *statsv1alpha1.CPUStats {
		return &statsv1alpha1.CPUStats{Time: ts, UsageNanoCores: ptr.To(rate), UsageCoreNanoSeconds: ptr.To(rate / 1e6 * since / 1e3)}
	}
	mem := func(b uint64) *statsv1alpha1.MemoryStats {
		return &statsv1alpha1.MemoryStats{Time: ts, WorkingSetBytes: ptr.To(b), UsageBytes: ptr.To(b), RSSBytes: ptr.To(b)}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sum := &statsv1alpha1.Summary{Pods: []statsv1alpha1.PodStats{}}
	nodeCPU, nodeMem := uint64(libNodeCPU), uint64(libNodeMemory)
	for _, v := range p.pods {
		ps := statsv1alpha1.PodStats{PodRef: statsv1alpha1.PodReference{Name: v.Name, Namespace: v.Namespace, UID: string(v.UID)},
			StartTime: metav1.NewTime(p.started)}
		for _, c := range v.Spec.Containers {
			ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{Name: c.Name, StartTime: metav1.NewTime(p.started),
				CPU: cpu(libPodCPU), Memory: mem(libPodMemory)})
		}
		n := uint64(len(v.Spec.Containers))
		ps.CPU, ps.Memory = cpu(n*libPodCPU), mem(n*libPodMemory)
		sum.Pods = append(sum.Pods, ps)
		nodeCPU, nodeMem = nodeCPU+n*libPodCPU, nodeMem+n*libPodMemory
	}
	sum.Node = statsv1alpha1.NodeStats{NodeName: "metrics-library", StartTime: metav1.NewTime(p.started), CPU: cpu(nodeCPU), Memory: mem(nodeMem)}
	return sum, nil
}
