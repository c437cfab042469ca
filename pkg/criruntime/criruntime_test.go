package criruntime

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
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
	mu    sync.Mutex
	resp  *runtimeapi.StatusResponse
	err   error
	calls int
}

func (f *fakeRuntime) Status(context.Context) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.resp, f.err
}
func (f *fakeRuntime) Version(context.Context) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "1.0"}, nil
}
func (f *fakeRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) { return nil, nil }
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
			desc:         "Status error leaves the state aging",
			err:          errors.New("connection refused"),
			wantRuntime:  "container runtime status check may not have completed yet",
			wantNetwork:  "network state unknown",
			wantOnStatus: onStatusCall{err: true},
		},
		{
			desc:         "nil status is an error too",
			resp:         &runtimeapi.StatusResponse{},
			wantRuntime:  "container runtime status check may not have completed yet",
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
			var calls []onStatusCall
			p, err := NewPoller(PollerConfig{
				Runtime: &fakeRuntime{resp: tc.resp, err: tc.err}, State: state, Clock: clk,
				OnStatus: func(err error, runtimeReady, networkReady bool) {
					calls = append(calls, onStatusCall{err != nil, runtimeReady, networkReady})
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			p.UpdateRuntimeUp(ctx)
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
			if len(calls) != 1 || calls[0] != tc.wantOnStatus {
				t.Errorf("OnStatus calls = %+v, want one %+v", calls, tc.wantOnStatus)
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
		{5 * time.Second, "container runtime is down"},
		{time.Minute, "container runtime is down"},
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

// TestPollerRun: Run calls Status at once and stops with the context.
func TestPollerRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	rt := &fakeRuntime{err: errors.New("down")}
	p, err := NewPoller(PollerConfig{Runtime: rt, State: NewState(testingclock.NewFakeClock(time.Now()), time.Second), Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rt.mu.Lock()
		n := rt.calls
		rt.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run made no Status call")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestClientConnectsLazily: a failed dial is ErrNotConnected and is retried on the next call; once
// connected, calls go to the runtime.
func TestClientConnectsLazily(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fakeRS := &fakeRuntimeService{}
	fakeIS := &fakeImageService{images: []*runtimeapi.Image{{Id: "sha256:1", RepoTags: []string{"registry.k8s.io/pause:3.10"}}}}
	c := NewClient("unix:///run/fake.sock", "", time.Second)
	if c.imageEndpoint != c.runtimeEndpoint {
		t.Errorf("image endpoint %q, want the runtime endpoint", c.imageEndpoint)
	}
	dials, fail := 0, true
	c.dialRuntime = func(ctx context.Context, ep string, _ time.Duration) (internalapi.RuntimeService, error) {
		dials++
		if fail {
			return nil, errors.New("no such file or directory")
		}
		return fakeRS, nil
	}
	c.dialImage = func(ctx context.Context, ep string, _ time.Duration) (internalapi.ImageManagerService, error) {
		if fail {
			return nil, errors.New("no such file or directory")
		}
		return fakeIS, nil
	}
	if _, err := c.Status(ctx); !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "unix:///run/fake.sock") {
		t.Fatalf("Status while down: %v, want ErrNotConnected naming the endpoint", err)
	}
	if _, err := c.ListImages(ctx); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("ListImages while down: %v, want ErrNotConnected", err)
	}
	fail = false
	resp, err := c.Status(ctx)
	if err != nil || resp.GetStatus() == nil {
		t.Fatalf("Status after the runtime came up: %v, %v", resp, err)
	}
	if _, err := c.Version(ctx); err != nil {
		t.Errorf("Version: %v", err)
	}
	images, err := c.ListImages(ctx)
	if err != nil || len(images) != 1 {
		t.Errorf("ListImages: %v, %v", images, err)
	}
	if _, err := c.ImageFsInfo(ctx); err != nil {
		t.Errorf("ImageFsInfo: %v", err)
	}
	before := dials
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if dials != before {
		t.Errorf("a connected client dialed again")
	}
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
