package criruntime

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestStateRuntimeErrors mirrors the kubelet's runtimeState.runtimeErrors with a fake clock.
func TestStateRuntimeErrors(t *testing.T) {
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		desc       string
		synced     bool          // SetRuntimeSync(start) was called
		elapsed    time.Duration // fake clock advance after the sync
		runtimeErr error
		want       string
	}{
		{desc: "never synced", want: "container runtime status check may not have completed yet"},
		{desc: "never synced, with a runtime error", runtimeErr: errors.New("container runtime not ready: <nil>"),
			want: "[container runtime status check may not have completed yet, container runtime not ready: <nil>]"},
		{desc: "just synced", synced: true},
		{desc: "synced 29s ago", synced: true, elapsed: 29 * time.Second},
		{desc: "synced exactly 30s ago is down (threshold not After now)", synced: true, elapsed: 30 * time.Second, want: "container runtime is down"},
		{desc: "synced 31s ago is down", synced: true, elapsed: 31 * time.Second, want: "container runtime is down"},
		{desc: "down and not ready", synced: true, elapsed: time.Minute, runtimeErr: errors.New("container runtime not ready: x"),
			want: "[container runtime is down, container runtime not ready: x]"},
		{desc: "synced with a runtime error", synced: true, runtimeErr: errors.New("container runtime not ready: x"), want: "container runtime not ready: x"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			clk := testingclock.NewFakeClock(start)
			s := NewState(clk, 30*time.Second)
			if tc.synced {
				s.SetRuntimeSync(clk.Now())
			}
			clk.Step(tc.elapsed)
			s.SetRuntimeState(tc.runtimeErr)
			if got := errString(s.RuntimeErrors()); got != tc.want {
				t.Errorf("RuntimeErrors() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStateNetworkAndStorageErrors(t *testing.T) {
	s := NewState(testingclock.NewFakeClock(time.Now()), 30*time.Second)
	if got := errString(s.NetworkErrors()); got != "network state unknown" {
		t.Errorf("initial NetworkErrors() = %q, want %q", got, "network state unknown")
	}
	if !errors.Is(s.NetworkErrors(), ErrNetworkUnknown) {
		t.Errorf("initial NetworkErrors() does not wrap ErrNetworkUnknown")
	}
	if err := s.StorageErrors(); err != nil {
		t.Errorf("initial StorageErrors() = %v, want nil", err)
	}
	s.SetNetworkState(errors.New("container runtime network not ready: <nil>"))
	if got := errString(s.NetworkErrors()); got != "container runtime network not ready: <nil>" {
		t.Errorf("NetworkErrors() = %q", got)
	}
	s.SetNetworkState(nil)
	if err := s.NetworkErrors(); err != nil {
		t.Errorf("NetworkErrors() after clearing = %v, want nil", err)
	}
	s.SetStorageState(errors.New("disk gone"))
	if got := errString(s.StorageErrors()); got != "disk gone" {
		t.Errorf("StorageErrors() = %q", got)
	}
	s.SetStorageState(nil)
	if err := s.StorageErrors(); err != nil {
		t.Errorf("StorageErrors() after clearing = %v, want nil", err)
	}
}

func TestStateHandlersAndFeatures(t *testing.T) {
	s := NewState(testingclock.NewFakeClock(time.Now()), 30*time.Second)
	if s.RuntimeHandlers() != nil || s.RuntimeFeatures() != nil {
		t.Fatalf("initial handlers/features = %v/%v, want nil", s.RuntimeHandlers(), s.RuntimeFeatures())
	}
	in := []Handler{{Name: "runc"}, {Name: ""}, {Name: "kata", SupportsUserNamespaces: true}}
	s.SetRuntimeHandlers(in)
	want := []Handler{{Name: ""}, {Name: "kata", SupportsUserNamespaces: true}, {Name: "runc"}}
	if got := s.RuntimeHandlers(); !reflect.DeepEqual(got, want) {
		t.Errorf("RuntimeHandlers() = %v, want sorted %v", got, want)
	}
	if in[0].Name != "runc" {
		t.Errorf("SetRuntimeHandlers sorted the caller's slice: %v", in)
	}
	s.SetRuntimeFeatures(&Features{SupplementalGroupsPolicy: true})
	if f := s.RuntimeFeatures(); f == nil || !f.SupplementalGroupsPolicy {
		t.Errorf("RuntimeFeatures() = %v", f)
	}
	if !strings.Contains(s.String(), "network=network state unknown") {
		t.Errorf("String() = %q", s.String())
	}
}

// fakeRuntime answers Status with resp/err and counts calls.
type fakeRuntime struct {
	mu      sync.Mutex
	resp    *runtimeapi.StatusResponse
	err     error
	calls   int
	version string // RuntimeVersion answered; "" for 1.0
}

func (f *fakeRuntime) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.resp, f.err
}
func (f *fakeRuntime) Version(context.Context, string) (*runtimeapi.VersionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.version
	if v == "" {
		v = "1.0"
	}
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: v}, nil
}
func (f *fakeRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return nil, nil
}
func (f *fakeRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func cond(t string, ok bool, reason, msg string) *runtimeapi.RuntimeCondition {
	return &runtimeapi.RuntimeCondition{Type: t, Status: ok, Reason: reason, Message: msg}
}

func statusResp(conds ...*runtimeapi.RuntimeCondition) *runtimeapi.StatusResponse {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: conds}}
}

type onStatusCall struct {
	err                        bool
	runtimeReady, networkReady bool
}

// recorder is an Observer that records each call.
type recorder struct {
	calls []onStatusCall
}

func (r *recorder) ObserveRuntimeStatus(err error, runtimeReady, networkReady bool) {
	r.calls = append(r.calls, onStatusCall{err != nil, runtimeReady, networkReady})
}

// TestPollerUpdateRuntimeUp mirrors the kubelet's updateRuntimeUp on each kind of CRI Status answer.
func TestPollerUpdateRuntimeUp(t *testing.T) {
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	runtimeOK := cond(runtimeapi.RuntimeReady, true, "", "")
	networkOK := cond(runtimeapi.NetworkReady, true, "", "")
	yes := &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}
	cases := []struct {
		desc         string
		resp         *runtimeapi.StatusResponse
		err          error
		wantRuntime  string
		wantNetwork  string
		wantSynced   bool
		wantHandlers []Handler
		wantFeatures *Features
		wantOnStatus onStatusCall
	}{
		{
			desc:         "Status error: the runtime is down, and says why",
			err:          errors.New("connection refused"),
			wantRuntime:  "container runtime is down: connection refused",
			wantNetwork:  "network state unknown",
			wantOnStatus: onStatusCall{err: true},
		},
		{
			desc:         "nil status is an error too",
			resp:         &runtimeapi.StatusResponse{},
			wantRuntime:  "container runtime is down: container runtime status is nil",
			wantNetwork:  "network state unknown",
			wantOnStatus: onStatusCall{err: true},
		},
		{
			desc: "NetworkReady false",
			resp: statusResp(runtimeOK, cond(runtimeapi.NetworkReady, false, "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized")),
			wantNetwork: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady " +
				"message:Network plugin returns error: cni plugin not initialized",
			wantSynced:   true,
			wantOnStatus: onStatusCall{runtimeReady: true},
		},
		{
			desc:         "missing conditions: both <nil>, runtime not synced",
			resp:         statusResp(),
			wantRuntime:  "[container runtime status check may not have completed yet, container runtime not ready: <nil>]",
			wantNetwork:  "container runtime network not ready: <nil>",
			wantOnStatus: onStatusCall{},
		},
		{
			desc:         "RuntimeReady false",
			resp:         statusResp(cond(runtimeapi.RuntimeReady, false, "Down", "shim gone"), networkOK),
			wantRuntime:  "[container runtime status check may not have completed yet, container runtime not ready: RuntimeReady=false reason:Down message:shim gone]",
			wantOnStatus: onStatusCall{networkReady: true},
		},
		{
			desc: "all good clears errors, sets the sync time, stores sorted handlers and features",
			resp: &runtimeapi.StatusResponse{
				Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeOK, networkOK}},
				RuntimeHandlers: []*runtimeapi.RuntimeHandler{
					{Name: "runc", Features: yes},
					{Name: ""},
				},
				Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
			},
			wantSynced:   true,
			wantHandlers: []Handler{{Name: ""}, {Name: "runc", SupportsRecursiveReadOnlyMounts: true, SupportsUserNamespaces: true}},
			wantFeatures: &Features{SupplementalGroupsPolicy: true},
			wantOnStatus: onStatusCall{runtimeReady: true, networkReady: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			clk := testingclock.NewFakeClock(start)
			state := NewState(clk, 30*time.Second)
			rec := &recorder{}
			p, err := NewPoller(PollerConfig{
				Runtime: &fakeRuntime{resp: tc.resp, err: tc.err}, State: state, Clock: clk, Observer: rec,
			})
			if err != nil {
				t.Fatal(err)
			}
			changed := p.UpdateRuntimeUp(ctx)
			if got := errString(state.RuntimeErrors()); got != tc.wantRuntime {
				t.Errorf("RuntimeErrors() = %q, want %q", got, tc.wantRuntime)
			}
			if got := errString(state.NetworkErrors()); got != tc.wantNetwork {
				t.Errorf("NetworkErrors() = %q, want %q", got, tc.wantNetwork)
			}
			state.mu.RLock()
			synced := state.lastBaseRuntimeSync
			state.mu.RUnlock()
			if tc.wantSynced != synced.Equal(start) {
				t.Errorf("lastBaseRuntimeSync = %v, want synced=%v at %v", synced, tc.wantSynced, start)
			}
			if tc.wantHandlers != nil && !reflect.DeepEqual(state.RuntimeHandlers(), tc.wantHandlers) {
				t.Errorf("handlers = %#v, want %#v", state.RuntimeHandlers(), tc.wantHandlers)
			}
			if !reflect.DeepEqual(state.RuntimeFeatures(), tc.wantFeatures) {
				t.Errorf("features = %v, want %v", state.RuntimeFeatures(), tc.wantFeatures)
			}
			if len(rec.calls) != 1 || rec.calls[0] != tc.wantOnStatus {
				t.Errorf("Observer calls = %+v, want one %+v", rec.calls, tc.wantOnStatus)
			}
			// The first answer is always a change; the same answer again is none.
			if !changed {
				t.Error("UpdateRuntimeUp = false for the first answer, want a change")
			}
			if p.UpdateRuntimeUp(ctx) {
				t.Error("UpdateRuntimeUp = true for the same answer again, want no change")
			}
		})
	}
}

// TestPollerAging: after a good Status, failing calls leave the last sync in place and the runtime
// turns "down" once the threshold passes; a good call again clears it.
func TestPollerAging(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := testingclock.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	state := NewState(clk, 30*time.Second)
	rt := &fakeRuntime{resp: statusResp(cond(runtimeapi.RuntimeReady, true, "", ""), cond(runtimeapi.NetworkReady, true, "", ""))}
	p, err := NewPoller(PollerConfig{Runtime: rt, State: state, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	p.UpdateRuntimeUp(ctx)
	if err := state.RuntimeErrors(); err != nil {
		t.Fatalf("after a good Status: %v", err)
	}
	rt.mu.Lock()
	good := rt.resp
	rt.resp, rt.err = nil, errors.New("rpc error: code = Unavailable")
	rt.mu.Unlock()
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{
		{5 * time.Second, ""},
		{20 * time.Second, ""},
		{5 * time.Second, "container runtime is down: rpc error: code = Unavailable"},
		{time.Minute, "container runtime is down: rpc error: code = Unavailable"},
	} {
		clk.Step(step.advance)
		p.UpdateRuntimeUp(ctx)
		if got := errString(state.RuntimeErrors()); got != step.want {
			t.Errorf("at %v: RuntimeErrors() = %q, want %q", clk.Now(), got, step.want)
		}
		if err := state.NetworkErrors(); err != nil {
			t.Errorf("a failed Status changed the network state: %v", err)
		}
	}
	rt.mu.Lock()
	rt.resp, rt.err = good, nil
	rt.mu.Unlock()
	p.UpdateRuntimeUp(ctx)
	if err := state.RuntimeErrors(); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}

func TestNewPoller(t *testing.T) {
	state := NewState(testingclock.NewFakeClock(time.Now()), time.Second)
	if _, err := NewPoller(PollerConfig{State: state}); err == nil {
		t.Error("NewPoller without Runtime: no error")
	}
	if _, err := NewPoller(PollerConfig{Runtime: &fakeRuntime{}}); err == nil {
		t.Error("NewPoller without State: no error")
	}
	p, err := NewPoller(PollerConfig{Runtime: &fakeRuntime{}, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if p.cfg.Period != 5*time.Second || p.cfg.Clock == nil {
		t.Errorf("defaults: period %v clock %v, want 5s and the real clock", p.cfg.Period, p.cfg.Clock)
	}
}

// TestPollerRun: Run calls Status at once, then every Period, and stops with the context.
func TestPollerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		rt := &fakeRuntime{err: errors.New("down")}
		p, err := NewPoller(PollerConfig{Runtime: rt, State: NewState(clock.RealClock{}, time.Second), Period: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { p.Run(ctx); close(done) }()
		calls := func() int {
			rt.mu.Lock()
			defer rt.mu.Unlock()
			return rt.calls
		}
		synctest.Wait()
		if n := calls(); n != 1 {
			t.Fatalf("after start: %d Status calls, want 1", n)
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n := calls(); n != 1 {
			t.Fatalf("4s later: %d Status calls, want 1", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := calls(); n != 2 {
			t.Fatalf("5s later: %d Status calls, want 2", n)
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

// hangingRuntime never answers Status until its context ends.
type hangingRuntime struct{ fakeRuntime }

func (*hangingRuntime) Status(ctx context.Context, _ bool) (*runtimeapi.StatusResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestPollerTimeout: a Status call that hangs is abandoned after Timeout and reported as the reason
// the runtime is down; the poller holds no lock meanwhile, so a second caller is not held up.
func TestPollerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		state := NewState(clock.RealClock{}, 30*time.Second)
		p, err := NewPoller(PollerConfig{Runtime: &hangingRuntime{}, State: state})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		ends := make([]time.Duration, 2)
		for i := range ends {
			wg.Go(func() { p.UpdateRuntimeUp(ctx); ends[i] = time.Since(start) })
		}
		synctest.Wait()
		if got := errString(state.RuntimeErrors()); got != "container runtime status check may not have completed yet" {
			t.Errorf("while Status hangs: %q", got)
		}
		wg.Wait()
		for i, d := range ends {
			if d != 5*time.Second {
				t.Errorf("call %d ended after %v, want the 5s default timeout (no call waits for another)", i, d)
			}
		}
		if got := errString(state.RuntimeErrors()); got != "container runtime is down: context deadline exceeded" {
			t.Errorf("after the timeout: %q", got)
		}
	})
}

// fakeRuntimeService is the part of internalapi.RuntimeService that Client calls; the embedded nil
// interface makes any other call panic.
type fakeRuntimeService struct {
	internalapi.RuntimeService
}

func (fakeRuntimeService) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return statusResp(cond(runtimeapi.RuntimeReady, true, "", "")), nil
}

func (fakeRuntimeService) Version(_ context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: apiVersion, RuntimeName: "fake", RuntimeVersion: "1.0"}, nil
}

// fakeImageService is the part of internalapi.ImageManagerService that Client calls.
type fakeImageService struct {
	internalapi.ImageManagerService
	images []*runtimeapi.Image
}

func (f *fakeImageService) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return f.images, nil
}

func (f *fakeImageService) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// TestPollerReadyExpected: "not ready" messages are logged at V(4) until SetReadyExpected, then at the
// default verbosity, as the kubelet's containerRuntimeReadyExpected (set once the fast start-up ends).
func TestPollerReadyExpected(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	rt := &fakeRuntime{resp: statusResp(cond(runtimeapi.RuntimeReady, true, "", ""), cond(runtimeapi.NetworkReady, false, "NoCNI", "no config"))}
	p, err := NewPoller(PollerConfig{Runtime: rt, State: NewState(testingclock.NewFakeClock(time.Now()), time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	p.UpdateRuntimeUp(ctx)
	if strings.Contains(buffer.String(), "Container runtime network not ready") {
		t.Errorf("logged at V(0) before SetReadyExpected:\n%s", buffer.String())
	}
	p.SetReadyExpected()
	p.UpdateRuntimeUp(ctx)
	if !strings.Contains(buffer.String(), "Container runtime network not ready") {
		t.Errorf("not logged at V(0) after SetReadyExpected:\n%s", buffer.String())
	}
}
