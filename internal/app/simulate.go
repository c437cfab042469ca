package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/internal/startgc"
	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/lifecycle"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/server"
	"github.com/nodeagent/nodeagent/pkg/simulation"
	"github.com/nodeagent/nodeagent/pkg/version"
)

// simulateAgentFlags are the agent's flags that apply to simulated Nodes (with the logging flags).
// The others describe this machine (--hostname-override, --node-ip, --root-dir, --max-pods, the
// reservations), its runtime (--container-runtime-endpoint) or modes the simulation has not
// (--companion, the problem monitors, --config): the template and the simulation flags replace them.
var simulateAgentFlags = []string{
	"kubeconfig", "node-labels", "register-with-taints", "register-schedulable",
	"node-status-update-frequency", "node-status-report-frequency", "node-lease-duration-seconds", "node-status-max-images",
	"healthz-bind-address", "healthz-port", "enable-profiling-handler", "kube-api-qps", "kube-api-burst",
	// The kubelet's API of the simulated Nodes (simulation.KubeletAPI): on unless --port=0.
	"node-ip", "address", "port", "tls-cert-file", "tls-private-key-file", "anonymous-auth", "authentication-token-webhook",
	"authentication-token-webhook-cache-ttl", "client-ca-file", "authorization-mode",
	"authorization-webhook-cache-authorized-ttl", "authorization-webhook-cache-unauthorized-ttl",
}

// simulateKubeAPIQPS and simulateKubeAPIBurst are `nodeagent simulate`'s defaults of --kube-api-qps
// and --kube-api-burst: the Nodes start at that pace (1000 Nodes in 5 s).
const (
	simulateKubeAPIQPS   = 200
	simulateKubeAPIBurst = 400
	// simulatePodAPIQPS and simulatePodAPIBurst are the defaults of --pod-api-qps and --pod-api-burst:
	// a simulated pod start costs one status patch with no delays, a deletion a patch and a DELETE,
	// so 10 000 pods start in about 10 s of writes (KWOK's client has no limit at all).
	simulatePodAPIQPS   = 1000
	simulatePodAPIBurst = 2000
)

// simulateOptions is the command line of `nodeagent simulate`.
type simulateOptions struct {
	agent          *config.Options
	nodes          int
	prefix         string
	templatePath   string
	simulatedTaint bool
	eventQPS       float32
	eventBurst     int32
	podAPIQPS      float32
	podAPIBurst    int32
	workers        int
	leaseWorkers   int
	podWorkers     int
	// The simulated pods' default behaviour (docs/simulation.md, "Pods"): annotations override it.
	podStartDelay, podReadinessDelay, podStopDelay time.Duration
	podCommandInterpretation                       bool
	clusterDomain                                  string
	// Sharding (docs/simulation.md, "Shards").
	shards                int
	shardIndex            int
	shardIndexFromPodName bool
	deleteNodesOnExit     bool
	controlAllowProxy     bool
	// portForwardTargets are --port-forward-target's NAME=host:port values.
	portForwardTargets []string
	// The simulated Nodes' kubelet API connections (--max-connections-per-node, --reserved-file-descriptors).
	kubeletAPIConns kubeletAPIConnOptions
	// adopt is the --manage-* flags: the Nodes others create that are run too (simulate_adopt.go).
	adopt adoptOptions
	// getenv and hostname read POD_NAME, POD_NAMESPACE and the host name (os.Getenv, os.Hostname;
	// replaced in tests).
	getenv   func(string) string
	hostname func() (string, error)
}

// simulateFlags returns the options and the flag set bound to them: the agent's flags that apply and
// the simulation's own.
func simulateFlags() (*simulateOptions, *pflag.FlagSet) {
	o := &simulateOptions{agent: &config.Options{Config: config.NewDefault()}, nodes: 100, prefix: "sim-node-",
		eventQPS: 50, eventBurst: 100, podAPIQPS: simulatePodAPIQPS, podAPIBurst: simulatePodAPIBurst, shards: 1, getenv: os.Getenv, hostname: os.Hostname}
	// The simulation's defaults for the main client: it registers every Node through it, paced by it;
	// one agent's 50/100 would take N/50 s to start N Nodes.
	*o.agent.Config.KubeAPIQPS, o.agent.Config.KubeAPIBurst = simulateKubeAPIQPS, simulateKubeAPIBurst
	// The kubelet's API is on by default, as the kubelet's (--port 10250): --port is the first of
	// --nodes ports (simulateKubeletAPI).
	agentFlags := config.BindFlags(o.agent)
	logFlags := pflag.NewFlagSet("logging", pflag.ContinueOnError)
	logsapi.AddFlags(&config.NewDefault().Logging, logFlags)
	fs := pflag.NewFlagSet("simulate", pflag.ContinueOnError)
	fs.IntVar(&o.nodes, "nodes", o.nodes, fmt.Sprintf("Number of Nodes this process (shard) simulates, 1 to %d; a simulation of --shards shards has --shards × --nodes. 0 with a --manage-* flag: only the Nodes others create.", simulation.MaxNodes))
	fs.StringVar(&o.prefix, "node-name-prefix", o.prefix, "Prefix of the simulated Nodes' names: <prefix>0000, <prefix>0001, ..., <prefix>9999, <prefix>10000, ... (the global index on at least 4 digits, whatever --nodes and --shards); also the simulation's identity (the label nodeagent.io/simulation).")
	fs.IntVar(&o.shards, "shards", o.shards, fmt.Sprintf("Number of shards (processes) the simulation is split into, 1 to %d: shard I runs the Nodes with global indexes [I×--nodes, (I+1)×--nodes).", simulation.MaxShards))
	fs.IntVar(&o.shardIndex, "shard-index", o.shardIndex, "This process's shard, 0 to --shards − 1.")
	fs.BoolVar(&o.shardIndexFromPodName, "shard-index-from-pod-name", o.shardIndexFromPodName, "Take the shard index from the ordinal at the end of $POD_NAME (or of the host name when POD_NAME is unset), as a StatefulSet names its pods: nodeagent-simulate-2 is shard 2.")
	fs.BoolVar(&o.deleteNodesOnExit, "delete-nodes-on-exit", o.deleteNodesOnExit, "On a clean exit (SIGTERM), delete this shard's Nodes (their Leases go with them). Off: they stay and the node lifecycle controller marks them Unknown.")
	fs.BoolVar(&o.controlAllowProxy, "control-allow-proxy", false, "Removed: the control API trusted a request header that any pod could send. `nodeagent simulate ctl` reaches each shard through port-forward to its pod, on the pod's loopback; a start with this flag fails, saying so.")
	fs.StringArrayVar(&o.portForwardTargets, "port-forward-target", nil, "NAME=host:port, repeatable: an address that kubectl port-forward to a simulated pod may reach, when the pod's annotation nodeagent.io/port-forward picks it by NAME ({\"5432\": {\"target\": \"NAME\"}}). None by default: every simulated pod's ports are answered in memory and nothing is dialed. Whoever may create pods and port-forward to them reaches every target named here (docs/simulation.md, \"Threat model\").")
	fs.StringVar(&o.templatePath, "node-template", o.templatePath, "Node manifest (YAML) every simulated Node is made of: labels, taints, capacity, allocatable, nodeInfo, extra conditions, images (see docs/simulation.md); empty: 4 CPUs, 16Gi, 110 pods.")
	fs.BoolVar(&o.simulatedTaint, "simulated-taint", o.simulatedTaint, "Register every simulated Node with the taint "+taintText(simulation.SimulatedTaint)+", so that only pods that tolerate it are scheduled there.")
	fs.Float32Var(&o.eventQPS, "event-qps", o.eventQPS, "QPS of the client that writes Events (its own rate limit, as the kubelet's --event-qps); events beyond it are dropped, never the heartbeats.")
	fs.Int32Var(&o.eventBurst, "event-burst", o.eventBurst, "Burst of the Events client (as the kubelet's --event-burst).")
	fs.Float32Var(&o.podAPIQPS, "pod-api-qps", o.podAPIQPS, "QPS of the client that writes the simulated pods' status and deletes them: a client of its own, so that a pod storm never delays a Node's registration (Node status and Leases have their own client, without a limit).")
	fs.Int32Var(&o.podAPIBurst, "pod-api-burst", o.podAPIBurst, "Burst of the pods client (--pod-api-qps).")
	fs.IntVar(&o.workers, "workers", o.workers, "Workers that run every simulated Node's runtime polls, status syncs and fast start-up updates, from one work queue; 0: one per 100 Nodes, 16 to 64.")
	fs.IntVar(&o.leaseWorkers, "lease-workers", o.leaseWorkers, "Workers that renew every simulated Node's Lease, from a work queue of their own, so that no status sync delays a Lease; 0: one per 20 Nodes, 16 to 256 (each holds one Lease request in flight).")
	fs.DurationVar(&o.podStartDelay, "pod-container-start-delay", 0, "Default time from a simulated pod's admission (or its previous init container) to each container running; the pod's nodeagent.io/container-start-delay annotation overrides it. 0: at once, as KWOK's fast Stages.")
	fs.DurationVar(&o.podReadinessDelay, "pod-readiness-delay", 0, "Default time from a simulated container running to it turning ready (annotation nodeagent.io/readiness-delay).")
	fs.BoolVar(&o.podCommandInterpretation, "pod-command-interpretation", true, "Interpret a simulated container's command and args (a shell's -c script, sleep, exit codes, files in emptyDir and hostPath volumes) in a sandbox, in simulated time, so that it decides how long each run lasts and how it exits; the annotations nodeagent.io/run-duration and exit-code take precedence, and a command the sandbox cannot honour keeps the default behaviour (a Warning Event CommandNotInterpreted says so). See docs/simulation.md.")
	fs.StringVar(&o.clusterDomain, "cluster-domain", simulation.DefaultClusterDomain, "Domain of this cluster (the kubelet's --cluster-domain): a simulated pod with spec.subdomain has <hostname>.<subdomain>.<namespace>.svc.<domain> in the /etc/hosts its interpreted commands read.")
	fs.DurationVar(&o.podStopDelay, "pod-stop-delay", 0, "Default time from a simulated pod's deletion to its containers stopped, capped by its grace period (annotation nodeagent.io/stop-delay).")
	fs.IntVar(&o.podWorkers, "pod-workers", o.podWorkers, "Workers that run the pods bound to the simulated Nodes (admission, status writes, deletion), from a work queue of their own, so that no pod storm delays a Lease or a Node status; 0: one per 20 Nodes, 32 to 128.")
	o.kubeletAPIConns.addFlags(fs)
	o.adopt.addFlags(fs)
	for _, name := range simulateAgentFlags {
		fs.AddFlag(agentFlags.Lookup(name))
	}
	logFlags.VisitAll(func(f *pflag.Flag) {
		if af := agentFlags.Lookup(f.Name); af != nil {
			fs.AddFlag(af)
		}
	})
	return o, fs
}

func taintText(t v1.Taint) string { return t.Key + "=" + t.Value + ":" + string(t.Effect) }

// newSimulateCommand returns `nodeagent simulate`.
func newSimulateCommand() *cobra.Command {
	o, fs := simulateFlags()
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Run many simulated Nodes in this process, each on the agent's own code path",
		Long: `simulate registers --nodes Nodes named <--node-name-prefix>0000... and keeps each of them true
exactly as a single nodeagent keeps its own: one per-node controller each (registration, the kubelet's
status setters, the status syncer, the fast start-up update, the Lease renewer, the CRI poller), over a
host made from --node-template and its own in-memory CRI runtime. Every Node carries the label
` + simulation.LabelSimulated + `=true. The pods bound to them run as
simulated containers, with the kubelet's admission and pod status (docs/simulation.md, "Pods").

With --shards=K, this process is shard --shard-index (or the ordinal of its StatefulSet pod, with
--shard-index-from-pod-name) and runs the global indexes [I×--nodes, (I+1)×--nodes), each Node
labelled ` + simulation.LabelShard + `=I and ` + simulation.LabelSimulation + `=<the prefix's identity>;
every shard must run the same --nodes, agreed on a Lease in kube-node-lease (docs/simulation.md, "Shards").

Every Node serves the kubelet's API (kubectl logs, exec, port-forward, the node proxy, the metrics
metrics-server scrapes) on its own port, --port+j (10250 by default; --port=0: off), at the node IP
(--node-ip, else the address of the default route's interface), client certificates verified against
--client-ca-file or the cluster's (kube-system's extension-apiserver-authentication ConfigMap); a start
that cannot serve it says why in one line and goes on without it (docs/simulation.md).

The agent's HTTP server also serves the control API, to loopback clients only (and through the API
server's pod proxy with --control-allow-proxy; see "nodeagent simulate ctl"):
  GET  /simulation/nodes            every Node's state
  POST /simulation/nodes/<name>     {"runtimeReady":false}, {"networkReady":false}, {"memoryPressure":true},
                                    {"diskPressure":true}, {"pidPressure":true}, {"stopped":true}, and back
The identity of --kubeconfig needs the RBAC in docs/simulation.md (create and watch Nodes, patch their
status, write Leases in kube-node-lease, Events); it is checked at start.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The start-up pause of the collector (internal/startgc) is for one Node's time to Ready;
			// thousands of Nodes' first second may allocate past its bound, so it ends here.
			startgc.Release()
			o.agent.Flags = fs
			return runSimulate(cmd.Context(), o)
		},
	}
	cmd.Flags().AddFlagSet(fs)
	cmd.AddCommand(newSimulateCtlCommand())
	return cmd
}

// simulationConfig is a validated simulate command line.
type simulationConfig struct {
	*simulateOptions
	template *simulation.Template
	// portForwardTargets is --port-forward-target parsed: address by name.
	portForwardTargets map[string]string
}

// completeSimulate checks the whole command line and reads the template, before anything touches the
// cluster. The error names the flag (or the file) and the value.
func completeSimulate(o *simulateOptions) (*simulationConfig, error) {
	if err := o.adopt.validateNodes(o.nodes); err != nil {
		return nil, err
	}
	if o.shards < 1 || o.shards > simulation.MaxShards {
		return nil, fmt.Errorf("--shards %d: must be between 1 and %d", o.shards, simulation.MaxShards)
	}
	if o.shardIndexFromPodName {
		if o.agent.Flags != nil && o.agent.Flags.Changed("shard-index") {
			return nil, fmt.Errorf("--shard-index %d: give either --shard-index or --shard-index-from-pod-name", o.shardIndex)
		}
		name, from := o.getenv("POD_NAME"), "POD_NAME"
		if name == "" {
			from = "the host name"
			var err error
			if name, err = o.hostname(); err != nil {
				return nil, fmt.Errorf("--shard-index-from-pod-name: POD_NAME is not set and the host name cannot be read: %w", err)
			}
		}
		index, err := simulation.ShardFromPodName(name)
		if err != nil {
			return nil, fmt.Errorf("--shard-index-from-pod-name: pod name %q (%s) %w", name, from, err)
		}
		if index >= o.shards {
			return nil, fmt.Errorf("--shard-index-from-pod-name: pod name %q (%s): shard %d is not in [0, %d) (--shards %d): scale the StatefulSet with --shards (docs/simulation.md)",
				name, from, index, o.shards, o.shards)
		}
		o.shardIndex = index
	}
	if err := simulation.ValidateShards(o.shards, o.shardIndex); err != nil {
		return nil, err
	}
	if o.controlAllowProxy {
		return nil, errors.New("--control-allow-proxy: removed: it admitted any peer whose request carried the API server's X-Forwarded-Uri header, which any pod can forge; `nodeagent simulate ctl` now reaches each shard through port-forward, and the control API admits loopback peers only: drop the flag (docs/simulation.md, \"Control across shards\")")
	}
	targets, err := simulation.ParsePortForwardTargets(o.portForwardTargets)
	if err != nil {
		return nil, err
	}
	if len(targets) > 0 && (o.agent.Config.Port == nil || *o.agent.Config.Port == 0) {
		return nil, fmt.Errorf("--port-forward-target %q: port-forward needs the kubelet's API (--port)", o.portForwardTargets[0])
	}
	if err := simulation.ValidateNamePrefix(o.prefix, o.nodes*o.shards); err != nil {
		return nil, fmt.Errorf("--node-name-prefix %q: %w", o.prefix, err)
	}
	if o.workers < 0 || o.workers > 1000 {
		return nil, fmt.Errorf("--workers %d: must be between 0 (one per 100 Nodes) and 1000", o.workers)
	}
	if o.leaseWorkers < 0 || o.leaseWorkers > 1000 {
		return nil, fmt.Errorf("--lease-workers %d: must be between 0 (one per 20 Nodes) and 1000", o.leaseWorkers)
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{"--pod-container-start-delay", o.podStartDelay}, {"--pod-readiness-delay", o.podReadinessDelay}, {"--pod-stop-delay", o.podStopDelay}} {
		if d.value < 0 || d.value > time.Hour {
			return nil, fmt.Errorf("%s %v: must be between 0 and 1h", d.flag, d.value)
		}
	}
	if errs := validation.IsDNS1123Subdomain(o.clusterDomain); len(errs) > 0 {
		return nil, fmt.Errorf("--cluster-domain %q: %s", o.clusterDomain, strings.Join(errs, "; "))
	}
	if o.podWorkers < 0 || o.podWorkers > 1000 {
		return nil, fmt.Errorf("--pod-workers %d: must be between 0 (one per 20 Nodes, 32 to 128) and 1000", o.podWorkers)
	}
	if o.eventQPS <= 0 || o.eventBurst <= 0 {
		return nil, fmt.Errorf("--event-qps %v --event-burst %d: must be greater than 0", o.eventQPS, o.eventBurst)
	}
	if o.podAPIQPS <= 0 || o.podAPIBurst <= 0 {
		return nil, fmt.Errorf("--pod-api-qps %v --pod-api-burst %d: must be greater than 0", o.podAPIQPS, o.podAPIBurst)
	}
	if err := config.Validate(o.agent.Config); err != nil {
		return nil, err
	}
	c := &simulationConfig{simulateOptions: o, template: simulation.DefaultTemplate(), portForwardTargets: targets}
	if o.templatePath != "" {
		t, err := simulation.LoadTemplate(o.templatePath)
		if err != nil {
			return nil, err
		}
		c.template = t
	}
	return c, nil
}

func runSimulate(ctx context.Context, o *simulateOptions) error {
	c, err := completeSimulate(o)
	if err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(&o.agent.Config.Logging, nil); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	defer klog.Flush()
	restConfig, err := loadRESTConfig(o.agent.Kubeconfig)
	if err != nil {
		return err
	}
	cfg := o.agent.Config
	kubeletAPI, err := simulateKubeletAPI(ctx, o, restConfig, hostKubeletAPI)
	if err != nil {
		return err
	}
	if kubeletAPI != nil {
		kubeletAPI.PortForwardTargets = c.portForwardTargets
	}
	taints := append([]v1.Taint(nil), cfg.RegisterWithTaints...)
	if o.simulatedTaint {
		taints = append(taints, simulation.SimulatedTaint)
	}
	p, err := simulation.NewProcess(ctx, simulation.ProcessConfig{
		Nodes: o.nodes, NamePrefix: o.prefix, Shard: simulation.Shard{Index: o.shardIndex, Count: o.shards}, Template: c.template, TemplatePath: o.templatePath,
		Node: node.Config{
			Labels: cfg.NodeLabels, Taints: taints, Unschedulable: !*cfg.RegisterSchedulable,
			NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency.Duration, NodeStatusReportFrequency: cfg.NodeStatusReportFrequency.Duration,
			NodeLeaseDurationSeconds: cfg.NodeLeaseDurationSeconds, NodeStatusMaxImages: *cfg.NodeStatusMaxImages,
			AgentVersion: version.Get().KubeletVersion(),
		},
		REST: restConfig, Kubeconfig: o.agent.Kubeconfig, QPS: *cfg.KubeAPIQPS, Burst: int(cfg.KubeAPIBurst),
		EventQPS: o.eventQPS, EventBurst: int(o.eventBurst), PodQPS: o.podAPIQPS, PodBurst: int(o.podAPIBurst), Workers: o.workers, LeaseWorkers: o.leaseWorkers, PodWorkers: o.podWorkers,
		PodBehaviour: simulation.Behaviour{
			Default:   simulation.ContainerBehaviour{StartDelay: o.podStartDelay, ReadinessDelay: o.podReadinessDelay},
			StopDelay: o.podStopDelay,
		},
		InterpretPodCommands: o.podCommandInterpretation, ClusterDomain: o.clusterDomain, KubeletAPI: kubeletAPI,
		ProcessStart: processStart, DeleteNodesOnExit: o.deleteNodesOnExit,
		Adopt: o.adopt.NodeSelector,
	})
	if err != nil {
		return err
	}
	if err := p.Preflight(ctx); err != nil {
		return err
	}
	// Loopback peers only: `nodeagent simulate ctl` comes through port-forward to the pod, whose
	// connections reach it on the pod's loopback.
	control := server.LoopbackOnly(p.Simulator.Handler())
	// One group: the HTTP server and the simulation once the Node informer has synced, one shutdown
	// timeout.
	group := lifecycle.Group{ShutdownTimeout: 10 * time.Second}
	group.AddCache("node informer", p.Informers())
	group.AddCache("pod informer", p.PodInformers())
	if adopted, ok := p.AdoptedInformers(); ok {
		group.AddCache("adopted node informer", adopted)
	}
	if *cfg.HealthzPort > 0 {
		srv, err := server.New(server.Config{
			BindAddress: cfg.HealthzBindAddress, Port: int(*cfg.HealthzPort), Metrics: p.Metrics.Handler(),
			SyncLoop: p.Simulator.Healthy, Registered: p.Simulator.Registered, EnableProfiling: cfg.EnableProfilingHandler, Flags: o.agent.Flags,
			Handlers: map[string]http.Handler{
				simulation.Path: control,
				node.DebugPath:  p.DebugHandler(),
			},
		})
		if err != nil {
			return fmt.Errorf("--healthz-bind-address %q --healthz-port %d: %w", cfg.HealthzBindAddress, *cfg.HealthzPort, err)
		}
		group.Add("healthz server", srv)
	}
	group.Add("simulation", p)
	if kubeletAPI != nil {
		group.Add("kubelet API authentication", lifecycle.RunnableFunc(kubeletAPI.Auth.Run))
		group.Add("kubelet API servers", lifecycle.RunnableFunc(p.Simulator.ServeKubeletAPI))
	}
	if err := group.Run(ctx); err != nil {
		return err
	}
	// A clean exit: with --delete-nodes-on-exit the shard's Nodes go (a StatefulSet scaled down
	// removes the departed shard's Nodes); the pod's terminationGracePeriodSeconds bounds it.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteNodesTimeout)
	defer cancel()
	return p.DeleteNodes(dctx)
}

// deleteNodesTimeout bounds the deletion of the shard's Nodes at exit (--delete-nodes-on-exit).
const deleteNodesTimeout = 60 * time.Second
