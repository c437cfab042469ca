//go:build scale

package integration_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestPodWatchScale (issue 29, item 5) measures the two ways a simulator can watch the pods of its Nodes,
// in this test's own process against a real API server: one watch of every bound pod (field selector
// spec.nodeName!=, what `nodeagent simulate` does) or one watch per Node (spec.nodeName=<node>, the
// kubelet's). For $PODWATCH_NODES Node names (default 1000) and $PODWATCH_PODS pods bound to them
// (default 10000, created with the admin client), each way is started on its own: the time until its
// caches have synced and every pod has been seen, the heap after GC, the goroutines, and the CPU of the
// whole test process from start to all seen. Run with make bench-sim-pods ... or:
// go test -tags scale -run TestPodWatchScale -v ./test/integration/
func TestPodWatchScale(t *testing.T) {
	nodes, pods := envInt(t, "PODWATCH_NODES", 1000), envInt(t, "PODWATCH_PODS", 10000)
	ctx := t.Context()
	cp := framework.StartTestControlPlane(ctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(t.TempDir(), "cp")})
	const ns = "watch"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cfg := *cp.AdminConfig
	cfg.QPS, cfg.Burst = -1, 0 // the test's own client: no client-side limit
	client := kubernetes.NewForConfigOrDie(&cfg)
	nodeName := func(i int) string { return fmt.Sprintf("watch-%04d", i) }
	start := time.Now()
	work := make(chan int)
	done := make(chan error, 32)
	for range 32 {
		go func() {
			for i := range work {
				_, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i)},
					Spec: corev1.PodSpec{NodeName: nodeName(i % nodes), AutomountServiceAccountToken: ptr.To(false),
						Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for i := range pods {
		select {
		case work <- i:
		case err := <-done: // a creator failed: stop here
			t.Fatal(err)
		}
	}
	close(work)
	for range 32 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d pods bound to %d Node names created in %v", pods, nodes, time.Since(start).Round(100*time.Millisecond))

	measure := func(name string, selectors []string) {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		cpu0 := processCPU()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var seen atomic.Int64
		start := time.Now()
		var factories []informers.SharedInformerFactory
		for _, sel := range selectors {
			f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel }))
			inf := f.Core().V1().Pods().Informer()
			_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen.Add(1) }})
			f.Start(wctx.Done())
			factories = append(factories, f)
		}
		err := framework.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
			if time.Since(start) > 5*time.Minute {
				return false, fmt.Errorf("%d of %d pods seen after 5 min: %w", seen.Load(), pods, framework.ErrStop)
			}
			return seen.Load() >= int64(pods), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		cpu := processCPU() - cpu0
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		t.Logf("%s: %d informers, all %d pods seen %v after start; heap +%.1f MiB after GC (%.2f KiB per pod), +%d goroutines, %.2f CPU-s in this process",
			name, len(selectors), pods, took.Round(10*time.Millisecond), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20),
			float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(pods)/1024, runtime.NumGoroutine()-g0, cpu)
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
	}
	measure("one watch of the bound pods", []string{fields.OneTermNotEqualSelector("spec.nodeName", "").String()})
	perNode := make([]string, nodes)
	for i := range perNode {
		perNode[i] = fields.OneTermEqualSelector("spec.nodeName", nodeName(i)).String()
	}
	measure("one watch per Node", perNode)
}

// processCPU returns this process's user+system CPU time in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
