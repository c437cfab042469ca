package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// kubemarkRun is what kubemark's hollow nodes cost: the kubelet's own code, one process a Node.
type kubemarkRun struct {
	nodes, podsPerNode int
	ready              time.Duration // all Ready after the first start
	idle               phase         // no pod, --kubemark-idle long
	create             phase         // the pods bound directly, until all Ready
	loaded             phase         // with every pod running, as long as idle
	del                phase
	dup                []string
}

// runKubemark starts o.kubemark hollow nodes (framework.StartHollowNode: kubemark --morph=kubelet, a fake
// runtime) on a control plane of their own, each with its node identity, measures them idle, binds
// o.kubemarkPods pods to each (as scenario 1 binds them), measures them loaded, and deletes the pods.
func runKubemark(ctx context.Context, o options) (*kubemarkRun, error) {
	names := make([]string, o.kubemark)
	for i := range names {
		names[i] = fmt.Sprintf("hollow-%04d", i)
	}
	e, err := newSysEnv(ctx, o, systemKubemark, "hollow", 24, false, o.kubemark, names...)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	e.scenario = "kubemark"
	k := &kubemarkRun{nodes: o.kubemark, podsPerNode: o.kubemarkPods}
	t0 := time.Now()
	for _, name := range names {
		h, err := framework.StartHollowNode(ctx, framework.HollowNodeOptions{
			Dir: filepath.Join(e.dir, name), NodeName: name, Kubeconfig: e.cp.KubeconfigFor(name),
			Args: []string{"--v=1", fmt.Sprintf("--max-pods=%d", max(110, o.kubemarkPods))},
		})
		if err != nil {
			return nil, err
		}
		e.hollow = append(e.hollow, h)
	}
	if err := e.wait(ctx, 5*time.Minute, func() (bool, string) {
		select {
		case <-e.nodes.AllReady():
			return true, ""
		default:
			return false, fmt.Sprintf("%d of %d hollow Nodes Ready", e.nodes.ReadyCount(), o.kubemark)
		}
	}); err != nil {
		return nil, err
	}
	k.ready = e.nodes.ReadyAt().Sub(t0)
	fmt.Printf("    all %d hollow Nodes Ready %v after the first start\n", o.kubemark, k.ready.Round(100*time.Millisecond))
	time.Sleep(20 * time.Second)
	window := func(name string) (phase, error) {
		from := time.Now()
		return e.measurePhase(ctx, name, func() error { return nil }, func() (bool, string) {
			return time.Since(from) >= o.kubemarkWindow, name
		})
	}
	if k.idle, err = window("idle"); err != nil {
		return nil, err
	}
	total := o.kubemark * o.kubemarkPods
	labels := map[string]string{"app": "hollow"}
	k.create, err = e.measurePhase(ctx, "create", func() error {
		return createPods(ctx, e.client, total, o.creatorsPool, func(i int) *corev1.Pod {
			spec := benchPod()
			spec.NodeName = names[i%len(names)]
			// kubemark's fake image service pulls nothing: IfNotPresent, as the pod fidelity test runs it.
			spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("hollow-%05d", i), Namespace: benchNamespace, Labels: labels}, Spec: spec}
		})
	}, func() (bool, string) {
		ready, live := e.pods.counts()
		return ready == total, fmt.Sprintf("%d of %d pods Ready (%d exist)", ready, total, live)
	})
	if err != nil {
		return nil, err
	}
	time.Sleep(20 * time.Second)
	if k.loaded, err = window("loaded"); err != nil {
		return nil, err
	}
	k.del, err = e.measurePhase(ctx, "delete", func() error {
		return parallel(o.creatorsPool, total, func(i int) error {
			return e.client.CoreV1().Pods(benchNamespace).Delete(ctx, fmt.Sprintf("hollow-%05d", i), metav1.DeleteOptions{})
		})
	}, func() (bool, string) {
		_, live := e.pods.counts()
		return live == 0, fmt.Sprintf("%d pods left", live)
	})
	if err != nil {
		return nil, err
	}
	k.dup = e.pods.duplicates()
	return k, nil
}

// render writes kubemark's table, per Node, beside nodeagent's and KWOK's per-Node figures of
// scenarios 2 and 3 (runs): the same pods per Node on average (10 by default).
func (k *kubemarkRun) render(b *strings.Builder, runs []*systemRun, o options) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	pods := k.nodes * k.podsPerNode
	p("**The price of fidelity: kubemark's hollow node** (k8s.io/kubernetes cmd/kubemark, `--morph=kubelet`: the kubelet's own code over a fake runtime, one process a Node): %d hollow nodes on a control plane of their own, %d pods bound to each (%d in all), windows of %v idle and loaded. Per Node, beside the simulators' per-Node figures of scenarios 2 and 3 (%d Nodes, %d pods: %d per Node on average).",
		k.nodes, k.podsPerNode, pods, o.kubemarkWindow, o.nodes, o.deployments*o.replicas, o.deployments*o.replicas/o.nodes)
	p("")
	fmt.Fprintf(b, "| | kubemark hollow node |")
	for _, r := range runs {
		fmt.Fprintf(b, " %s |", systemTitle(r.system))
	}
	b.WriteString("\n|---|---:|")
	for range runs {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	row := func(name, km string, f func(r *systemRun) string) {
		fmt.Fprintf(b, "| %s | %s |", name, km)
		for _, r := range runs {
			fmt.Fprintf(b, " %s |", f(r))
		}
		b.WriteString("\n")
	}
	kn, sn := float64(k.nodes), float64(o.nodes)
	row("all Nodes Ready after start (s)", secs(k.ready), func(r *systemRun) string { return secs(r.nodesReady) })
	row("RSS per Node, no pods (MiB)", fmt.Sprintf("%.2f", mib(k.idle.cost.rssMean)/kn), func(r *systemRun) string { return fmt.Sprintf("%.3f", mib(r.idleRSS)/sn) })
	row("CPU per Node, no pods (millicores)", fmt.Sprintf("%.2f", k.idle.cost.cores*1000/kn), func(r *systemRun) string { return "–" })
	row("**RSS per Node with its pods (MiB)**", fmt.Sprintf("**%.2f**", mib(k.loaded.cost.rssMean)/kn), func(r *systemRun) string {
		return fmt.Sprintf("**%.3f**", mib(r.steady.cost.rssMean)/sn)
	})
	row("**CPU per Node with its pods (millicores)**", fmt.Sprintf("**%.2f**", k.loaded.cost.cores*1000/kn), func(r *systemRun) string {
		return fmt.Sprintf("**%.3f**", r.steady.cost.cores*1000/sn)
	})
	row("CPU-s per 1000 pod starts", perThousand(k.create.cost.cpu, k.create.starts.ready), func(r *systemRun) string {
		return perThousand(r.create.cost.cpu, r.create.starts.ready)
	})
	row("bind → Ready p50 / p99 (s)", secs(pct(k.create.starts.latencies, 0.5))+" / "+secs(pct(k.create.starts.latencies, 0.99)), func(r *systemRun) string {
		return secs(pct(r.create.starts.latencies, 0.5)) + " / " + secs(pct(r.create.starts.latencies, 0.99))
	})
	row("pod writes per pod start", perPod(k.create.cost, k.create.starts.ready), func(r *systemRun) string { return perPod(r.create.cost, r.create.starts.ready) })
	row("pod writes per pod delete", perPod(k.del.cost, k.del.deletes.gone), func(r *systemRun) string { return perPod(r.del.cost, r.del.deletes.gone) })
	row("writes, pod starts", podWriteKinds(k.create.cost), func(r *systemRun) string { return podWriteKinds(r.create.cost) })
	row("pods stuck (start; delete)", stuckText(k.create.starts.stuck)+"; "+stuckText(k.del.deletes.stuck), func(r *systemRun) string {
		return stuckText(r.create.starts.stuck) + "; " + stuckText(r.del.deletes.stuck)
	})
	row("pod IPs held by two live pods", dupText(k.dup), func(r *systemRun) string { return dupText(r.dup) })
	p("")
}
