package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	"github.com/nodeagent/nodeagent/pkg/simulation"
)

// Defaults of `nodeagent simulate ctl`: where deploy/kubernetes/simulate puts the simulation.
const (
	defaultSimNamespace   = "nodeagent-simulation"
	defaultSimStatefulSet = "nodeagent-simulate"
)

// ctlOptions is the command line of `nodeagent simulate ctl`.
type ctlOptions struct {
	kubeconfig  string
	namespace   string
	statefulSet string
	// nodes, prefix, shards and port override what the StatefulSet's pod template says (0 or "": its).
	nodes  int
	prefix string
	shards int
	port   int
	list   bool
	change simulation.Change
	// pod (namespace/name) and podChange: a change of one of a pod's containers instead of a Node's.
	pod       string
	podChange simulation.ContainerChange
	// usage (--cpu, --memory): a change of the simulated usage of the pod (its --container, or all)
	// or of the Node's base usage.
	usage simulation.UsageChange
}

// ctlChangeFlags are the flags of a Change, by field.
var ctlChangeFlags = []struct {
	name, help string
	field      func(*simulation.Change) **bool
}{
	{"runtime-ready", "Whether the Node's container runtime answers RuntimeReady.", func(c *simulation.Change) **bool { return &c.RuntimeReady }},
	{"network-ready", "Whether the Node's container runtime answers NetworkReady.", func(c *simulation.Change) **bool { return &c.NetworkReady }},
	{"memory-pressure", "Whether the Node's host reports memory pressure.", func(c *simulation.Change) **bool { return &c.MemoryPressure }},
	{"disk-pressure", "Whether the Node's host reports disk pressure.", func(c *simulation.Change) **bool { return &c.DiskPressure }},
	{"pid-pressure", "Whether the Node's host reports PID pressure.", func(c *simulation.Change) **bool { return &c.PIDPressure }},
	{"stopped", "Stop the Node's agent (true: no status, no Lease) or start it again (false).", func(c *simulation.Change) **bool { return &c.Stopped }},
}

// newSimulateCtlCommand returns `nodeagent simulate ctl`.
func newSimulateCtlCommand() *cobra.Command {
	o := &ctlOptions{namespace: defaultSimNamespace, statefulSet: defaultSimStatefulSet}
	values := make([]bool, len(ctlChangeFlags))
	fs := pflag.NewFlagSet("ctl", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "kubeconfig of an identity that may get the StatefulSet and pods, and create pods/portforward, in --namespace (default: $KUBECONFIG, ~/.kube/config).")
	fs.StringVarP(&o.namespace, "namespace", "n", o.namespace, "Namespace of the simulation's StatefulSet.")
	fs.StringVar(&o.statefulSet, "statefulset", o.statefulSet, "Name of the simulation's StatefulSet; its pod <name>-<I> runs shard I.")
	fs.IntVar(&o.nodes, "nodes", 0, "Nodes per shard (default: the StatefulSet's --nodes).")
	fs.StringVar(&o.prefix, "node-name-prefix", "", "Prefix of the Node names (default: the StatefulSet's --node-name-prefix).")
	fs.IntVar(&o.shards, "shards", 0, "Number of shards (default: the StatefulSet's --shards).")
	fs.IntVar(&o.port, "port", 0, "Port of the shards' control API in their pods (default: the nodeagent container's --healthz-port, else its port named \"http\", else its first, else 10248).")
	fs.BoolVar(&o.list, "list", false, "List every shard's Nodes and a summary.")
	for i, f := range ctlChangeFlags {
		fs.BoolVar(&values[i], f.name, false, f.help)
	}
	var crash int32
	var stopContainer, containerReady bool
	fs.StringVar(&o.pod, "pod", "", "NAMESPACE/NAME of a pod on a simulated Node: change one of its containers (--container with --crash, --stop-container or --container-ready) instead of a Node.")
	fs.StringVar(&o.podChange.Container, "container", "", "With --pod: the container to change.")
	fs.Int32Var(&crash, "crash", 0, "With --pod: the container exits now with this code (1-255); its restart policy applies (CrashLoopBackOff).")
	fs.BoolVar(&stopContainer, "stop-container", false, "With --pod: the container exits 0 now (Completed).")
	fs.BoolVar(&containerReady, "container-ready", true, "With --pod: false makes the container not ready until set true again.")
	fs.StringVar(&o.usage.CPU, "cpu", "", "Simulated CPU use from now on, a quantity (800m): with --pod, of each of its containers (or of --container); with NODE, the Node's base use besides its pods.")
	fs.StringVar(&o.usage.Memory, "memory", "", "Simulated memory working set from now on, a quantity (300Mi): with --pod, of each of its containers (or of --container); with NODE, the Node's base besides its pods.")
	cmd := &cobra.Command{
		Use:   "ctl NODE [--runtime-ready=false|--network-ready=...|--memory-pressure=...|--disk-pressure=...|--pid-pressure=...|--stopped=...] | ctl --list | ctl --pod NS/NAME --container C [--crash=CODE|--stop-container|--container-ready=false] | ctl (NODE|--pod NS/NAME [--container C]) --cpu 800m --memory 300Mi",
		Short: "Control a simulated Node of a sharded simulation from outside the cluster, through port-forward to its shard",
		Long: `ctl finds the shard that owns NODE (from its global index and the StatefulSet's --nodes per shard)
and sends the change to that shard's pod through port-forward, as kubectl port-forward does
(/api/v1/namespaces/<ns>/pods/<statefulset>-<I>/portforward): the request reaches the shard's control API
on the pod's own loopback, the only peer it admits. Without a change it prints the Node's state. --list prints every shard's Nodes with a summary. --pod changes a container of a
pod on a simulated Node (crash it, stop it, make it unready), through the shard of the pod's Node. --cpu and
--memory set the simulated usage (served as the kubelet's /stats/summary and /metrics/resource, which
metrics-server, kubectl top and the HorizontalPodAutoscaler read) of a pod's containers, or a Node's base
usage besides its pods, from now on. The identity needs get on the StatefulSet and pods and create on
pods/portforward in the namespace (and get on the pod given with --pod, in its namespace).`,
		Args:          cobra.MaximumNArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			for i, f := range ctlChangeFlags {
				if fs.Changed(f.name) {
					*f.field(&o.change) = &values[i]
				}
			}
			if fs.Changed("crash") {
				o.podChange.Crash = &crash
			}
			if fs.Changed("stop-container") {
				o.podChange.Stop = &stopContainer
			}
			if fs.Changed("container-ready") {
				o.podChange.Ready = &containerReady
			}
			podFlags := o.podChange.Container != "" || o.podChange.Crash != nil || o.podChange.Stop != nil || o.podChange.Ready != nil
			usage := o.usage.CPU != "" || o.usage.Memory != ""
			o.usage.Container = o.podChange.Container
			for _, q := range []struct{ flag, value string }{{"--cpu", o.usage.CPU}, {"--memory", o.usage.Memory}} {
				if v, err := resource.ParseQuantity(q.value); q.value != "" && (err != nil || v.Sign() <= 0) {
					return fmt.Errorf("%s %q: give a positive quantity such as 800m (cpu) or 300Mi (memory)", q.flag, q.value)
				}
			}
			switch {
			case o.pod != "" && (len(args) > 0 || o.list || !o.change.Empty()):
				return errors.New("--pod: takes no NODE, --list or Node change flag")
			case usage && (o.podChange.Crash != nil || o.podChange.Stop != nil || o.podChange.Ready != nil):
				return errors.New("--cpu and --memory: give them alone (with --container), not with --crash, --stop-container or --container-ready")
			case usage && (o.list || !o.change.Empty()):
				return errors.New("--cpu and --memory: take no --list or Node condition flag")
			case o.pod != "" && o.podChange.Container == "" && !usage:
				return errors.New("--pod: give the --container to change, or --cpu/--memory")
			case o.pod == "" && podFlags:
				return errors.New("--container, --crash, --stop-container and --container-ready need --pod NAMESPACE/NAME")
			case o.pod != "":
				if ns, name, ok := strings.Cut(o.pod, "/"); !ok || ns == "" || name == "" {
					return fmt.Errorf("--pod %q: give NAMESPACE/NAME", o.pod)
				}
				return runSimulateCtl(cmd.Context(), cmd.OutOrStdout(), o, "")
			}
			switch {
			case o.list && len(args) > 0:
				return fmt.Errorf("--list: takes no NODE (got %q)", args[0])
			case !o.list && len(args) == 0:
				return errors.New("ctl: give a NODE, or --list")
			case o.list && !o.change.Empty():
				return errors.New("--list: takes no change flag")
			}
			node := ""
			if len(args) > 0 {
				node = args[0]
			}
			return runSimulateCtl(cmd.Context(), cmd.OutOrStdout(), o, node)
		},
	}
	cmd.Flags().AddFlagSet(fs)
	return cmd
}

// simLayout is how a simulation is laid out over its StatefulSet's pods.
type simLayout struct {
	nodes, shards, port int
	prefix              string
}

// owner returns the shard that runs node, or an error saying why node is none of the simulation's.
func (l simLayout) owner(node string) (int, error) {
	i, ok := simulation.ParseNodeName(node, l.prefix)
	if !ok {
		return 0, fmt.Errorf("node %q: not a simulated Node name of this simulation (%s followed by the index on at least 4 digits, without leading zeros beyond 4)", node, l.prefix)
	}
	shard := simulation.Owner(i, l.nodes)
	if shard >= l.shards {
		return 0, fmt.Errorf("node %q: index %d is beyond the simulation's %d Nodes (%d shards of %d)", node, i, l.nodes*l.shards, l.shards, l.nodes)
	}
	return shard, nil
}

// layoutFromStatefulSet reads --nodes, --node-name-prefix, --shards and the control API's port from
// the StatefulSet's nodeagent container (the port: its --healthz-port, else its container port named
// "http", else its first container port, else 10248); o's non-zero values override them.
func layoutFromStatefulSet(sts *appsv1.StatefulSet, o *ctlOptions) (simLayout, error) {
	l := simLayout{nodes: 100, shards: 1, prefix: "sim-node-", port: 10248}
	found := false
	for _, c := range sts.Spec.Template.Spec.Containers {
		args := append(append([]string(nil), c.Command...), c.Args...)
		if !containsArg(args, "simulate") {
			continue
		}
		found = true
		for i, p := range c.Ports {
			if i == 0 || p.Name == "http" {
				l.port = int(p.ContainerPort)
			}
			if p.Name == "http" {
				break
			}
		}
		for _, a := range args {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				continue
			}
			var err error
			switch k {
			case "--nodes":
				l.nodes, err = strconv.Atoi(v)
			case "--shards":
				l.shards, err = strconv.Atoi(v)
			case "--node-name-prefix":
				l.prefix = v
			case "--healthz-port":
				l.port, err = strconv.Atoi(v)
			}
			if err != nil {
				return l, fmt.Errorf("statefulset %s/%s: argument %q: %w", sts.Namespace, sts.Name, a, err)
			}
		}
	}
	if !found {
		return l, fmt.Errorf("statefulset %s/%s: no container runs `nodeagent simulate`", sts.Namespace, sts.Name)
	}
	if o.nodes > 0 {
		l.nodes = o.nodes
	}
	if o.shards > 0 {
		l.shards = o.shards
	}
	if o.port > 0 {
		l.port = o.port
	}
	if o.prefix != "" {
		l.prefix = o.prefix
	}
	if l.nodes < 1 || l.shards < 1 {
		return l, fmt.Errorf("statefulset %s/%s: --nodes %d --shards %d: must be at least 1", sts.Namespace, sts.Name, l.nodes, l.shards)
	}
	return l, nil
}

func containsArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// runSimulateCtl applies o.change to node (or prints its state), or lists every shard's Nodes.
func runSimulateCtl(ctx context.Context, out io.Writer, o *ctlOptions, node string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", o.kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", o.kubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sts, err := client.AppsV1().StatefulSets(o.namespace).Get(ctx, o.statefulSet, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("--statefulset %q in --namespace %q: %w", o.statefulSet, o.namespace, err)
	}
	l, err := layoutFromStatefulSet(sts, o)
	if err != nil {
		return err
	}
	c := shardClient{client: client, config: cfg, namespace: o.namespace, statefulSet: o.statefulSet, port: l.port}
	if o.pod != "" {
		ns, name, _ := strings.Cut(o.pod, "/")
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("--pod %q: %w", o.pod, err)
		}
		shard, err := l.owner(p.Spec.NodeName)
		if err != nil {
			return fmt.Errorf("--pod %q: %w", o.pod, err)
		}
		if o.usage.CPU != "" || o.usage.Memory != "" {
			body, err := json.Marshal(o.usage)
			if err != nil {
				return err
			}
			var st simulation.PodUsageState
			if err := c.do(ctx, shard, "POST", "usage/pods/"+ns+"/"+name, body, &st); err != nil {
				return err
			}
			return writeIndented(out, st)
		}
		body, err := json.Marshal(o.podChange)
		if err != nil {
			return err
		}
		var st simulation.PodState
		if err := c.do(ctx, shard, "POST", "pods/"+ns+"/"+name, body, &st); err != nil {
			return err
		}
		return writeIndented(out, st)
	}
	if o.list {
		all := simulation.List{}
		for shard := range l.shards {
			var part simulation.List
			if err := c.do(ctx, shard, "GET", "nodes", nil, &part); err != nil {
				return err
			}
			all.Nodes = append(all.Nodes, part.Nodes...)
			s := &all.Summary
			s.Total, s.Pending, s.Running, s.Stopped = s.Total+part.Summary.Total, s.Pending+part.Summary.Pending, s.Running+part.Summary.Running, s.Stopped+part.Summary.Stopped
			s.Ready, s.NotReady = s.Ready+part.Summary.Ready, s.NotReady+part.Summary.NotReady
		}
		return writeIndented(out, all)
	}
	shard, err := l.owner(node)
	if err != nil {
		return err
	}
	if o.usage.CPU != "" || o.usage.Memory != "" {
		body, err := json.Marshal(o.usage)
		if err != nil {
			return err
		}
		var st simulation.NodeUsageState
		if err := c.do(ctx, shard, "POST", "usage/nodes/"+node, body, &st); err != nil {
			return err
		}
		return writeIndented(out, st)
	}
	var st simulation.NodeState
	if o.change.Empty() {
		err = c.do(ctx, shard, "GET", "nodes/"+node, nil, &st)
	} else {
		body, merr := json.Marshal(o.change)
		if merr != nil {
			return merr
		}
		err = c.do(ctx, shard, "POST", "nodes/"+node, body, &st)
	}
	if err != nil {
		return err
	}
	return writeIndented(out, st)
}

// shardClient reaches the shards' control API through port-forward to each shard's pod, as kubectl
// port-forward does (client-go's tools/portforward over the pod's portforward subresource: WebSockets,
// falling back to SPDY): the request arrives on the pod's own loopback, the only peer the control
// API admits, so that no header and no network path lets anyone else in.
type shardClient struct {
	client                 kubernetes.Interface
	config                 *rest.Config
	namespace, statefulSet string
	port                   int
}

// do sends method to /simulation/<path> of shard's pod and decodes the JSON answer into into. The
// error names the pod and carries the shard's one-line answer.
func (c shardClient) do(ctx context.Context, shard int, method, path string, body []byte, into any) error {
	pod := fmt.Sprintf("%s-%d", c.statefulSet, shard)
	local, stop, err := c.forward(ctx, pod)
	if err != nil {
		return fmt.Errorf("shard %d (pod %s/%s): port-forward to port %d: %w", shard, c.namespace, pod, c.port, err)
	}
	defer stop()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://127.0.0.1:%d/simulation/%s", local, path), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return fmt.Errorf("shard %d (pod %s/%s): %w", shard, c.namespace, pod, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxCtlAnswer))
	if err != nil {
		return fmt.Errorf("shard %d (pod %s/%s): %w", shard, c.namespace, pod, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("shard %d (pod %s/%s): %s: %s", shard, c.namespace, pod, resp.Status, strings.TrimSpace(string(raw)))
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("shard %d (pod %s/%s): answer %q: %w", shard, c.namespace, pod, truncate(string(raw), 200), err)
	}
	return nil
}

// maxCtlAnswer bounds a shard's answer (a --list of 20 000 Nodes is about 10 MiB).
const maxCtlAnswer = 256 << 20

// forward starts a port-forward from a free port of 127.0.0.1 to c.port of pod, as kubectl
// port-forward does, and returns the local port and the func that stops it.
func (c shardClient) forward(ctx context.Context, pod string) (int, func(), error) {
	u := c.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(c.config)
	if err != nil {
		return 0, nil, err
	}
	// kubectl port-forward's dialer (k8s.io/kubectl pkg/cmd/portforward createDialer): WebSockets first,
	// SPDY when the upgrade fails.
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	tunneling, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, c.config)
	if err != nil {
		return 0, nil, err
	}
	dialer = portforward.NewFallbackDialerForStreaming(tunneling, dialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	fctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddressesForStreamingWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", c.port)}, ready, io.Discard, io.Discard)
	if err != nil {
		cancel()
		return 0, nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		if err == nil {
			err = errors.New("port-forward ended before it was ready")
		}
		return 0, nil, err
	case <-ctx.Done():
		cancel()
		return 0, nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		cancel()
		return 0, nil, fmt.Errorf("port-forward: local ports %v: %w", ports, err)
	}
	return int(ports[0].Local), func() { cancel(); <-errc }, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func writeIndented(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
