// Command startprof times nodeagent's cold starts against the harness (test/framework: etcd,
// kube-apiserver, kube-controller-manager, containerd), as `make bench` times them (exec → Ready=True seen
// by a watch, the Node and its Lease deleted before each start), without the reference kubelet or the
// steady-state part, and optionally with a start-up trace and CPU profile per start
// (NODEAGENT_STARTUP_TRACE, NODEAGENT_STARTUP_CPUPROFILE: merge them with `go tool pprof -top DIR/cpu-*.pprof`).
// With -bins it alternates binaries start by start, so that an A/B comparison sees the same machine load:
//
//	go build -tags grpcnotrace -o /tmp/a ./cmd/nodeagent   # and /tmp/b from another commit
//	go run ./hack/startprof -n 40 -prof=false -bins /tmp/a,/tmp/b
//
// The agent runs without its kubelet API (framework.StartAgent's --port=0) unless -args or a binary's
// own flags (-bins PATH@--port=N) turn it on, as make bench does (--port=<free port>).
//
// It prints each start and the median, min and max per binary (the first start of each is not counted).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeagent/nodeagent/test/framework"
)

func main() {
	n := flag.Int("n", 20, "timed starts (after one untimed start of each binary)")
	dir := flag.String("dir", "/tmp/startprof", "working directory, emptied first: logs, traces, profiles")
	v := flag.Int("v", 2, "nodeagent's -v")
	prof := flag.Bool("prof", true, "write a start-up trace and CPU profile of each start to the directory")
	bins := flag.String("bins", "", "comma-separated nodeagent binaries to alternate, copied to "+
		"$NODEAGENT_BINARY before each start (default: the one framework.BuildAgent builds); "+
		"PATH@K=V[@K=V...] also sets those environment variables for that binary's starts, and PATH@--flag=V "+
		"adds that flag to its starts after -args (e.g. /tmp/a@--port=0,/tmp/a: one binary with and without its kubelet API)")
	extra := flag.String("args", "", "comma-separated extra nodeagent flags for every start (e.g. --port=10250,--cert-dir=/tmp/certs: "+
		"its kubelet API on, the self-signed certificate kept across starts as on a node)")
	idle := flag.Duration("idle", 0, "after the last start, keep that agent running this long, then write its heap "+
		"(after a GC) and goroutine profiles from the healthz port to the directory (adds --enable-profiling-handler)")
	flag.Parse()
	ctx := context.Background()
	os.RemoveAll(*dir)
	os.MkdirAll(*dir, 0o755)
	const node = "prof-node"
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: filepath.Join(*dir, "cp"), NodeNames: []string{node}, ControllerManager: true})
	if err != nil {
		panic(err)
	}
	defer cp.Stop()
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: filepath.Join(*dir, "ctrd"), CNI: true})
	if err != nil {
		panic(err)
	}
	defer ctrd.Close()
	time.Sleep(2 * time.Second)
	cs := cp.AdminClient
	var binList []string
	if *bins != "" {
		binList = strings.Split(*bins, ",")
		if os.Getenv("NODEAGENT_BINARY") == "" {
			_ = os.Setenv("NODEAGENT_BINARY", filepath.Join(*dir, "nodeagent"))
		}
	}
	byBin := map[string][]time.Duration{}
	var times []time.Duration
	for i := 0; i < *n+max(1, len(binList)); i++ {
		bin := ""
		if len(binList) > 0 {
			bin = binList[i%len(binList)]
			path, _, _ := strings.Cut(bin, "@")
			b, err := os.ReadFile(path)
			if err != nil {
				panic(err)
			}
			dst := os.Getenv("NODEAGENT_BINARY")
			if err := os.WriteFile(dst+".tmp", b, 0o755); err != nil {
				panic(err)
			}
			if err := os.Rename(dst+".tmp", dst); err != nil {
				panic(err)
			}
		}
		_ = cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
		_ = cs.CoordinationV1().Leases("kube-node-lease").Delete(ctx, node, metav1.DeleteOptions{})
		for {
			_, e1 := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			_, e2 := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
			if apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		sel := fields.OneTermEqualSelector("metadata.name", node).String()
		list, _ := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel})
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			panic(err)
		}
		var env []string
		if *prof && i > 0 {
			env = []string{"NODEAGENT_STARTUP_TRACE=" + filepath.Join(*dir, fmt.Sprintf("trace-%02d.out", i)),
				"NODEAGENT_STARTUP_CPUPROFILE=" + filepath.Join(*dir, fmt.Sprintf("cpu-%02d.pprof", i))}
		}
		var binArgs []string
		if _, kvs, ok := strings.Cut(bin, "@"); ok {
			for _, kv := range strings.Split(kvs, "@") {
				if strings.HasPrefix(kv, "-") {
					binArgs = append(binArgs, kv)
				} else {
					env = append(env, kv)
				}
			}
		}
		adir := filepath.Join(*dir, fmt.Sprintf("agent-%02d", i))
		// The Ready event's time is taken as it arrives, not after StartAgent returns (which waits
		// for the agent's HTTP server, polling every 50 ms), as make bench takes it.
		readyAt := make(chan time.Time, 1)
		go func() {
			for ev := range w.ResultChan() {
				now := time.Now()
				if nd, ok := ev.Object.(*corev1.Node); ok && ev.Type != watch.Deleted && framework.IsReady(nd) {
					readyAt <- now
					return
				}
			}
			close(readyAt)
		}()
		start := time.Now()
		a, err := framework.StartAgent(ctx, framework.AgentOptions{Dir: adir, NodeName: node, Kubeconfig: cp.KubeconfigFor(node),
			RuntimeEndpoint: ctrd.Endpoint, Env: env, Args: append(args(*v, *extra, *idle > 0), binArgs...)})
		if err != nil {
			panic(err)
		}
		at := <-readyAt
		w.Stop()
		d := at.Sub(start)
		fmt.Printf("start %2d %s: Ready after %v (pid %d, log %s)\n", i, bin, d.Round(100*time.Microsecond), a.PID, a.LogPath)
		time.Sleep(1200 * time.Millisecond) // let the trace finish
		if *idle > 0 && i == *n+max(1, len(binList))-1 {
			idleProfiles(ctx, a, *idle, *dir)
		}
		_ = a.Stop()
		if i >= max(1, len(binList)) {
			times = append(times, d)
			byBin[bin] = append(byBin[bin], d)
		}
	}
	for b, ts := range byBin {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		fmt.Printf("%s: n=%d median %v min %v max %v\n", b, len(ts), ts[len(ts)/2].Round(100*time.Microsecond), ts[0].Round(100*time.Microsecond), ts[len(ts)-1].Round(100*time.Microsecond))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("median %v min %v max %v\n", times[len(times)/2].Round(100*time.Microsecond), times[0], times[len(times)-1])
}

// args are the agent's flags: -v, the extra ones, and the profiling handler when profiles are taken.
func args(v int, extra string, profiling bool) []string {
	out := []string{fmt.Sprintf("-v=%d", v)}
	if extra != "" {
		out = append(out, strings.Split(extra, ",")...)
	}
	if profiling {
		out = append(out, "--enable-profiling-handler")
	}
	return out
}

// idleProfiles waits d, then writes the agent's heap profile (after a GC), its goroutines and its
// /proc status (VmRSS, RssAnon, RssFile) to dir.
func idleProfiles(ctx context.Context, a *framework.Agent, d time.Duration, dir string) {
	fmt.Printf("idle %v, then profiles of pid %d\n", d, a.PID)
	time.Sleep(d)
	for name, path := range map[string]string{"heap-idle.pprof": "/debug/pprof/heap?gc=1", "goroutines-idle.txt": "/debug/pprof/goroutine?debug=1"} {
		_, body, err := a.Get(ctx, path)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			continue
		}
		_ = os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.PID)); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "RssAnon") || strings.HasPrefix(l, "RssFile") || strings.HasPrefix(l, "Threads") {
				fmt.Println(l)
			}
		}
	}
}
