package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// nestedExpansion is issue 45's command: a of 1 KiB, b of a 1024 times (1 MiB), c of b n times, then
// exit 3 — one assignment of n MiB, with no command in between.
func nestedExpansion(n int) string {
	return "a=" + strings.Repeat("x", 1024) + "; b=" + strings.Repeat("$a", 1024) + "; c=" + strings.Repeat("$b", n) + "; exit 3"
}

// TestSimulateCommandMemory is issue 45's item 2 on a real control plane: pods whose command is the
// nested expansion (N=256, a 3.6 KB script, and N=1024, 5 KB: on the unbounded sandbox they took the
// simulator from 125 MB to 938 MB, and to 2.4 GB and the kernel's OOM kill), then a Job of 100 pods of
// the endless recursion f(){ f; }; f all at once. The simulator stays up, its RSS grows by a bounded
// amount (the sandbox's budget, 64 MiB, and the pods' own records), its Nodes stay Ready; each pod's
// command is refused with a Warning Event CommandNotInterpreted that names the memory limit, and the
// pods run as without a command (the Job completes).
func TestSimulateCommandMemory(t *testing.T) {
	t.Parallel()
	const (
		nodes  = 3
		prefix = "cmdmem-"
		ns     = "sim-cmdmem"
		// The most the simulator's RSS may grow (the sandbox's budget and the pods' records, the Go
		// runtime's slack) and its peak above the RSS before.
		maxGrowth = 96 << 20
	)
	ctx := t.Context()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{
		Dir: filepath.Join(t.TempDir(), "cp"), ControllerManager: true,
		ExtraControllerManagerArgs: []string{"--controllers=job,podgc,garbagecollector",
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
	sim := startSimulator(t, "--kubeconfig="+cp.AdminKubeconfig, fmt.Sprintf("--nodes=%d", nodes), "--node-name-prefix="+prefix)
	waitNodesReady(ctx, t, admin, sim, nodes, 2*time.Minute)
	rss := func() int64 {
		t.Helper()
		st, err := framework.ReadProcStats(sim.pid)
		if err != nil {
			t.Fatal(err)
		}
		return st.RSS
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	// warned waits for the CommandNotInterpreted Event of every pod named, and returns their messages.
	warned := func(names []string, timeout time.Duration) map[string]string {
		t.Helper()
		msgs := map[string]string{}
		start := time.Now()
		err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
			select {
			case <-sim.done:
				return false, fmt.Errorf("nodeagent simulate exited: %v: %w", sim.err, framework.ErrStop)
			default:
			}
			evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=CommandNotInterpreted"})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				msgs[e.InvolvedObject.Name] = e.Message
			}
			if time.Since(start) > timeout {
				return false, fmt.Errorf("%d of %d pods warned after %v: %w", len(msgs), len(names), timeout, framework.ErrStop)
			}
			for _, n := range names {
				if _, ok := msgs[n]; !ok {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}

	// The nested expansions, N=256 and N=1024, on each Node.
	before := rss()
	var names []string
	for _, n := range []int{256, 1024} {
		for i := range nodes {
			name := fmt.Sprintf("nested-%d-%d", n, i)
			names = append(names, name)
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: corev1.PodSpec{NodeName: fmt.Sprintf("%s%04d", prefix, i), RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "busybox:1.37", Command: []string{"sh", "-c", nestedExpansion(n)}}}},
			}
			if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, msg := range warned(names, time.Minute) {
		if !strings.Contains(msg, "would hold more than 1048576 bytes") {
			t.Errorf("pod %s: Event %q, want the memory limit", name, msg)
		}
	}
	after := rss()
	t.Logf("nested expansions N=256 and N=1024 on %d Nodes: RSS %s before, %s after, peak %s", nodes, mib(before), mib(after), mib(peakRSS(t, sim.pid)))
	if after-before > maxGrowth {
		t.Errorf("the simulator's RSS grew from %s to %s, want at most %s more", mib(before), mib(after), mib(maxGrowth))
	}
	if peak := peakRSS(t, sim.pid); peak-before > maxGrowth {
		t.Errorf("the simulator's peak RSS %s, %s before, want at most %s more", mib(peak), mib(before), mib(maxGrowth))
	}
	waitNodesReady(ctx, t, admin, sim, nodes, 30*time.Second)

	// 100 pods of the endless recursion at once: a Job that completes (each pod runs as without a
	// command: exit 0).
	before = rss()
	job := e2eTestJob("recursion", "f(){ f; }; f", corev1.RestartPolicyNever, 100, 100, 0, "")
	job.Spec.Template.Spec.Volumes, job.Spec.Template.Spec.Containers[0].VolumeMounts = nil, nil
	job.Spec.Template.Spec.Containers[0].SecurityContext = nil
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	created := time.Now()
	if _, err := admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		j, err := admin.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if time.Since(created) > 2*time.Minute {
			return false, fmt.Errorf("job recursion: %d succeeded, %d failed after 2 minutes: %w", j.Status.Succeeded, j.Status.Failed, framework.ErrStop)
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after = rss()
	t.Logf("a Job of 100 pods of f(){ f; }; f: complete after %v; RSS %s before, %s after, peak %s", time.Since(created).Round(time.Millisecond),
		mib(before), mib(after), mib(peakRSS(t, sim.pid)))
	if after-before > maxGrowth {
		t.Errorf("the simulator's RSS grew from %s to %s, want at most %s more", mib(before), mib(after), mib(maxGrowth))
	}
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=recursion"})
	if err != nil {
		t.Fatal(err)
	}
	var podNames []string
	for _, p := range pods.Items {
		podNames = append(podNames, p.Name)
	}
	for name, msg := range warned(podNames, 30*time.Second) {
		if strings.HasPrefix(name, "recursion-") && !strings.Contains(msg, "would hold more than 1048576 bytes (calling f") {
			t.Errorf("pod %s: Event %q, want the memory limit of the recursion", name, msg)
		}
	}
	waitNodesReady(ctx, t, admin, sim, nodes, 30*time.Second)
}

// peakRSS is pid's peak RSS (VmHWM of /proc/<pid>/status) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM of %d: %v", pid, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
