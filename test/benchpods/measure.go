package main

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/test/benchkit"
	"github.com/nodeagent/nodeagent/test/framework"
)

// cost is what one phase cost: the system's processes, the control plane, the API requests.
type cost struct {
	wall time.Duration
	// cpu is the system's processes' CPU time in the phase; cores that over wall.
	cpu   time.Duration
	cores float64
	// rssMean and rssMax are the sum of the system's processes' RSS, sampled every second.
	rssMean, rssMax int64
	// components is each control-plane component's cores in the phase.
	components map[string]float64
	// requests counts the system's API requests in the phase, "verb resource[/subresource]".
	requests map[string]int
}

// writes sums the write requests of requests whose resource starts with prefix ("" for all).
func (c cost) writes(prefix string) int {
	n := 0
	for k, v := range c.requests {
		verb, res, _ := strings.Cut(k, " ")
		if framework.IsWriteVerb(verb) && strings.HasPrefix(res, prefix) {
			n += v
		}
	}
	return n
}

// meter measures one phase: started with startMeter, ended with stop.
type meter struct {
	cp       *framework.ControlPlane
	procs    map[string]int
	sys      []string
	users    []string
	cpu0     map[string]time.Duration
	audit0   int64
	t0       time.Time
	done     chan struct{}
	wg       sync.WaitGroup
	rssSum   int64
	rssMax   int64
	rssCount int64
}

// startMeter starts measuring the system's processes (name → pid) and the control plane's, and the
// requests of users in the audit log.
func startMeter(cp *framework.ControlPlane, sysPIDs map[string]int, users []string) (*meter, error) {
	m := &meter{cp: cp, procs: cp.PIDs(), users: users, done: make(chan struct{})}
	for name, pid := range sysPIDs {
		m.procs[name] = pid
		m.sys = append(m.sys, name)
	}
	var err error
	if m.cpu0, err = benchkit.ReadCPU(m.procs); err != nil {
		return nil, err
	}
	if m.audit0, err = framework.AuditLogSize(cp.AuditLogPath); err != nil {
		return nil, err
	}
	m.t0 = time.Now()
	m.sample()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-tick.C:
				m.sample()
			}
		}
	}()
	return m, nil
}

// sample adds one sample of the system's RSS.
func (m *meter) sample() {
	var total int64
	for _, name := range m.sys {
		if st, err := framework.ReadProcStats(m.procs[name]); err == nil {
			total += st.RSS
		}
	}
	m.rssSum += total
	m.rssCount++
	m.rssMax = max(m.rssMax, total)
}

// stop ends the phase and returns its cost.
func (m *meter) stop() (cost, error) {
	close(m.done)
	m.wg.Wait()
	m.sample()
	c := cost{wall: time.Since(m.t0), components: map[string]float64{}, rssMax: m.rssMax}
	if m.rssCount > 0 {
		c.rssMean = m.rssSum / m.rssCount
	}
	cpu1, err := benchkit.ReadCPU(m.procs)
	if err != nil {
		return c, err
	}
	for name := range m.procs {
		d := cpu1[name] - m.cpu0[name]
		if slices.Contains(m.sys, name) {
			c.cpu += d
		} else {
			c.components[name] = d.Seconds() / c.wall.Seconds()
		}
	}
	c.cores = c.cpu.Seconds() / c.wall.Seconds()
	audit1, err := framework.AuditLogSize(m.cp.AuditLogPath)
	if err != nil {
		return c, err
	}
	if rotated, _ := filepath.Glob(filepath.Join(filepath.Dir(m.cp.AuditLogPath), "audit-*.log")); audit1 < m.audit0 || len(rotated) > 0 {
		return c, fmt.Errorf("the audit log was rotated during the run (%v): its window cannot be read", rotated)
	}
	events, err := framework.ReadAuditEventsRange(m.cp.AuditLogPath, m.audit0, audit1)
	if err != nil {
		return c, err
	}
	c.requests = map[string]int{}
	for _, u := range m.users {
		for k, v := range framework.RequestCounts(events, u) {
			c.requests[k] += v
		}
	}
	return c, nil
}

// podRecord is what the watch saw of one pod, each instant the first time it was seen.
type podRecord struct {
	name               string
	bound, ready, dead time.Time // dead: deletionTimestamp seen
	gone               time.Time
	ip                 string
}

// podTracker follows every pod of the benchmark from a watch (this program's own, as admin: not in
// the audit log's counts of the system): when each was bound, Ready, marked for deletion and gone, and
// whether a pod IP was ever held by two live pods at once.
type podTracker struct {
	mu   sync.Mutex
	pods map[types.UID]*podRecord
	// ipOwner is the live pod holding each pod IP; a pod stops holding it when it is terminal or gone.
	ipOwner map[string]types.UID
	dupIPs  []string
}

func newPodTracker() *podTracker {
	return &podTracker{pods: map[types.UID]*podRecord{}, ipOwner: map[string]types.UID{}}
}

func (t *podTracker) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { t.observe(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				t.gone(p)
			}
		},
	}
}

func (t *podTracker) record(p *corev1.Pod) *podRecord {
	r := t.pods[p.UID]
	if r == nil {
		r = &podRecord{name: p.Namespace + "/" + p.Name}
		t.pods[p.UID] = r
	}
	return r
}

func (t *podTracker) observe(p *corev1.Pod) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(p)
	if p.Spec.NodeName != "" && r.bound.IsZero() {
		r.bound = now
	}
	if r.ready.IsZero() {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				r.ready = now
			}
		}
	}
	if p.DeletionTimestamp != nil && r.dead.IsZero() {
		r.dead = now
	}
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if p.Spec.HostNetwork {
		return
	}
	switch ip := p.Status.PodIP; {
	case terminal:
		t.release(p.UID, r)
	case ip != "" && ip != r.ip:
		t.release(p.UID, r)
		if owner, ok := t.ipOwner[ip]; ok && owner != p.UID {
			t.dupIPs = append(t.dupIPs, fmt.Sprintf("%s: %s and %s", ip, t.pods[owner].name, r.name))
		}
		t.ipOwner[ip], r.ip = p.UID, ip
	}
}

func (t *podTracker) release(uid types.UID, r *podRecord) {
	if r.ip != "" && t.ipOwner[r.ip] == uid {
		delete(t.ipOwner, r.ip)
	}
	r.ip = ""
}

func (t *podTracker) gone(p *corev1.Pod) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(p)
	if r.dead.IsZero() {
		r.dead = now
	}
	r.gone = now
	t.release(p.UID, r)
}

// counts returns how many pods are bound and Ready (and not gone), and how many are not gone.
func (t *podTracker) counts() (ready, live int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.pods {
		if !r.gone.IsZero() {
			continue
		}
		live++
		if !r.ready.IsZero() {
			ready++
		}
	}
	return ready, live
}

// duplicates returns the pod IPs seen held by two live pods at once.
func (t *podTracker) duplicates() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.dupIPs)
}

// startStats is what the pods bound in [from, to) did: how many turned Ready, their bind → Ready
// latencies (sorted), and those stuck (not Ready stuckAfter after their bind, by `now`).
type startStats struct {
	bound, ready int
	latencies    []time.Duration
	stuck        []string
	// lastReady is when the last of them turned Ready (zero: none did).
	lastReady time.Time
}

func (t *podTracker) starts(from, to time.Time, stuckAfter time.Duration) startStats {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var s startStats
	for _, r := range t.pods {
		if r.bound.IsZero() || r.bound.Before(from) || !r.bound.Before(to) {
			continue
		}
		s.bound++
		if !r.ready.IsZero() {
			s.ready++
			s.latencies = append(s.latencies, r.ready.Sub(r.bound))
			if r.ready.After(s.lastReady) {
				s.lastReady = r.ready
			}
		}
		switch {
		case r.ready.IsZero() && !r.dead.IsZero():
			// Deleted before it was Ready (a rollout's surge pod): not stuck.
		case r.ready.IsZero() && now.Sub(r.bound) > stuckAfter, !r.ready.IsZero() && r.ready.Sub(r.bound) > stuckAfter:
			s.stuck = append(s.stuck, r.name)
		}
	}
	slices.Sort(s.latencies)
	return s
}

// deleteStats is what the pods marked for deletion in [from, to) did: how many are gone, and those stuck
// (not gone stuckAfter after their deletion, by now).
type deleteStats struct {
	deleted, gone int
	latencies     []time.Duration
	stuck         []string
}

func (t *podTracker) deletes(from, to time.Time, stuckAfter time.Duration) deleteStats {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var s deleteStats
	for _, r := range t.pods {
		if r.dead.IsZero() || r.dead.Before(from) || !r.dead.Before(to) {
			continue
		}
		s.deleted++
		if !r.gone.IsZero() {
			s.gone++
			s.latencies = append(s.latencies, r.gone.Sub(r.dead))
		}
		if (r.gone.IsZero() && now.Sub(r.dead) > stuckAfter) || (!r.gone.IsZero() && r.gone.Sub(r.dead) > stuckAfter) {
			s.stuck = append(s.stuck, r.name)
		}
	}
	slices.Sort(s.latencies)
	return s
}

// pct returns the p-th percentile (0..1) of sorted, or 0.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// topRequests returns the n most frequent requests of m, "verb resource count", most first.
func topRequests(m map[string]int, n int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return out
}
