package faults

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
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
// with agentArgs then args (startAgentWith).
func startAgent(ctx context.Context, t *testing.T, name string, args ...string) *framework.Agent {
	t.Helper()
	return startAgentWith(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, name), NodeName: name, Kubeconfig: suite.cp.KubeconfigFor(name),
		RuntimeEndpoint: suite.ctrd.Endpoint, Args: append(agentArgs(), args...),
	})
}

// startAgentWith starts nodeagent with every option given (Args are used as they are) for the duration
// of the test (framework.StartTestAgent); once it has stopped, its Node and Lease are deleted.
func startAgentWith(ctx context.Context, t *testing.T, opts framework.AgentOptions) *framework.Agent {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := framework.DeleteNode(ctx, suite.cp.AdminClient, opts.NodeName); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return framework.StartTestAgent(ctx, t, opts)
}

// waitHealthz polls path until it answers want, failing the test after timeout.
func waitHealthz(ctx context.Context, t *testing.T, a *framework.Agent, path string, want int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := a.WaitHTTP(ctx, path, want); err != nil {
		t.Fatalf("nodeagent %s: %v", a.NodeName, err)
	}
}

// mustScrape scrapes the agent's /metrics, failing the test on error.
func mustScrape(ctx context.Context, t *testing.T, a *framework.Agent) *framework.Metrics {
	t.Helper()
	m, err := a.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
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

// auditEvents returns the completed requests of user in the suite's audit log that keep accepts (nil
// keeps all).
func auditEvents(t *testing.T, user string, keep func(e framework.AuditEvent) bool) []framework.AuditEvent {
	t.Helper()
	events, err := framework.ReadAuditEventsBy(suite.cp.AuditLogPath, user, keep)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// nodeUser is the username of node identity name.
func nodeUser(name string) string { return "system:node:" + name }

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
