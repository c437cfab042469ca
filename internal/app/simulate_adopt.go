package app

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/nodeagent/nodeagent/pkg/simulation"
)

// adoptOptions are `nodeagent simulate`'s flags for the Nodes that others create (Karpenter's and the
// cluster autoscaler's kwok providers): KWOK's --manage-* flags, of the same names and meaning
// (simulation.NodeSelector).
type adoptOptions struct {
	simulation.NodeSelector
}

func (o *adoptOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.AllNodes, "manage-all-nodes", false, "Also run every Node that others create (not the simulation's own), as KWOK's --manage-all-nodes: each gets a Lease, the kubelet's status (Ready, the pressure conditions, nodeInfo) filled from --node-template where its creator set none, and runs its pods; it is never registered or re-created. Exclusive with the other --manage-* flags.")
	fs.StringVar(&o.AnnotationSelector, "manage-nodes-with-annotation-selector", "", "Also run the Nodes that others create whose annotations match this selector (label selector syntax), as KWOK's flag: kwok.x-k8s.io/node=fake for the cluster autoscaler's kwok provider. May be combined with --manage-nodes-with-label-selector.")
	fs.StringVar(&o.LabelSelector, "manage-nodes-with-label-selector", "", "Also run the Nodes that others create whose labels match this selector, as KWOK's flag. May be combined with --manage-nodes-with-annotation-selector.")
	fs.StringVar(&o.SingleNode, "manage-single-node", "", "Also run the one Node of this name that another creates, as KWOK's flag.")
}

// validateNodes checks --nodes with the --manage-* flags: 0 means "adopt only", which needs one of them.
func (o *adoptOptions) validateNodes(nodes int) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if nodes == 0 && o.Enabled() {
		return nil
	}
	if err := simulation.ValidateNodes(nodes); err != nil {
		if nodes == 0 {
			return fmt.Errorf("--nodes 0: %w, or 0 (adopt only) with --manage-all-nodes, --manage-nodes-with-annotation-selector, --manage-nodes-with-label-selector or --manage-single-node", err)
		}
		return fmt.Errorf("--nodes %d: %w", nodes, err)
	}
	return nil
}
