package simulation

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeagent/nodeagent/pkg/apiclient"
	"github.com/nodeagent/nodeagent/pkg/lease"
	"github.com/nodeagent/nodeagent/pkg/server"
)

func TestShardFromPodName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    int
		wantErr string
	}{
		{"nodeagent-simulate-0", 0, ""},
		{"nodeagent-simulate-2", 2, ""},
		{"sim-17", 17, ""},
		{"nodeagent-simulate", 0, `ordinal "simulate" is not a number`},
		{"nodeagent-simulate-", 0, "has no ordinal"},
		{"host", 0, "has no ordinal"},
		{"", 0, "has no ordinal"},
		{"web-1a", 0, `ordinal "1a" is not a number`},
		{"web--1", 1, ""}, // the ordinal is what follows the last '-'
	} {
		got, err := ShardFromPodName(tc.name)
		if tc.wantErr == "" && (err != nil || got != tc.want) {
			t.Errorf("ShardFromPodName(%q) = %d, %v; want %d", tc.name, got, err, tc.want)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ShardFromPodName(%q) = %d, %v; want an error with %q", tc.name, got, err, tc.wantErr)
		}
	}
}

func TestValidateShards(t *testing.T) {
	for _, tc := range []struct {
		count, index int
		wantErr      string
	}{
		{1, 0, ""}, {3, 2, ""}, {MaxShards, MaxShards - 1, ""},
		{0, 0, "--shards 0: must be between 1 and 1000"},
		{-1, 0, "--shards -1"},
		{MaxShards + 1, 0, "--shards 1001"},
		{3, 3, "--shard-index 3: must be in [0, 3) (--shards 3)"},
		{3, -1, "--shard-index -1: must be in [0, 3)"},
	} {
		err := ValidateShards(tc.count, tc.index)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ValidateShards(%d, %d) = %v, want %q", tc.count, tc.index, err, tc.wantErr)
		}
	}
}

// TestMapping: contiguous ranges, global names on at least 4 digits, whatever the number of Nodes or
// shards (issue 27, item 4: --nodes=11 with --shards=909 named w-0000..., with 910 w-00000...).
func TestMapping(t *testing.T) {
	for _, tc := range []struct {
		index int
		want  string
	}{{0, "sim-0000"}, {42, "sim-0042"}, {9999, "sim-9999"}, {10000, "sim-10000"}, {123456, "sim-123456"}} {
		if got := NodeName("sim-", tc.index); got != tc.want {
			t.Errorf("NodeName(%d) = %q, want %q", tc.index, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name       string
		index      int
		ok, padded bool
	}{
		{"sim-0042", 42, true, false}, {"sim-10042", 10042, true, false}, {"sim-00042", 0, false, true}, {"sim-004a", 0, false, false},
		{"other-0042", 0, false, false}, {"sim-+042", 0, false, false}, {"sim-042", 0, false, false}, {"sim-0000", 0, true, false},
		{"sim-000000", 0, false, true},
	} {
		i, ok := ParseNodeName(tc.name, "sim-")
		if ok != tc.ok || (ok && i != tc.index) {
			t.Errorf("ParseNodeName(%q) = %d, %v; want %d, %v", tc.name, i, ok, tc.index, tc.ok)
		}
		if got := IsZeroPaddedName(tc.name, "sim-"); got != tc.padded {
			t.Errorf("IsZeroPaddedName(%q) = %v, want %v", tc.name, got, tc.padded)
		}
	}
	for _, tc := range []struct{ index, nodes, owner int }{{0, 300, 0}, {299, 300, 0}, {300, 300, 1}, {899, 300, 2}} {
		if got := Owner(tc.index, tc.nodes); got != tc.owner {
			t.Errorf("Owner(%d, %d) = %d, want %d", tc.index, tc.nodes, got, tc.owner)
		}
	}
	// A Simulator of shard 1 of 3 with 3 Nodes each runs sim-0003..sim-0005, labelled with its shard;
	// one of 1000 shards with 11 Nodes each (11000 in all) has 4-digit names below index 10000, 5 above.
	for _, tc := range []struct {
		shard Shard
		nodes int
		want  []string
	}{
		{Shard{}, 3, []string{"sim-0000", "sim-0001", "sim-0002"}},
		{Shard{Index: 1, Count: 3}, 3, []string{"sim-0003", "sim-0004", "sim-0005"}},
		{Shard{Index: 2, Count: 1000}, 11, []string{"sim-0022", "sim-0023", "sim-0024"}},
		{Shard{Index: 999, Count: 1000}, 11, []string{"sim-10989", "sim-10990", "sim-10991"}},
	} {
		e := newSimEnv(t, func(c *Config) { c.Shard, c.Nodes = tc.shard, tc.nodes })
		if got := e.sim.Names()[:3]; fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("shard %+v: names %v, want %v", tc.shard, got, tc.want)
		}
		if got := e.sim.labels[LabelShard]; got != tc.shard.Label() {
			t.Errorf("shard %+v: label %s=%q", tc.shard, LabelShard, got)
		}
		if got := e.sim.labels[LabelSimulation]; got != SimulationID("sim-") {
			t.Errorf("shard %+v: label %s=%q, want %q", tc.shard, LabelSimulation, got, SimulationID("sim-"))
		}
		if got := e.sim.nodeConfig(e.sim.nodes[0]).NodeIPs[0].String(); got != nodeIP(tc.shard.First(tc.nodes)).String() {
			t.Errorf("shard %+v: first IP %s", tc.shard, got)
		}
	}
	if _, err := New(Config{Nodes: 3, NamePrefix: "sim-", Shard: Shard{Index: 3, Count: 3}}); err == nil || !strings.Contains(err.Error(), "--shard-index 3") {
		t.Errorf("New with shard 3 of 3: %v", err)
	}
}

// TestNamesStableWhenShardsChange (issue 27, item 4): a Node's name does not depend on K: with
// --nodes=11, --shards=909 (9999 Nodes) and 910 (10010) name shard 0's Nodes w-0000..w-0010 alike.
func TestNamesStableWhenShardsChange(t *testing.T) {
	// The same Nodes keep their names when K changes: shard 0 of --nodes=11 is w-0000..w-0010 with 909
	// shards (9999 Nodes) and with 910 (10010).
	for _, shards := range []int{909, 910, 1000} {
		e := newSimEnv(t, func(c *Config) { c.NamePrefix, c.Nodes, c.Shard = "w-", 11, Shard{Index: 0, Count: shards} })
		if got := e.sim.Names(); got[0] != "w-0000" || got[10] != "w-0010" {
			t.Errorf("--nodes=11 --shards=%d: shard 0 names %v, want w-0000..w-0010", shards, got)
		}
		e = newSimEnv(t, func(c *Config) { c.NamePrefix, c.Nodes, c.Shard = "w-", 11, Shard{Index: 908, Count: shards} })
		if got := e.sim.Names(); got[0] != "w-9988" || got[10] != "w-9998" {
			t.Errorf("--nodes=11 --shards=%d: shard 908 names %v, want w-9988..w-9998", shards, got)
		}
	}
}

func simNodeObj(name string, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestCheckOwnership(t *testing.T) {
	sim := func(shard string) map[string]string {
		l := map[string]string{LabelSimulated: "true", LabelSimulation: SimulationID("sim-")}
		if shard != "" {
			l[LabelShard] = shard
		}
		return l
	}
	// Of a run before issue 27: no LabelSimulation.
	old := func(shard string) map[string]string {
		l := sim(shard)
		delete(l, LabelSimulation)
		return l
	}
	other := func(prefix, shard string) map[string]string {
		l := sim(shard)
		l[LabelSimulation] = SimulationID(prefix)
		return l
	}
	own := Ownership{NamePrefix: "sim-", Nodes: 300, Shard: Shard{Index: 1, Count: 3}}
	for _, tc := range []struct {
		desc       string
		nodes      []*v1.Node
		o          Ownership
		wantErr    string
		unlabelled []string
	}{
		{"empty cluster", nil, own, "", nil},
		{"own nodes, other shards' and real nodes outside the range", []*v1.Node{
			simNodeObj("sim-0300", sim("1")), simNodeObj("sim-0000", sim("0")), simNodeObj("sim-0899", sim("2")),
			simNodeObj("sim-0299", nil), simNodeObj("sim-0900", nil), simNodeObj("worker-1", nil),
		}, own, "", nil},
		{"a real node in the range", []*v1.Node{simNodeObj("sim-0450", nil)}, own,
			`--node-name-prefix "sim-": node sim-0450 exists and is not simulated`, nil},
		{"a node of the range labelled with another shard", []*v1.Node{simNodeObj("sim-0301", sim("0"))}, own,
			"--shard-index 1: node sim-0301 is labelled nodeagent.io/simulation-shard=0", nil},
		{"K lowered: a node of shard 3 exists", []*v1.Node{simNodeObj("sim-0950", sim("3"))}, own,
			"--shards 3: node sim-0950 is labelled nodeagent.io/simulation-shard=3", nil},
		{"another simulation's shard 3 (another prefix) is not ours", []*v1.Node{simNodeObj("other-0950", sim("3"))}, own, "", nil},
		{"unlabelled simulated nodes of an earlier run are adopted", []*v1.Node{
			simNodeObj("sim-0302", sim("")), simNodeObj("sim-0300", sim("")), simNodeObj("sim-0001", sim("")),
		}, own, "", []string{"sim-0300", "sim-0302"}},
		{"nodes of a run before issue 27 (no simulation label) are adopted", []*v1.Node{
			simNodeObj("sim-0302", old("1")), simNodeObj("sim-0301", old("")), simNodeObj("sim-0303", sim("1")),
		}, own, "", []string{"sim-0301", "sim-0302"}},
		{"K lowered: a node of shard 3 of a run before issue 27", []*v1.Node{simNodeObj("sim-0950", old("3"))}, own,
			"--shards 3: node sim-0950 is labelled nodeagent.io/simulation-shard=3", nil},
		{"another simulation's node with one of our names", []*v1.Node{simNodeObj("sim-0301", other("sim-0", "0"))}, own,
			`--node-name-prefix "sim-": node sim-0301 is labelled nodeagent.io/simulation=` + SimulationID("sim-0") + `: it belongs to another simulation`, nil},
		{"another simulation's shard 3 with our prefix's names", []*v1.Node{simNodeObj("sim-0950", other("sim", "3"))}, own, "", nil},
		{"a node named with the zero-padded width of an earlier version", []*v1.Node{simNodeObj("sim-00042", old("0"))}, own,
			`--node-name-prefix "sim-": node sim-00042 is named with the zero-padded width of a nodeagent before issue 27 (this one names index 42 sim-0042, whatever --shards)`, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var objs []runtime.Object
			for _, n := range tc.nodes {
				objs = append(objs, n)
			}
			c := fake.NewClientset(objs...)
			unlabelled, err := CheckOwnership(context.Background(), c, tc.o)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("CheckOwnership = %v, want %q", err, tc.wantErr)
			}
			if fmt.Sprint(unlabelled) != fmt.Sprint(tc.unlabelled) {
				t.Errorf("unlabelled %v, want %v", unlabelled, tc.unlabelled)
			}
			if err := AdoptNodes(context.Background(), c, tc.o.Shard, tc.o.NamePrefix, unlabelled); err != nil {
				t.Fatal(err)
			}
			for _, name := range unlabelled {
				n, _ := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if n.Labels[LabelShard] != "1" || n.Labels[LabelSimulation] != SimulationID("sim-") {
					t.Errorf("%s not labelled: %v", name, n.Labels)
				}
			}
		})
	}
}

// TestCheckNoOtherInstance: a Lease renewed recently by another instance that renews it again within
// the wait means a live duplicate (refused at the first poll after its renewal, naming the instance); one that is not renewed again is an
// earlier run (started after the wait); old or own Leases are no reason to wait.
func TestCheckNoOtherInstance(t *testing.T) {
	const other = "host_42_1"
	names := []string{"sim-0300", "sim-0301", "sim-0302"}
	for _, tc := range []struct {
		desc     string
		age      time.Duration // of the Leases' renew time at the check
		instance string
		renew    bool // the other instance renews sim-0300 every 10 s during the check
		wantErr  string
		wantWait time.Duration
	}{
		{"no recent lease", 41 * time.Second, other, false, "", 0},
		{"own lease", time.Second, "me", false, "", 0},
		{"a killed earlier run", 5 * time.Second, other, false, "", 15 * time.Second},
		{"a live other instance", 5 * time.Second, other, true, "--shard-index 1: another instance, host_42_1, renews the Lease of node sim-0300", 6 * time.Second},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c := fake.NewClientset()
				put := func(name string, at time.Time) {
					l := &coordinationv1.Lease{
						ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1.NamespaceNodeLease, Annotations: map[string]string{lease.AnnotationInstance: tc.instance}},
						Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: at}},
					}
					if _, err := c.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
						if _, err := c.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(ctx, l, metav1.CreateOptions{}); err != nil {
							t.Error(err)
						}
					}
				}
				for _, n := range names {
					put(n, time.Now().Add(-tc.age))
				}
				if tc.renew {
					go func() {
						for {
							select {
							case <-ctx.Done():
								return
							case <-time.After(10*time.Second - tc.age + 500*time.Millisecond): // between two of the check's 1 s polls
								put(names[0], time.Now())
							}
						}
					}()
				}
				start := time.Now()
				err := CheckNoOtherInstance(ctx, c, DuplicateCheck{Names: names, Instance: "me", LeaseDuration: 40 * time.Second, Flag: "--shard-index 1"})
				if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
					t.Errorf("CheckNoOtherInstance = %v, want %q", err, tc.wantErr)
				}
				if waited := time.Since(start); waited != tc.wantWait {
					t.Errorf("waited %v, want %v", waited, tc.wantWait)
				}
			})
		})
	}
}

func TestSampleNames(t *testing.T) {
	names := make([]string, 300)
	for i := range names {
		names[i] = NodeName("sim-", 300+i)
	}
	got := sampleNames(names, 4)
	if want := "[sim-0300 sim-0399 sim-0499 sim-0599]"; fmt.Sprint(got) != want {
		t.Errorf("sampleNames = %v, want %s", got, want)
	}
	if got := sampleNames(names[:2], 8); len(got) != 2 {
		t.Errorf("sampleNames of 2 = %v", got)
	}
}

// TestControlAPIForgedProxyHeader (issue 45, item 3): the control API as nodeagent simulate serves it
// (server.LoopbackOnly around Handler) admits loopback peers only: a remote peer is refused whatever
// headers it sends, among them the API server's X-Forwarded-Uri naming this very pod's proxy, which any
// pod can forge (earlier releases' --control-allow-proxy obeyed it).
func TestControlAPIForgedProxyHeader(t *testing.T) {
	e := newSimEnv(t, nil)
	h := server.LoopbackOnly(e.sim.Handler())
	const proxyPath = "/api/v1/namespaces/sim/pods/nodeagent-simulate-1:10248/proxy"
	for _, tc := range []struct {
		desc, method, path, remote, host, forwarded string
		want                                        int
	}{
		{"loopback (port-forward)", "GET", "/simulation/nodes", "127.0.0.1:5000", "127.0.0.1:41234", "", 200},
		{"loopback POST (port-forward)", "POST", "/simulation/nodes/sim-0000", "127.0.0.1:5000", "127.0.0.1:41234", "", 200},
		{"loopback, foreign Host", "GET", "/simulation/nodes", "127.0.0.1:5000", "evil.example:10248", "", 403},
		{"remote", "GET", "/simulation/nodes", "10.0.0.9:5000", "10.0.0.5:10248", "", 403},
		{"remote, forged proxy header", "GET", "/simulation/nodes", "10.0.0.9:5000", "api.example:6443", proxyPath + "/simulation/nodes", 403},
		{"remote POST, forged proxy header", "POST", "/simulation/nodes/sim-0000", "10.0.0.9:5000", "api.example:6443", proxyPath + "/simulation/nodes/sim-0000", 403},
		{"remote, forged header and loopback Host", "POST", "/simulation/nodes/sim-0000", "10.0.0.9:5000", "127.0.0.1:10248", proxyPath + "/simulation/nodes/sim-0000", 403},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{"memoryPressure":false}`))
			req.RemoteAddr, req.Host = tc.remote, tc.host
			req.Header.Set("Content-Type", "application/json")
			if tc.forwarded != "" {
				req.Header.Set("X-Forwarded-Uri", tc.forwarded)
				req.Header.Set("X-Forwarded-For", "127.0.0.1")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.want)
			}
			if tc.want == http.StatusForbidden && !strings.HasPrefix(rec.Body.String(), "forbidden") {
				t.Errorf("403 body %q", rec.Body)
			}
		})
	}
}

// TestDeleteNodes: with DeleteNodesOnExit the shard deletes exactly its own Nodes (one already gone is
// no error); without it, nothing.
func TestDeleteNodes(t *testing.T) {
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprint(del), func(t *testing.T) {
			e := newSimEnv(t, func(c *Config) { c.Shard = Shard{Index: 1, Count: 2} }) // sim-0003..sim-0005
			for _, name := range []string{"sim-0002", "sim-0003", "sim-0005", "sim-0006"} {
				if _, err := e.client.CoreV1().Nodes().Create(context.Background(), simNodeObj(name, nil), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p := &Process{cfg: ProcessConfig{DeleteNodesOnExit: del}, Simulator: e.sim, set: &apiclient.Set{Heartbeat: e.client}}
			if err := p.DeleteNodes(context.Background()); err != nil {
				t.Fatal(err)
			}
			list, err := e.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, n := range list.Items {
				left = append(left, n.Name)
			}
			want := "[sim-0002 sim-0003 sim-0005 sim-0006]"
			if del {
				want = "[sim-0002 sim-0006]"
			}
			if fmt.Sprint(left) != want {
				t.Errorf("Nodes left %v, want %s", left, want)
			}
		})
	}
}
