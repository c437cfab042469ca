package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nodeagent/nodeagent/test/framework"
)

// agentArgs are the flags every agent of the suite gets before the case's own.
func agentArgs() []string {
	return []string{
		"--node-status-update-frequency=" + statusFrequency.String(),
		fmt.Sprintf("--node-lease-duration-seconds=%d", leaseDurationSeconds),
	}
}

// startAgent runs nodeagent as node identity name against the shared control plane and containerd,
// with agentArgs then args. On cleanup it stops the agent, prints its log's tail if the test
// failed, and deletes its Node and Lease.
func startAgent(ctx context.Context, t *testing.T, name string, args ...string) *framework.Agent {
	t.Helper()
	return startAgentWith(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, name), NodeName: name, Kubeconfig: suite.cp.KubeconfigFor(name),
		RuntimeEndpoint: suite.ctrd.Endpoint, Args: append(agentArgs(), args...),
	})
}

// startAgentWith is startAgent with every option given; Args are used as they are.
func startAgentWith(ctx context.Context, t *testing.T, opts framework.AgentOptions) *framework.Agent {
	t.Helper()
	a, err := framework.StartAgent(ctx, opts)
	if err != nil {
		t.Fatalf("start nodeagent %s: %v", opts.NodeName, err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil && !strings.Contains(err.Error(), "killed") {
			t.Errorf("nodeagent %s: stop: %v", opts.NodeName, err)
		}
		if t.Failed() {
			t.Logf("nodeagent %s log (%s), last lines:\n%s", opts.NodeName, a.LogPath, lastLines(a.Logs(), 60))
		}
		cleanupNode(t, opts.NodeName)
	})
	return a
}

// cleanupNode deletes the Node and Lease called name, ignoring NotFound.
func cleanupNode(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := suite.cp.AdminClient
	if err := c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Logf("cleanup: delete node %s: %v", name, err)
	}
	if err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Logf("cleanup: delete lease %s: %v", name, err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// readyCondition returns node's Ready condition, or nil.
func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// isReady reports whether node's Ready condition is True.
func isReady(node *corev1.Node) bool {
	c := readyCondition(node)
	return c != nil && c.Status == corev1.ConditionTrue
}

func describeReady(node *corev1.Node) string {
	c := readyCondition(node)
	if c == nil {
		return "no Ready condition"
	}
	return fmt.Sprintf("Ready=%s reason=%q message=%q heartbeat=%s", c.Status, c.Reason, c.Message, c.LastHeartbeatTime.Format(time.RFC3339))
}

// waitNode polls the Node called name every 100 ms until cond holds and returns it; it fails the
// test after timeout, naming what and the last state seen.
func waitNode(ctx context.Context, t *testing.T, name string, timeout time.Duration, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *corev1.Node
	err := framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		n, err := suite.cp.AdminClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		state := "never seen"
		if last != nil {
			state = describeReady(last)
		}
		t.Fatalf("node %s: %s not seen within %v: %v (last: %s)", name, what, timeout, err, state)
	}
	return last
}

// waitReady waits up to a minute for the Node called name to be Ready.
func waitReady(ctx context.Context, t *testing.T, name string) *corev1.Node {
	t.Helper()
	return waitNode(ctx, t, name, time.Minute, "Ready=True", isReady)
}

// getLease returns the Lease of node name, or nil with the error.
func getLease(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return suite.cp.AdminClient.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
}

// ownedBy reports whether lease has exactly one owner reference, to the Node with uid.
func ownedBy(lease *coordinationv1.Lease, node *corev1.Node) bool {
	refs := lease.OwnerReferences
	return len(refs) == 1 && refs[0].Kind == "Node" && refs[0].APIVersion == "v1" && refs[0].Name == node.Name && refs[0].UID == node.UID
}

// waitLease polls the Lease of node name every 50 ms until cond holds and returns it.
func waitLease(ctx context.Context, t *testing.T, name string, timeout time.Duration, what string, cond func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *coordinationv1.Lease
	err := framework.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		l, err := getLease(ctx, name)
		if err != nil {
			return false, err
		}
		last = l
		return cond(l), nil
	})
	if err != nil {
		t.Fatalf("lease %s: %s not seen within %v: %v (last: %+v)", name, what, timeout, err, leaseSummary(last))
	}
	return last
}

func leaseSummary(l *coordinationv1.Lease) string {
	if l == nil {
		return "never seen"
	}
	renew := "<nil>"
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("uid=%s renewTime=%s owners=%v", l.UID, renew, l.OwnerReferences)
}

// renewedAfter reports whether lease was renewed after t.
func renewedAfter(lease *coordinationv1.Lease, t time.Time) bool {
	return lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(t)
}

// healthz GETs path on the agent's HTTP server and returns the status code and body.
func healthz(ctx context.Context, a *framework.Agent, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.HealthzURL+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// waitHealthz polls path until it answers want, failing the test after timeout.
func waitHealthz(ctx context.Context, t *testing.T, a *framework.Agent, path string, want int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		code, body, err := healthz(ctx, a, path)
		if err != nil {
			return false, err
		}
		if code != want {
			return false, fmt.Errorf("%s answered %d: %s", path, code, body)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("nodeagent %s: %s did not answer %d within %v: %v", a.NodeName, path, want, timeout, err)
	}
}

// scrape reads the agent's /metrics into a map from series ("name{label="v",...}" as exposed, or
// "name") to value.
func scrape(ctx context.Context, a *framework.Agent) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.HealthzURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", a.HealthzURL, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", a.HealthzURL, err)
	}
	return out, nil
}

// mustScrape is scrape failing the test on error.
func mustScrape(ctx context.Context, t *testing.T, a *framework.Agent) map[string]float64 {
	t.Helper()
	m, err := scrape(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sumMetric adds the values of every series of metric name whose labels include all of labels
// (`key="value"` strings).
func sumMetric(m map[string]float64, name string, labels ...string) float64 {
	total := 0.0
	for series, v := range m {
		if series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(series, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// logLine is one klog text line of an agent's log.
type logLine struct {
	Severity byte // 'I', 'W', 'E' or 'F'
	Time     time.Time
	Text     string
}

var klogHeader = regexp.MustCompile(`^([IWEF])(\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s`)

// klogLines parses the klog text lines of log (other lines, such as the framework's start
// banners, are skipped). klog headers have no year: the current one is assumed.
func klogLines(log string) []logLine {
	var out []logLine
	year := time.Now().Year()
	for _, line := range strings.Split(log, "\n") {
		m := klogHeader.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ts, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, m[2]), time.Local)
		if err != nil {
			continue
		}
		out = append(out, logLine{Severity: m[1][0], Time: ts, Text: line})
	}
	return out
}

// errorLines returns the E and F lines of log logged in [from, to] (zero bounds are open).
func errorLines(log string, from, to time.Time) []logLine {
	var out []logLine
	for _, l := range klogLines(log) {
		if l.Severity != 'E' && l.Severity != 'F' {
			continue
		}
		if (!from.IsZero() && l.Time.Before(from)) || (!to.IsZero() && l.Time.After(to)) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// auditEvents returns the ResponseComplete events of user that match keep.
func auditEvents(t *testing.T, user string, keep func(e framework.AuditEvent) bool) []framework.AuditEvent {
	t.Helper()
	events, err := framework.ReadAuditEvents(suite.cp.AuditLogPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []framework.AuditEvent
	for _, e := range events {
		if e.Stage != "ResponseComplete" || e.User.Username != user {
			continue
		}
		if keep == nil || keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// isRequest reports whether e is verb on resource (and subresource, "" for none).
func isRequest(e framework.AuditEvent, verb, resource, subresource string) bool {
	return e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.ObjectRef.Subresource == subresource
}

func code(e framework.AuditEvent) int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// nodeUser is the username of node identity name.
func nodeUser(name string) string { return "system:node:" + name }

// writeKubeconfig writes a kubeconfig for server (trusting caData) authenticating with token.
func writeKubeconfig(t *testing.T, path, server string, caData []byte, token string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// nodeWatch is a watch on one Node that records every state it sees with the time it saw it.
type nodeWatch struct {
	events chan watchedNode
	stop   func()

	mu      sync.Mutex
	lastErr error // the last event that was not a Node (an error), for messages
}

// err returns the last error event the watch got, or nil.
func (w *nodeWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

type watchedNode struct {
	Time time.Time
	Type watch.EventType
	Node *corev1.Node
}

// watchNode lists the Node called name and watches it from the list's resource version (the watch
// is re-established from the last version seen when the API server ends it). It returns the watch,
// whose events arrive on w.events until w.stop, and the Node as listed (nil if there is none).
func watchNode(ctx context.Context, t *testing.T, name string) (*nodeWatch, *corev1.Node) {
	t.Helper()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := suite.cp.AdminClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		t.Fatalf("list node %s: %v", name, err)
	}
	var current *corev1.Node
	if len(list.Items) == 1 {
		current = &list.Items[0]
	}
	rv := list.ResourceVersion
	ctx, cancel := context.WithCancel(ctx)
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = selector
		return suite.cp.AdminClient.CoreV1().Nodes().Watch(ctx, o)
	}}
	wi, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
	if err != nil {
		cancel()
		t.Fatalf("watch node %s: %v", name, err)
	}
	w := &nodeWatch{events: make(chan watchedNode, 1000), stop: func() { cancel(); wi.Stop() }}
	go func() {
		defer close(w.events)
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				w.mu.Lock()
				w.lastErr = fmt.Errorf("%s event: %v", ev.Type, apierrors.FromObject(ev.Object))
				w.mu.Unlock()
				continue
			}
			w.events <- watchedNode{Time: time.Now(), Type: ev.Type, Node: n}
		}
	}()
	t.Cleanup(w.stop)
	return w, current
}

// next returns the first event for which match holds, or an error after timeout.
func (w *nodeWatch) next(timeout time.Duration, match func(watchedNode) bool) (watchedNode, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				return watchedNode{}, fmt.Errorf("watch ended (last error: %v)", w.err())
			}
			if match(ev) {
				return ev, nil
			}
		case <-timer.C:
			return watchedNode{}, fmt.Errorf("nothing matching within %v", timeout)
		}
	}
}
