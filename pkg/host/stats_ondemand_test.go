package host

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeManager is cadvisor's manager as Stats reads it: one root cgroup sample per housekeeping,
// counting starts, stops and the requests' options.
type fakeManager struct {
	mu      sync.Mutex
	started int
	stopped int
	options []cadvisorapi.RequestOptions
}

func (f *fakeManager) Start() error { f.mu.Lock(); defer f.mu.Unlock(); f.started++; return nil }
func (f *fakeManager) Stop() error  { f.mu.Lock(); defer f.mu.Unlock(); f.stopped++; return nil }
func (f *fakeManager) record(o cadvisorapi.RequestOptions) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.options = append(f.options, o)
}
func (f *fakeManager) info() cadvisorapi.ContainerInfo {
	return cadvisorapi.ContainerInfo{ContainerReference: cadvisorapi.ContainerReference{Name: "/"},
		Spec:  cadvisorapi.ContainerSpec{HasCpu: true},
		Stats: []*cadvisorapi.ContainerStats{{Timestamp: time.Unix(1, 0), Cpu: &cadvisorapi.CpuStats{Usage: cadvisorapi.CpuUsage{Total: 5}}}}}
}
func (f *fakeManager) GetContainerInfoV2(_ string, o cadvisorapi.RequestOptions) (map[string]cadvisorapi.ContainerInfo, error) {
	f.record(o)
	return map[string]cadvisorapi.ContainerInfo{"/": f.info()}, nil
}
func (f *fakeManager) GetRequestedContainersInfo(_ string, o cadvisorapi.RequestOptions) (map[string]*cadvisorapi.ContainerInfo, error) {
	f.record(o)
	i := f.info()
	return map[string]*cadvisorapi.ContainerInfo{"/": &i}, nil
}
func (f *fakeManager) GetVersionInfo() (*cadvisorapi.VersionInfo, error) {
	return &cadvisorapi.VersionInfo{KernelVersion: "6"}, nil
}
func (f *fakeManager) GetMachineInfo() (*cadvisorapi.MachineInfo, error) {
	return &cadvisorapi.MachineInfo{NumCores: 2}, nil
}
func (f *fakeManager) GetDirFsInfo(string) (cadvisorapi.FsInfo, error) {
	return cadvisorapi.FsInfo{}, nil
}

// TestStatsOnDemand: cadvisor's manager is made and started by the first request (a Summary or a
// scrape of /metrics/cadvisor's collectors), not by NewStats or Run; once; again after a failed
// start; every request asks for a sample at most maxSampleAge old; Run's end stops it.
func TestStatsOnDemand(t *testing.T) {
	summary := func(s *Stats) error { _, err := s.GetStatsSummary(context.Background()); return err }
	scrape := func(s *Stats) error {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(s.CadvisorCollectors()...)
		n, err := testutil.GatherAndCount(reg, "container_cpu_usage_seconds_total")
		if err == nil && n == 0 {
			err = errors.New("no container_cpu_usage_seconds_total")
		}
		return err
	}
	register := func(s *Stats) error { // what the kubelet API's server does when it is built
		reg := prometheus.NewPedanticRegistry()
		for _, c := range s.CadvisorCollectors() {
			if err := reg.Register(c); err != nil {
				return err
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name      string
		requests  []func(*Stats) error
		failFirst bool // the first start fails (no root cgroup yet)
		wantMade  int
		wantErrs  int
	}{
		{name: "no request", wantMade: 0},
		{name: "collectors registered, not scraped", requests: []func(*Stats) error{register}, wantMade: 0},
		{name: "summaries", requests: []func(*Stats) error{summary, summary, summary}, wantMade: 1},
		{name: "scrapes", requests: []func(*Stats) error{scrape, scrape}, wantMade: 1},
		{name: "scrape then summary", requests: []func(*Stats) error{scrape, summary}, wantMade: 1},
		{name: "failed start retried", requests: []func(*Stats) error{summary, summary}, failFirst: true, wantMade: 1, wantErrs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var made []*fakeManager
			attempts := 0
			s, err := NewStats(StatsConfig{NodeName: "n", RootDir: "/", Clock: clocktesting.NewFakeClock(time.Unix(100, 0))})
			if err != nil {
				t.Fatal(err)
			}
			s.newManager = func() (statsManager, error) {
				attempts++
				if tc.failFirst && attempts == 1 {
					return nil, errors.New("no root cgroup")
				}
				m := &fakeManager{}
				made = append(made, m)
				return m, m.Start()
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- s.Run(ctx) }()
			errs := 0
			for _, r := range tc.requests {
				if err := r(s); err != nil {
					errs++
				}
			}
			if errs != tc.wantErrs {
				t.Errorf("%d requests failed, want %d", errs, tc.wantErrs)
			}
			if len(made) != tc.wantMade {
				t.Fatalf("%d managers made, want %d", len(made), tc.wantMade)
			}
			for _, m := range made {
				if m.started != 1 {
					t.Errorf("manager started %d times, want 1", m.started)
				}
				if len(m.options) == 0 {
					t.Errorf("no request reached the manager")
				}
				for _, o := range m.options {
					if o.MaxAge == nil || *o.MaxAge != 10*time.Second {
						t.Errorf("request options %+v: want MaxAge 10s (a sample taken on demand)", o)
					}
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, m := range made {
				if m.stopped != 1 {
					t.Errorf("manager stopped %d times at Run's end, want 1", m.stopped)
				}
			}
			if err := summary(s); err == nil || !strings.Contains(err.Error(), "stopped") {
				t.Errorf("a Summary after Run's end: %v, want stopped", err)
			}
			if len(made) != tc.wantMade {
				t.Errorf("a manager made after Run's end")
			}
		})
	}
}

// TestStatsSampledOnDemand reads this machine's root cgroup through cadvisor: a request takes a new
// sample when the last one is older than maxSampleAge (0 here: every request), and none otherwise
// (the periodic housekeeping is off).
func TestStatsSampledOnDemand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxAge  time.Duration
		newEach bool
	}{
		{name: "every request samples", maxAge: 0, newEach: true},
		{name: "a fresh sample is reused", maxAge: time.Hour, newEach: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(old time.Duration) { maxSampleAge = old }(maxSampleAge)
			maxSampleAge = tc.maxAge
			s, err := NewStats(StatsConfig{NodeName: "n", RootDir: t.TempDir(), Clock: clocktesting.NewFakeClock(time.Now())})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- s.Run(ctx) }()
			defer func() { cancel(); <-done }()
			var stamps []time.Time
			for range 3 {
				sum, err := s.GetStatsSummary(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if sum.Node.CPU == nil || sum.Node.CPU.UsageCoreNanoSeconds == nil || *sum.Node.CPU.UsageCoreNanoSeconds == 0 {
					t.Fatalf("node CPU %+v: want usageCoreNanoSeconds", sum.Node.CPU)
				}
				stamps = append(stamps, sum.Node.CPU.Time.Time)
			}
			for i := 1; i < len(stamps); i++ {
				if fresh := stamps[i].After(stamps[i-1]); fresh != tc.newEach {
					t.Errorf("sample times %v: request %d took a new sample %v, want %v", stamps, i, fresh, tc.newEach)
				}
			}
		})
	}
}
