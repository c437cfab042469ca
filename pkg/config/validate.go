package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	nodeutil "k8s.io/component-helpers/node/util"

	"github.com/nodeagent/nodeagent/pkg/eviction"
)

// Validate checks every field of c and returns all problems at once, joined with errors.Join;
// each names the field (as in the config file) and the offending value. It returns nil when c is valid.
func Validate(c *NodeAgentConfiguration) error {
	var errs []error
	add := func(field string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("invalid %s %q: %s", field, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}

	if c.APIVersion != GroupVersion || c.Kind != Kind {
		add("apiVersion/kind", c.APIVersion+"/"+c.Kind, "must be %s/%s", GroupVersion, Kind)
	}
	if c.HostnameOverride != "" {
		for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(c.HostnameOverride)) {
			add("hostnameOverride", c.HostnameOverride, "%s", msg)
		}
	}
	if _, invalid, err := nodeutil.ParseNodeIPArgument(c.NodeIP, c.CloudProvider); err != nil {
		add("nodeIP", c.NodeIP, "%v", err)
	} else if len(invalid) > 0 {
		add("nodeIP", c.NodeIP, "not IP addresses: %s", strings.Join(invalid, ", "))
	}
	errs = append(errs, validateKubeletLabels(c.NodeLabels)...)
	for _, k := range sortedKeys(c.NodeLabels) {
		for _, msg := range validation.IsQualifiedName(k) {
			add("nodeLabels", k, "%s", msg)
		}
		for _, msg := range validation.IsValidLabelValue(c.NodeLabels[k]) {
			add("nodeLabels["+k+"]", c.NodeLabels[k], "%s", msg)
		}
	}
	for i, t := range c.RegisterWithTaints {
		field := fmt.Sprintf("registerWithTaints[%d]", i)
		if err := validateTaint(t); err != nil {
			add(field, taintString(t), "%v", err)
		}
		if j := duplicateTaint(c.RegisterWithTaints[:i], t); j >= 0 {
			add(field, taintString(t), "duplicated taints with the same key and effect: registerWithTaints[%d] is %q", j, taintString(c.RegisterWithTaints[j]))
		}
		// The kubelet's ValidateKubeletConfiguration: timeAdded is the API's to set, not the config's.
		if t.TimeAdded != nil {
			add(field, taintString(t), "taint.TimeAdded is not nil (timeAdded %q): remove timeAdded", t.TimeAdded.UTC().Format(time.RFC3339))
		}
	}
	if c.CloudProvider != "" && c.CloudProvider != "external" {
		add("cloudProvider", c.CloudProvider, `must be "" or "external"`)
	}
	if err := validateUnixEndpoint(c.ContainerRuntimeEndpoint); err != nil {
		add("containerRuntimeEndpoint", c.ContainerRuntimeEndpoint, "%v", err)
	}
	if c.ImageServiceEndpoint != "" {
		if err := validateUnixEndpoint(c.ImageServiceEndpoint); err != nil {
			add("imageServiceEndpoint", c.ImageServiceEndpoint, "%v", err)
		}
	}
	if c.RuntimeRequestTimeout.Duration <= 0 {
		add("runtimeRequestTimeout", c.RuntimeRequestTimeout.Duration, "must be greater than 0")
	}
	if c.RootDir == "" {
		add("rootDir", c.RootDir, "must not be empty")
	}
	if c.MaxPods != nil && *c.MaxPods < 0 {
		add("maxPods", *c.MaxPods, "must not be negative")
	}
	for field, m := range map[string]map[string]string{"systemReserved": c.SystemReserved, "kubeReserved": c.KubeReserved} {
		if _, err := ParseReserved(m); err != nil {
			add(field, formatMap(m, "="), "%v", err)
		}
	}
	if _, err := eviction.ParseThresholds(c.EvictionHard); err != nil {
		add("evictionHard", formatMap(c.EvictionHard, "<"), "%v", err)
	}
	if c.NodeStatusUpdateFrequency.Duration <= 0 {
		add("nodeStatusUpdateFrequency", c.NodeStatusUpdateFrequency.Duration, "must be greater than 0")
	}
	if c.NodeStatusReportFrequency.Duration <= 0 {
		add("nodeStatusReportFrequency", c.NodeStatusReportFrequency.Duration, "must be greater than 0")
	}
	if c.NodeLeaseDurationSeconds <= 0 {
		add("nodeLeaseDurationSeconds", c.NodeLeaseDurationSeconds, "must be greater than 0")
	}
	if c.NodeStatusMaxImages != nil && *c.NodeStatusMaxImages < -1 {
		add("nodeStatusMaxImages", *c.NodeStatusMaxImages, "must be -1 or greater")
	}
	if net.ParseIP(c.HealthzBindAddress) == nil {
		add("healthzBindAddress", c.HealthzBindAddress, "must be an IP address")
	}
	if c.HealthzPort != nil && (*c.HealthzPort < 0 || *c.HealthzPort > 65535) {
		add("healthzPort", *c.HealthzPort, "must be between 0 and 65535")
	}
	if c.KubeAPIQPS != nil && *c.KubeAPIQPS < 0 {
		add("kubeAPIQPS", *c.KubeAPIQPS, "must not be negative")
	}
	if c.K8sExporterHeartbeatPeriod.Duration <= 0 {
		add("k8sExporterHeartbeatPeriod", c.K8sExporterHeartbeatPeriod.Duration, "must be greater than 0")
	}
	if c.KubeAPIBurst < 0 {
		add("kubeAPIBurst", c.KubeAPIBurst, "must not be negative")
	}
	validateServing(c, add)
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// ParseReserved parses a systemReserved/kubeReserved map (keys cpu, memory, ephemeral-storage, pid)
// into a ResourceList. It returns an error naming the first bad key or quantity.
func ParseReserved(m map[string]string) (v1.ResourceList, error) {
	rl := v1.ResourceList{}
	for _, k := range sortedKeys(m) {
		switch v1.ResourceName(k) {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid":
		default:
			return nil, fmt.Errorf("unknown resource %q (want cpu, memory, ephemeral-storage or pid)", k)
		}
		q, err := resource.ParseQuantity(m[k])
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", k, m[k], err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s=%q: must not be negative", k, m[k])
		}
		rl[v1.ResourceName(k)] = q
	}
	return rl, nil
}

func validateUnixEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "unix" {
		return fmt.Errorf("must be a unix socket URL (unix:///path/to/socket)")
	}
	if u.Path == "" {
		return fmt.Errorf("unix socket URL has no path")
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func formatMap(m map[string]string, sep string) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+sep+m[k])
	}
	return strings.Join(parts, ",")
}
