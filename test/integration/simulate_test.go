package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/test/framework"
)

// simTemplate is the Node template of TestSimulate: everything the simulation takes from a template.
const simTemplate = `apiVersion: v1
kind: Node
metadata:
  labels:
    topology.kubernetes.io/zone: sim-a
    kubernetes.io/hostname: ignored
spec:
  taints:
  - {key: example.com/simulated, value: "yes", effect: PreferNoSchedule}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110", ephemeral-storage: 200Gi, example.com/gpu: "2"}
  allocatable: {cpu: "7", memory: 30Gi}
  nodeInfo:
    kernelVersion: 6.1.0-28-amd64
    osImage: Debian GNU/Linux 12 (bookworm)
    containerRuntimeVersion: containerd://1.7.24
  conditions:
  - {type: KernelDeadlock, status: "False", reason: KernelHasNoDeadlock, message: kernel has no deadlock}
  - {type: Ready, status: "False"}
  images:
  - names: [registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a, registry.k8s.io/pause:3.10]
    sizeBytes: 320368
`

// simulator is a running `nodeagent simulate` process.
type simulator struct {
	pid     int
	base    string // http://127.0.0.1:<port>
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// startSimulator runs `nodeagent simulate` with the args in its own process group, logging to a file in
// the test's directory, and stops it (SIGTERM, then SIGKILL after 20 s) when the test ends.
func startSimulator(t *testing.T, args ...string) *simulator {
	t.Helper()
	return startSimulatorUnder(t, nil, args...)
}

// startSimulatorUnder is startSimulator through the command wrap, which execs its last argument
// with the arguments that follow (prlimit --nofile=N:N --, to run it with fewer descriptors).
func startSimulatorUnder(t *testing.T, wrap []string, args ...string) *simulator {
	t.Helper()
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	port := framework.FreePort()
	s := &simulator{base: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: filepath.Join(t.TempDir(), "simulate.log"), done: make(chan struct{})}
	logf, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet API is on by default; a test that wants it gives --port (a later flag wins).
	args = append([]string{"simulate", "--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(port), "-v=2", "--port=0"}, args...)
	s.cmd = exec.Command(bin, args...)
	if len(wrap) > 0 {
		s.cmd = exec.Command(wrap[0], append(append(wrap[1:len(wrap):len(wrap)], bin), args...)...)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.pid = s.cmd.Process.Pid
	go func() { s.err = s.cmd.Wait(); logf.Close(); close(s.done) }()
	t.Cleanup(func() {
		if err := s.stop(20 * time.Second); err != nil {
			t.Errorf("nodeagent simulate did not exit cleanly: %v", err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(s.logPath)
			t.Logf("nodeagent simulate log (tail):\n%s", framework.TailLines(string(b), 30))
		}
	})
	return s
}

// stop sends SIGTERM and waits for the exit, SIGKILLing the process group after grace.
func (s *simulator) stop(grace time.Duration) error {
	_ = syscall.Kill(s.pid, syscall.SIGTERM)
	select {
	case <-s.done:
		return s.err
	case <-time.After(grace):
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		<-s.done
		return fmt.Errorf("killed after %v", grace)
	}
}

// post POSTs body to /simulation/nodes/<name> and returns the status code and body.
func (s *simulator) post(ctx context.Context, name, body string) (int, string, error) {
	return s.postPath(ctx, "nodes/"+name, body)
}

// postPath POSTs body to /simulation/<path> and returns the status code and body.
func (s *simulator) postPath(ctx context.Context, path, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/simulation/"+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// mustPost POSTs and fails the test unless the answer is 200.
func (s *simulator) mustPost(t *testing.T, name, body string) {
	t.Helper()
	code, text, err := s.post(t.Context(), name, body)
	if err != nil || code != http.StatusOK {
		t.Fatalf("POST /simulation/nodes/%s %s: %d %s %v", name, body, code, text, err)
	}
}

// cpuSeconds returns framework.ReadProcCPU of pid in seconds.
func cpuSeconds(pid int) (float64, error) {
	d, err := framework.ReadProcCPU(pid)
	return d.Seconds(), err
}

// memStats is what the process's heap profile says after a forced GC (runtime.MemStats), and its
// goroutine count.
type memStats struct {
	heapAlloc, stackInuse, goroutines int64
}

// readMemStats reads the Go heap in use and the goroutine stacks after a forced GC and the number of
// goroutines from the process's /debug/pprof (--enable-profiling-handler).
func readMemStats(ctx context.Context, base string) (memStats, error) {
	var m memStats
	code, body, err := framework.HTTPGet(ctx, base+"/debug/pprof/heap?gc=1&debug=1")
	if err != nil || code != http.StatusOK {
		return m, fmt.Errorf("heap profile: %d %w", code, err)
	}
	s := bufio.NewScanner(strings.NewReader(body))
	s.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for s.Scan() {
		// "# HeapAlloc = N", "# Stack = StackInuse / StackSys"
		for prefix, v := range map[string]*int64{"# HeapAlloc = ": &m.heapAlloc, "# Stack = ": &m.stackInuse} {
			if text, ok := strings.CutPrefix(s.Text(), prefix); ok {
				text, _, _ = strings.Cut(text, " ")
				if *v, err = strconv.ParseInt(text, 10, 64); err != nil {
					return m, fmt.Errorf("heap profile: %q: %w", s.Text(), err)
				}
			}
		}
	}
	if m.heapAlloc == 0 || m.stackInuse == 0 {
		return m, fmt.Errorf("no HeapAlloc or StackInuse in the heap profile")
	}
	code, body, err = framework.HTTPGet(ctx, base+"/debug/pprof/goroutine?debug=1")
	if err != nil || code != http.StatusOK {
		return m, fmt.Errorf("goroutine profile: %d %w", code, err)
	}
	first, _, _ := strings.Cut(body, "\n")
	m.goroutines, err = strconv.ParseInt(strings.TrimPrefix(first, "goroutine profile: total "), 10, 64)
	return m, err
}

// perNode formats the stats, also divided by the number of nodes.
func (m memStats) perNode(nodes int) string {
	return fmt.Sprintf("heap %.1f MiB after GC (%.1f KiB per node, fixed costs included), goroutine stacks %.1f MiB (%.1f KiB per node), %d goroutines (%.2f per node)",
		float64(m.heapAlloc)/(1<<20), float64(m.heapAlloc)/float64(nodes)/1024, float64(m.stackInuse)/(1<<20),
		float64(m.stackInuse)/float64(nodes)/1024, m.goroutines, float64(m.goroutines)/float64(nodes))
}

// conditionChange is one change of a kubelet condition of a simulated Node, seen by the watch.
type conditionChange struct {
	node            string
	typ             corev1.NodeConditionType
	status          corev1.ConditionStatus
	reason, message string
	at              time.Time
}

func (c conditionChange) String() string {
	return fmt.Sprintf("%s %s %s=%s %s %q", c.at.Format("15:04:05.000"), c.node, c.typ, c.status, c.reason, c.message)
}

// conditionRecorder watches the simulated Nodes from a resourceVersion on and records every change of
// their Ready and pressure conditions (status, reason or message), and every deletion.
type conditionRecorder struct {
	mu      sync.Mutex
	changes []conditionChange
	last    map[string]map[corev1.NodeConditionType]conditionChange
	err     error
}

func recordConditions(ctx context.Context, client kubernetes.Interface, selector string, list *corev1.NodeList) *conditionRecorder {
	r := &conditionRecorder{last: map[string]map[corev1.NodeConditionType]conditionChange{}}
	for i := range list.Items {
		r.observe(&list.Items[i], false)
	}
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
			if err != nil {
				if ctx.Err() == nil {
					r.setErr(fmt.Errorf("watch nodes: %w", err))
				}
				return
			}
			for ev := range w.ResultChan() {
				n, ok := ev.Object.(*corev1.Node)
				switch {
				case ev.Type == watch.Error:
					if ctx.Err() == nil { // after the caller stopped recording, the watch ends with an error event
						r.setErr(fmt.Errorf("watch nodes: error event %v", ev.Object))
					}
					w.Stop()
					return
				case !ok:
				case ev.Type == watch.Deleted:
					r.add(conditionChange{node: n.Name, typ: "Deleted", at: time.Now()})
				default:
					r.observe(n, true)
				}
				if ok {
					rv = n.ResourceVersion
				}
			}
		}
	}()
	return r
}

func (r *conditionRecorder) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *conditionRecorder) add(c conditionChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
}

func (r *conditionRecorder) observe(n *corev1.Node, record bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last[n.Name] == nil {
		r.last[n.Name] = map[corev1.NodeConditionType]conditionChange{}
	}
	for _, c := range n.Status.Conditions {
		if !slices.Contains([]corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}, c.Type) {
			continue
		}
		now := conditionChange{node: n.Name, typ: c.Type, status: c.Status, reason: c.Reason, message: c.Message, at: time.Now()}
		prev, seen := r.last[n.Name][c.Type]
		r.last[n.Name][c.Type] = now
		if record && (!seen || prev.status != now.status || prev.reason != now.reason || prev.message != now.message) {
			r.changes = append(r.changes, now)
		}
	}
}

// result returns the changes so far and the watch's error.
func (r *conditionRecorder) result() ([]conditionChange, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes), r.err
}

// TestSimulate runs 200 simulated Nodes with `nodeagent simulate` against the shared control plane and
// its kube-controller-manager (node lifecycle controller, 40 s grace) for about 3 minutes:
//   - all register and turn Ready, made of the template, and renew their Leases; none is ever seen
//     NotReady or Unknown but the two the test disturbs;
//   - the control endpoint flips one Node's runtime, network, memory, disk and PID pressure: the Node
//     shows the kubelet's exact condition (status, reason, message) within one status period (10 s), and
//     no other Node changes;
//   - a stopped Node is marked Unknown by the node lifecycle controller after its grace period, and is
//     Ready again once started;
//   - bad control requests get 404 and 400;
//
// and it logs the time until all are Ready, the heap per Node and the CPU per 1000 Nodes.
func TestSimulate(t *testing.T) {
	t.Parallel()
	const (
		nodes       = 200
		prefix      = "sim-"
		target      = "sim-0007" // flipped through the control API
		stopped     = "sim-0011" // stopped and started again
		period      = 10 * time.Second
		observation = 150 * time.Second // from all Ready to the end
	)
	env := shared(t)
	client := env.cp.AdminClient
	ctx := t.Context()
	tmpl := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(tmpl, []byte(simTemplate), 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	// Its own label, as other tests' simulated Nodes share the control plane.
	sim := startSimulator(t, "--kubeconfig="+env.cp.AdminKubeconfig, "--nodes="+strconv.Itoa(nodes), "--node-name-prefix="+prefix,
		"--node-template="+tmpl, "--enable-profiling-handler", "--node-labels=test.nodeagent.io/run=simulate")
	selector := metav1.ListOptions{LabelSelector: "nodeagent.io/simulated=true,test.nodeagent.io/run=simulate"}
	var list *corev1.NodeList
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		select {
		case <-sim.done:
			return false, fmt.Errorf("nodeagent simulate exited: %v: %w", sim.err, framework.ErrStop)
		default:
		}
		var err error
		if list, err = client.CoreV1().Nodes().List(ctx, selector); err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if framework.IsReady(&list.Items[i]) {
				ready++
			}
		}
		if time.Since(start) > 2*time.Minute {
			return false, fmt.Errorf("%d of %d nodes Ready after 2m: %w", ready, nodes, framework.ErrStop)
		}
		return len(list.Items) == nodes && ready == nodes, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	allReady := time.Now()
	t.Logf("all %d simulated nodes Ready %v after the process started", nodes, allReady.Sub(start).Round(10*time.Millisecond))
	// /readyz says registered once each node's registration has returned and its first status sync
	// has read the Node back: a watch may see the last Creates a round trip before the agent does.
	var code int
	var body string
	readyzErr := framework.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		if time.Since(allReady) > 10*time.Second {
			return false, fmt.Errorf("/readyz %d %s: %w", code, body, framework.ErrStop)
		}
		var err error
		code, body, err = framework.HTTPGet(ctx, sim.base+"/readyz")
		return err == nil && code == http.StatusOK, nil
	})
	if readyzErr != nil {
		t.Errorf("/readyz 10 s after every node was Ready: %v", readyzErr)
	} else {
		t.Logf("/readyz ok %v after every node was seen Ready", time.Since(allReady).Round(time.Millisecond))
	}
	rec := recordConditions(ctx, client, selector.LabelSelector, list)
	cpu0, cpuErr := cpuSeconds(sim.pid)

	t.Run("template", func(t *testing.T) {
		n, err := client.CoreV1().Nodes().Get(ctx, prefix+"0000", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkSimulatedNode(t, n)
	})

	t.Run("control API refuses bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			name, body string
			code       int
			says       string
		}{
			{"sim-9999", `{"runtimeReady":false}`, http.StatusNotFound, `no such simulated node "sim-9999"`},
			{target, `{"runtimeready":false}`, http.StatusBadRequest, `unknown field "runtimeready"`},
			{target, `{"reboot":true}`, http.StatusBadRequest, `unknown field "reboot"`},
			{target, `{"runtimeReady":"no"}`, http.StatusBadRequest, "bad request"},
			{target, `{}`, http.StatusBadRequest, "changes nothing"},
		} {
			code, body, err := sim.post(ctx, tc.name, tc.body)
			if err != nil || code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("POST %s %s: got %d %q %v, want %d saying %q", tc.name, tc.body, code, strings.TrimSpace(body), err, tc.code, tc.says)
			}
		}
		if code, body, _ := framework.HTTPGet(ctx, sim.base+"/simulation/nodes"); code != http.StatusOK || !strings.Contains(body, `"total": 200`) {
			t.Errorf("GET /simulation/nodes: %d %.200s", code, body)
		}
	})

	// The stopped node: its Lease and status stop; the node lifecycle controller (grace 40 s, monitor
	// period 5 s) marks it Unknown while the flips below run.
	stopAt := time.Now()
	sim.mustPost(t, stopped, `{"stopped":true}`)
	// The grace period counts from the last heartbeat the lifecycle controller saw: the Lease's last
	// renewal, up to one renew interval before the stop.
	lastRenew := stopAt
	if l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), stopped, metav1.GetOptions{}); err == nil && l.Spec.RenewTime != nil {
		lastRenew = l.Spec.RenewTime.Time
	}

	t.Run("flips", func(t *testing.T) {
		flip := func(body string, want ...corev1.NodeCondition) {
			t.Helper()
			sim.mustPost(t, target, body)
			n, took := framework.WaitNode(t.Context(), t, client, target, 2*period, body, func(n *corev1.Node) bool {
				for _, w := range want {
					c := framework.NodeCondition(n, w.Type)
					if c == nil || c.Status != w.Status || c.Reason != w.Reason || c.Message != w.Message {
						return false
					}
				}
				return true
			})
			t.Logf("%s: %s after %v", body, framework.DescribeReady(n), took.Round(time.Millisecond))
			if took > period {
				t.Errorf("%s: took %v, more than one status period (%v)", body, took, period)
			}
		}
		ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
		noMemory := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"}
		noDisk := corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"}
		noPID := corev1.NodeCondition{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"}

		flip(`{"runtimeReady":false}`, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
			Message: "container runtime not ready: RuntimeReady=false reason:SimulatedRuntimeNotReady message:runtime made not ready through the simulation API"})
		flip(`{"runtimeReady":true}`, ready)
		flip(`{"networkReady":false}`, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
			Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"})
		flip(`{"networkReady":true}`, ready)
		flip(`{"memoryPressure":true}`, ready, corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue,
			Reason: "KubeletHasInsufficientMemory", Message: "kubelet has insufficient memory available"})
		flip(`{"memoryPressure":false}`, ready, noMemory)
		flip(`{"diskPressure":true,"pidPressure":true}`, ready,
			corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue, Reason: "KubeletHasDiskPressure", Message: "kubelet has disk pressure"},
			corev1.NodeCondition{Type: corev1.NodePIDPressure, Status: corev1.ConditionTrue, Reason: "KubeletHasInsufficientPID", Message: "kubelet has insufficient PID available"})
		flip(`{"diskPressure":false,"pidPressure":false}`, ready, noDisk, noPID)
	})

	t.Run("stopped node turns Unknown and comes back", func(t *testing.T) {
		n, _ := framework.WaitNode(t.Context(), t, client, stopped, 90*time.Second-time.Since(stopAt), "Ready=Unknown from the node lifecycle controller", func(n *corev1.Node) bool {
			c := framework.NodeCondition(n, corev1.NodeReady)
			return c != nil && c.Status == corev1.ConditionUnknown
		})
		c := framework.NodeCondition(n, corev1.NodeReady)
		t.Logf("%s Ready=Unknown %v after it was stopped: %s %q", stopped, time.Since(stopAt).Round(time.Second), c.Reason, c.Message)
		if c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status." {
			t.Errorf("Ready=Unknown says %s %q, want the node lifecycle controller's NodeStatusUnknown", c.Reason, c.Message)
		}
		if d := time.Since(lastRenew); d < 40*time.Second {
			t.Errorf("Unknown %v after the last Lease renewal, before the 40 s grace period", d)
		}
		sim.mustPost(t, stopped, `{"stopped":false}`)
		_, took := framework.WaitNode(t.Context(), t, client, stopped, 3*period, "Ready=True after the start", framework.IsReady)
		t.Logf("%s Ready again %v after it was started", stopped, took.Round(time.Millisecond))
	})

	// The rest of the observation window, then: every Lease renewed lately, nothing else changed.
	if rest := observation - time.Since(allReady); rest > 0 {
		time.Sleep(rest)
	}
	cpu1, cpuErr1 := cpuSeconds(sim.pid)
	window := time.Since(allReady)

	t.Run("leases", func(t *testing.T) {
		leases, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodesByName := map[string]corev1.Node{}
		list, err := client.CoreV1().Nodes().List(ctx, selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list.Items {
			nodesByName[n.Name] = n
		}
		seen := 0
		for _, l := range leases.Items {
			n, ok := nodesByName[l.Name]
			if !ok {
				continue
			}
			seen++
			age := time.Since(l.Spec.RenewTime.Time)
			if age > 2*period+period/2 {
				t.Errorf("lease %s last renewed %v ago", l.Name, age.Round(time.Second))
			}
			if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID || *l.Spec.HolderIdentity != l.Name {
				t.Errorf("lease %s: holder %v, owners %v; want the Node %s", l.Name, *l.Spec.HolderIdentity, l.OwnerReferences, n.UID)
			}
		}
		if seen != nodes {
			t.Errorf("%d leases of simulated nodes, want %d", seen, nodes)
		}
	})

	t.Run("no other node changed", func(t *testing.T) {
		changes, err := rec.result()
		if err != nil {
			t.Fatal(err)
		}
		var targetChanges, stoppedChanges int
		for _, c := range changes {
			switch c.node {
			case target:
				targetChanges++
			case stopped:
				stoppedChanges++
			default:
				t.Errorf("node %s changed while untouched: %v", c.node, c)
			}
		}
		t.Logf("over %v: %d condition changes on %s, %d on %s, none elsewhere", window.Round(time.Second), targetChanges, target, stoppedChanges, stopped)
	})

	t.Run("metrics", func(t *testing.T) {
		ms, err := framework.ScrapeMetrics(ctx, nil, sim.base+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		// Every node was created once, and the restarted one found its Node existing. A Create that timed
		// out on the client but was stored by the API server (a loaded machine) makes that node's retry an
		// "existing" one too, so only the sum is exact.
		created, _ := ms.Get("nodeagent_node_registration_attempts_total", map[string]string{"result": "created"})
		existing, _ := ms.Get("nodeagent_node_registration_attempts_total", map[string]string{"result": "existing"})
		t.Logf("registrations: %v created, %v of an existing Node", created, existing)
		if created+existing != nodes+1 || existing < 1 || created < nodes/2 {
			t.Errorf("registrations: %v created + %v existing, want %d in all (each node once, the restart once more), the restart among the existing",
				created, existing, nodes+1)
		}
		// Every node renews every 10 s: at least 10 renewals each over 2.5 minutes.
		if renewals := ms.Sum("nodeagent_lease_renew_duration_seconds_count", nil); renewals < 10*nodes {
			t.Errorf("%v lease renewals, want at least %d", renewals, 10*nodes)
		}
		// A renewal may fail on a loaded machine (a timeout) and be retried, as the kubelet's; the Leases'
		// ages above say none lapsed. More than 1 % failing is a fault.
		if errs := ms.Sum("nodeagent_lease_renew_errors_total", nil); errs > 0 {
			t.Logf("%v lease renewal errors", errs)
			if renewals := ms.Sum("nodeagent_lease_renew_duration_seconds_count", nil); errs > renewals/100 {
				t.Errorf("%v of %v lease renewals failed", errs, renewals)
			}
		}
		for _, name := range []string{"nodeagent_node_ready", "nodeagent_node_condition", "nodeagent_runtime_condition",
			"nodeagent_startup_to_ready_duration_seconds", "nodeagent_node_status_last_sync_timestamp_seconds", "nodeagent_node_name"} {
			if ms.Has(name) {
				t.Errorf("%s exported: a gauge of one node means nothing for %d", name, nodes)
			}
		}
	})

	t.Run("cost", func(t *testing.T) {
		m, err := readMemStats(ctx, sim.base)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := framework.ReadProcStats(sim.pid)
		t.Logf("after %v: %s; %s", window.Round(time.Second), m.perNode(nodes), st)
		if err := errors.Join(cpuErr, cpuErr1); err != nil {
			t.Fatal(err)
		}
		cores := (cpu1 - cpu0) / window.Seconds()
		t.Logf("CPU %.3f cores over %v with %d nodes: %.3f cores per 1000 nodes (flips and one restart included)",
			cores, window.Round(time.Second), nodes, cores*1000/nodes)
	})
}

// checkSimulatedNode checks that a simulated Node is made of simTemplate.
func checkSimulatedNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	if n.Labels["topology.kubernetes.io/zone"] != "sim-a" || n.Labels["nodeagent.io/simulated"] != "true" || n.Labels["kubernetes.io/hostname"] != n.Name {
		t.Errorf("labels %v: want the template's zone, nodeagent.io/simulated=true and hostname %s", n.Labels, n.Name)
	}
	// The API server's TaintNodesByCondition admission adds node.kubernetes.io/not-ready to every new Node,
	// and the node lifecycle controller removes it, at its own pace, once the Node is Ready: not ours.
	var taints []corev1.Taint
	for _, taint := range n.Spec.Taints {
		if taint.Key != corev1.TaintNodeNotReady {
			taints = append(taints, taint)
		}
	}
	if len(taints) != 1 || taints[0].Key != "example.com/simulated" {
		t.Errorf("taints %v: want the template's", n.Spec.Taints)
	}
	for name, want := range map[corev1.ResourceName]string{"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "200Gi", "example.com/gpu": "2"} {
		if q := n.Status.Capacity[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("capacity[%s] = %s, want %s", name, q.String(), want)
		}
	}
	for name, want := range map[corev1.ResourceName]string{"cpu": "7", "memory": "30Gi", "pods": "110", "ephemeral-storage": "200Gi", "example.com/gpu": "2"} {
		if q := n.Status.Allocatable[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("allocatable[%s] = %s, want %s", name, q.String(), want)
		}
	}
	info := n.Status.NodeInfo
	if info.KernelVersion != "6.1.0-28-amd64" || info.OSImage != "Debian GNU/Linux 12 (bookworm)" || info.ContainerRuntimeVersion != "containerd://1.7.24" ||
		info.MachineID == "" || info.BootID == "" {
		t.Errorf("nodeInfo %+v: want the template's", info)
	}
	if c := framework.NodeCondition(n, "KernelDeadlock"); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "KernelHasNoDeadlock" {
		t.Errorf("KernelDeadlock condition %+v: want the template's", c)
	}
	if c := framework.NodeCondition(n, corev1.NodeReady); c == nil || c.Reason != "KubeletReady" {
		t.Errorf("Ready %+v: want the setters' (the template's is ignored)", c)
	}
	if len(n.Status.Images) != 1 || len(n.Status.Images[0].Names) != 2 || n.Status.Images[0].SizeBytes != 320368 {
		t.Errorf("images %+v: want the template's", n.Status.Images)
	}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0].Type != corev1.NodeInternalIP || !strings.HasPrefix(n.Status.Addresses[0].Address, "100.64.") {
		t.Errorf("addresses %+v: want an InternalIP from 100.64.0.0/10 and the hostname", n.Status.Addresses)
	}
}

// simulationRBAC returns the objects of the RBAC and FlowSchema blocks of docs/simulation.md.
func simulationRBAC(t *testing.T) []runtime.Object {
	t.Helper()
	return append(docBlock(t, "simulation-rbac"), docBlock(t, "simulation-flowschema")...)
}

// docBlock returns the objects of the YAML block between <!-- BEGIN name --> and <!-- END name --> in
// docs/simulation.md.
func docBlock(t *testing.T, name string) []runtime.Object {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "simulation.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- BEGIN "+name+" -->")
	block, _, ok2 := strings.Cut(block, "<!-- END "+name+" -->")
	if !ok || !ok2 {
		t.Fatalf("docs/simulation.md has no %s block", name)
	}
	block = strings.TrimSpace(block)
	block = strings.TrimSuffix(strings.TrimPrefix(block, "```yaml"), "```")
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(block)))
	var objs []runtime.Object
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(d, nil, nil)
		if err != nil {
			t.Fatalf("docs/simulation.md %s: %v", name, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// runSimulateToExit runs `nodeagent simulate` with args, expecting it to exit within 30 s, and returns
// its exit code and output.
func runSimulateToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"simulate", "--healthz-port=0", "--port=0"}, args...)...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("nodeagent simulate: %v\n%s", err, out)
	}
	return 0, string(out)
}

// TestSimulateRBAC: with a node identity or a ServiceAccount without RBAC, `nodeagent simulate` exits 1
// naming what is missing and creates no Node; with exactly the RBAC of docs/simulation.md it registers its
// Nodes, patches their status, renews their Leases and records events, and no request is refused.
func TestSimulateRBAC(t *testing.T) {
	t.Parallel()
	env := shared(t)
	ctx := t.Context()
	admin := env.cp.AdminClient
	const prefix = "simrbac-"
	noNodes := func(when string) {
		t.Helper()
		list, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeagent.io/simulated=true"})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list.Items {
			if strings.HasPrefix(n.Name, prefix) {
				t.Fatalf("%s: node %s was created", when, n.Name)
			}
		}
	}

	// A node identity: refused (NodeRestriction would refuse every other name).
	code, out := runSimulateToExit(t, "--kubeconfig="+env.cp.KubeconfigFor(nodeSimIdentity), "--nodes=3", "--node-name-prefix="+prefix)
	if want := "system:node:" + nodeSimIdentity + " is a node identity (group system:nodes)"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("as a node: exit %d, output:\n%s\nwant exit 1 saying %q", code, out, want)
	}
	// A ServiceAccount without any RBAC: refused, naming what it may not do.
	bare, err := env.cp.ServiceAccountKubeconfig(ctx, "nodeagent-simulation-bare", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	code, out = runSimulateToExit(t, "--kubeconfig="+bare, "--nodes=3", "--node-name-prefix="+prefix)
	want := `user "system:serviceaccount:nodeagent-simulation-bare:nobody" may not create nodes, get nodes, list nodes, watch nodes, patch nodes, patch nodes/status, ` +
		`create leases.coordination.k8s.io in kube-node-lease, get leases.coordination.k8s.io in kube-node-lease, update leases.coordination.k8s.io in kube-node-lease, ` +
		`list pods, watch pods, patch pods/status, delete pods; ` +
		`the simulation needs the RBAC in docs/simulation.md`
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("without RBAC: exit %d, output:\n%s\nwant exit 1 saying %q", code, out, want)
	}
	noNodes("after the refusals")

	// Exactly the documented RBAC.
	var saNamespace, saName string
	var flowSchema *flowcontrolv1.FlowSchema
	for _, obj := range simulationRBAC(t) {
		if fs, ok := obj.(*flowcontrolv1.FlowSchema); ok {
			if flowSchema, err = admin.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
				t.Fatalf("apply FlowSchema: %v", err)
			}
			continue
		}
		if err := createObject(t, admin, obj); err != nil {
			t.Fatalf("apply %T: %v", obj, err)
		}
		if sa, ok := obj.(*corev1.ServiceAccount); ok {
			saNamespace, saName = sa.Namespace, sa.Name
		}
	}
	kubeconfig, err := env.cp.ServiceAccountKubeconfig(ctx, saNamespace, saName)
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + saNamespace + ":" + saName
	sim := startSimulator(t, "--kubeconfig="+kubeconfig, "--nodes=3", "--node-name-prefix="+prefix)
	for i := range 3 {
		framework.WaitReady(t.Context(), t, admin, fmt.Sprintf("%s%04d", prefix, i), time.Minute)
	}
	// A status change (nodes/status patch, events), then a Lease renewal (update).
	sim.mustPost(t, prefix+"0001", `{"networkReady":false}`)
	framework.WaitNode(t.Context(), t, admin, prefix+"0001", 20*time.Second, "Ready=False", func(n *corev1.Node) bool { return !framework.IsReady(n) })
	sim.mustPost(t, prefix+"0001", `{"networkReady":true}`)
	framework.WaitReady(t.Context(), t, admin, prefix+"0001", time.Minute)
	framework.WaitLeaseRenewals(t.Context(), t, admin, prefix+"0000", 1, 30*time.Second)
	waitEventsWith(t, admin, prefix+"0001", "NodeNotReady")

	events, err := framework.ReadAuditEvents(env.cp.AuditLogPath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range events {
		// A watch still open is logged at ResponseStarted only.
		if ev.User.Username != user || (ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted") || ev.ObjectRef == nil {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		code := 0
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		if code == http.StatusForbidden && ev.Stage == "ResponseComplete" {
			t.Errorf("Forbidden: %s %s (%s)", ev.Verb, res, ev.RequestURI)
		}
		if code < 300 {
			seen[ev.Verb+" "+res] = true
		}
	}
	for _, want := range []string{"create nodes", "patch nodes/status", "create leases", "update leases", "create events", "watch nodes"} {
		if !seen[want] {
			t.Errorf("audit log has no successful %q by %s; seen %v", want, user, seen)
		}
	}
	if b, _ := os.ReadFile(sim.logPath); strings.Contains(strings.ToLower(string(b)), "forbidden") {
		t.Errorf("simulator log mentions forbidden:\n%s", grepLines(string(b), "orbidden"))
	}

	// API Priority and Fairness puts the account's Node and Lease requests in the documented FlowSchema
	// (node-high), as the kubelets'.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/nodes/" + prefix + "0000", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + prefix + "0000"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"); resp.StatusCode != http.StatusOK || got != string(flowSchema.UID) {
			t.Errorf("GET %s as %s: %d, FlowSchema UID %q, want %s's %s", path, user, resp.StatusCode, got, flowSchema.Name, flowSchema.UID)
		}
	}
}

// createObject creates one RBAC or namespace object of docs/simulation.md as admin.
func createObject(t *testing.T, c kubernetes.Interface, obj runtime.Object) error {
	ctx := t.Context()
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, o, opts)
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	default:
		return fmt.Errorf("unexpected kind %T in docs/simulation.md", obj)
	}
	return err
}
