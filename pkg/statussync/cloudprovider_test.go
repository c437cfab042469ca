package statussync

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// cloudInitialisedNode is baseNode as an external cloud controller leaves it: no uninitialized taint,
// its providerID and labels, its addresses, and the provided-node-ip annotation the agent set.
func cloudInitialisedNode() *v1.Node {
	n := baseNode()
	n.Annotations = map[string]string{"alpha.kubernetes.io/provided-node-ip": "10.1.1.1"}
	n.Spec.ProviderID = "fake://" + nodeName
	for k, v := range map[string]string{
		v1.LabelInstanceTypeStable: "m1", v1.LabelInstanceType: "m1", v1.LabelTopologyZone: "z",
		v1.LabelFailureDomainBetaZone: "z", v1.LabelTopologyRegion: "r", v1.LabelFailureDomainBetaRegion: "r",
	} {
		n.Labels[k] = v
	}
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.10"}, {Type: v1.NodeHostName, Address: "cloud-hostname"}}
	return n
}

// TestSyncKeepsWhatTheCloudSet: with --cloud-provider=external and --node-ip, the status syncs of a Node
// a cloud controller has initialised never write its addresses, providerID, labels or taints: the
// first sync's patch carries the conditions only, the next ones patch nothing, and a change of
// addresses by the cloud is left alone (the kubelet's NodeAddress setter keeps existing addresses).
func TestSyncKeepsWhatTheCloudSet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeAddress := nodestatus.NodeAddress([]net.IP{net.ParseIP("10.1.1.1")}, func(net.IP) error { return nil },
		"agent-hostname", true, func(net.IP) (net.IP, error) { return nil, errors.New("not called") },
		func(string) ([]net.IP, error) { return nil, errors.New("not called") })
	w := newWorld(t, worldOpts{inAPI: cloudInitialisedNode(), inLister: cloudInitialisedNode(), rand: 0.5,
		extra: []nodestatus.Func{{Name: "NodeAddress", Setter: nodeAddress}}})
	cloudFields := func(n *v1.Node) any {
		return []any{n.Labels, n.Annotations, n.Spec, n.Status.Addresses}
	}

	w.sync(ctx)
	if got := w.actions(); join(got) != "patch/status" {
		t.Errorf("first sync: actions %v, want [patch/status]", got)
	}
	syncs := w.takeSyncs()
	if len(syncs) != 1 || syncs[0].Result != ResultPatched {
		t.Fatalf("first sync: %+v, want one patch (conditions never reported)", syncs)
	}
	for _, field := range []string{"addresses", "providerID", "taints", "labels", "annotations"} {
		if strings.Contains(syncs[0].Patch, field) {
			t.Errorf("first sync's patch touches %s: %s", field, syncs[0].Patch)
		}
	}
	if want, got := cloudFields(cloudInitialisedNode()), cloudFields(w.apiNode()); !apiequality.Semantic.DeepEqual(want, got) {
		t.Errorf("after the first sync: %s", diff.Diff(want, got))
	}
	w.syncInformer()

	for i := range 3 {
		w.step(10 * time.Second)
		w.sync(ctx)
		if got := w.actions(); len(got) != 0 {
			t.Errorf("sync %d: actions %v, want none", i+2, got)
		}
	}

	// The cloud controller changes the ExternalIP: the agent leaves it.
	n := w.apiNode().DeepCopy()
	n.Status.Addresses[1].Address = "203.0.113.99"
	if err := w.client.Tracker().Update(nodesGVR, n, ""); err != nil {
		t.Fatal(err)
	}
	w.syncInformer()
	w.takeSyncs()
	w.step(10 * time.Second)
	w.sync(ctx)
	if got := w.results(); join(got) != string(ResultUnchanged) {
		t.Errorf("sync after the cloud changed an address: %v, want unchanged", got)
	}
	if got := w.apiNode().Status.Addresses[1].Address; got != "203.0.113.99" {
		t.Errorf("ExternalIP %q after a sync, want the cloud's 203.0.113.99", got)
	}
}
