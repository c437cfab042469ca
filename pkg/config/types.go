// Package config holds the versioned nodeagent configuration: the NodeAgentConfiguration
// type (field names as the kubelet's KubeletConfiguration where they exist), its defaults,
// strict decoding from a YAML file, validation, and the command-line flags bound to it.
//
// Precedence is the kubelet's: defaults < config file < command-line flags.
package config

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

const (
	// GroupVersion is the apiVersion of a config file.
	GroupVersion = "nodeagent.io/v1alpha1"
	// Kind is the kind of a config file.
	Kind = "NodeAgentConfiguration"
)

// NodeAgentConfiguration configures one nodeagent. Durations are metav1.Duration ("10s", "5m").
type NodeAgentConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// HostnameOverride is the node name; empty means the OS hostname, lowercased.
	HostnameOverride string `json:"hostnameOverride,omitempty"`
	// NodeIP is a comma-separated list of at most two IPs (one per family) reported as InternalIP.
	NodeIP string `json:"nodeIP,omitempty"`
	// NodeLabels are added to the Node at registration.
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	// RegisterNode enables registration of the Node object (kubelet --register-node).
	RegisterNode *bool `json:"registerNode,omitempty"`
	// RegisterWithTaints are the taints the Node is created with.
	RegisterWithTaints []v1.Taint `json:"registerWithTaints,omitempty"`
	// RegisterSchedulable false registers the node with spec.unschedulable and the unschedulable taint.
	RegisterSchedulable *bool `json:"registerSchedulable,omitempty"`
	// CloudProvider is "" or "external" (adds node.cloudprovider.kubernetes.io/uninitialized).
	CloudProvider string `json:"cloudProvider,omitempty"`
	// ProviderID is written to spec.providerID at registration.
	ProviderID string `json:"providerID,omitempty"`

	// ContainerRuntimeEndpoint is the CRI runtime socket, a unix:// URL.
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint,omitempty"`
	// ImageServiceEndpoint is the CRI image socket, a unix:// URL; empty means ContainerRuntimeEndpoint.
	ImageServiceEndpoint string `json:"imageServiceEndpoint,omitempty"`
	// RuntimeRequestTimeout bounds each CRI call.
	RuntimeRequestTimeout metav1.Duration `json:"runtimeRequestTimeout,omitempty"`
	// RootDir is the agent's directory; its filesystem is the nodefs (ephemeral-storage, DiskPressure).
	RootDir string `json:"rootDir,omitempty"`

	// MaxPods is the pods capacity (capacity.pods and allocatable.pods). nil means not set, and then
	// nodeagent reports DefaultMaxPods (0: it runs no pods, so none is scheduled here); an explicit
	// value, 0 included, is kept. Read it through EffectiveMaxPods or MaxPodsOr, not directly.
	MaxPods *int32 `json:"maxPods,omitempty"`
	// SystemReserved and KubeReserved are subtracted from capacity for allocatable
	// (keys cpu, memory, ephemeral-storage, pid; values resource quantities).
	SystemReserved map[string]string `json:"systemReserved,omitempty"`
	KubeReserved   map[string]string `json:"kubeReserved,omitempty"`
	// EvictionHard maps an eviction signal (memory.available, nodefs.available, nodefs.inodesFree,
	// imagefs.available, imagefs.inodesFree, pid.available) to a quantity or a percentage.
	// It drives the pressure conditions and is subtracted from allocatable.
	EvictionHard map[string]string `json:"evictionHard,omitempty"`

	// NodeStatusUpdateFrequency is the status sync period.
	NodeStatusUpdateFrequency metav1.Duration `json:"nodeStatusUpdateFrequency,omitempty"`
	// NodeStatusReportFrequency is how long an unchanged status goes unreported.
	NodeStatusReportFrequency metav1.Duration `json:"nodeStatusReportFrequency,omitempty"`
	// NodeLeaseDurationSeconds is the Lease's leaseDurationSeconds; it is renewed every quarter of it.
	NodeLeaseDurationSeconds int32 `json:"nodeLeaseDurationSeconds,omitempty"`
	// NodeStatusMaxImages caps status.images; -1 means no cap.
	NodeStatusMaxImages *int32 `json:"nodeStatusMaxImages,omitempty"`

	// HealthzBindAddress and HealthzPort locate the HTTP server (/healthz, /readyz, /livez, /metrics); port 0 disables it.
	HealthzBindAddress string `json:"healthzBindAddress,omitempty"`
	HealthzPort        *int32 `json:"healthzPort,omitempty"`
	// EnableProfilingHandler serves /debug/pprof on the HTTP server.
	EnableProfilingHandler bool `json:"enableProfilingHandler,omitempty"`

	// KubeAPIQPS and KubeAPIBurst rate-limit the API client.
	KubeAPIQPS   *float32 `json:"kubeAPIQPS,omitempty"`
	KubeAPIBurst int32    `json:"kubeAPIBurst,omitempty"`

	// Companion runs nodeagent beside the node's own kubelet (a DaemonSet): it neither registers the
	// Node nor renews its Lease and writes none of the kubelet's fields, only its own conditions
	// (problem monitors, ContainerRuntimeUnhealthy) and Events.
	Companion bool `json:"companion,omitempty"`
	// CustomPluginMonitors and SystemLogMonitors are paths of node-problem-detector monitor configs
	// (NPD's --config.custom-plugin-monitor and --config.system-log-monitor), read as NPD reads them.
	CustomPluginMonitors []string `json:"customPluginMonitors,omitempty"`
	SystemLogMonitors    []string `json:"systemLogMonitors,omitempty"`
	// K8sExporterHeartbeatPeriod is how often, in companion mode, the conditions are patched even when
	// unchanged (NPD's --k8s-exporter-heartbeat-period, 5m).
	K8sExporterHeartbeatPeriod metav1.Duration `json:"k8sExporterHeartbeatPeriod,omitempty"`

	// RotateCertificates renews the client certificate through CSRs as it nears expiry
	// (KubeletConfiguration's rotateCertificates, --rotate-certificates).
	RotateCertificates bool `json:"rotateCertificates,omitempty"`

	// Address and Port locate the kubelet's API (pkg/kubeletserver: logs, exec, attach,
	// port-forward, /pods), as KubeletConfiguration's address and port: 0.0.0.0 and 10250 by
	// default; Port 0 disables it. TLSCertFile and TLSPrivateKeyFile are its serving certificate
	// (tlsCertFile, tlsPrivateKeyFile); without them a self-signed one, as the kubelet's.
	Address           string `json:"address,omitempty"`
	Port              *int32 `json:"port,omitempty"`
	TLSCertFile       string `json:"tlsCertFile,omitempty"`
	TLSPrivateKeyFile string `json:"tlsPrivateKeyFile,omitempty"`
	// ServerTLSBootstrap requests the serving certificate from the cluster (a kubernetes.io/kubelet-serving
	// CSR for the Node's addresses) and renews it before it expires (KubeletConfiguration's
	// serverTLSBootstrap, --rotate-server-certificates).
	ServerTLSBootstrap bool `json:"serverTLSBootstrap,omitempty"`
	// Authentication and Authorization of the kubelet's API: KubeletConfiguration's own types, with
	// its v1beta1 defaults (anonymous off, TokenReview on, authorization Webhook).
	Authentication kubeletconfig.KubeletAuthentication `json:"authentication"`
	Authorization  kubeletconfig.KubeletAuthorization  `json:"authorization"`

	// Logging configures k8s.io/component-base logging (format, verbosity), as in KubeletConfiguration.
	Logging logsapi.LoggingConfiguration `json:"logging,omitempty"`
}
