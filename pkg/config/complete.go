package config

import (
	"fmt"
	"net"

	v1 "k8s.io/api/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"

	"github.com/nodeagent/nodeagent/pkg/eviction"
)

// Completed is a validated configuration with every string parsed once: the node name, the node
// IPs, the reservations and the hard eviction thresholds. Build it with Complete.
type Completed struct {
	*Options
	// NodeName is --hostname-override, or the OS hostname, lowercased (nodeutil.GetHostname).
	NodeName string
	// NodeIPs are --node-ip's addresses.
	NodeIPs []net.IP
	// SystemReserved and KubeReserved are --system-reserved and --kube-reserved.
	SystemReserved, KubeReserved v1.ResourceList
	// EvictionHard are the hard eviction thresholds.
	EvictionHard []eviction.Threshold
}

// Complete parses what Validate checked. The error names the flag and the value (it can only fail on
// a configuration that did not pass Validate, or when the OS hostname cannot be read).
func Complete(o *Options) (*Completed, error) {
	c := o.Config
	name, err := nodeutil.GetHostname(c.HostnameOverride)
	if err != nil {
		return nil, fmt.Errorf("--hostname-override %q: %w", c.HostnameOverride, err)
	}
	ips, _, err := nodeutil.ParseNodeIPArgument(c.NodeIP, c.CloudProvider)
	if err != nil {
		return nil, fmt.Errorf("--node-ip %q: %w", c.NodeIP, err)
	}
	systemReserved, err := ParseReserved(c.SystemReserved)
	if err != nil {
		return nil, fmt.Errorf("--system-reserved %q: %w", formatMap(c.SystemReserved, "="), err)
	}
	kubeReserved, err := ParseReserved(c.KubeReserved)
	if err != nil {
		return nil, fmt.Errorf("--kube-reserved %q: %w", formatMap(c.KubeReserved, "="), err)
	}
	thresholds, err := eviction.ParseThresholds(c.EvictionHard)
	if err != nil {
		return nil, fmt.Errorf("--eviction-hard %q: %w", formatMap(c.EvictionHard, "<"), err)
	}
	return &Completed{Options: o, NodeName: name, NodeIPs: ips, SystemReserved: systemReserved,
		KubeReserved: kubeReserved, EvictionHard: thresholds}, nil
}

// Reservation returns what is subtracted from capacity for allocatable (NodeAllocatableReservation
// of the completed reservations and thresholds): the kubelet's GetNodeAllocatableReservation.
func (c *Completed) Reservation(capacity v1.ResourceList) v1.ResourceList {
	return NodeAllocatableReservation(capacity, c.SystemReserved, c.KubeReserved, c.EvictionHard)
}
