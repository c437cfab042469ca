package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/utils/ptr"
)

// DefaultEvictionHard is the kubelet's default hard eviction thresholds (pkg/kubelet/apis/config/v1beta1/defaults_linux.go).
var DefaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// NewDefault returns a configuration holding every default, as KubeletConfiguration's SetDefaults would.
func NewDefault() *NodeAgentConfiguration {
	c := &NodeAgentConfiguration{}
	SetDefaults(c)
	return c
}

// SetDefaults fills every unset field of c with the kubelet's default.
func SetDefaults(c *NodeAgentConfiguration) {
	c.APIVersion, c.Kind = GroupVersion, Kind
	if c.RegisterNode == nil {
		c.RegisterNode = ptr.To(true)
	}
	if c.RegisterSchedulable == nil {
		c.RegisterSchedulable = ptr.To(true)
	}
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	}
	if c.RuntimeRequestTimeout.Duration == 0 {
		c.RuntimeRequestTimeout = metav1.Duration{Duration: 2 * time.Minute}
	}
	if c.RootDir == "" {
		c.RootDir = "/var/lib/nodeagent"
	}
	if c.EvictionHard == nil {
		c.EvictionHard = make(map[string]string, len(DefaultEvictionHard))
		for k, v := range DefaultEvictionHard {
			c.EvictionHard[k] = v
		}
	}
	if c.NodeStatusUpdateFrequency.Duration == 0 {
		c.NodeStatusUpdateFrequency = metav1.Duration{Duration: 10 * time.Second}
	}
	if c.NodeStatusReportFrequency.Duration == 0 {
		c.NodeStatusReportFrequency = metav1.Duration{Duration: 5 * time.Minute}
	}
	if c.NodeLeaseDurationSeconds == 0 {
		c.NodeLeaseDurationSeconds = 40
	}
	if c.NodeStatusMaxImages == nil {
		c.NodeStatusMaxImages = ptr.To[int32](50)
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = "127.0.0.1"
	}
	if c.HealthzPort == nil {
		c.HealthzPort = ptr.To[int32](10248)
	}
	if c.KubeAPIQPS == nil {
		c.KubeAPIQPS = ptr.To[float32](50)
	}
	if c.K8sExporterHeartbeatPeriod.Duration == 0 {
		c.K8sExporterHeartbeatPeriod = metav1.Duration{Duration: 5 * time.Minute}
	}
	setServingDefaults(c)
	logsapi.SetRecommendedLoggingConfiguration(&c.Logging)
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = 100
	}
}
