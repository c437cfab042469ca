// Package benchkit is what the benchmark programs (test/benchscale, test/benchpods) and bench-karpenter
// (test/integration) share: the machine's description, the CPU of processes, a service account per
// system, KWOK's Nodes, watches of Node readiness and Lease renewals, a nearest-rank quantile, and the
// section of BENCHMARKS.md a program writes.
package benchkit

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// KWOKAnnotation is the annotation KWOK's documentation gives the Nodes it is to manage
// (--manage-nodes-with-annotation-selector), with its taint of the same key.
const KWOKAnnotation = "kwok.x-k8s.io/node"

// AdminServiceAccount creates service account sys in namespace, bound to cluster-admin (every system of a
// benchmark gets the same rights), and returns the path of a kubeconfig with a token for it. Each system
// runs as its own, so that the audit log (which logs service accounts) tells its requests apart.
func AdminServiceAccount(ctx context.Context, cp *framework.ControlPlane, namespace, sys string) (string, error) {
	path, err := cp.ServiceAccountKubeconfig(ctx, namespace, sys)
	if err != nil {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + sys},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: sys}},
	}
	if _, err := cp.AdminClient.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("bind cluster-admin to %s: %w", sys, err)
	}
	return path, nil
}

// CreateKWOKNodes creates n Nodes kwok-node-0000... as KWOK's documentation shows them: annotation and
// taint kwok.x-k8s.io/node=fake, label type=kwok, no status (KWOK's node-initialize stage fills it in).
// Eight creates at a time.
func CreateKWOKNodes(ctx context.Context, client kubernetes.Interface, n int) error {
	return CreateKWOKNodesAnnotated(ctx, client, n, nil)
}

// CreateKWOKNodesAnnotated is CreateKWOKNodes with more annotations on each Node: annotations(name), when
// not nil (e.g. metrics.k8s.io/resource-metrics-path, which metrics-server reads for KWOK's Nodes).
func CreateKWOKNodesAnnotated(ctx context.Context, client kubernetes.Interface, n int, annotations func(name string) map[string]string) error {
	names := make(chan string)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{
						Name:        name,
						Annotations: map[string]string{KWOKAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
						Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": name,
							"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent"},
					},
					Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: KWOKAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
				}
				if annotations != nil {
					maps.Copy(node.Annotations, annotations(name))
				}
				if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create node %s: %w", name, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case names <- fmt.Sprintf("kwok-node-%04d", i):
		case err = <-errs:
			break feed
		}
	}
	close(names)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errs:
	default:
	}
	return err
}

// ReadCPU reads the CPU time of every process in pids.
func ReadCPU(pids map[string]int) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for name, pid := range pids {
		d, err := framework.ReadProcCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// NodeTracker follows every Node's Ready condition from a watch.
type NodeTracker struct {
	want int

	mu sync.Mutex
	// Nodes seen with Ready False or Unknown before all were Ready and after, name → status.
	badStartup, badWindow map[string]string
	ready                 map[string]bool
	nReady                int
	allReady              chan struct{} // closed when all want Nodes are Ready the first time
	allReadyAt            time.Time
	after                 bool // all were Ready once, or waiting for that timed out: count in badWindow
}

// NewNodeTracker returns a tracker waiting for want Nodes to be Ready.
func NewNodeTracker(want int) *NodeTracker {
	return &NodeTracker{want: want, ready: map[string]bool{}, allReady: make(chan struct{}),
		badStartup: map[string]string{}, badWindow: map[string]string{}}
}

// AllReady is closed when all the Nodes wanted are Ready the first time.
func (t *NodeTracker) AllReady() <-chan struct{} { return t.allReady }

// TimedOut makes Nodes seen not Ready from now on count in badWindow, as if all had been Ready.
func (t *NodeTracker) TimedOut() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.after = true
}

// Observe takes one Node from the watch. A Node without a Ready condition (KWOK's before it initializes
// them) counts as neither.
func (t *NodeTracker) Observe(n *corev1.Node) {
	c := framework.NodeCondition(n, corev1.NodeReady)
	if c == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ready := c.Status == corev1.ConditionTrue
	if ready != t.ready[n.Name] {
		if ready {
			t.nReady++
		} else {
			t.nReady--
		}
	}
	t.ready[n.Name] = ready
	if !ready {
		if !t.after {
			t.badStartup[n.Name] = string(c.Status)
		} else {
			t.badWindow[n.Name] = string(c.Status)
		}
	}
	if t.nReady == t.want && t.allReadyAt.IsZero() {
		t.allReadyAt, t.after = now, true
		close(t.allReady)
	}
}

// ReadyCount is the number of Nodes Ready now.
func (t *NodeTracker) ReadyCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nReady
}

// ReadyAt is when all were Ready the first time (zero: not yet).
func (t *NodeTracker) ReadyAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.allReadyAt
}

// BadWindowCount is the number of Nodes seen not Ready since all were Ready.
func (t *NodeTracker) BadWindowCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.badWindow)
}

// Bad returns copies of the Nodes seen not Ready before and after all were Ready.
func (t *NodeTracker) Bad() (startup, window map[string]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.badStartup), maps.Clone(t.badWindow)
}

// LeaseTracker collects, while recording, the intervals between consecutive renewTimes of each Lease.
type LeaseTracker struct {
	mu        sync.Mutex
	last      map[string]time.Time
	recording bool
	got       []time.Duration
}

// NewLeaseTracker returns a tracker that is not recording yet.
func NewLeaseTracker() *LeaseTracker { return &LeaseTracker{last: map[string]time.Time{}} }

// Observe takes one Lease from the watch.
func (t *LeaseTracker) Observe(l *coordinationv1.Lease) {
	if l.Spec.RenewTime == nil {
		return
	}
	rt := l.Spec.RenewTime.Time
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, ok := t.last[l.Name]
	if ok && !rt.After(prev) {
		return
	}
	t.last[l.Name] = rt
	if ok && t.recording {
		t.got = append(t.got, rt.Sub(prev))
	}
}

// Record starts (on) or stops recording intervals.
func (t *LeaseTracker) Record(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recording = on
}

// Reset forgets the intervals recorded so far (for a tracker that records several windows).
func (t *LeaseTracker) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.got = nil
}

// Intervals returns the intervals recorded, sorted.
func (t *LeaseTracker) Intervals() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.got)
	slices.Sort(out)
	return out
}

// NearestRank is the p-th quantile (0 < p ≤ 1) of sorted by the nearest-rank method: the element of
// rank ⌈p·n⌉ (1-based); 0 when sorted is empty. LeaseTracker.Intervals returns its input.
func NearestRank(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Env describes the machine and the versions of a benchmark run.
type Env struct {
	CPUs               int
	CPUModel, Memory   string
	Kernel, OS         string
	AgentVersion       string
	Commit             string
	K8sVersion         string
	KWOKVersion        string
	GoVersion          string
	LoadStart, LoadEnd string
	Took               time.Duration
	Started            time.Time
}

// DescribeEnv reads the machine (CPUs, model, memory, kernel, OS), nodeagent's version (agentBin version),
// the commit, and the pinned Kubernetes, KWOK and Go versions. Unknown values read "(unknown: ...)".
func DescribeEnv(ctx context.Context, root, agentBin string) (*Env, error) {
	e := &Env{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Started: time.Now().UTC()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				e.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		e.Memory = strings.Join(strings.Fields(line)[1:], " ")
	}
	e.Kernel = CmdOut(ctx, "", "uname", "-r")
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				e.OS = strings.Trim(v, `"`)
			}
		}
	}
	e.AgentVersion, _, _ = strings.Cut(CmdOut(ctx, "", agentBin, "version"), "\n")
	e.Commit = CmdOut(ctx, root, "git", "rev-parse", "--short", "HEAD")
	if CmdOut(ctx, root, "git", "status", "--porcelain", "--untracked-files=no") != "" {
		e.Commit += " (with uncommitted changes)"
	}
	e.K8sVersion = CmdOut(ctx, filepath.Join(root, "hack", "tools"), "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	e.KWOKVersion = CmdOut(ctx, filepath.Join(root, "hack", "kwok"), "go", "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/kwok")
	return e, nil
}

// CmdOut runs name with args in dir and returns its trimmed output, or "(unknown: ...)".
func CmdOut(ctx context.Context, dir, name string, args ...string) string {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("(unknown: %s: %v)", name, err)
	}
	return strings.TrimSpace(string(out))
}

// LoadAvg is /proc/loadavg's 1, 5 and 15 min load averages, or "?".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// WriteSection replaces the text between beginMarker and endMarker (both included) in the file at path with
// section, which starts and ends with them, or appends section when the markers are missing.
func WriteSection(path, beginMarker, endMarker, section string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + strings.TrimSuffix(section, "\n") + s[j+len(endMarker):]
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// Prepare readies a benchmark program: it changes to the repository's root, ensures the pinned
// binaries (framework.EnsureBinaries), builds KWOK (hack/build-kwok.sh) and nodeagent
// (framework.BuildAgent), and returns the root and nodeagent's path. Errors name the step.
func Prepare(ctx context.Context) (root, agentBin string, err error) {
	if root, err = framework.RepoRoot(); err != nil {
		return "", "", err
	}
	if err := os.Chdir(root); err != nil {
		return "", "", err
	}
	if _, err := framework.EnsureBinaries(); err != nil {
		return "", "", err
	}
	if out, err := exec.CommandContext(ctx, "hack/build-kwok.sh").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("hack/build-kwok.sh: %w\n%s", err, out)
	}
	if agentBin, err = framework.BuildAgent(); err != nil {
		return "", "", err
	}
	return root, agentBin, nil
}
