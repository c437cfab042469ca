package quickstart

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/test/framework"
)

// readmeBlocks returns the command lines of the ```sh blocks between <!-- BEGIN name --> and
// <!-- END name --> in README.md, one slice per block, comments after " # " removed.
func readmeBlocks(t *testing.T, root, name string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "<!-- BEGIN "+name+" -->")
	section, _, ok2 := strings.Cut(section, "<!-- END "+name+" -->")
	if !ok || !ok2 {
		t.Fatalf("README.md has no %s section", name)
	}
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, cur)
		case in:
			if i := strings.Index(line, " # "); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" {
				cur = append(cur, line)
			}
		}
	}
	return blocks
}

// TestSimulationQuickStart runs README's simulation quick start as written: `make up SIMULATE=20` from the
// repository's root until it says the Nodes are Ready, checks that it printed README's commands, and runs
// each as written (issue 47): the Deployment's 40 pods are Running, each on a simulated Node with an IP
// of its Node's pod CIDR; `kubectl logs -f` streams the pods' lines (stopped after the first, as Ctrl-C
// would); `kubectl exec ... -- env` prints the annotation's environment; `kubectl port-forward` + curl
// gets the simulator's in-memory answer naming the pod ("(simulated)", issue 45's contract); `kubectl top
// pods` answers (retried until metrics-server's first scrape); the HPA, once the control API raised the
// pods' CPU, scales the Deployment out past 40 (`kubectl get hpa --watch` stopped then). Then SIGINT
// (Ctrl-C) to make's process group stops everything within 30 s.
//
// The simulated Nodes' address (their kubelet API, which the API server's node proxy refuses on loopback)
// is quickStartAddress, added to lo and given to localup as LOCALUP_NODE_IP: the test sends no traffic
// to this machine's other interfaces.
func TestSimulationQuickStart(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, root, "quick-start (simulation)")
	if len(blocks) != 2 || len(blocks[0]) != 1 || len(blocks[1]) == 0 {
		t.Fatalf("README's simulation quick start: want a block with the make command and a block of kubectl commands, got %q", blocks)
	}
	up, kubectlLines := blocks[0][0], blocks[1]
	if !strings.HasPrefix(up, "make up SIMULATE=") {
		t.Fatalf("README's simulation quick start runs %q, want make up SIMULATE=N", up)
	}

	// `make up SIMULATE=N`, in a process group of its own, as a shell in a terminal would run it; its output
	// goes to a file (a pipe would keep cmd.Wait waiting for anything that inherited it).
	outPath := filepath.Join(t.TempDir(), "make-up.log")
	outFile, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	output := func() string { b, _ := os.ReadFile(outPath); return string(b) }
	addLoopbackAddress(t, quickStartAddress)
	cmd := exec.Command("bash", "-c", up)
	cmd.Env = append(os.Environ(), "LOCALUP_NODE_IP="+quickStartAddress)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = outFile, outFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pgid := cmd.Process.Pid
	// interrupt sends SIGINT to the process group, as Ctrl-C does, and returns once the group is empty
	// (localup stops what it started, then exits), or false after 30 s.
	interrupt := func() bool {
		_ = syscall.Kill(-pgid, syscall.SIGINT)
		deadline := time.Now().Add(30 * time.Second)
		for syscall.Kill(-pgid, 0) == nil {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(100 * time.Millisecond)
		}
		return true
	}
	t.Cleanup(func() {
		if !interrupt() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("%s:\n%s", up, output())
		}
	})
	const ready = "simulated Nodes are Ready; press Ctrl-C to stop"
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	err = framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("%s exited (%v): %w", up, err, framework.ErrStop)
		default:
		}
		return strings.Contains(output(), ready), nil
	})
	if err != nil {
		t.Fatalf("%s: never said %q: %v", up, ready, err)
	}
	printed := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(output()))
	for sc.Scan() {
		printed[strings.TrimSpace(sc.Text())] = true
	}
	for _, l := range kubectlLines {
		if !printed[l] {
			t.Errorf("README's command %q: %s did not print it", l, up)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(root, "_output", "simulate", "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// README's commands, as written, from the repository's root, one after the other; those that keep
	// running (logs -f, get --watch) until what they show is there.
	var getPods string
	for _, l := range kubectlLines {
		switch {
		case strings.Contains(l, " logs -f "):
			out := runUntil(ctx, t, root, l, time.Minute, func(out string) bool { return strings.Contains(out, "GET / 200 container=nginx") })
			t.Logf("%s:\n%s", l, out)
		case strings.Contains(l, " --watch"):
			// The HPA scales the Deployment out once metrics-server has seen the raised usage.
			out := runUntil(ctx, t, root, l, 4*time.Minute, func(string) bool {
				dep, err := client.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
				return err == nil && *dep.Spec.Replicas > 40
			})
			t.Logf("%s:\n%s", l, out)
		case strings.Contains(l, " top pods"):
			// metrics-server answers after its first scrape of the pods (15 s resolution).
			start := time.Now()
			var out string
			if err := framework.WaitFor(ctx, 2*time.Second, func() (bool, error) {
				b, err := runLine(ctx, root, l)
				out = b
				return err == nil && strings.Contains(out, "web-"), nil
			}); err != nil {
				t.Fatalf("%s: %v; last output:\n%s", l, err, out)
			}
			t.Logf("%s (answered after %.0f s):\n%s", l, time.Since(start).Seconds(), out)
		case strings.Contains(l, " port-forward "):
			// Issue 45's contract: a simulated pod's port answers HTTP in memory, naming the pod. An error
			// here does not stop the commands after it.
			out, err := runLine(ctx, root, l)
			if err != nil || !strings.Contains(out, "(simulated)") || !strings.Contains(out, "pod default/web-") {
				t.Errorf("%s: %v, %q: want the simulator's answer naming the pod and \"(simulated)\"", l, err, out)
			}
		default:
			out, err := runLine(ctx, root, l)
			if err != nil {
				t.Fatalf("%s: %v\n%s", l, err, out)
			}
			switch {
			case strings.Contains(l, " get pods -o wide"):
				getPods = out
				checkPods(ctx, t, client, l, getPods)
			case strings.Contains(l, " exec "):
				if !strings.Contains(out, "NGINX_VERSION=") {
					t.Errorf("%s: %q, want the environment of docs/examples/web.yaml's nodeagent.io/exec", l, out)
				}
			}
		}
	}
	if getPods == "" {
		t.Errorf("README's commands do not list the pods (get pods -o wide)")
	}

	// Ctrl-C: make exits at once; localup stops what it started, then exits: the process group empties.
	if !interrupt() {
		t.Fatalf("%s: its processes still running 30 s after SIGINT", up)
	}
	if !strings.Contains(output(), "localup: stopping") {
		t.Errorf("%s: SIGINT did not stop it cleanly (no \"localup: stopping\")", up)
	}
}

// quickStartAddress is the simulated Nodes' --node-ip in TestSimulationQuickStart: in 198.18.0.0/15
// (RFC 2544, benchmarking), on no real network, added to lo; not test/integration's 198.18.0.1, which
// TestShards adds and removes.
const quickStartAddress = "198.18.0.47"

// addLoopbackAddress adds ip/32 to lo for the test's life ("File exists": a run killed before its
// cleanup left it; it serves as well).
func addLoopbackAddress(t *testing.T, ip string) {
	t.Helper()
	if out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
		t.Fatalf("adding %s to lo (the tests run as root, with iproute2): %v: %s", ip, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", ip+"/32", "dev", "lo").Run() })
}

// runLine runs one README line with bash from dir and returns its output.
func runLine(ctx context.Context, dir, line string) (string, error) {
	c := exec.CommandContext(ctx, "bash", "-c", line)
	c.Dir = dir
	b, err := c.CombinedOutput()
	return string(b), err
}

// runUntil runs a README line that keeps running (kubectl logs -f, get --watch) in a process group of its
// own until done(its output so far) holds, then stops it as Ctrl-C would, and returns its output; it fails
// the test if the line exits first or done does not hold within timeout.
func runUntil(ctx context.Context, t *testing.T, dir, line string, timeout time.Duration, done func(string) bool) string {
	t.Helper()
	outPath := filepath.Join(t.TempDir(), "out.log")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := exec.Command("bash", "-c", line)
	c.Dir = dir
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	output := func() string { b, _ := os.ReadFile(outPath); return string(b) }
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = framework.WaitFor(wctx, time.Second, func() (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("exited (%v): %w", err, framework.ErrStop)
		default:
		}
		return done(output()), nil
	})
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	if err != nil {
		t.Fatalf("%s: %v; output:\n%s", line, err, output())
	}
	return output()
}

// checkPods checks that the Deployment's pods are Running and Ready, each on a simulated Node with an IP
// of its pod CIDR, and named in getPods (the output of line, README's get pods).
func checkPods(ctx context.Context, t *testing.T, client kubernetes.Interface, line, getPods string) {
	t.Helper()
	dep, err := client.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	if want := int(*dep.Spec.Replicas); len(pods.Items) != want || want == 0 {
		t.Errorf("%d pods of Deployment web, want %d", len(pods.Items), want)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		node, err := client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s on node %q: %v", p.Name, p.Spec.NodeName, err)
			continue
		}
		if node.Labels["nodeagent.io/simulated"] != "true" {
			t.Errorf("pod %s on node %s, which is not simulated", p.Name, node.Name)
		}
		if p.Status.Phase != corev1.PodRunning || !podReady(p) {
			t.Errorf("pod %s: phase %s, conditions %+v: want Running and Ready", p.Name, p.Status.Phase, p.Status.Conditions)
		}
		if !inPodCIDR(node, p.Status.PodIP) {
			t.Errorf("pod %s: IP %q, not of its node %s's pod CIDR %v", p.Name, p.Status.PodIP, node.Name, node.Spec.PodCIDRs)
		}
		if !strings.Contains(getPods, p.Name) {
			t.Errorf("pod %s is not in the output of %q", p.Name, line)
		}
	}
}

// inPodCIDR reports whether ip is an address of one of node's pod CIDRs.
func inPodCIDR(node *corev1.Node, ip string) bool {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, c := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Contains(addr) {
			return true
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
