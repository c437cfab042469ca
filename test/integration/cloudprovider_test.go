package integration_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// Node names of TestCloudProviderExternal, on a control plane of its own: the cloud node controller
// reconciles the addresses of every Node of its cluster, so it must not run beside the shared one's tests.
const (
	cloudAgent       = "cloud-agent"        // nodeagent, controller up at registration; restarted, then its Node deleted
	cloudKubelet     = "cloud-kubelet"      // the reference kubelet run the same way; restarted
	cloudLateAgent   = "cloud-late-agent"   // nodeagent registered while the controller is down
	cloudLateKubelet = "cloud-late-kubelet" // the reference kubelet, same
	cloudLateNoIP    = "cloud-late-noip"    // nodeagent without --node-ip, registered while the controller is down
	cloudLateNoIPK   = "cloud-late-noip-k"  // the reference kubelet, same
)

// Well-known keys (k8s.io/cloud-provider/api and k8s.io/api/core/v1).
const (
	taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
	annotationNodeIP   = "alpha.kubernetes.io/provided-node-ip"
)

// cloudStatusPeriod is --node-status-update-frequency of the agents, the kubelets and the cloud node
// controller in this test: short, so that a hold of several periods takes seconds.
const cloudStatusPeriod = 2 * time.Second

// TestCloudProviderExternal runs nodeagent and the reference kubelet with --cloud-provider=external
// against the real cloud node controller (k8s.io/cloud-provider's controllers/node and
// controllers/nodelifecycle over its fake cloud, hack/tools/cloud-node-controller), issue 9:
//
//   - controller down at registration: the Nodes are created with the uninitialized taint and stay so
//     over several status periods, with no providerID, no cloud labels and only the addresses they were
//     given (--node-ip and the hostname; the hostname alone without --node-ip); once the controller comes
//     up they are initialised;
//   - controller up at registration: the Node is tainted until initialised, then has providerID
//     fake://<name>, the instance-type, zone and region labels (GA and beta) and the cloud's addresses
//     (InternalIP = --node-ip, ExternalIP, Hostname), and keeps all of them over several status periods,
//     across a restart, and through a re-registration after the Node is deleted (the new Node is created
//     tainted and is initialised again);
//   - every version of every Node, as a watch saw it, is tainted until it carries the cloud's providerID
//     and labels, and once initialised never loses any of it (nodeagent does not fight the controller);
//     nodeagent never writes the Node's spec, and creates it exactly twice (audit log);
//   - the reference kubelet run the same way ends with the same labels, annotations, taints, spec and
//     addresses as nodeagent, the node name normalised, both while the controller is down and after.
func TestCloudProviderExternal(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx := t.Context()
	dir := t.TempDir()
	cpCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cp, err := framework.StartControlPlane(cpCtx, framework.ControlPlaneOptions{Dir: dir + "/cp",
		NodeNames: []string{cloudAgent, cloudKubelet, cloudLateAgent, cloudLateKubelet, cloudLateNoIP, cloudLateNoIPK}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	ctrd := startContainerd(t, true)
	client := cp.AdminClient
	nodeIP := hostIPv4(t)
	noIPFlags := []string{"--cloud-provider=external", "--node-status-update-frequency=" + cloudStatusPeriod.String()}
	flags := append([]string{"--node-ip=" + nodeIP}, noIPFlags...)

	// Every version of every Node, from before the first one is created.
	hist := watchNodes(ctx, t, client)

	// Not started yet: the first nodes register while it is down.
	cnc := framework.NewTestCloudNodeController(t, cp, framework.CloudNodeControllerOptions{
		Dir: dir + "/cloud", NodeStatusUpdateFrequency: cloudStatusPeriod})
	withIP := expectation{cnc: cnc, internalIP: nodeIP}
	noIP := expectation{cnc: cnc}

	// 1. The controller is down: nodes register tainted, with only what they were given.
	lateAgent := startAgent(t, cp, cloudLateAgent, ctrd, flags...)
	lateNoIP := startAgent(t, cp, cloudLateNoIP, ctrd, noIPFlags...)
	startCloudKubelet(t, cp, ctrd, cloudLateKubelet, flags)
	startCloudKubelet(t, cp, ctrd, cloudLateNoIPK, noIPFlags)
	for _, n := range []string{cloudLateAgent, cloudLateNoIP, cloudLateKubelet, cloudLateNoIPK} {
		framework.WaitReady(ctx, t, client, n, time.Minute)
	}
	holdStart := time.Now()
	waitSyncs(t, 3, lateAgent, lateNoIP)
	t.Logf("controller down: held %v (3 status periods and syncs of each agent)", time.Since(holdStart).Round(time.Millisecond))
	for _, c := range []struct {
		name string
		want expectation
	}{{cloudLateAgent, withIP}, {cloudLateNoIP, noIP}, {cloudLateKubelet, withIP}, {cloudLateNoIPK, noIP}} {
		n := getNode(t, client, c.name)
		if p := c.want.uninitialisedProblems(n); len(p) > 0 {
			t.Errorf("node %s, cloud controller down: %s", c.name, strings.Join(p, "; "))
		}
	}
	compareCloudFields(t, client, cloudLateKubelet, cloudLateAgent, "controller down")
	compareCloudFields(t, client, cloudLateNoIPK, cloudLateNoIP, "controller down, no --node-ip")

	// 2. The controller comes up: it initialises them.
	upCtx, cancel := context.WithTimeout(ctx, time.Minute)
	if err := cnc.Start(upCtx); err != nil {
		cancel()
		t.Fatal(err)
	}
	cancel()
	up := time.Now()
	for _, c := range []struct {
		name string
		want expectation
	}{{cloudLateAgent, withIP}, {cloudLateNoIP, noIP}, {cloudLateKubelet, withIP}, {cloudLateNoIPK, noIP}} {
		waitInitialised(t, client, c.name, c.want, up)
	}

	// 3. The controller is up at registration.
	agentDir := t.TempDir()
	agentOpts := framework.AgentOptions{Dir: agentDir, NodeName: cloudAgent, Kubeconfig: cp.KubeconfigFor(cloudAgent),
		RuntimeEndpoint: ctrd.Endpoint, Args: flags}
	registered := time.Now()
	agent := framework.StartTestAgent(ctx, t, agentOpts)
	kubelet := startCloudKubelet(t, cp, ctrd, cloudKubelet, flags)
	waitInitialised(t, client, cloudAgent, withIP, registered)
	waitInitialised(t, client, cloudKubelet, withIP, registered)
	holdStart = time.Now()
	waitSyncs(t, 3, agent, lateAgent)
	t.Logf("controller up: held %v (3 status periods and syncs of each agent)", time.Since(holdStart).Round(time.Millisecond))

	// 4. A restart of nodeagent (and of the kubelet, to compare): everything stays.
	if err := agent.Stop(); err != nil {
		t.Fatalf("stop nodeagent: %v", err)
	}
	if err := kubelet.Stop(); err != nil {
		t.Fatalf("stop kubelet: %v", err)
	}
	agent = framework.StartTestAgent(ctx, t, agentOpts)
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = kubelet.WaitHealthy(hctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, agent)
	holdStart = time.Now()
	waitSyncs(t, 3, agent)
	t.Logf("after restart: held %v (3 status periods and syncs)", time.Since(holdStart).Round(time.Millisecond))
	for _, c := range []struct {
		name string
		want expectation
	}{{cloudAgent, withIP}, {cloudKubelet, withIP}} {
		if p := c.want.initialisedProblems(getNode(t, client, c.name)); len(p) > 0 {
			t.Errorf("node %s after a restart: %s", c.name, strings.Join(p, "; "))
		}
	}

	// 5. Re-registration: the Node is deleted; nodeagent creates it again, tainted, and the controller
	// initialises it again.
	old := getNode(t, client, cloudAgent)
	deleted := time.Now()
	if err := framework.DeleteNode(ctx, client, cloudAgent); err != nil {
		t.Fatal(err)
	}
	framework.WaitNode(ctx, t, client, cloudAgent, time.Minute, "a new Node", func(n *corev1.Node) bool { return n.UID != old.UID })
	waitInitialised(t, client, cloudAgent, withIP, deleted)
	holdStart = time.Now()
	waitSyncs(t, 3, agent)
	t.Logf("after re-registration: held %v (3 status periods and syncs)", time.Since(holdStart).Round(time.Millisecond))
	if uids := hist.uids(cloudAgent); len(uids) != 2 {
		t.Errorf("node %s: want 2 Nodes (the first and the one registered again), saw UIDs %v", cloudAgent, uids)
	}

	// 6. The kubelet ends as nodeagent; every version of every Node kept the rules.
	compareCloudFields(t, client, cloudKubelet, cloudAgent, "controller up at registration, after a restart (nodeagent: and a re-registration)")
	compareCloudFields(t, client, cloudLateKubelet, cloudLateAgent, "controller down at registration, then up")
	compareCloudFields(t, client, cloudLateNoIPK, cloudLateNoIP, "controller down at registration, then up, no --node-ip")
	versions, err := hist.stop()
	if err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		name string
		want expectation
	}{{cloudAgent, withIP}, {cloudKubelet, withIP}, {cloudLateAgent, withIP}, {cloudLateKubelet, withIP}, {cloudLateNoIP, noIP}, {cloudLateNoIPK, noIP}} {
		checkCloudHistory(t, c.name, versions[c.name], c.want)
	}
	creates, err := framework.ReadAuditEventsBy(cp.AuditLogPath, "system:node:"+cloudAgent, func(e framework.AuditEvent) bool {
		return e.Is("create", "nodes", "") && e.Code() == 201
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(creates) != 2 {
		t.Errorf("nodeagent %s created its Node %d times (audit log), want 2: at first and after the deletion", cloudAgent, len(creates))
	}
	for _, name := range []string{cloudAgent, cloudLateAgent, cloudLateNoIP} {
		writes, err := framework.ReadAuditEventsBy(cp.AuditLogPath, "system:node:"+name, func(e framework.AuditEvent) bool {
			return (e.Verb == "update" || e.Verb == "patch") && e.ObjectRef != nil && e.ObjectRef.Resource == "nodes" && e.ObjectRef.Subresource == ""
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(writes) > 0 {
			t.Errorf("nodeagent %s wrote its Node's spec or metadata (not nodes/status) %d times, first %s %s", name, len(writes), writes[0].Verb, writes[0].RequestURI)
		}
	}
	t.Logf("wall time %v", time.Since(start).Round(time.Millisecond))
}

// startCloudKubelet starts the reference kubelet as node name with args (and, as the fidelity test,
// local storage capacity isolation on, as nodeagent reports it), for the duration of the test.
func startCloudKubelet(t *testing.T, cp *framework.ControlPlane, c *framework.Containerd, name string, args []string) *framework.Kubelet {
	t.Helper()
	// A short directory: the kubelet's unix sockets under its root dir must fit 108 bytes.
	dir, err := os.MkdirTemp("", "cloud-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return framework.StartTestKubelet(t.Context(), t, framework.KubeletOptions{
		Dir: dir, NodeName: name, Kubeconfig: cp.KubeconfigFor(name), RuntimeEndpoint: c.Endpoint,
		Args: append([]string{"--local-storage-capacity-isolation=true"}, args...),
	})
}

// waitSyncs waits until each agent has made n more status syncs (patched or not) than when called and
// n status periods have passed: a hold of n periods in which every sync could have undone what the cloud
// controller set. (Syncs can come faster than the period: after a re-registration, or a Lease renewal
// that follows failures, the agent syncs again within seconds.)
func waitSyncs(t *testing.T, n int, agents ...*framework.Agent) {
	t.Helper()
	start := time.Now()
	from := make([]float64, len(agents))
	for i, a := range agents {
		m, err := a.Metrics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		from[i] = m.Sum("nodeagent_node_status_syncs_total", nil)
	}
	for i, a := range agents {
		framework.WaitMetrics(t.Context(), t, a, time.Duration(n+3)*cloudStatusPeriod+10*time.Second,
			fmt.Sprintf("%d more status syncs over %d periods", n, n), func(m *framework.Metrics) bool {
				return m.Sum("nodeagent_node_status_syncs_total", nil) >= from[i]+float64(n) &&
					time.Since(start) >= time.Duration(n)*cloudStatusPeriod
			})
	}
}

// waitReadyz waits until the agent's /readyz answers 200 (registered, status posted).
func waitReadyz(t *testing.T, a *framework.Agent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.WaitHTTP(ctx, "/readyz", 200); err != nil {
		t.Fatal(err)
	}
}

// expectation is what a Node should carry, before and after the fake cloud initialises it.
type expectation struct {
	cnc *framework.CloudNodeController
	// internalIP is --node-ip, "" when not given.
	internalIP string
}

// cloudLabels are the labels the cloud node controller sets, with the fake cloud's values.
func (e expectation) cloudLabels() map[string]string {
	return map[string]string{
		corev1.LabelInstanceTypeStable:      e.cnc.InstanceType,
		corev1.LabelInstanceType:            e.cnc.InstanceType,
		corev1.LabelTopologyZone:            e.cnc.Zone,
		corev1.LabelFailureDomainBetaZone:   e.cnc.Zone,
		corev1.LabelTopologyRegion:          e.cnc.Region,
		corev1.LabelFailureDomainBetaRegion: e.cnc.Region,
	}
}

// addresses returns the addresses expected of node name, sorted (addressKey), before (initialised false)
// or after the cloud initialised it: the agent's own are --node-ip's InternalIP and the Hostname (only
// the Hostname without --node-ip); the cloud's add its ExternalIP.
func (e expectation) addresses(name string, initialised bool) []string {
	out := []string{"Hostname=" + name}
	if e.internalIP != "" {
		out = append(out, "InternalIP="+e.internalIP)
	}
	if initialised {
		out = append(out, "ExternalIP="+e.cnc.ExternalIP)
	}
	sort.Strings(out)
	return out
}

// addressKey returns n's addresses as sorted "Type=address" strings.
func addressKey(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		out = append(out, string(a.Type)+"="+a.Address)
	}
	sort.Strings(out)
	return out
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// annotationProblems checks the provided-node-ip annotation: --node-ip's address, or absent without it.
func (e expectation) annotationProblems(n *corev1.Node) []string {
	v, ok := n.Annotations[annotationNodeIP]
	switch {
	case e.internalIP == "" && ok:
		return []string{fmt.Sprintf("annotation %s=%q, want none (no --node-ip)", annotationNodeIP, v)}
	case e.internalIP != "" && v != e.internalIP:
		return []string{fmt.Sprintf("annotation %s=%q, want %q", annotationNodeIP, v, e.internalIP)}
	}
	return nil
}

// uninitialisedProblems lists how n differs from a Node no cloud controller has initialised: tainted
// uninitialized NoSchedule, no providerID, none of the cloud's labels, only its own addresses.
func (e expectation) uninitialisedProblems(n *corev1.Node) []string {
	var p []string
	if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == taintUninitialized && t.Value == "true" && t.Effect == corev1.TaintEffectNoSchedule
	}) {
		p = append(p, fmt.Sprintf("no %s=true:NoSchedule taint (taints %v)", taintUninitialized, n.Spec.Taints))
	}
	if n.Spec.ProviderID != "" {
		p = append(p, fmt.Sprintf("providerID %q", n.Spec.ProviderID))
	}
	for k := range e.cloudLabels() {
		if v, ok := n.Labels[k]; ok {
			p = append(p, fmt.Sprintf("label %s=%q", k, v))
		}
	}
	if got, want := addressKey(n), e.addresses(n.Name, false); !slices.Equal(got, want) {
		p = append(p, fmt.Sprintf("addresses %v, want %v", got, want))
	}
	return append(p, e.annotationProblems(n)...)
}

// specProblems lists how n's taints, providerID and labels differ from an initialised Node's.
func (e expectation) specProblems(n *corev1.Node) []string {
	var p []string
	if hasTaint(n, taintUninitialized) {
		p = append(p, "still tainted "+taintUninitialized)
	}
	if want := framework.CloudProviderID(n.Name); n.Spec.ProviderID != want {
		p = append(p, fmt.Sprintf("providerID %q, want %q", n.Spec.ProviderID, want))
	}
	for k, want := range e.cloudLabels() {
		if v := n.Labels[k]; v != want {
			p = append(p, fmt.Sprintf("label %s=%q, want %q", k, v, want))
		}
	}
	return p
}

// initialisedProblems lists how n differs from a Node the fake cloud has initialised: specProblems, the
// cloud's addresses and the annotation.
func (e expectation) initialisedProblems(n *corev1.Node) []string {
	p := e.specProblems(n)
	if got, want := addressKey(n), e.addresses(n.Name, true); !slices.Equal(got, want) {
		p = append(p, fmt.Sprintf("addresses %v, want %v", got, want))
	}
	return append(p, e.annotationProblems(n)...)
}

// waitInitialised waits until Node name is initialised (initialisedProblems is empty) and logs how long
// after since that took.
func waitInitialised(t *testing.T, c kubernetes.Interface, name string, want expectation, since time.Time) {
	t.Helper()
	var last []string
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = want.initialisedProblems(n)
		return len(last) == 0, nil
	})
	if err != nil {
		t.Fatalf("node %s not initialised by the cloud node controller within a minute: %v; last: %s", name, err, strings.Join(last, "; "))
	}
	t.Logf("node %s initialised %v after %s", name, time.Since(since).Round(time.Millisecond), since.Format("15:04:05.000"))
}

// cloudFields are the flattenNode fields the cloud provider touches or depends on.
func cloudFields(n *corev1.Node) map[string]string {
	out := map[string]string{}
	for k, v := range flattenNode(n) {
		for _, prefix := range []string{"label/", "annotation/", "taint/", "spec/", "address/"} {
			if strings.HasPrefix(k, prefix) {
				out[k] = v
			}
		}
	}
	return out
}

// compareCloudFields polls (up to 30 s) until the kubelet's and nodeagent's Nodes have the same
// labels, annotations, taints, spec and addresses (node names normalised), and fails the test with the
// differences otherwise.
func compareCloudFields(t *testing.T, c kubernetes.Interface, kubeletNode, agentNode, when string) {
	t.Helper()
	var diffs []string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		k, err := c.CoreV1().Nodes().Get(ctx, kubeletNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		a, err := c.CoreV1().Nodes().Get(ctx, agentNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		diffs = compareNodes(cloudFields(k), cloudFields(a))
		return len(diffs) == 0, nil
	})
	if err != nil {
		t.Errorf("%s: kubelet %s and nodeagent %s differ in labels, annotations, taints, spec or addresses: %v\n%s",
			when, kubeletNode, agentNode, err, strings.Join(diffs, "\n"))
		return
	}
	t.Logf("%s: kubelet %s and nodeagent %s have the same labels, annotations, taints, spec and addresses", when, kubeletNode, agentNode)
}

// checkCloudHistory checks every version of Node name seen by the watch, Node by Node (UID): the first
// version (the Create) is uninitialised; a version without the uninitialized taint has the cloud's
// providerID and labels (tainted until initialised); once a version is fully initialised, every later
// version of that Node is too (nothing the cloud set is lost or fought over); and each carries the
// provided-node-ip annotation as expected. It logs how many versions it checked.
func checkCloudHistory(t *testing.T, name string, versions []*corev1.Node, want expectation) {
	t.Helper()
	if len(versions) == 0 {
		t.Errorf("node %s: the watch saw no version", name)
		return
	}
	initialised := map[types.UID]bool{}
	seen := map[types.UID]int{}
	var bad []string
	for _, n := range versions {
		seen[n.UID]++
		where := fmt.Sprintf("uid %s rv %s", n.UID, n.ResourceVersion)
		if seen[n.UID] == 1 {
			if p := want.uninitialisedProblems(n); len(p) > 0 {
				bad = append(bad, fmt.Sprintf("%s: created not as an uninitialised Node: %s", where, strings.Join(p, "; ")))
			}
		}
		if !hasTaint(n, taintUninitialized) {
			if p := want.specProblems(n); len(p) > 0 {
				bad = append(bad, fmt.Sprintf("%s: untainted but not initialised: %s", where, strings.Join(p, "; ")))
			}
		}
		p := want.initialisedProblems(n)
		if initialised[n.UID] && len(p) > 0 {
			bad = append(bad, fmt.Sprintf("%s: lost what the cloud set: %s", where, strings.Join(p, "; ")))
		}
		if len(p) == 0 {
			initialised[n.UID] = true
		}
		if p := want.annotationProblems(n); len(p) > 0 {
			bad = append(bad, where+": "+strings.Join(p, "; "))
		}
	}
	for uid := range seen {
		if !initialised[uid] {
			bad = append(bad, fmt.Sprintf("uid %s: never initialised", uid))
		}
	}
	if len(bad) > 0 {
		t.Errorf("node %s, %d versions: %s", name, len(versions), strings.Join(bad, "\n"))
		return
	}
	t.Logf("node %s: %d versions of %d Node(s) checked", name, len(versions), len(seen))
}

// nodeWatch records every version of every Node from a watch started before the test creates any.
type nodeWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	byName map[string][]*corev1.Node
	err    error
}

// watchNodes lists the Nodes and watches them from the list's resourceVersion (again from the last one
// seen if the server closes the watch) until stop.
func watchNodes(ctx context.Context, t *testing.T, c kubernetes.Interface) *nodeWatch {
	t.Helper()
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &nodeWatch{cancel: cancel, done: make(chan struct{}), byName: map[string][]*corev1.Node{}}
	for i := range list.Items {
		w.byName[list.Items[i].Name] = append(w.byName[list.Items[i].Name], &list.Items[i])
	}
	t.Cleanup(func() { _, _ = w.stop() })
	go func() {
		defer close(w.done)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			wi, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if ctx.Err() == nil {
					w.fail(err)
				}
				return
			}
			for ev := range wi.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified:
					n := ev.Object.(*corev1.Node)
					rv = n.ResourceVersion
					w.mu.Lock()
					w.byName[n.Name] = append(w.byName[n.Name], n)
					w.mu.Unlock()
				case watch.Deleted, watch.Bookmark:
					rv = ev.Object.(metav1.Object).GetResourceVersion()
				case watch.Error:
					if ctx.Err() == nil {
						w.fail(apierrors.FromObject(ev.Object))
					}
					wi.Stop()
					return
				}
			}
			wi.Stop()
		}
	}()
	return w
}

func (w *nodeWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("node watch: %w", err)
	}
}

// uids returns the UIDs of the Nodes called name seen so far, in order.
func (w *nodeWatch) uids(name string) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []types.UID
	for _, n := range w.byName[name] {
		if !slices.Contains(out, n.UID) {
			out = append(out, n.UID)
		}
	}
	return out
}

// stop ends the watch and returns the versions by Node name, and the error that ended the watch early
// if one did (then versions after it are missing).
func (w *nodeWatch) stop() (map[string][]*corev1.Node, error) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byName, w.err
}
