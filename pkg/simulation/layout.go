package simulation

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// The layout record of a simulation: a Lease in kube-node-lease named LayoutLeaseName(prefix), whose
// annotations say how the simulation's Nodes map to shards. Every shard of the simulation must run the
// same Nodes per shard (the owner of a Node is its index / --nodes): AgreeLayout, at start, creates the
// record if absent (create-if-absent: of two shards racing, one creates it, the other reads it) and
// refuses a shard whose --nodes differs while the record holds.
const (
	// AnnotationLayoutPrefix is the simulation's --node-name-prefix.
	AnnotationLayoutPrefix = "nodeagent.io/simulation-prefix"
	// AnnotationLayoutNodes is its Nodes per shard (--nodes), which every shard must run.
	AnnotationLayoutNodes = "nodeagent.io/simulation-nodes-per-shard"
	// AnnotationLayoutShards is the --shards of the last shard that started: K may change (names and
	// owners do not depend on it), so it is not compared.
	AnnotationLayoutShards = "nodeagent.io/simulation-shards"
	// LayoutHold is how long a record a starting shard wrote holds the layout while the simulation has
	// no Node yet (the shard's checks and its first registrations take seconds): the Lease's
	// leaseDurationSeconds. Past it, a record of a simulation without Nodes is taken over by a shard
	// of another layout.
	LayoutHold = 2 * time.Minute
	// layoutTries bounds AgreeLayout's read-compare-write rounds (each lost to another shard's write).
	layoutTries = 20
)

// LayoutLeaseName returns the name of the layout record (a Lease in kube-node-lease) of the
// simulation of prefix: "nodeagent-simulation-" + SimulationID(prefix).
func LayoutLeaseName(prefix string) string { return "nodeagent-simulation-" + SimulationID(prefix) }

// Layout is what AgreeLayout records and compares.
type Layout struct {
	// NamePrefix is the simulation's --node-name-prefix; Nodes its --nodes (per shard); Shards the
	// starting shard's --shards (recorded, not compared).
	NamePrefix    string
	Nodes, Shards int
	// Instance is the starting process (node.ProcessInstance), the Lease's holder.
	Instance string
	// Clock; default the real clock.
	Clock clock.PassiveClock
}

// AgreeLayout makes this shard agree with the simulation's layout record before it writes anything
// else: it creates the record (a Lease in kube-node-lease, LayoutLeaseName) when absent; when present
// with the same prefix and Nodes per shard it renews it (at most once per LayoutHold/2, and when
// Shards changed); when present with other Nodes per shard it refuses, naming --nodes, both values, the
// record and how to change it, unless the record no longer holds: written more than LayoutHold ago and
// no Node labelled with the simulation (LabelSimulation) exists, in which case it takes the record
// over. Every write is conditional (create, or update at the resourceVersion read), so that of shards
// racing with different layouts exactly one wins and the others read the winner's record and compare.
// API errors are returned wrapped.
func AgreeLayout(ctx context.Context, client kubernetes.Interface, l Layout) error {
	if l.Clock == nil {
		l.Clock = clock.RealClock{}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	logger := klog.FromContext(ctx)
	name := LayoutLeaseName(l.NamePrefix)
	leases := client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	where := fmt.Sprintf("Lease %s/%s", v1.NamespaceNodeLease, name)
	for range layoutTries {
		rec, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, l.record(nil), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another shard created it first: read it and compare
			}
			if err != nil {
				return fmt.Errorf("recording the simulation's layout on %s: %w", where, err)
			}
			logger.Info("Recorded the simulation's layout", "lease", where, "nodesPerShard", l.Nodes, "shards", l.Shards)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the simulation's layout from %s: %w", where, err)
		}
		nodes, _ := strconv.Atoi(rec.Annotations[AnnotationLayoutNodes])
		prefix, hasPrefix := rec.Annotations[AnnotationLayoutPrefix]
		same := nodes == l.Nodes && (!hasPrefix || prefix == l.NamePrefix)
		renewed := renewTime(rec)
		age := l.Clock.Since(renewed)
		if same {
			if age < LayoutHold/2 && rec.Annotations[AnnotationLayoutShards] == strconv.Itoa(l.Shards) {
				return nil // recently confirmed: nothing to write
			}
		} else {
			held, err := l.held(ctx, client, age)
			if err != nil {
				return err
			}
			if held != "" {
				return fmt.Errorf("--nodes %d: the simulation of --node-name-prefix %q runs %s Nodes per shard (%s, written by %s %s ago; %s): every shard must run the same --nodes, the names map to shards by it; to change it, stop every shard and delete the simulation's Nodes (kubectl delete nodes -l %s=%s)",
					l.Nodes, l.NamePrefix, rec.Annotations[AnnotationLayoutNodes], where, ptr.Deref(rec.Spec.HolderIdentity, "?"),
					age.Round(time.Second), held, LabelSimulation, SimulationID(l.NamePrefix))
			}
			logger.Info("Taking over the layout record of a simulation that has ended", "lease", where,
				"nodesPerShard", rec.Annotations[AnnotationLayoutNodes], "newNodesPerShard", l.Nodes, "renewed", renewed)
		}
		_, err = leases.Update(ctx, l.record(rec), metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another shard wrote it: read it again
		}
		if err != nil {
			return fmt.Errorf("recording the simulation's layout on %s: %w", where, err)
		}
		return nil
	}
	return fmt.Errorf("recording the simulation's layout on %s: it changed under every one of %d tries", where, layoutTries)
}

// held says why a layout record written age ago still holds ("" when it does not): it was written
// within LayoutHold, or Nodes of the simulation exist.
func (l Layout) held(ctx context.Context, client kubernetes.Interface, age time.Duration) (string, error) {
	if age < LayoutHold {
		return fmt.Sprintf("a shard started with it less than %s ago", LayoutHold), nil
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelSimulation + "=" + SimulationID(l.NamePrefix), Limit: 1})
	if err != nil {
		return "", fmt.Errorf("listing the simulation's nodes: %w", err)
	}
	if len(list.Items) > 0 {
		return fmt.Sprintf("its Nodes exist, e.g. %s", list.Items[0].Name), nil
	}
	return "", nil
}

// record returns the layout Lease: base (nil: a new one) with this layout, holder and renew time.
func (l Layout) record(base *coordinationv1.Lease) *coordinationv1.Lease {
	rec := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LayoutLeaseName(l.NamePrefix), Namespace: v1.NamespaceNodeLease}}
	if base != nil {
		rec = base.DeepCopy()
	}
	if rec.Labels == nil {
		rec.Labels = map[string]string{}
	}
	rec.Labels[LabelSimulated], rec.Labels[LabelSimulation] = "true", SimulationID(l.NamePrefix)
	if rec.Annotations == nil {
		rec.Annotations = map[string]string{}
	}
	rec.Annotations[AnnotationLayoutPrefix] = l.NamePrefix
	rec.Annotations[AnnotationLayoutNodes] = strconv.Itoa(l.Nodes)
	rec.Annotations[AnnotationLayoutShards] = strconv.Itoa(l.Shards)
	now := metav1.NewMicroTime(l.Clock.Now())
	rec.Spec.HolderIdentity = ptr.To(l.Instance)
	rec.Spec.LeaseDurationSeconds = ptr.To(int32(LayoutHold / time.Second))
	rec.Spec.RenewTime = &now
	if rec.Spec.AcquireTime == nil {
		rec.Spec.AcquireTime = &now
	}
	return rec
}

// renewTime is the record's renew time (zero when unset).
func renewTime(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}
