package simulation

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/lease"
)

// LeaseSample is how many of a shard's Leases CheckNoOtherInstance reads (spread over its range).
const LeaseSample = 8

// DuplicateCheck configures CheckNoOtherInstance.
type DuplicateCheck struct {
	// Names are the shard's Node names (and so its Leases' names), in index order; a sample of
	// LeaseSample of them, spread evenly, is read.
	Names []string
	// Instance is this process's identity (node.ProcessInstance), as written to lease.AnnotationInstance.
	Instance string
	// LeaseDuration is the Leases' duration (--node-lease-duration-seconds): a Lease renewed within it
	// by another instance may have a live writer. The other writer renews every quarter of it.
	LeaseDuration time.Duration
	// Flag names the shard in the error, e.g. "--shard-index 1".
	Flag string
	// Clock; default the real clock.
	Clock clock.WithTicker
}

// CheckNoOtherInstance refuses to start a shard whose Nodes another live process renews: two
// processes started with the same shard index would overwrite each other's Leases and status. It
// reads a sample of the shard's Leases (GET, in kube-node-lease). A Lease renewed within LeaseDuration
// by another instance (lease.AnnotationInstance) is watched: if that instance renews one of them
// again within 1.5 renew intervals (LeaseDuration/4) it is alive, and the error names the Flag, the
// Node and the instance; if none is renewed, the writer was an earlier run of this shard (killed, or a
// restarted container) and the shard may start. Without recent Leases it returns at once. It makes no
// write. API errors other than NotFound are returned wrapped.
func CheckNoOtherInstance(ctx context.Context, client kubernetes.Interface, c DuplicateCheck) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	logger := klog.FromContext(ctx)
	sample := sampleNames(c.Names, LeaseSample)
	leases := client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	get := func(name string) (*coordinationv1.Lease, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading the Lease of node %s to check for another instance: %w", c.Flag, name, err)
		}
		return l, nil
	}
	// Recently renewed by another instance: name → renew time seen.
	recent := map[string]time.Time{}
	for _, name := range sample {
		l, err := get(name)
		if err != nil {
			return err
		}
		if other, renewed, ok := lease.OtherInstance(l, c.Instance); ok && c.Clock.Since(renewed) <= c.LeaseDuration {
			recent[name] = renewed
			logger.Info("A Lease of this shard was renewed recently by another instance; waiting to see whether it is still running",
				"node", name, "instance", other, "renewed", renewed)
		}
	}
	if len(recent) == 0 {
		return nil
	}
	wait := c.LeaseDuration / 4 * 3 / 2
	deadline := c.Clock.Now().Add(wait)
	ticker := c.Clock.NewTicker(time.Second)
	defer ticker.Stop()
	for c.Clock.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C():
		}
		for name, seen := range recent {
			l, err := get(name)
			if err != nil {
				return err
			}
			if other, renewed, ok := lease.OtherInstance(l, c.Instance); ok && renewed.After(seen) {
				return fmt.Errorf("%s: another instance, %s, renews the Lease of node %s (renewed %s ago): a process with this shard runs already; stop it or choose another index",
					c.Flag, other, name, c.Clock.Since(renewed).Round(time.Millisecond))
			}
		}
	}
	logger.Info("No other instance renews this shard's Leases; starting", "waited", wait)
	return nil
}

// sampleNames returns at most n of names, spread evenly, the first and the last included.
func sampleNames(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	out := make([]string, 0, n)
	for k := range n {
		out = append(out, names[k*(len(names)-1)/(n-1)])
	}
	return out
}
