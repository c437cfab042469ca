package config

import (
	"strconv"
)

// DefaultMaxPods is the pods capacity nodeagent reports when maxPods (--max-pods) is not set: 0.
// nodeagent runs no pods, so a node advertising pod capacity would attract pods that nothing runs;
// with capacity.pods and allocatable.pods at 0 the scheduler places none here. Set --max-pods for a
// node whose pods something else runs (the kubelet's default is 110).
const DefaultMaxPods int32 = 0

// maxPodsUsage is the --max-pods help text; docs/flags.md says the same.
const maxPodsUsage = "Pods capacity of the node (capacity.pods and allocatable.pods). Default 0: nodeagent runs no pods, " +
	"so no pod is scheduled here; set --max-pods for a node whose pods something else runs (the kubelet's default is 110)."

// EffectiveMaxPods returns the pods capacity nodeagent reports when it runs alone (standalone mode):
// maxPods when it was set (--max-pods or the config file, 0 included), else DefaultMaxPods (0).
// It is c.MaxPodsOr(DefaultMaxPods). The kubelet has no counterpart: its maxPods always defaults to 110.
func (c *NodeAgentConfiguration) EffectiveMaxPods() int32 {
	return c.MaxPodsOr(DefaultMaxPods)
}

// MaxPodsOr returns maxPods when it was set explicitly (--max-pods or the config file), else def.
// Modes whose default pod capacity comes from elsewhere (a Node template in simulation) pass theirs.
func (c *NodeAgentConfiguration) MaxPodsOr(def int32) int32 {
	if c.MaxPods == nil {
		return def
	}
	return *c.MaxPods
}

// optionalInt32Value is the pflag.Value behind --max-pods: it writes into a *int32 that stays nil
// until the flag is given, so "not set" and an explicit 0 differ. Unset, it prints DefaultMaxPods.
type optionalInt32Value struct{ p **int32 }

func (v optionalInt32Value) String() string {
	if v.p == nil || *v.p == nil {
		return strconv.Itoa(int(DefaultMaxPods))
	}
	return strconv.Itoa(int(**v.p))
}

func (v optionalInt32Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 32)
	if err != nil {
		return err
	}
	i := int32(n)
	*v.p = &i
	return nil
}

func (v optionalInt32Value) Type() string { return "int32" }
