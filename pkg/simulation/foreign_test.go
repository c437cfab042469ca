package simulation

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodeagent/nodeagent/pkg/lease"
)

// TestStopForeignNodes (issue 27, item 5, at run time): when another process renews the Lease of one
// of this shard's Nodes, the shard stops writing that Node if the Node is labelled with another shard
// (that shard registered it) and keeps it if the Node is labelled as its own; Nodes nobody else writes
// are untouched.
func TestStopForeignNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newSimEnv(t, func(c *Config) { c.Dependencies.Instance = "me" })
		// From when conflicting is set, our renewals of sim-0001 and sim-0002 conflict with another
		// process's (the fake clientset has no resourceVersion check). Installed before the run: the
		// fake's reactor chain is not safe to change while it serves.
		var conflicting atomic.Bool
		e.client.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
			l := a.(clienttesting.UpdateAction).GetObject().(metav1.Object)
			if conflicting.Load() && l.GetAnnotations()[lease.AnnotationInstance] == "me" && l.GetName() != "sim-0000" {
				return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, l.GetName(), fmt.Errorf("changed"))
			}
			return false, nil, nil
		})
		stop := e.run(ctx)
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()
		// Another process (shard 1 of a simulation with another --nodes) renews the Leases of sim-0001
		// and sim-0002; sim-0001 is labelled with its shard (it registered it), sim-0002 with ours.
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"1"}}}`, LabelShard)
		if _, err := e.client.CoreV1().Nodes().Patch(ctx, "sim-0001", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"sim-0001", "sim-0002"} {
			l := e.lease(name)
			l.Annotations[lease.AnnotationInstance], l.Spec.RenewTime = "host_7_7", &metav1.MicroTime{Time: time.Now()}
			if _, err := e.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		conflicting.Store(true) // our next renewal conflicts with theirs
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if got := fmt.Sprint(e.sim.StopForeignNodes(ctx, e.client)); got != "[sim-0001]" {
			t.Errorf("StopForeignNodes stopped %s, want [sim-0001]", got)
		}
		for name, want := range map[string]Phase{"sim-0000": PhaseRunning, "sim-0001": PhaseStopped, "sim-0002": PhaseRunning} {
			if got := e.sim.State(name).Phase; got != want {
				t.Errorf("%s: %s, want %s", name, got, want)
			}
		}
		if got := e.sim.StopForeignNodes(ctx, e.client); len(got) != 0 {
			t.Errorf("second check stopped %v, want none", got)
		}
	})
}
