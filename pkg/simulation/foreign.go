package simulation

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// ForeignCheckPeriod is how often a running shard looks for Nodes it writes that another shard owns
// (StopForeignNodes).
const ForeignCheckPeriod = 30 * time.Second

// StopForeignNodes stops writing the Nodes another shard owns: for every running Node whose Lease
// another process renews (its controller saw another instance's renewal within the Lease duration:
// node.Controller.Status().Lease.Duplicate), it reads the Node from the API server, and when the Node
// is labelled with another shard (LabelShard) or another simulation (LabelSimulation) than this
// Simulator's, that shard registered it and owns it: this Simulator stops its controller for it (as
// the control API's "stopped": true; "stopped": false starts it again) and logs why. A Node labelled
// as this shard's is kept: the other writer is the intruder, and its own check stops it. Only a
// layout that slipped past the start-time checks (AgreeLayout, CheckOwnership) gets here. It returns
// the names stopped; API errors other than NotFound skip the Node until the next check.
func (s *Simulator) StopForeignNodes(ctx context.Context, client kubernetes.Interface) []string {
	logger := klog.FromContext(ctx)
	shard, sim := s.labels[LabelShard], s.labels[LabelSimulation]
	var stopped []string
	for _, n := range s.nodes {
		n.mu.Lock()
		ctrl, running := n.ctrl, n.phase == PhaseRunning
		n.mu.Unlock()
		if !running || ctrl.Registered() == nil { // Registered fails while another agent renews the Lease
			continue
		}
		other := ctrl.Status().Lease.Duplicate
		if other == "" {
			continue
		}
		obj, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				logger.Error(err, "Cannot read a simulated node another process writes", "node", n.name, "instance", other)
			}
			continue
		}
		owner, ownSim := obj.Labels[LabelShard], obj.Labels[LabelSimulation]
		if (owner == "" || owner == shard) && (ownSim == "" || ownSim == sim) {
			continue
		}
		if _, err := s.Set(ctx, n.name, Change{Stopped: ptr.To(true)}); err != nil {
			logger.Error(err, "Cannot stop a simulated node another shard owns", "node", n.name)
			continue
		}
		logger.Error(nil, "Another shard owns this simulated node and writes it; stopped writing it (is --nodes or --node-name-prefix the same in every shard?)",
			"node", n.name, "instance", other, LabelShard, owner, LabelSimulation, ownSim, "thisShard", shard, "thisSimulation", sim)
		stopped = append(stopped, n.name)
	}
	return stopped
}

// stopForeignNodesEvery runs StopForeignNodes every period until ctx ends.
func (s *Simulator) stopForeignNodesEvery(ctx context.Context, client kubernetes.Interface, clk clock.WithTicker, period time.Duration) {
	t := clk.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if names := s.StopForeignNodes(ctx, client); len(names) > 0 {
				klog.FromContext(ctx).Info("Stopped simulated nodes another shard owns", "nodes", strings.Join(names, ","))
			}
		}
	}
}
