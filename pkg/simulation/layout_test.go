package simulation

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestAgreeLayout (issue 27, item 5): the first shard records the layout; a shard with the same
// --nodes agrees (and renews the record only when it is old or --shards changed); one with another
// --nodes is refused while the record holds (written within LayoutHold, or the simulation has Nodes),
// and takes over a record that no longer holds.
func TestAgreeLayout(t *testing.T) {
	now := time.Date(2026, 11, 25, 22, 0, 0, 0, time.UTC)
	record := func(nodes, shards int, age time.Duration) *coordinationv1.Lease {
		return Layout{NamePrefix: "sim-", Nodes: nodes, Shards: shards, Instance: "host_1_1", Clock: clocktesting.NewFakePassiveClock(now.Add(-age))}.record(nil)
	}
	ours := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-0000", Labels: map[string]string{LabelSimulated: "true", LabelSimulation: SimulationID("sim-")}}}
	foreign := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-0000", Labels: map[string]string{LabelSimulated: "true", LabelSimulation: SimulationID("other-")}}}
	for _, tc := range []struct {
		desc       string
		objs       []runtime.Object
		nodes      int
		wantErr    string
		wantWrites int
		wantNodes  string // the record's nodes per shard after
	}{
		{"no record: created", nil, 300, "", 1, "300"},
		{"same layout, recent: nothing written", []runtime.Object{record(300, 3, time.Second)}, 300, "", 0, "300"},
		{"same layout, --shards changed: renewed", []runtime.Object{record(300, 2, time.Second)}, 300, "", 1, "300"},
		{"same layout, old: renewed", []runtime.Object{record(300, 3, time.Hour), ours}, 300, "", 1, "300"},
		{"other --nodes, recent", []runtime.Object{record(300, 3, 10*time.Second)}, 200, `--nodes 200: the simulation of --node-name-prefix "sim-" runs 300 Nodes per shard (Lease kube-node-lease/nodeagent-simulation-sim-a60deeec, written by host_1_1 10s ago; a shard started with it less than 2m0s ago): every shard must run the same --nodes`, 0, "300"},
		{"other --nodes, old, Nodes exist", []runtime.Object{record(300, 3, time.Hour), ours}, 200, "its Nodes exist, e.g. sim-0000", 0, "300"},
		{"other --nodes, old, no Node left: taken over", []runtime.Object{record(300, 3, time.Hour), foreign}, 200, "", 1, "200"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c := fake.NewClientset(tc.objs...)
			c.ClearActions()
			err := AgreeLayout(context.Background(), c, Layout{NamePrefix: "sim-", Nodes: tc.nodes, Shards: 3, Instance: "me", Clock: clocktesting.NewFakePassiveClock(now)})
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("AgreeLayout = %v, want %q", err, tc.wantErr)
			}
			writes := 0
			for _, a := range c.Actions() {
				if a.GetVerb() == "create" || a.GetVerb() == "update" {
					writes++
				}
			}
			if writes != tc.wantWrites {
				t.Errorf("%d writes, want %d: %v", writes, tc.wantWrites, c.Actions())
			}
			rec, err := c.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), LayoutLeaseName("sim-"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.Annotations[AnnotationLayoutNodes]; got != tc.wantNodes || rec.Annotations[AnnotationLayoutPrefix] != "sim-" {
				t.Errorf("record %v, want nodes per shard %s", rec.Annotations, tc.wantNodes)
			}
			if tc.wantWrites > 0 && (ptr.Deref(rec.Spec.HolderIdentity, "") != "me" || !rec.Spec.RenewTime.Time.Equal(now)) {
				t.Errorf("record written by %v at %v, want me at %v", ptr.Deref(rec.Spec.HolderIdentity, ""), rec.Spec.RenewTime, now)
			}
		})
	}
}

// TestAgreeLayoutRace: shards started at once with different --nodes (the hostile run's 300 and 200)
// agree on one layout: those of the winner's --nodes start, every other one is refused.
func TestAgreeLayoutRace(t *testing.T) {
	for round := range 20 {
		c := fake.NewClientset()
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = AgreeLayout(context.Background(), c, Layout{NamePrefix: "sim-", Nodes: 200 + 100*(i%2), Shards: 2, Instance: fmt.Sprint(i)})
			}()
		}
		wg.Wait()
		rec, err := c.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), LayoutLeaseName("sim-"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range errs {
			agreed := fmt.Sprint(200+100*(i%2)) == rec.Annotations[AnnotationLayoutNodes]
			if agreed != (err == nil) || (err != nil && !strings.Contains(err.Error(), "every shard must run the same --nodes")) {
				t.Errorf("round %d: shard %d with --nodes %d: %v; the record says %s", round, i, 200+100*(i%2), err, rec.Annotations[AnnotationLayoutNodes])
			}
		}
	}
}
