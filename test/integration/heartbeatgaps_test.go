package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// heartbeatGaps records the intervals between the consecutive heartbeats of every simulated Node
// whose name has a prefix, as the heartbeats themselves record them, so that how late a Lease
// renewal or a status sync came does not depend on when or how fast it was read:
//   - Lease: the renewTime of each Lease (stamped by the simulator as it writes the Lease) from a
//     watch on kube-node-lease; the gap between two renewTimes is the renew interval (10 s, 4 %
//     jitter: at most 10.4 s) plus the previous write's latency plus any delay of ours;
//   - status: each Node's lastSync from the simulator's GET /simulation/nodes, read every 2 s (the
//     sync runs every 10 s, so no sync goes unseen).
//
// A gap over the longest interval the kubelet intends (10.4 s) by more than late is a heartbeat late by
// that much. The Lease renewal is sliding, as the kubelet's (wait.JitterUntil with sliding): the next
// renewal is timed from the end of the previous write, so an interval also holds that write's
// latency, the API server's; leaseOwn subtracts it (as the watch saw it: from renewTime to the
// event's arrival, an upper bound), leaving the interval and what the simulator itself added.
type heartbeatGaps struct {
	prefix string
	mu     sync.Mutex
	lease  gapSet
	status gapSet
}

// gapSet is the last heartbeat seen per Node and every interval between consecutive ones: as
// recorded (gaps), and without the previous heartbeat's write latency (own).
type gapSet struct {
	last map[string]beat
	gaps []time.Duration
	own  []time.Duration
	// worst is the longest interval, worstNode its Node, worstEnd when it ended.
	worst     time.Duration
	worstNode string
	worstEnd  time.Time
}

// beat is one heartbeat: when the Node stamped it, and how long it took to reach the API server
// and the watch (an upper bound of its write's latency; 0 when unknown).
type beat struct {
	at  time.Time
	lag time.Duration
}

func (g *gapSet) add(node string, b beat) {
	if g.last == nil {
		g.last = map[string]beat{}
	}
	prev, ok := g.last[node]
	if ok && !b.at.After(prev.at) {
		return
	}
	g.last[node] = b
	if !ok {
		return
	}
	d := b.at.Sub(prev.at)
	if d > g.worst {
		g.worst, g.worstNode, g.worstEnd = d, node, b.at
	}
	g.gaps = append(g.gaps, d)
	g.own = append(g.own, d-max(prev.lag, 0))
}

// gapStats summarises intervals: how many, the 99th percentile and the longest, and how many were
// over Limit.
type gapStats struct {
	N         int
	P99, Max  time.Duration
	Over      int
	Limit     time.Duration
	WorstNode string
	WorstEnd  time.Time
}

func (s gapStats) String() string {
	worst := ""
	if s.WorstNode != "" {
		worst = fmt.Sprintf(" (%s, ending %s)", s.WorstNode, s.WorstEnd.UTC().Format("15:04:05.000"))
	}
	return fmt.Sprintf("%d intervals, p99 %v, longest %v%s, %d over %v",
		s.N, s.P99.Round(10*time.Millisecond), s.Max.Round(10*time.Millisecond), worst, s.Over, s.Limit)
}

func summarise(gaps []time.Duration, limit time.Duration) gapStats {
	st := gapStats{N: len(gaps), Limit: limit}
	if st.N == 0 {
		return st
	}
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	st.P99, st.Max = sorted[(len(sorted)*99)/100], sorted[len(sorted)-1]
	for _, d := range sorted {
		if d > limit {
			st.Over++
		}
	}
	return st
}

// stats summarises the intervals as recorded and without the write latency, over limit.
func (g *gapSet) stats(limit time.Duration) (recorded, own gapStats) {
	recorded = summarise(g.gaps, limit)
	recorded.WorstNode, recorded.WorstEnd = g.worstNode, g.worstEnd
	return recorded, summarise(g.own, limit)
}

// heartbeatIntervalMax is the longest interval the kubelet's Lease renewal and status sync intend:
// 10 s with wait.Jitter's 0.04 factor.
const heartbeatIntervalMax = 10400 * time.Millisecond

// watchHeartbeats records the heartbeats of the Nodes named prefix* until ctx ends: a watch on
// their Leases through client, and, when simBase is not empty, the simulator's /simulation/nodes
// every 2 s. It returns once the watch is open.
func watchHeartbeats(ctx context.Context, t *testing.T, client kubernetes.Interface, prefix, simBase string) *heartbeatGaps {
	t.Helper()
	g := &heartbeatGaps{prefix: prefix}
	leases := client.CoordinationV1().Leases("kube-node-lease")
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		g.addLease(&list.Items[i], time.Time{})
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					if ctx.Err() == nil {
						t.Errorf("the watch on the Leases ended early")
					}
					return
				}
				if l, isLease := ev.Object.(*coordinationv1.Lease); isLease && ev.Type == watch.Modified {
					g.addLease(l, time.Now())
				}
			}
		}
	}()
	if simBase != "" {
		go func() {
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for {
				g.pollStatus(ctx, simBase)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	return g
}

// addLease records a Lease seen at arrived (zero: in the first List, its latency unknown).
func (g *heartbeatGaps) addLease(l *coordinationv1.Lease, arrived time.Time) {
	if !strings.HasPrefix(l.Name, g.prefix) || l.Spec.RenewTime == nil {
		return
	}
	b := beat{at: l.Spec.RenewTime.Time}
	if !arrived.IsZero() {
		b.lag = arrived.Sub(b.at)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lease.add(l.Name, b)
}

// pollStatus reads every simulated Node's lastSync once.
func (g *heartbeatGaps) pollStatus(ctx context.Context, simBase string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, simBase+"/simulation/nodes", nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var list struct {
		Nodes []struct {
			Name     string    `json:"name"`
			LastSync time.Time `json:"lastSync"`
		} `json:"nodes"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&list) != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range list.Nodes {
		if strings.HasPrefix(n.Name, g.prefix) && !n.LastSync.IsZero() {
			g.status.add(n.Name, beat{at: n.LastSync})
		}
	}
}

// stats returns the Lease intervals as the Leases record them and without each previous write's
// latency (leaseOwn: what the simulator's own scheduling adds), and the status sync intervals (the
// sync's own time, stamped at its end), each counted over heartbeatIntervalMax+late.
func (g *heartbeatGaps) stats(late time.Duration) (lease, leaseOwn, status gapStats) {
	g.mu.Lock()
	defer g.mu.Unlock()
	lease, leaseOwn = g.lease.stats(heartbeatIntervalMax + late)
	status, _ = g.status.stats(heartbeatIntervalMax + late)
	return lease, leaseOwn, status
}
