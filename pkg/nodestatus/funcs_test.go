package nodestatus

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

// TestFuncsApply: Apply runs the setters in order on the same Node; a setter's error is recorded and
// logged with the setter's name and the setters after it still run (the kubelet's setNodeStatus).
func TestFuncsApply(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	var order []string
	setter := func(name string, err error) Func {
		return Func{Name: name, Setter: func(_ context.Context, n *v1.Node) error {
			order = append(order, name)
			n.Status.NodeInfo.KernelVersion += name + ";"
			return err
		}}
	}
	f := NewFuncs(testingclock.NewFakeClock(time.Unix(1000, 0)),
		setter("NodeAddress", nil),
		setter("MachineInfo", errors.New("cadvisor machine info: no /proc")),
		setter("VersionInfo", nil),
		setter("Images", errors.New("container runtime is down")),
		setter("ReadyCondition", nil),
	)
	if got := strings.Join(f.Names(), ","); got != "NodeAddress,MachineInfo,VersionInfo,Images,ReadyCondition" {
		t.Errorf("Names() = %s", got)
	}
	node := &v1.Node{}
	f.Apply(ctx, node)
	if got := strings.Join(order, ","); got != "NodeAddress,MachineInfo,VersionInfo,Images,ReadyCondition" {
		t.Errorf("run order %s", got)
	}
	if got := node.Status.NodeInfo.KernelVersion; got != "NodeAddress;MachineInfo;VersionInfo;Images;ReadyCondition;" {
		t.Errorf("the setters did not all modify the same Node in order: %q", got)
	}
	wantErrors := map[string]string{"MachineInfo": "cadvisor machine info: no /proc", "Images": "container runtime is down"}
	for _, s := range f.Stats() {
		if s.LastError != wantErrors[s.Name] {
			t.Errorf("Stats for %s: LastError %q, want %q", s.Name, s.LastError, wantErrors[s.Name])
		}
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for name, msg := range wantErrors {
		if !strings.Contains(logs, `setter="`+name+`"`) || !strings.Contains(logs, msg) {
			t.Errorf("log has no error for setter %s (%q):\n%s", name, msg, logs)
		}
	}

	// The next run records its own outcome: errors that are gone are cleared.
	order = nil
	f2 := NewFuncs(nil, setter("MachineInfo", nil))
	f2.Apply(ctx, &v1.Node{})
	if s := f2.Stats(); len(s) != 1 || s[0].LastError != "" {
		t.Errorf("Stats after a successful run %+v", s)
	}
}

// TestFuncsStats: before any run each setter has its name only; after a run, when it started and
// how long it took, timed on the clock given to NewFuncs; Stats returns a copy.
func TestFuncsStats(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	fail := false
	f := NewFuncs(clk,
		Func{Name: "Fast", Setter: func(context.Context, *v1.Node) error { return nil }},
		Func{Name: "Slow", Setter: func(context.Context, *v1.Node) error { clk.Step(250 * time.Millisecond); return nil }},
		Func{Name: "Flaky", Setter: func(context.Context, *v1.Node) error {
			clk.Step(time.Second)
			if fail {
				return errors.New("boom")
			}
			return nil
		}},
	)
	before := f.Stats()
	if len(before) != 3 {
		t.Fatalf("Stats before any run: %+v", before)
	}
	for i, name := range []string{"Fast", "Slow", "Flaky"} {
		if before[i] != (SetterStats{Name: name}) {
			t.Errorf("Stats[%d] before any run = %+v, want the name only", i, before[i])
		}
	}

	f.Apply(ctx, &v1.Node{})
	want := []SetterStats{
		{Name: "Fast", LastRun: start},
		{Name: "Slow", LastRun: start, Duration: 250 * time.Millisecond},
		{Name: "Flaky", LastRun: start.Add(250 * time.Millisecond), Duration: time.Second},
	}
	checkStats(t, "first run", f.Stats(), want)

	clk.Step(10 * time.Second)
	fail = true
	f.Apply(ctx, &v1.Node{})
	second := start.Add(11250 * time.Millisecond)
	want = []SetterStats{
		{Name: "Fast", LastRun: second},
		{Name: "Slow", LastRun: second, Duration: 250 * time.Millisecond},
		{Name: "Flaky", LastRun: second.Add(250 * time.Millisecond), Duration: time.Second, LastError: "boom"},
	}
	got := f.Stats()
	checkStats(t, "second run", got, want)
	got[0].Name = "changed"
	if f.Stats()[0].Name != "Fast" {
		t.Error("changing what Stats returned changed the Funcs")
	}
}

func checkStats(t *testing.T, when string, got, want []SetterStats) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: Stats %+v, want %+v", when, got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || !g.LastRun.Equal(w.LastRun) || g.Duration != w.Duration || g.LastError != w.LastError {
			t.Errorf("%s: Stats[%d] = %+v, want %+v", when, i, g, w)
		}
	}
}

// TestFuncsApplySerialised: Applies of one Node's Funcs at once (registration's initial Node and the
// fast update, say) run one after the other, never interleaved, as under the kubelet's
// syncNodeStatusMux: a setter with state between runs (SchedulableEvent) is never entered twice (the
// race detector, which make test runs, also reports its unguarded state otherwise).
func TestFuncsApplySerialised(t *testing.T) {
	var inside, most atomic.Int32
	f := NewFuncs(nil, Func{Name: "Slow", Setter: func(context.Context, *v1.Node) error {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		for range 1000 {
			runtime.Gosched() // let another Apply in, if it can get in
		}
		inside.Add(-1)
		return nil
	}}, Func{Name: "SchedulableEvent", Setter: SchedulableEvent(func(string, string) {})})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { f.Apply(t.Context(), &v1.Node{}) })
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d Applies ran at once, want 1", most.Load())
	}
}
