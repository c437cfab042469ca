package config

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// Options is everything the command line sets: the configuration plus the flags that are not part of it.
type Options struct {
	// ConfigFile is the --config path; empty means flags and defaults only.
	ConfigFile string
	// Kubeconfig is the --kubeconfig path; empty means the in-cluster config.
	Kubeconfig string
	// BootstrapKubeconfig and CertDir are --bootstrap-kubeconfig and --cert-dir (certificates.go).
	BootstrapKubeconfig string
	CertDir             string
	// Config is the effective configuration: defaults < file < flags.
	Config *NodeAgentConfiguration
	// Flags is the parsed flag set, bound to Config: each flag's value is the effective one (a value
	// from the config file shows under its flag's name). Load sets it; nodeagent serves it at /flagz.
	Flags *pflag.FlagSet
}

// BindFlags returns a flag set whose flags write into o. Each flag's default is the field's current
// value, so binding never overwrites what a config file set (the kubelet's approach).
func BindFlags(o *Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nodeagent", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is reported once, as an error, not with the whole usage
	fs.Usage = func() {}
	c := o.Config
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "Path to a "+Kind+" file ("+GroupVersion+"). Flags override its values.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; empty uses the in-cluster config.")

	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "Node name to use instead of the OS hostname.")
	fs.StringVar(&c.NodeIP, "node-ip", c.NodeIP, "Comma-separated IPs (at most one per family) to report as the node's InternalIP.")
	fs.Var(cliflag.NewMapStringString(&c.NodeLabels), "node-labels", "Labels to add when registering the node (key=value,...). Keys in the kubernetes.io and k8s.io namespaces must be ones a kubelet may set.")
	fs.BoolVar(c.RegisterNode, "register-node", *c.RegisterNode, "Register the node with the API server.")
	fs.Var(taintsValue{&c.RegisterWithTaints}, "register-with-taints", "Taints to register the node with (key=value:Effect,...), at most one per key and effect.")
	fs.BoolVar(c.RegisterSchedulable, "register-schedulable", *c.RegisterSchedulable, "Register the node as schedulable.")
	fs.StringVar(&c.CloudProvider, "cloud-provider", c.CloudProvider, `"external" taints the node uninitialized until a cloud controller initializes it.`)
	fs.StringVar(&c.ProviderID, "provider-id", c.ProviderID, "Unique identifier of the node in the machine database (spec.providerID).")

	fs.StringVar(&c.ContainerRuntimeEndpoint, "container-runtime-endpoint", c.ContainerRuntimeEndpoint, "CRI runtime endpoint (unix:// URL).")
	fs.StringVar(&c.ImageServiceEndpoint, "image-service-endpoint", c.ImageServiceEndpoint, "CRI image endpoint (unix:// URL); empty uses --container-runtime-endpoint.")
	fs.DurationVar(&c.RuntimeRequestTimeout.Duration, "runtime-request-timeout", c.RuntimeRequestTimeout.Duration, "Timeout of each CRI request.")
	fs.StringVar(&c.RootDir, "root-dir", c.RootDir, "Directory for the agent's files; its filesystem is the nodefs.")

	fs.Var(optionalInt32Value{&c.MaxPods}, "max-pods", maxPodsUsage)
	fs.Var(cliflag.NewMapStringString(&c.SystemReserved), "system-reserved", "Resources reserved for the system (cpu=100m,memory=100Mi,ephemeral-storage=1Gi,pid=100).")
	fs.Var(cliflag.NewMapStringString(&c.KubeReserved), "kube-reserved", "Resources reserved for Kubernetes components (same keys as --system-reserved).")
	fs.Var(cliflag.NewLangleSeparatedMapStringString(&c.EvictionHard), "eviction-hard", "Hard eviction thresholds (memory.available<100Mi,nodefs.available<10%,...).")

	fs.DurationVar(&c.NodeStatusUpdateFrequency.Duration, "node-status-update-frequency", c.NodeStatusUpdateFrequency.Duration, "How often the node status is computed and, if changed, posted.")
	fs.DurationVar(&c.NodeStatusReportFrequency.Duration, "node-status-report-frequency", c.NodeStatusReportFrequency.Duration, "How often the node status is posted when it has not changed.")
	fs.Int32Var(&c.NodeLeaseDurationSeconds, "node-lease-duration-seconds", c.NodeLeaseDurationSeconds, "Duration of the node Lease; it is renewed every quarter of it.")
	fs.Int32Var(c.NodeStatusMaxImages, "node-status-max-images", *c.NodeStatusMaxImages, "Maximum number of images in node status; -1 for no cap.")

	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "IP the /healthz, /metrics, /statusz and /flagz server listens on; a non-loopback address logs a warning.")
	fs.Int32Var(c.HealthzPort, "healthz-port", *c.HealthzPort, "Port of the /healthz and /metrics server; 0 disables it.")
	fs.BoolVar(&c.EnableProfilingHandler, "enable-profiling-handler", c.EnableProfilingHandler, "Serve /debug/pprof on the healthz server, to loopback clients only (others get 403).")

	fs.Float32Var(c.KubeAPIQPS, "kube-api-qps", *c.KubeAPIQPS, "QPS of the API client.")
	fs.Int32Var(&c.KubeAPIBurst, "kube-api-burst", c.KubeAPIBurst, "Burst of the API client.")

	fs.BoolVar(&c.Companion, "companion", c.Companion, "Run beside the node's kubelet (as a DaemonSet): do not register the Node or renew its Lease, write only nodeagent's own conditions and Events.")
	fs.StringSliceVar(&c.CustomPluginMonitors, "config.custom-plugin-monitor", c.CustomPluginMonitors, "Comma-separated node-problem-detector custom plugin monitor configs (as NPD's flag).")
	fs.StringSliceVar(&c.SystemLogMonitors, "config.system-log-monitor", c.SystemLogMonitors, "Comma-separated node-problem-detector system log monitor configs (as NPD's flag).")
	fs.DurationVar(&c.K8sExporterHeartbeatPeriod.Duration, "k8s-exporter-heartbeat-period", c.K8sExporterHeartbeatPeriod.Duration, "In companion mode, how often nodeagent's conditions are patched when unchanged (as NPD's flag).")
	bindCertificateFlags(o, fs)
	bindServingFlags(c, fs)
	logsapi.AddFlags(&c.Logging, fs)
	return fs
}

// Load parses args into Options, applying defaults, then the --config file (if any), then the flags
// again so that they take precedence, and validates the result. Errors name the flag or field and the
// value: a *pflag error for a bad flag, a file error wrapping the decode error, or Validate's joined errors.
func Load(args []string) (*Options, error) {
	o := &Options{Config: NewDefault()}
	fs := BindFlags(o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if len(fs.Args()) > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.ConfigFile != "" {
		fileCfg, err := LoadFile(o.ConfigFile)
		if err != nil {
			return nil, err
		}
		o = &Options{Config: fileCfg}
		fs = BindFlags(o)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
	}
	o.Flags = fs
	if err := Validate(o.Config); err != nil {
		return nil, err
	}
	return o, nil
}

// LoadFile reads and strictly decodes a config file (unknown or duplicate fields are errors), checks
// apiVersion and kind, and applies defaults to unset fields. Errors name the file; a file larger
// than MaxFileSize (or /dev/zero) is refused with ErrFileTooLarge, never read whole.
func LoadFile(path string) (*NodeAgentConfiguration, error) {
	data, err := ReadFileLimited(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("--config %q: %w", path, err)
	}
	c, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("--config %q: %w", path, err)
	}
	return c, nil
}

// Decode strictly decodes a YAML or JSON config and applies defaults. It does not validate values.
// As the kubelet's strict config codec, field names are case-sensitive and unknown or duplicate
// fields are errors (encoding/json alone would take "maxpods" for maxPods).
func Decode(data []byte) (*NodeAgentConfiguration, error) {
	c := &NodeAgentConfiguration{}
	if err := DecodeStrict(data, c); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if c.APIVersion != GroupVersion || c.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q kind %q: want apiVersion %s, kind %s", c.APIVersion, c.Kind, GroupVersion, Kind)
	}
	SetDefaults(c)
	return c, nil
}

// ErrHelp is returned by Load when -h or --help was given.
var ErrHelp = pflag.ErrHelp
