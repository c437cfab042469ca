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
// repository's root until it says the Nodes are Ready, checks that it printed README's kubectl commands,
// runs them, and checks that the Deployment's 40 pods are Running, each on a simulated Node with an IP of
// its Node's pod CIDR. Then SIGINT (Ctrl-C) to make's process group stops everything within 30 s.
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
	cmd := exec.Command("bash", "-c", up)
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
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
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

	// README's kubectl commands, as written, from the repository's root.
	var last string
	for _, l := range kubectlLines {
		c := exec.CommandContext(ctx, "bash", "-c", l)
		c.Dir = root
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", l, err, b)
		}
		last = string(b)
	}
	t.Logf("%s:\n%s", kubectlLines[len(kubectlLines)-1], last)

	// The Deployment's pods: Running, each on a simulated Node, with an IP of its pod CIDR.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(root, "_output", "simulate", "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
		if !strings.Contains(last, p.Name) {
			t.Errorf("pod %s is not in the output of %q", p.Name, kubectlLines[len(kubectlLines)-1])
		}
	}

	// Ctrl-C: make exits at once; localup stops what it started, then exits: the process group empties.
	if !interrupt() {
		t.Fatalf("%s: its processes still running 30 s after SIGINT", up)
	}
	if !strings.Contains(output(), "localup: stopping") {
		t.Errorf("%s: SIGINT did not stop it cleanly (no \"localup: stopping\")", up)
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
