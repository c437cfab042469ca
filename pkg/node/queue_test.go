package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// hungRuntime is a CRI runtime whose calls block until their context ends (a hung containerd).
type hungRuntime struct{ criruntime.Runtime }

func (hungRuntime) Status(ctx context.Context, _ bool) (*runtimeapi.StatusResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLeaseNeverWaitsForAnotherNode: on one queue with the default workers, a Node whose runtime
// hangs (every CRI call until its 5 s timeout) and whose status sync hangs in a setter for 50 s
// delays no Lease renewal, neither its own nor another Node's: each is renewed every 10-10.4 s.
func TestLeaseNeverWaitsForAnotherNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		s, err := NewQueue(QueueConfig{})
		if err != nil {
			t.Fatal(err)
		}
		healthy := newEnv(t, nil)
		var slow atomic.Bool
		hung := newEnv(t, func(c *Config) {
			c.NodeName = "hung-node"
			c.ExtraFuncs = []nodestatus.Func{{Name: "Slow", Setter: func(ctx context.Context, _ *v1.Node) error {
				if slow.Load() {
					time.Sleep(50 * time.Second) // a status call that takes its time, ignoring ctx
				}
				return nil
			}}}
		})
		hung.ctrl.cfg.Runtime = hungRuntime{hung.ctrl.cfg.Runtime}
		hung.ctrl.poller = mustPoller(t, hung.ctrl)
		for _, c := range []*Controller{healthy.ctrl, hung.ctrl} {
			if err := s.Start(c); err != nil {
				t.Fatal(err)
			}
		}
		stop := runQueue(ctx, s)
		time.Sleep(time.Second)
		slow.Store(true)

		var mu sync.Mutex
		renewals := map[string][]time.Time{}
		start := time.Now()
		for time.Since(start) < 2*time.Minute {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			mu.Lock()
			for _, c := range []*Controller{healthy.ctrl, hung.ctrl} {
				r := c.LastLeaseRenew()
				if l := renewals[c.Name()]; !r.IsZero() && (len(l) == 0 || !l[len(l)-1].Equal(r)) {
					renewals[c.Name()] = append(l, r)
				}
			}
			mu.Unlock()
		}
		for name, l := range renewals {
			if len(l) < 11 {
				t.Errorf("%s: %d Lease renewals in 2 minutes, want at least 11", name, len(l))
			}
			for i := 1; i < len(l); i++ {
				if gap := l[i].Sub(l[i-1]); gap > 10400*time.Millisecond+150*time.Millisecond {
					t.Errorf("%s: %v between Lease renewals %d and %d, want at most 10.4 s", name, gap, i-1, i)
				}
			}
		}
		if len(renewals) != 2 {
			t.Errorf("renewals seen for %d Nodes, want 2", len(renewals))
		}
		slow.Store(false)
		stop()
	})
}

// runQueue runs s in the background until stop, which cancels Run's context and waits for it.
func runQueue(ctx context.Context, s *Queue) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() { cancel(); <-done }
}

func mustPoller(t *testing.T, c *Controller) *criruntime.Poller {
	t.Helper()
	p, err := criruntime.NewPoller(criruntime.PollerConfig{
		Runtime: c.cfg.Runtime, State: c.runtimeState, Period: c.cfg.RuntimePollPeriod, Timeout: StatusCallTimeout,
		Clock: c.deps.Clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStatusStepTriggersAndPeriod: the status step runs every 10 s (+ up to 4 % jitter); a trigger
// runs it at once, as one extra sync: the periodic syncs keep their times (the work queue keeps the
// earlier of two due times of one item, so the triggered run's own next time is dropped); triggers
// while it runs make exactly one more run.
func TestStatusStepTriggersAndPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		var mu sync.Mutex
		syncs := 0
		block := make(chan struct{})
		var blocking atomic.Bool
		e := newEnv(t, func(c *Config) {
			c.ExtraFuncs = []nodestatus.Func{{Name: "Count", Setter: func(context.Context, *v1.Node) error {
				mu.Lock()
				syncs++
				mu.Unlock()
				if blocking.Load() {
					<-block
				}
				return nil
			}}}
		})
		stop := e.run(ctx)
		defer stop()
		count := func() int {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			n := syncs
			syncs = 0
			return n
		}
		time.Sleep(2 * time.Second)
		count() // registration and the first sync, at 0
		// A trigger at 2 s: one sync now; the next at the periodic time, 10-10.4 s after the first.
		e.ctrl.Trigger()
		if n := count(); n != 1 {
			t.Fatalf("%d syncs at once after a trigger, want 1", n)
		}
		time.Sleep(8*time.Second - time.Millisecond)
		if n := count(); n != 0 {
			t.Errorf("%d syncs before the periodic time, want 0", n)
		}
		time.Sleep(500 * time.Millisecond)
		if n := count(); n != 1 {
			t.Errorf("%d syncs once the period with its jitter has passed, want 1", n)
		}
		time.Sleep(2 * time.Second)
		if n := count(); n != 0 {
			t.Errorf("%d syncs 10-10.4 s after the triggered one, want 0 (its next time was dropped)", n)
		}
		// Five triggers while a sync is blocked make one more sync, not five.
		blocking.Store(true)
		e.ctrl.Trigger()
		synctest.Wait()
		for range 5 {
			e.ctrl.Trigger()
		}
		blocking.Store(false)
		close(block)
		if n := count(); n != 2 {
			t.Errorf("%d syncs for a trigger plus 5 triggers during its run, want 2", n)
		}
	})
}

// TestCloseAllConnsOnlyInAnOutage: a repeated heartbeat failure closes the process's API
// connections only while its heartbeats fail as a whole, and at most once per 10 s.
func TestCloseAllConnsOnlyInAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		closes := 0
		s, err := NewQueue(QueueConfig{CloseAllConns: func() { closes++ }})
		if err != nil {
			t.Fatal(err)
		}
		defer runQueue(t.Context(), s)()
		time.Sleep(time.Second)
		start := time.Now()
		time.Sleep(time.Second)
		s.Heartbeats().Succeeded() // another Node's heartbeat succeeded after ours started
		s.Heartbeats().Failed(start)
		s.outage.closeAllConns()
		if closes != 0 {
			t.Fatalf("closed while other heartbeats succeed")
		}
		time.Sleep(time.Second)
		s.Heartbeats().Failed(time.Now().Add(-time.Millisecond))
		s.outage.closeAllConns()
		s.outage.closeAllConns()
		if closes != 1 {
			t.Fatalf("%d closes in an outage, want 1", closes)
		}
		time.Sleep(9 * time.Second)
		s.outage.closeAllConns()
		if closes != 1 {
			t.Errorf("%d closes within 10 s, want 1", closes)
		}
		time.Sleep(time.Second)
		s.outage.closeAllConns()
		if closes != 2 {
			t.Errorf("%d closes after 10 s in the outage, want 2", closes)
		}
	})
}

// TestRenewalsSpreadAfterAnOutage (issue 27 item 7): 20 Nodes on one queue whose Lease calls fail
// for 60 s renew all at once when the API server is back; their next renewals are then spread over
// the renew interval (as at the first start) instead of staying bunched within the 4 % jitter.
func TestRenewalsSpreadAfterAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		s, err := NewQueue(QueueConfig{LeaseWorkers: 4})
		if err != nil {
			t.Fatal(err)
		}
		var down atomic.Bool
		client := fake.NewClientset()
		client.PrependReactor("*", "leases", func(core.Action) (bool, runtime.Object, error) {
			if down.Load() {
				return true, nil, apierrors.NewServiceUnavailable("down")
			}
			return false, nil, nil
		})
		var ctrls []*Controller
		for i := range 20 {
			e := newEnvFull(t, func(c *Config) { c.NodeName = fmt.Sprintf("node-%02d", i) }, nil, client, "")
			if err := s.Start(e.ctrl); err != nil {
				t.Fatal(err)
			}
			ctrls = append(ctrls, e.ctrl)
		}
		defer runQueue(ctx, s)()
		time.Sleep(30 * time.Second)
		down.Store(true)
		time.Sleep(60 * time.Second)
		down.Store(false)
		back := time.Now()
		renewals := map[string][]time.Time{}
		for time.Since(back) < 30*time.Second {
			time.Sleep(50 * time.Millisecond)
			synctest.Wait()
			for _, c := range ctrls {
				if r := c.LastLeaseRenew(); r.After(back) {
					if l := renewals[c.Name()]; len(l) == 0 || !l[len(l)-1].Equal(r) {
						renewals[c.Name()] = append(l, r)
					}
				}
			}
		}
		var first, second []time.Time
		for name, l := range renewals {
			if len(l) < 2 {
				t.Fatalf("%s: %d renewals in the 30 s after the outage, want at least 2", name, len(l))
			}
			first, second = append(first, l[0]), append(second, l[1])
		}
		spread := func(ts []time.Time) time.Duration {
			lo, hi := ts[0], ts[0]
			for _, t := range ts {
				lo, hi = minTime(lo, t), maxTime(hi, t)
			}
			return hi.Sub(lo)
		}
		if d := spread(first); d > 8*time.Second {
			t.Errorf("first renewals after the outage spread over %v, want them soon after it", d)
		}
		if d := spread(second); d < 4*time.Second {
			t.Errorf("second renewals after the outage spread over %v, want them spread over the 10 s interval", d)
		}
	})
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func TestCoalesce(t *testing.T) {
	base := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		now         time.Time
		after, grid time.Duration
		want        time.Duration
	}{
		{"no grid", base.Add(300 * time.Millisecond), 10 * time.Second, 0, 10 * time.Second},
		{"moved down onto the grid", base.Add(300 * time.Millisecond), 10 * time.Second, time.Second, 9700 * time.Millisecond},
		{"jittered status sync", base.Add(999 * time.Millisecond), 10400 * time.Millisecond, time.Second, 10001 * time.Millisecond},
		{"on the grid already", base, 10 * time.Second, time.Second, 10 * time.Second},
		{"a backoff is kept", base.Add(300 * time.Millisecond), 1500 * time.Millisecond, time.Second, 1500 * time.Millisecond},
		{"two intervals is moved", base.Add(300 * time.Millisecond), 2 * time.Second, time.Second, 1700 * time.Millisecond},
		{"now", base.Add(300 * time.Millisecond), 0, time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := coalesce(tc.now, tc.after, tc.grid)
			if got != tc.want {
				t.Errorf("coalesce(%v, %v, %v) = %v, want %v", tc.now, tc.after, tc.grid, got, tc.want)
			}
			if got > tc.after || (tc.grid > 0 && got <= tc.after-tc.grid) {
				t.Errorf("coalesce moved the run by %v, want less than one grid interval and never later", tc.after-got)
			}
		})
	}
}

// TestCoalescedRenewals: with a 1 s grid, the Lease renewals of 20 Nodes started at scattered times
// fall on whole seconds after the first, never more than the renew interval (10 s, jittered up to
// 10.4 s) apart: moved earlier by less than a second, never later.
func TestCoalescedRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		s, err := NewQueue(QueueConfig{LeaseWorkers: 4, Coalesce: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		client := fake.NewClientset()
		defer runQueue(ctx, s)()
		var ctrls []*Controller
		for i := range 20 {
			e := newEnvFull(t, func(c *Config) { c.NodeName = fmt.Sprintf("node-%02d", i) }, nil, client, "")
			if err := s.Start(e.ctrl); err != nil {
				t.Fatal(err)
			}
			ctrls = append(ctrls, e.ctrl)
			time.Sleep(137 * time.Millisecond)
		}
		renewals := map[string][]time.Time{}
		start := time.Now()
		for time.Since(start) < 2*time.Minute {
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
			for _, c := range ctrls {
				if r := c.LastLeaseRenew(); !r.IsZero() {
					if l := renewals[c.Name()]; len(l) == 0 || !l[len(l)-1].Equal(r) {
						renewals[c.Name()] = append(l, r)
					}
				}
			}
		}
		for name, l := range renewals {
			if len(l) < 12 {
				t.Errorf("%s: %d renewals in 2 minutes, want at least 12", name, len(l))
			}
			for i := 1; i < len(l); i++ {
				if !l[i].Equal(l[i].Truncate(time.Second)) {
					t.Errorf("%s: renewal %d at %v, not on the 1 s grid", name, i, l[i].Format("15:04:05.000"))
				}
				if gap := l[i].Sub(l[i-1]); gap > 10400*time.Millisecond || gap <= 9*time.Second {
					t.Errorf("%s: %v between renewals %d and %d, want (9 s, 10.4 s]", name, gap, i-1, i)
				}
			}
		}
		if len(renewals) != len(ctrls) {
			t.Errorf("renewals of %d Nodes, want %d", len(renewals), len(ctrls))
		}
	})
}

// popRecorder wraps a step work queue and records the instant of every item it hands out: with the
// fake clock of a synctest bubble, the instants at which the delaying queue woke to release due items
// (time stands still while anything runs, so items released together share one instant).
type popRecorder struct {
	workqueue.TypedRateLimitingInterface[stepKey]
	mu   sync.Mutex
	pops map[time.Time]popCount
}

// popCount is what a queue handed out at one instant: Node steps and liveness probes.
type popCount struct{ steps, probes int }

func (q *popRecorder) Get() (stepKey, bool) {
	key, shutdown := q.TypedRateLimitingInterface.Get()
	if !shutdown {
		q.mu.Lock()
		n := q.pops[time.Now()]
		if key.c == nil {
			n.probes++
		} else {
			n.steps++
		}
		q.pops[time.Now()] = n
		q.mu.Unlock()
	}
	return key, shutdown
}

// TestCoalescedWakeups measures what docs/operating.md says of the simulation's step grid: 500 Nodes
// started 10 ms apart on one queue with the simulator's workers for 500 Nodes, the queue itself started
// off the grid, and, after 30 s of start-up (registration, the fast updates), a simulated minute in
// which the distinct instants at which the Lease queue, the step queue, and either, hand out an item
// are counted. With the 250 ms grid (simulation.StepGrid) every step runs on it: at most 240 instants
// a minute, 4 a second; the liveness probes (every 5 s on each queue, not on the grid) run at instants
// of their own. Without a grid (the single agent's queue) the same steps run at thousands of instants.
func TestCoalescedWakeups(t *testing.T) {
	const nodes = 500
	for _, tc := range []struct {
		grid time.Duration
		// wantMax bounds the instants with steps in the minute, wantMin from below (0: none).
		wantMax, wantMin int
	}{
		{grid: 250 * time.Millisecond, wantMax: 240},
		{grid: 0, wantMin: 2000},
	} {
		t.Run(fmt.Sprintf("grid %v", tc.grid), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				measureWakeups(t, nodes, tc.grid, tc.wantMax, tc.wantMin)
			})
		})
	}
}

// measureWakeups is one case of TestCoalescedWakeups, in a synctest bubble.
func measureWakeups(t *testing.T, nodes int, grid time.Duration, wantMax, wantMin int) {
	_, ctx := ktesting.NewTestContext(t)
	s, err := NewQueue(QueueConfig{Workers: 16, LeaseWorkers: 25, Coalesce: grid}) // simulation.DefaultWorkersFor(500)
	if err != nil {
		t.Fatal(err)
	}
	var recorders [2]*popRecorder // [0] the Lease queue, [1] the step queue
	for i, q := range s.queues {
		recorders[i] = &popRecorder{TypedRateLimitingInterface: q, pops: map[time.Time]popCount{}}
		s.queues[i] = recorders[i]
	}
	time.Sleep(1137 * time.Millisecond) // a process starts at any time, not on the grid
	start := time.Now()
	defer runQueue(ctx, s)()
	// One Node informer for all, as in the simulator: the fast start-up update ends once it shows the
	// Node Ready.
	client := fake.NewClientset()
	serveLeasesFromMap(client)
	factory := informers.NewSharedInformerFactory(client, 0)
	tracker := nodecache.New(clock.RealClock{})
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(tracker.EventHandler()); err != nil {
		t.Fatal(err)
	}
	informerCtx, stopInformer := context.WithCancel(ctx)
	factory.Start(informerCtx.Done())
	defer func() { stopInformer(); factory.Shutdown() }()
	for i := range nodes {
		e := newEnvFull(t, func(c *Config) { c.NodeName = fmt.Sprintf("node-%03d", i) }, nil, client, "")
		deps := e.ctrl.deps
		deps.NodeLister, deps.Cache = factory.Core().V1().Nodes().Lister(), tracker
		c, err := New(e.ctrl.cfg, deps)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(c); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	from := start.Add(30 * time.Second)
	to := from.Add(time.Minute)
	time.Sleep(time.Until(to))
	synctest.Wait()

	// Per queue and for both: the instants with steps (and how many of them off the grid), the
	// instants with only probes, and the steps.
	type tally struct{ stepInstants, offGrid, probeOnly, steps int }
	count := func(pops map[time.Time]popCount) tally {
		var c tally
		for at, n := range pops {
			switch {
			case at.Before(from) || !at.Before(to):
			case n.steps == 0:
				c.probeOnly++
			default:
				c.stepInstants++
				c.steps += n.steps
				if grid > 0 && !at.Equal(at.Truncate(grid)) {
					c.offGrid++
				}
			}
		}
		return c
	}
	both := map[time.Time]popCount{}
	var per [2]tally
	for i, r := range recorders {
		r.mu.Lock()
		per[i] = count(r.pops)
		for at, n := range r.pops {
			m := both[at]
			both[at] = popCount{m.steps + n.steps, m.probes + n.probes}
		}
		r.mu.Unlock()
	}
	all := count(both)
	t.Logf("grid %v, %d Nodes, one minute: %d steps at %d instants (%.2f a second; Lease queue %d, step queue %d), %d of them off the grid; %d instants with only liveness probes",
		grid, nodes, all.steps, all.stepInstants, float64(all.stepInstants)/60, per[0].stepInstants, per[1].stepInstants, all.offGrid, all.probeOnly)
	if want := nodes * (6 + 6 + 12); all.steps < want*9/10 || all.steps > want*11/10 {
		t.Errorf("%d steps in the minute, want about %d (each Node's Lease and status every 10 s, runtime poll every 5 s)", all.steps, want)
	}
	if all.offGrid > 0 {
		t.Errorf("%d instants with steps off the %v grid, want none", all.offGrid, grid)
	}
	if wantMax > 0 && all.stepInstants > wantMax {
		t.Errorf("steps at %d instants in the minute, want at most %d", all.stepInstants, wantMax)
	}
	if all.stepInstants < wantMin {
		t.Errorf("steps at %d instants in the minute, want at least %d", all.stepInstants, wantMin)
	}
	if all.probeOnly > 2*12 {
		t.Errorf("%d instants with only liveness probes in the minute, want at most 24 (every 5 s on each of two queues)", all.probeOnly)
	}
}

// serveLeasesFromMap makes client keep its Leases in a map of its own (get, create, update), instead
// of the fake's field-managed tracker, which builds a REST mapper for every write: at 500 Nodes, most
// of TestCoalescedWakeups' time went there.
func serveLeasesFromMap(client *fake.Clientset) {
	var mu sync.Mutex
	leases := map[string]*coordinationv1.Lease{}
	client.PrependReactor("*", "leases", func(a core.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a.GetVerb() {
		case "get":
			name := a.(core.GetAction).GetName()
			if l, ok := leases[name]; ok {
				return true, l.DeepCopy(), nil
			}
			return true, nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), name)
		case "create", "update":
			l := a.(interface{ GetObject() runtime.Object }).GetObject().(*coordinationv1.Lease).DeepCopy()
			if _, ok := leases[l.Name]; ok == (a.GetVerb() == "create") {
				if ok {
					return true, nil, apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), l.Name)
				}
				return true, nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), l.Name)
			}
			leases[l.Name] = l
			return true, l.DeepCopy(), nil
		}
		return false, nil, nil
	})
}
