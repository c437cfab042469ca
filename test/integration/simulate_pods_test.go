package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/version"
	"github.com/nodeagent/nodeagent/test/framework"
)

// TestSimulatePods (issue 29): pods on simulated Nodes, with the real kube-scheduler and
// kube-controller-manager (deployment, replicaset, job, podgc, garbagecollector, nodelifecycle and
// nodeipam with pod CIDRs):
//   - a Deployment of 100 replicas over 20 simulated Nodes turns Available; every pod is Running and
//     Ready with the kubelet's conditions, a <runtime>:// container ID, an imageID, started, its
//     Node's IP as hostIP and a pod IP of its Node's podCIDR, no IP given twice;
//   - a Job of 5 completions completes: its pods Succeeded, Ready False with PodCompleted;
//   - a pod bound to a Node it does not fit is rejected as the kubelet rejects it: Failed, OutOfcpu,
//     "Pod was rejected: Node didn't have enough resource: cpu, ...";
//   - the Deployment scaled to 0: every pod is gone (each deleted with grace 0 once stopped).
func TestSimulatePods(t *testing.T) {
	t.Parallel()
	const (
		nodes    = 20
		replicas = 100
		prefix   = "pods-"
		ns       = "sim-pods"
	)
	ctx := t.Context()
	dir := t.TempDir()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "cp"), ControllerManager: true,
		ExtraControllerManagerArgs: []string{"--kube-api-qps=200", "--kube-api-burst=400",
			"--controllers=deployment,replicaset,job,podgc,garbagecollector",
			"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24"},
	})
	if err := cp.StartScheduler(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.StopScheduler() })
	admin := cp.AdminClient
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes="+strconv.Itoa(nodes), "--node-name-prefix="+prefix)
	waitNodesReady(ctx, t, admin, sim, nodes, 2*time.Minute)
	t.Logf("%d simulated Nodes Ready after %v", nodes, time.Since(start).Round(10*time.Millisecond))

	// The Deployment turns Available.
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "nginx:1.27",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				}}},
			},
		},
	}
	created := time.Now()
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		d, err := admin.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if time.Since(created) > 2*time.Minute {
			return false, fmt.Errorf("deployment web: %d of %d available after 2m: %w", d.Status.AvailableReplicas, replicas, framework.ErrStop)
		}
		return d.Status.AvailableReplicas == replicas, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Deployment of %d Available %v after its creation", replicas, time.Since(created).Round(10*time.Millisecond))
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	nodeList, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeagent.io/simulated=true"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*corev1.Node{}
	for i := range nodeList.Items {
		byName[nodeList.Items[i].Name] = &nodeList.Items[i]
		// The kubelet version the simulated Nodes mirror, as the agent's Node says it (issue 35 Low).
		if got := nodeList.Items[i].Status.NodeInfo.KubeletVersion; !strings.HasPrefix(got, version.KubernetesVersion+"+nodeagent.") {
			t.Errorf("Node %s: kubeletVersion %q, want %s+nodeagent.<version>", nodeList.Items[i].Name, got, version.KubernetesVersion)
		}
	}
	seen := map[string]string{}
	for i := range pods.Items {
		checkRunningPod(t, &pods.Items[i], byName[pods.Items[i].Spec.NodeName], seen)
	}

	// The control API: a container made unready, then crashed (restartPolicy Always: CrashLoopBackOff).
	target := pods.Items[0]
	waitPod := func(what string, ok func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		var p *corev1.Pod
		start := time.Now()
		err := framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
			var err error
			p, err = admin.CoreV1().Pods(ns).Get(ctx, target.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if time.Since(start) > 30*time.Second {
				return false, fmt.Errorf("not after 30 s: %w", framework.ErrStop)
			}
			return ok(p), nil
		})
		if err != nil {
			t.Fatalf("pod %s: %s: %v (status %+v)", target.Name, what, err, p.Status)
		}
		return p
	}
	if code, body, err := sim.postPath(ctx, "pods/"+ns+"/"+target.Name, `{"container":"web","ready":false}`); err != nil || code != 200 {
		t.Fatalf("unready: %d %s %v", code, body, err)
	}
	var p *corev1.Pod
	p = waitPod("Ready False after the container was made unready", func(p *corev1.Pod) bool {
		c := podCondition(p, corev1.PodReady)
		return c != nil && c.Status == corev1.ConditionFalse
	})
	if c := podCondition(p, corev1.PodReady); c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [web]" {
		t.Errorf("unready pod: Ready %+v, want ContainersNotReady \"containers with unready status: [web]\"", c)
	}
	// Crashed once: restarted at once (the kubelet's first restart has no back-off), its last state the
	// crash; crashed again: CrashLoopBackOff for the back-off's 10 s, then running again.
	crash := func(body string) {
		t.Helper()
		if code, text, err := sim.postPath(ctx, "pods/"+ns+"/"+target.Name, body); err != nil || code != 200 {
			t.Fatalf("POST %s: %d %s %v", body, code, text, err)
		}
	}
	crash(`{"container":"web","ready":true,"crash":2}`)
	p = waitPod("restarted once after the crash", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Running != nil && cs[0].Ready
	})
	if lt := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; lt == nil || lt.ExitCode != 2 || lt.Reason != "Error" {
		t.Errorf("crashed container: lastState %+v, want terminated with exit code 2, reason Error", p.Status.ContainerStatuses[0].LastTerminationState)
	}
	crash(`{"container":"web","crash":3}`)
	crashed := time.Now()
	p = waitPod("CrashLoopBackOff after the second crash", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	if c := podCondition(p, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("pod in CrashLoopBackOff: Ready %+v, want False", c)
	}
	p = waitPod("running again after the back-off", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Running != nil && cs[0].Ready && cs[0].RestartCount == 2
	})
	if d := time.Since(crashed); d < 9*time.Second {
		t.Errorf("running again %v after the second crash, want after the kubelet's 10 s back-off", d)
	}
	if code, _, _ := sim.postPath(ctx, "pods/"+ns+"/no-such-pod", `{"container":"web","crash":2}`); code != 404 {
		t.Errorf("a pod that does not exist: %d, want 404", code)
	}
	if code, _, _ := sim.postPath(ctx, "pods/"+ns+"/"+target.Name, `{"container":"nope","crash":2}`); code != 400 {
		t.Errorf("a container that does not exist: %d, want 400", code)
	}
	if code, body, _ := sim.postPath(ctx, "pods/"+ns+"/"+target.Name, `{"container":"web","stop":false}`); code != 400 || !strings.Contains(body, "changes nothing") {
		t.Errorf(`{"stop":false}: %d %s, want 400 saying it changes nothing`, code, body)
	}
	seen[p.Status.PodIP] = p.Name

	// A Job completes.
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](5), Parallelism: ptr.To[int32](5),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "work", Image: "busybox:1.36"}},
			}},
		},
	}
	if _, err := admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		j, err := admin.BatchV1().Jobs(ns).Get(ctx, "batch", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, nil
			}
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("job failed: %s: %w", c.Message, framework.ErrStop)
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	jobPods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=batch"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobPods.Items) < 5 {
		t.Errorf("job: %d pods, want 5", len(jobPods.Items))
	}
	for _, p := range jobPods.Items {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("job pod %s: phase %s, want Succeeded", p.Name, p.Status.Phase)
		}
		if c := podCondition(&p, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
			t.Errorf("job pod %s: Ready %+v, want False PodCompleted", p.Name, c)
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil ||
			p.Status.ContainerStatuses[0].State.Terminated.Reason != "Completed" || p.Status.ContainerStatuses[0].State.Terminated.ExitCode != 0 {
			t.Errorf("job pod %s: container statuses %+v, want one terminated Completed with exit 0", p.Name, p.Status.ContainerStatuses)
		}
	}

	// A pod that does not fit its Node is rejected as the kubelet rejects it.
	big := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "too-big", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: prefix + "0003", Containers: []corev1.Container{{
			Name: "big", Image: "busybox:1.36",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}},
		}}},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rejected *corev1.Pod
	err = framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		var err error
		rejected, err = admin.CoreV1().Pods(ns).Get(ctx, "too-big", metav1.GetOptions{})
		return err == nil && rejected.Status.Phase == corev1.PodFailed, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if rejected.Status.Reason != "OutOfcpu" || !strings.HasPrefix(rejected.Status.Message, "Pod was rejected: Node didn't have enough resource: cpu, requested: 64000") {
		t.Errorf("rejected pod: reason %q message %q, want OutOfcpu, \"Pod was rejected: Node didn't have enough resource: cpu, requested: 64000, ...\"", rejected.Status.Reason, rejected.Status.Message)
	}

	// Scaled to 0: every pod goes.
	scale, err := admin.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 0
	if _, err := admin.AppsV1().Deployments(ns).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	scaled := time.Now()
	err = framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		if time.Since(scaled) > time.Minute {
			return false, fmt.Errorf("%d pods left a minute after the scale to 0: %w", len(l.Items), framework.ErrStop)
		}
		return len(l.Items) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("all %d pods gone %v after the scale to 0", replicas, time.Since(scaled).Round(10*time.Millisecond))
	// Every pod IP back in its Node's pool (the rejected and the Job's pods have none left either).
	err = framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		code, body, err := framework.HTTPGet(ctx, sim.base+"/simulation/nodes")
		if err != nil || code != 200 {
			return false, fmt.Errorf("GET /simulation/nodes: %d %w", code, err)
		}
		var l struct {
			Nodes []struct {
				Name   string `json:"name"`
				PodIPs int    `json:"podIPs"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			return false, err
		}
		held := 0
		for _, n := range l.Nodes {
			held += n.PodIPs
		}
		if time.Since(scaled) > time.Minute {
			return false, fmt.Errorf("%d pod IPs still given out a minute after the scale to 0: %w", held, framework.ErrStop)
		}
		return held == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitNodesReady waits until n Nodes labelled nodeagent.io/simulated=true are Ready.
func waitNodesReady(ctx context.Context, t *testing.T, client kubernetes.Interface, sim *simulator, n int, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		select {
		case <-sim.done:
			return false, fmt.Errorf("nodeagent simulate exited: %v: %w", sim.err, framework.ErrStop)
		default:
		}
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeagent.io/simulated=true"})
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if framework.IsReady(&list.Items[i]) && len(list.Items[i].Spec.PodCIDRs) > 0 {
				ready++
			}
		}
		if time.Since(start) > timeout {
			return false, fmt.Errorf("%d of %d nodes Ready with a pod CIDR after %v: %w", ready, n, timeout, framework.ErrStop)
		}
		return ready == n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkRunningPod checks a Running pod's status field by field against what the kubelet writes for a
// pod without probes, and that its IP is in its Node's podCIDR and given to no other pod (seen).
func checkRunningPod(t *testing.T, p *corev1.Pod, node *corev1.Node, seen map[string]string) {
	t.Helper()
	if node == nil {
		t.Errorf("pod %s: bound to %q, not a simulated Node", p.Name, p.Spec.NodeName)
		return
	}
	st := p.Status
	if st.Phase != corev1.PodRunning {
		t.Errorf("pod %s: phase %s, want Running", p.Name, st.Phase)
	}
	var types []string
	for _, c := range st.Conditions {
		types = append(types, string(c.Type))
		if c.Status != corev1.ConditionTrue {
			t.Errorf("pod %s: condition %s is %s (%s), want True", p.Name, c.Type, c.Status, c.Reason)
		}
	}
	// The kubelet's order (generateAPIPodStatus), PodScheduled (the scheduler's) kept where it was.
	if got, want := strings.Join(types, ","), "PodReadyToStartContainers,Initialized,Ready,ContainersReady,PodScheduled"; got != want {
		t.Errorf("pod %s: conditions %s, want %s", p.Name, got, want)
	}
	if len(st.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: %d container statuses, want 1", p.Name, len(st.ContainerStatuses))
	}
	cs := st.ContainerStatuses[0]
	// The container IDs' scheme is the runtime's name, as the Node's containerRuntimeVersion says it
	// (the kubelet's kubecontainer.ContainerID.Type).
	runtimeName, _, _ := strings.Cut(node.Status.NodeInfo.ContainerRuntimeVersion, "://")
	if !strings.HasPrefix(cs.ContainerID, runtimeName+"://") || len(cs.ContainerID) <= len(runtimeName)+3 || cs.ImageID == "" || cs.Image == "" ||
		cs.Started == nil || !*cs.Started || !cs.Ready || cs.State.Running == nil || cs.RestartCount != 0 {
		t.Errorf("pod %s: container status %+v, want running, ready, started, a %s:// ID and an imageID", p.Name, cs, runtimeName)
	}
	if st.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("pod %s: qosClass %s, want Burstable", p.Name, st.QOSClass)
	}
	if st.StartTime == nil {
		t.Errorf("pod %s: no startTime", p.Name)
	}
	var nodeIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if st.HostIP != nodeIP || len(st.HostIPs) == 0 || st.HostIPs[0].IP != nodeIP {
		t.Errorf("pod %s: hostIP %q hostIPs %v, want its Node's %q", p.Name, st.HostIP, st.HostIPs, nodeIP)
	}
	ip, err := netip.ParseAddr(st.PodIP)
	cidr, cerr := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil || cerr != nil || !cidr.Contains(ip) || len(st.PodIPs) != 1 || st.PodIPs[0].IP != st.PodIP {
		t.Errorf("pod %s: podIP %q podIPs %v, want one address in its Node's podCIDR %s", p.Name, st.PodIP, st.PodIPs, node.Spec.PodCIDR)
	}
	if other, ok := seen[st.PodIP]; ok {
		t.Errorf("pod IP %s given to both %s and %s", st.PodIP, other, p.Name)
	}
	seen[st.PodIP] = p.Name
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestSimulatePodsNodeLifecycle (issue 29): pods on simulated Nodes through the node-lifecycle
// controller, taint eviction, a DaemonSet and a drain, with the real kube-scheduler and
// kube-controller-manager:
//   - a DaemonSet gets one Running, Ready pod per simulated Node;
//   - a Node stopped through the control API goes Unknown: the node-lifecycle controller marks its
//     pods not Ready and taints it; the Deployment's pods there (toleration of 5 s) are evicted and
//     rescheduled on the healthy Nodes, and the Deployment is Available again;
//   - started again, the Node's DaemonSet pod is Ready again within a status period (KWOK issue 1464:
//     KWOK leaves it not Ready) and the evicted pods it still had are stopped and gone;
//   - `kubectl drain` of one Node honours a PodDisruptionBudget and empties it of the Deployment's pods;
//   - a Node deleted with pods bound registers again, and its new pods get addresses of its new pod CIDR
//     (issue 35 H2, checkPodIPsAfterNodeDeleted).
//
// The Deployment's pods have a plain init container without annotations (issue 35 H1: they stayed Init:0/1).
func TestSimulatePodsNodeLifecycle(t *testing.T) {
	t.Parallel()
	const (
		nodes   = 5
		prefix  = "life-"
		ns      = "sim-life"
		stopped = prefix + "0001"
		drained = prefix + "0002"
	)
	ctx := t.Context()
	dir := t.TempDir()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(dir, "cp"), ControllerManager: true, NodeMonitorGracePeriod: 20 * time.Second,
		ExtraControllerManagerArgs: []string{"--kube-api-qps=200", "--kube-api-burst=400",
			"--controllers=deployment,replicaset,daemonset,disruption,podgc,garbagecollector,taint-eviction-controller",
			"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24"},
	})
	if err := cp.StartScheduler(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.StopScheduler() })
	admin := cp.AdminClient
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, "--nodes="+strconv.Itoa(nodes), "--node-name-prefix="+prefix)
	waitNodesReady(ctx, t, admin, sim, nodes, 2*time.Minute)

	dsLabels, webLabels := map[string]string{"app": "agent"}, map[string]string{"app": "web"}
	container := []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}
	if _, err := admin.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: dsLabels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: dsLabels}, Spec: corev1.PodSpec{Containers: container}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10), Selector: &metav1.LabelSelector{MatchLabels: webLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: webLabels}, Spec: corev1.PodSpec{
				// A plain init container, no annotation (issue 35 H1: it ran for ever, Init:0/1).
				InitContainers: []corev1.Container{{Name: "init", Image: "registry.example/app:1", Command: []string{"sh", "-c", "true"}}},
				Containers:     container,
				Tolerations: []corev1.Toleration{
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)},
					{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)},
				},
			}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDaemonSetReady(ctx, t, admin, ns, "agent", nodes)
	waitDeploymentAvailable(ctx, t, admin, ns, "web", 10, nil)

	// Stop a Node: its pods go not Ready, the Deployment's are evicted and rescheduled elsewhere.
	sim.mustPost(t, stopped, `{"stopped":true}`)
	stoppedAt := time.Now()
	err := framework.WaitFor(ctx, time.Second, func() (bool, error) {
		p, err := daemonPodOn(ctx, admin, ns, stopped)
		if err != nil || p == nil {
			return false, err
		}
		if time.Since(stoppedAt) > 90*time.Second {
			return false, fmt.Errorf("daemon pod on the stopped Node still Ready 90 s after the stop: %w", framework.ErrStop)
		}
		c := podCondition(p, corev1.PodReady)
		return c != nil && c.Status == corev1.ConditionFalse, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the stopped Node's pods marked not Ready %v after the stop", time.Since(stoppedAt).Round(time.Second))
	waitDeploymentAvailable(ctx, t, admin, ns, "web", 10, func(pods []corev1.Pod) error {
		for _, p := range pods {
			if p.Spec.NodeName == stopped && p.DeletionTimestamp == nil {
				return fmt.Errorf("pod %s still on the stopped Node, not being deleted", p.Name)
			}
		}
		return nil
	})
	t.Logf("the Deployment Available again on the healthy Nodes %v after the stop", time.Since(stoppedAt).Round(time.Second))

	// Start it again: its DaemonSet pod is Ready again, its evicted pods go.
	sim.mustPost(t, stopped, `{"stopped":false}`)
	startedAt := time.Now()
	err = framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + stopped})
		if err != nil {
			return false, err
		}
		ready, others := false, 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Labels["app"] == "agent" {
				c := podCondition(p, corev1.PodReady)
				ready = c != nil && c.Status == corev1.ConditionTrue
			} else {
				others++
			}
		}
		if time.Since(startedAt) > 40*time.Second {
			return false, fmt.Errorf("40 s after the Node started again: daemon pod Ready %v, %d evicted pods left: %w", ready, others, framework.ErrStop)
		}
		return ready && others == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the restarted Node's daemon pod Ready and its evicted pods gone %v after the start", time.Since(startedAt).Round(100*time.Millisecond))

	// Drain a Node with a PodDisruptionBudget: the evictions wait for replacements.
	if _, err := admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(9)), Selector: &metav1.LabelSelector{MatchLabels: webLabels}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		pdb, err := admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.CurrentHealthy == 10, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "drain", drained, "--ignore-daemonsets", "--timeout=90s"); err != nil {
		t.Fatalf("kubectl drain: %v\n%s", err, out)
	}
	waitDeploymentAvailable(ctx, t, admin, ns, "web", 10, func(pods []corev1.Pod) error {
		for _, p := range pods {
			if p.Spec.NodeName == drained {
				return fmt.Errorf("pod %s still on the drained Node", p.Name)
			}
		}
		return nil
	})

	checkPodIPsAfterNodeDeleted(ctx, t, admin, ns, prefix+"0003")
}

// checkPodIPsAfterNodeDeleted is issue 35's H2: `kubectl delete node` with pods bound; the Node
// registers again and nodeipam gives it a pod CIDR anew. Pods started on it afterwards get addresses of
// its current spec.podCIDR (not of the old one, which nodeipam may give another Node), and no two
// pods of the namespace that are not terminal share an address.
func checkPodIPsAfterNodeDeleted(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns, name string) {
	t.Helper()
	old, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var node *corev1.Node
	err = framework.WaitFor(wctx, 500*time.Millisecond, func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(wctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // not registered again yet
		}
		node = n
		return n.UID != old.UID && n.Spec.PodCIDR != "", nil
	})
	if err != nil {
		t.Fatalf("Node %s not registered again with a pod CIDR after its deletion: %v", name, err)
	}
	cidr := netip.MustParsePrefix(node.Spec.PodCIDR)
	t.Logf("Node %s registered again: podCIDR %s, was %s", name, cidr, old.Spec.PodCIDR)
	for i := range 3 {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("after-delete-%d", i), Namespace: ns},
			Spec:       corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var last string
	err = framework.WaitFor(wctx, 500*time.Millisecond, func() (bool, error) {
		pods, err := admin.CoreV1().Pods(ns).List(wctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		owner, running := map[string]string{}, 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.Status.PodIP == "" {
				continue
			}
			if o, dup := owner[p.Status.PodIP]; dup {
				return false, fmt.Errorf("pods %s and %s share %s: %w", o, p.Name, p.Status.PodIP, framework.ErrStop)
			}
			owner[p.Status.PodIP] = p.Spec.NodeName + "/" + p.Name
			if !strings.HasPrefix(p.Name, "after-delete-") {
				continue
			}
			if ip := netip.MustParseAddr(p.Status.PodIP); !cidr.Contains(ip) {
				return false, fmt.Errorf("pod %s got %s, not of its Node's podCIDR %s (was %s): %w", p.Name, ip, cidr, old.Spec.PodCIDR, framework.ErrStop)
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		last = fmt.Sprintf("%d of 3 Running", running)
		return running == 3, nil
	})
	if err != nil {
		t.Fatalf("pods bound after the Node registered again (%s): %v", last, err)
	}
}

// daemonPodOn returns the DaemonSet "agent"'s pod on node, or nil.
func daemonPodOn(ctx context.Context, c kubernetes.Interface, ns, node string) (*corev1.Pod, error) {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) == 0 {
		return nil, err
	}
	return &pods.Items[0], nil
}

// waitDaemonSetReady waits until the DaemonSet has n Ready pods, one per Node.
func waitDaemonSetReady(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, n int32) {
	t.Helper()
	start := time.Now()
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		ds, err := c.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if time.Since(start) > time.Minute {
			return false, fmt.Errorf("daemonset %s: %d of %d ready after 1m: %w", name, ds.Status.NumberReady, n, framework.ErrStop)
		}
		return ds.Status.DesiredNumberScheduled == n && ds.Status.NumberReady == n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitDeploymentAvailable waits until the Deployment has want available replicas, updated, and its
// pods pass check (nil: any).
func waitDeploymentAvailable(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, want int32, check func([]corev1.Pod) error) {
	t.Helper()
	start := time.Now()
	var last error
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if time.Since(start) > 90*time.Second {
			return false, fmt.Errorf("deployment %s: %d of %d available after 90 s (last check: %v): %w", name, d.Status.AvailableReplicas, want, last, framework.ErrStop)
		}
		if d.Status.AvailableReplicas != want || d.Status.UpdatedReplicas != want || d.Status.ObservedGeneration != d.Generation {
			return false, nil
		}
		if check == nil {
			return true, nil
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		last = check(pods.Items)
		return last == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
