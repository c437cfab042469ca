package eviction

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/cadvisor/lib/fs"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// TestParseThresholds mirrors the kubelet's TestParseThresholdConfig for hard thresholds
// (pkg/kubelet/eviction/helpers_test.go) and parseThresholdStatement.
func TestParseThresholds(t *testing.T) {
	cases := []struct {
		desc    string
		in      map[string]string
		want    []Threshold
		wantErr string
	}{
		{desc: "empty", in: nil, want: nil},
		{
			desc: "kubelet defaults, sorted by signal",
			in: map[string]string{
				"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
				"imagefs.available": "15%", "imagefs.inodesFree": "5%",
			},
			want: []Threshold{
				{Signal: SignalImageFsAvailable, Percentage: float64(float32(15) / 100)},
				{Signal: SignalImageFsInodesFree, Percentage: float64(float32(5) / 100)},
				{Signal: SignalMemoryAvailable, Quantity: quantity("100Mi")},
				{Signal: SignalNodeFsAvailable, Percentage: float64(float32(10) / 100)},
				{Signal: SignalNodeFsInodesFree, Percentage: float64(float32(5) / 100)},
			},
		},
		{
			desc: "quantities and fractional percentages",
			in:   map[string]string{"pid.available": "1000", "nodefs.available": "20.5%", "memory.available": "1Gi"},
			want: []Threshold{
				{Signal: SignalMemoryAvailable, Quantity: quantity("1Gi")},
				{Signal: SignalNodeFsAvailable, Percentage: float64(float32(20.5) / 100)},
				{Signal: SignalPIDAvailable, Quantity: quantity("1000")},
			},
		},
		{desc: "disable via 0%", in: map[string]string{"memory.available": "0%"}, want: nil},
		{desc: "disable via 100%", in: map[string]string{"memory.available": "100%"}, want: nil},
		{
			desc: "disabled signal dropped, others kept",
			in:   map[string]string{"memory.available": "0%", "nodefs.available": "10%"},
			want: []Threshold{{Signal: SignalNodeFsAvailable, Percentage: float64(float32(10) / 100)}},
		},
		{desc: "invalid signal", in: map[string]string{"mem.available": "150Mi"}, wantErr: `unknown eviction signal "mem.available"`},
		{desc: "valid and invalid signal", in: map[string]string{"memory.available": "150Mi", "invalid.foo": "150Mi"}, wantErr: `unknown eviction signal "invalid.foo"`},
		{desc: "hard signal negative", in: map[string]string{"memory.available": "-150Mi"}, wantErr: "memory.available<-150Mi"},
		{desc: "hard signal zero quantity must be positive", in: map[string]string{"memory.available": "0"}, wantErr: "memory.available<0: must be positive"},
		{desc: "hard signal negative percentage", in: map[string]string{"memory.available": "-15%"}, wantErr: "memory.available<-15%"},
		{desc: "hard signal percentage greater than 100%", in: map[string]string{"memory.available": "150%"}, wantErr: "memory.available<150%"},
		{desc: "not a quantity", in: map[string]string{"memory.available": "lots"}, wantErr: "memory.available<lots"},
		{desc: "not a percentage", in: map[string]string{"memory.available": "x%"}, wantErr: "memory.available<x%"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := ParseThresholds(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d thresholds %+v, want %d %+v", len(got), got, len(tc.want), tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Signal != w.Signal || g.Percentage != w.Percentage || (g.Quantity == nil) != (w.Quantity == nil) ||
					(g.Quantity != nil && g.Quantity.Cmp(*w.Quantity) != 0) {
					t.Errorf("threshold %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// TestThresholdValue checks Value against the kubelet's GetThresholdQuantity:
// int64(float64(capacity) * float64(float32 percentage)), truncated.
func TestThresholdValue(t *testing.T) {
	parse := func(v string) Threshold {
		th, err := ParseThresholds(map[string]string{"nodefs.available": v})
		if err != nil || len(th) != 1 {
			t.Fatalf("ParseThresholds(%q) = %v, %v", v, th, err)
		}
		return th[0]
	}
	kubelet := func(percent float64, capacity int64) int64 {
		p := float32(percent) / 100 // parsePercentage
		return int64(float64(capacity) * float64(p))
	}
	cases := []struct {
		desc     string
		th       Threshold
		capacity int64
		want     int64
	}{
		{desc: "quantity ignores capacity", th: Threshold{Signal: SignalMemoryAvailable, Quantity: quantity("100Mi")}, capacity: 1 << 40, want: 100 << 20},
		{desc: "10% of 1000", th: parse("10%"), capacity: 1000, want: kubelet(10, 1000)},
		{desc: "10% of 100 GB", th: parse("10%"), capacity: 100e9, want: kubelet(10, 100e9)},
		{desc: "15% of 1 TiB", th: parse("15%"), capacity: 1 << 40, want: kubelet(15, 1<<40)},
		{desc: "5% of inodes", th: parse("5%"), capacity: 6553600, want: kubelet(5, 6553600)},
		{desc: "20.5% truncates", th: parse("20.5%"), capacity: 333, want: kubelet(20.5, 333)},
		{desc: "0 capacity", th: parse("10%"), capacity: 0, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.th.Value(tc.capacity); got != tc.want {
				t.Errorf("Value(%d) = %d, want %d", tc.capacity, got, tc.want)
			}
		})
	}
}

func TestReserved(t *testing.T) {
	th, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"})
	if err != nil {
		t.Fatal(err)
	}
	if got := ReservedMemory(th, 8<<30); got != 100<<20 {
		t.Errorf("ReservedMemory = %d, want %d", got, 100<<20)
	}
	capacity, pct := int64(100e9), float32(10)
	if got, want := ReservedEphemeralStorage(th, capacity), int64(float64(capacity)*float64(pct/100)); got != want {
		t.Errorf("ReservedEphemeralStorage = %d, want %d", got, want)
	}
	if got := ReservedMemory(nil, 8<<30); got != 0 {
		t.Errorf("ReservedMemory without thresholds = %d, want 0", got)
	}
}

// fakeObserver returns the observations and error it holds.
type fakeObserver struct {
	mu    sync.Mutex
	obs   Observations
	err   error
	calls int
}

func (f *fakeObserver) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeObserver) set(obs Observations, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.obs, f.err = obs, err
}

func (f *fakeObserver) Observe(context.Context) (Observations, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.obs, f.err
}

type pressures struct{ memory, disk, pid bool }

func currentPressures(m *Manager) pressures {
	return pressures{m.IsUnderMemoryPressure(), m.IsUnderDiskPressure(), m.IsUnderPIDPressure()}
}

// TestManagerPressure mirrors the kubelet eviction manager's node conditions: a breached threshold
// sets the pressure of its condition, which stays for the transition period after the last breach
// (nodeConditionsObservedSince: duration < period) and then clears.
func TestManagerPressure(t *testing.T) {
	thresholds, err := ParseThresholds(map[string]string{
		"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
		"imagefs.available": "15%", "imagefs.inodesFree": "5%", "pid.available": "1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	healthy := Observations{
		SignalMemoryAvailable:   {Available: 1 << 30, Capacity: 8 << 30},
		SignalNodeFsAvailable:   {Available: 50e9, Capacity: 100e9},
		SignalNodeFsInodesFree:  {Available: 5e6, Capacity: 6e6},
		SignalImageFsAvailable:  {Available: 50e9, Capacity: 100e9},
		SignalImageFsInodesFree: {Available: 5e6, Capacity: 6e6},
		SignalPIDAvailable:      {Available: 30000, Capacity: 32768},
	}
	with := func(s Signal, available int64) Observations {
		o := Observations{}
		for k, v := range healthy {
			o[k] = v
		}
		v := o[s]
		v.Available = available
		o[s] = v
		return o
	}
	cases := []struct {
		desc string
		obs  Observations
		want pressures
	}{
		{desc: "healthy", obs: healthy},
		{desc: "memory below 100Mi", obs: with(SignalMemoryAvailable, 100<<20-1), want: pressures{memory: true}},
		{desc: "memory exactly at the threshold is not a breach", obs: with(SignalMemoryAvailable, 100<<20)},
		{desc: "nodefs below 10%", obs: with(SignalNodeFsAvailable, 9e9), want: pressures{disk: true}},
		{desc: "nodefs inodes below 5%", obs: with(SignalNodeFsInodesFree, 1000), want: pressures{disk: true}},
		{desc: "imagefs below 15%", obs: with(SignalImageFsAvailable, 14e9), want: pressures{disk: true}},
		{desc: "imagefs inodes below 5%", obs: with(SignalImageFsInodesFree, 10), want: pressures{disk: true}},
		{desc: "pids below 1000", obs: with(SignalPIDAvailable, 999), want: pressures{pid: true}},
		{desc: "a signal not observed never breaches", obs: Observations{}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			clk := testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
			obs := &fakeObserver{obs: tc.obs}
			m, err := New(Config{Thresholds: thresholds, Observe: obs.Observe, Clock: clk, PressureTransitionPeriod: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if got := currentPressures(m); got != (pressures{}) {
				t.Fatalf("before any observation: %+v, want none", got)
			}
			if err := m.Synchronize(ctx); err != nil {
				t.Fatal(err)
			}
			if got := currentPressures(m); got != tc.want {
				t.Errorf("pressures = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestManagerTransitionPeriod: once the breach ends the pressure stays for the transition period,
// then clears; a new breach within the period extends it.
func TestManagerTransitionPeriod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	thresholds, err := ParseThresholds(map[string]string{"memory.available": "100Mi"})
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	breach := Observations{SignalMemoryAvailable: {Available: 50 << 20, Capacity: 8 << 30}}
	fine := Observations{SignalMemoryAvailable: {Available: 4 << 30, Capacity: 8 << 30}}
	obs := &fakeObserver{obs: breach}
	m, err := New(Config{Thresholds: thresholds, Observe: obs.Observe, Clock: clk, PressureTransitionPeriod: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance time.Duration
		obs     Observations
		want    bool
	}{
		{0, breach, true},
		{10 * time.Second, fine, true},
		{4 * time.Minute, fine, true},
		{50*time.Second - time.Nanosecond, fine, true}, // 5m − 1ns after the last breach
		{time.Nanosecond, fine, false},                 // exactly 5m: cleared, as duration < period fails
		{time.Minute, breach, true},
		{2 * time.Minute, breach, true}, // breach again: the period restarts from here
		{4 * time.Minute, fine, true},
		{time.Minute, fine, false},
	}
	for i, s := range steps {
		clk.Step(s.advance)
		obs.set(s.obs, nil)
		if err := m.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		if got := m.IsUnderMemoryPressure(); got != s.want {
			t.Errorf("step %d (+%v): memory pressure = %v, want %v", i, s.advance, got, s.want)
		}
	}
}

// TestManagerObserveError: an observation error is returned, and signals that were observed still count.
func TestManagerObserveError(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	thresholds, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "pid.available": "10"})
	if err != nil {
		t.Fatal(err)
	}
	obsErr := errors.New("pid.available: open /proc/sys/kernel/pid_max: no such file")
	obs := &fakeObserver{obs: Observations{SignalMemoryAvailable: {Available: 1, Capacity: 8 << 30}}, err: obsErr}
	m, err := New(Config{Thresholds: thresholds, Observe: obs.Observe, Clock: testingclock.NewFakeClock(time.Now()), PressureTransitionPeriod: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Synchronize(ctx); !errors.Is(err, obsErr) {
		t.Errorf("Synchronize error = %v, want %v", err, obsErr)
	}
	if got := currentPressures(m); got != (pressures{memory: true}) {
		t.Errorf("pressures = %+v, want memory only", got)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without Observe: no error")
	}
	if _, err := New(Config{Observe: (&fakeObserver{}).Observe, PressureTransitionPeriod: -time.Second}); err == nil {
		t.Error("New with a negative transition period: no error")
	}
	m, err := New(Config{Observe: (&fakeObserver{}).Observe})
	if err != nil {
		t.Fatal(err)
	}
	if m.cfg.Period != 10*time.Second || m.cfg.Clock == nil {
		t.Errorf("defaults: period %v clock %v", m.cfg.Period, m.cfg.Clock)
	}
}

// TestManagerRun: Run observes at once, then every Period, and stops with the context.
func TestManagerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		thresholds, _ := ParseThresholds(map[string]string{"memory.available": "100Mi"})
		obs := &fakeObserver{obs: Observations{SignalMemoryAvailable: {Available: 1, Capacity: 2}}, err: errors.New("partial")}
		m, err := New(Config{Thresholds: thresholds, Observe: obs.Observe, Period: 10 * time.Second, PressureTransitionPeriod: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		synctest.Wait()
		if !m.IsUnderMemoryPressure() || obs.count() != 1 {
			t.Fatalf("after start: pressure %v, %d observations; want pressure after one", m.IsUnderMemoryPressure(), obs.count())
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := obs.count(); n != 2 {
			t.Errorf("after one period: %d observations, want 2", n)
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run did not return after cancel")
		}
	})
}

// writeFiles writes path → content under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const meminfo = `MemTotal:        8000000 kB
MemFree:         1000000 kB
MemAvailable:    5000000 kB
Buffers:          100000 kB
Cached:          3000000 kB
Inactive(file):  1500000 kB
`

// TestHostObserverMemory checks memory.available against the kubelet's (cadvisor's) root working set:
// cgroup v1 usage_in_bytes − total_inactive_file; cgroup v2 (MemTotal − MemFree) − inactive_file of
// the root memory.stat (runc's statsFromMeminfo); MemTotal − MemAvailable when neither is readable.
func TestHostObserverMemory(t *testing.T) {
	const total = 8000000 * 1024
	cases := []struct {
		desc    string
		proc    map[string]string
		cgroup  map[string]string
		want    Observation
		wantErr string
	}{
		{
			desc: "cgroup v1: usage − total_inactive_file",
			proc: map[string]string{"meminfo": meminfo},
			cgroup: map[string]string{
				"memory/memory.usage_in_bytes": "4000000000\n",
				"memory/memory.stat":           "cache 100\ninactive_file 7\ntotal_inactive_file 1000000000\ntotal_active_file 5\n",
			},
			want: Observation{Available: total - (4000000000 - 1000000000), Capacity: total},
		},
		{
			desc: "cgroup v1: inactive above usage gives a zero working set",
			proc: map[string]string{"meminfo": meminfo},
			cgroup: map[string]string{
				"memory/memory.usage_in_bytes": "100\n",
				"memory/memory.stat":           "total_inactive_file 200\n",
			},
			want: Observation{Available: total, Capacity: total},
		},
		{
			desc: "cgroup v1 without total_inactive_file: the working set is the usage",
			proc: map[string]string{"meminfo": meminfo},
			cgroup: map[string]string{
				"memory/memory.usage_in_bytes": "4000000000\n",
				"memory/memory.stat":           "cache 100\n",
			},
			want: Observation{Available: total - 4000000000, Capacity: total},
		},
		{
			desc:   "cgroup v2: (MemTotal − MemFree) − inactive_file of the root memory.stat",
			proc:   map[string]string{"meminfo": meminfo},
			cgroup: map[string]string{"memory.stat": "anon 100\nfile 200\ninactive_file 1000000000\nactive_file 5\n"},
			want:   Observation{Available: total - ((8000000-1000000)*1024 - 1000000000), Capacity: total},
		},
		{
			desc: "no cgroup memory stats: fallback MemTotal − MemAvailable",
			proc: map[string]string{"meminfo": meminfo},
			want: Observation{Available: 5000000 * 1024, Capacity: total},
		},
		{
			desc:    "no MemTotal",
			proc:    map[string]string{"meminfo": "MemFree: 1 kB\n"},
			wantErr: "no MemTotal",
		},
		{
			desc:    "fallback without MemAvailable",
			proc:    map[string]string{"meminfo": "MemTotal: 100 kB\n"},
			wantErr: "no MemAvailable",
		},
		{desc: "no meminfo", wantErr: "meminfo"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			writeFiles(t, proc, tc.proc)
			writeFiles(t, cg, tc.cgroup)
			h := &HostObserver{ProcRoot: proc, CgroupRoot: cg}
			got, err := h.memory()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("memory = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestHostObserverPIDs checks pid.available against the kubelet's pidlimit.Stats: capacity is the
// smaller of pid_max and threads-max, running tasks come from /proc/loadavg.
func TestHostObserverPIDs(t *testing.T) {
	cases := []struct {
		desc    string
		proc    map[string]string
		want    Observation
		wantErr string
	}{
		{
			desc: "pid_max smaller",
			proc: map[string]string{"sys/kernel/pid_max": "32768\n", "sys/kernel/threads-max": "192730\n", "loadavg": "1.36 3.49 4.53 2/3518 3715089\n"},
			want: Observation{Available: 32768 - 3518, Capacity: 32768},
		},
		{
			desc: "threads-max smaller",
			proc: map[string]string{"sys/kernel/pid_max": "4194304\n", "sys/kernel/threads-max": "100000\n", "loadavg": "0.00 0.01 0.05 1/70000 42\n"},
			want: Observation{Available: 100000 - 70000, Capacity: 100000},
		},
		{
			desc: "only pid_max readable",
			proc: map[string]string{"sys/kernel/pid_max": "32768\n", "loadavg": "0 0 0 1/100 5\n"},
			want: Observation{Available: 32768 - 100, Capacity: 32768},
		},
		{
			desc: "only threads-max readable",
			proc: map[string]string{"sys/kernel/threads-max": "5000\n", "loadavg": "0 0 0 1/100 5\n"},
			want: Observation{Available: 5000 - 100, Capacity: 5000},
		},
		{
			desc:    "neither limit readable",
			proc:    map[string]string{"loadavg": "0 0 0 1/100 5\n"},
			wantErr: "pid_max",
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			proc := t.TempDir()
			writeFiles(t, proc, tc.proc)
			h := &HostObserver{ProcRoot: proc, CgroupRoot: t.TempDir()}
			got, err := h.pids()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("pids = %+v, want %+v", got, tc.want)
			}
		})
	}
	// Without /proc/loadavg the count comes from sysinfo(2): this process's host has some tasks.
	proc := t.TempDir()
	writeFiles(t, proc, map[string]string{"sys/kernel/pid_max": "4194304\n"})
	got, err := (&HostObserver{ProcRoot: proc}).pids()
	if err != nil {
		t.Fatal(err)
	}
	if got.Capacity != 4194304 || got.Available <= 0 || got.Available >= got.Capacity {
		t.Errorf("sysinfo fallback: %+v, want 0 < available < 4194304", got)
	}
}

// TestHostObserverObserve: Observe returns what it measured and names each failing signal.
func TestHostObserverObserve(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	proc, cg := t.TempDir(), t.TempDir()
	writeFiles(t, proc, map[string]string{"meminfo": meminfo})
	obs, err := (&HostObserver{ProcRoot: proc, CgroupRoot: cg}).Observe(ctx)
	if err == nil || !strings.Contains(err.Error(), string(SignalPIDAvailable)) {
		t.Errorf("error = %v, want one naming %s", err, SignalPIDAvailable)
	}
	if _, ok := obs[SignalMemoryAvailable]; !ok {
		t.Errorf("observations %v lack %s", obs, SignalMemoryAvailable)
	}
	if _, ok := obs[SignalPIDAvailable]; ok {
		t.Errorf("observations %v have %s though it failed", obs, SignalPIDAvailable)
	}
	var keys []Signal
	for k := range obs {
		keys = append(keys, k)
	}
	if !reflect.DeepEqual(keys, []Signal{SignalMemoryAvailable}) {
		t.Errorf("signals observed = %v, want memory only (no FsInfo)", keys)
	}
}

// fakeFsInfo is cadvisor's FsInfo over a table of directories: dir → device, device → mount point,
// mount point → stats. Only what DirFs calls is implemented.
type fakeFsInfo struct {
	fs.FsInfo
	devices map[string]string // dir → device
	stats   map[string]fs.Fs  // device → its filesystem (mounted at "/mnt/<device>")
}

func (f fakeFsInfo) GetDirFsDevice(dir string) (*fs.DeviceInfo, error) {
	dev, ok := f.devices[dir]
	if !ok {
		return nil, errors.New("no such dir")
	}
	return &fs.DeviceInfo{Device: dev}, nil
}

func (f fakeFsInfo) GetMountpointForDevice(dev string) (string, error) { return "/mnt/" + dev, nil }

func (f fakeFsInfo) GetFsInfoForPath(mounts map[string]struct{}) ([]fs.Fs, error) {
	var out []fs.Fs
	for m := range mounts {
		if st, ok := f.stats[strings.TrimPrefix(m, "/mnt/")]; ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// TestHostObserverFilesystems: nodefs.* come from the root dir's filesystem and imagefs.* from the image
// store's, also when both are one filesystem (as the kubelet's makeSignalObservations reads the summary's
// runtime ImageFs whatever its device); an image store this process cannot see is not observed.
func TestHostObserverFilesystems(t *testing.T) {
	inodes := func(n uint64) *uint64 { return &n }
	root := fs.Fs{DeviceInfo: fs.DeviceInfo{Device: "vda"}, Capacity: 100e9, Available: 12e9, Inodes: inodes(1e6), InodesFree: inodes(9e5)}
	images := fs.Fs{DeviceInfo: fs.DeviceInfo{Device: "vdb"}, Capacity: 50e9, Available: 40e9, Inodes: inodes(5e5), InodesFree: inodes(4e5)}
	fsInfo := fakeFsInfo{
		devices: map[string]string{"/root": "vda", "/root/images": "vda", "/images": "vdb"},
		stats:   map[string]fs.Fs{"vda": root, "vdb": images},
	}
	rootObs := Observations{
		SignalNodeFsAvailable:  {Available: 12e9, Capacity: 100e9},
		SignalNodeFsInodesFree: {Available: 9e5, Capacity: 1e6},
	}
	with := func(img fs.Fs) Observations {
		o := Observations{SignalImageFsAvailable: {Available: int64(img.Available), Capacity: int64(img.Capacity)},
			SignalImageFsInodesFree: {Available: int64(*img.InodesFree), Capacity: int64(*img.Inodes)}}
		for k, v := range rootObs {
			o[k] = v
		}
		return o
	}
	for _, tc := range []struct {
		name     string
		imageDir string
		want     Observations
	}{
		{name: "image store on the nodefs's filesystem", imageDir: "/root/images", want: with(root)},
		{name: "image store on a filesystem of its own", imageDir: "/images", want: with(images)},
		{name: "image store not visible", imageDir: "/elsewhere", want: rootObs},
		{name: "image store unknown", imageDir: "", want: rootObs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			h := &HostObserver{FsInfo: fsInfo, RootDir: "/root", ImageFsDir: func(context.Context) string { return tc.imageDir },
				ProcRoot: t.TempDir(), CgroupRoot: t.TempDir()}
			obs, _ := h.Observe(ctx) // memory and pids fail on the empty /proc: not what this test is about
			if !reflect.DeepEqual(obs, tc.want) {
				t.Errorf("observations = %v, want %v", obs, tc.want)
			}
		})
	}
}
