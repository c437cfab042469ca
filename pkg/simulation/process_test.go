package simulation

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// TestProcessInformerSelectsItsSimulation (issue 27, item 6): the Node informer of an unsharded
// simulation lists and watches its own simulation's Nodes only (its prefix's identity and its shard), not
// every simulation's shard 0: the selector is what the API server filters on.
func TestProcessInformerSelectsItsSimulation(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		shard  Shard
		want   string
	}{
		{"sim-", Shard{}, "nodeagent.io/simulated=true,nodeagent.io/simulation=sim-a60deeec,nodeagent.io/simulation-shard=0"},
		{"sim-node-", Shard{Index: 2, Count: 3}, "nodeagent.io/simulated=true,nodeagent.io/simulation=sim-node-9dbbdbf1,nodeagent.io/simulation-shard=2"},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			selectors := make(chan string, 10)
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/nodes" {
					select {
					case selectors <- r.URL.Query().Get("labelSelector"):
					default:
					}
				}
				http.Error(w, "not here", http.StatusServiceUnavailable)
			}))
			defer api.Close()
			p, err := NewProcess(ctx, ProcessConfig{
				Nodes: 3, NamePrefix: tc.prefix, Shard: tc.shard, REST: &rest.Config{Host: api.URL}, Kubeconfig: "test",
				Node: node.Config{NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
					NodeLeaseDurationSeconds: 40, NodeStatusMaxImages: 50, AgentVersion: "v0.0.0-test"},
				QPS: 100, Burst: 100, EventQPS: 10, EventBurst: 10, ProcessStart: time.Now(),
			})
			if err != nil {
				t.Fatal(err)
			}
			p.set.Informers.Start(ctx.Done())
			defer p.set.Informers.Shutdown()
			select {
			case got := <-selectors:
				if got != tc.want {
					t.Errorf("the Node informer lists with labelSelector %q, want %q", got, tc.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the Node informer made no list request")
			}
			cancel()
		})
	}
}
