package criruntime

import (
	"context"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criServer is a real gRPC CRI server on a unix socket, answering Status and Version, or hanging.
type criServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
	hang chan struct{} // non-nil: Status blocks until it is closed or the call ends
}

func (s *criServer) Status(ctx context.Context, _ *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	if s.hang != nil {
		select {
		case <-s.hang:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return statusResp(cond(runtimeapi.RuntimeReady, true, "", "")), nil
}

func (s *criServer) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "1.6.20~ds1"}, nil
}

func (s *criServer) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:1", RepoTags: []string{"registry.k8s.io/pause:3.10"}}}}, nil
}

func serveCRI(t *testing.T, sock string, srv *criServer) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(g, srv)
	runtimeapi.RegisterImageServiceServer(g, srv)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
}

// TestClientRuntimeAbsentThenPresent: while the socket does not exist every call fails at once with
// the dial error naming the socket, and the process does not grow (no connection per call, unlike
// cri-client's NewRemoteRuntimeService); once a runtime listens, the same Client reaches it.
func TestClientRuntimeAbsentThenPresent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	c, err := Dial("unix://"+sock, "", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()

	_, err = c.Status(ctx, false)
	if err == nil {
		t.Fatal("Status with no runtime: no error")
	}
	if want := "dial unix " + sock + ": connect: no such file or directory"; err.Error() != want {
		t.Errorf("Status with no runtime: %q, want %q", err, want)
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("error does not wrap ENOENT: %v", err)
	}
	before := runtime.NumGoroutine()
	for range 300 {
		if _, err := c.Status(ctx, false); err == nil {
			t.Fatal("Status with no runtime: no error")
		}
		_, _ = c.Version(ctx, "v1")
	}
	if after := runtime.NumGoroutine(); after > before+5 {
		t.Errorf("goroutines %d → %d after 600 calls with no runtime: connections leak", before, after)
	}

	// gRPC reconnects by itself, after its backoff (100 ms to 3 s). That wait cannot be in a synctest
	// bubble: the connection is a real unix socket, and goroutines blocked in its I/O are not durably
	// blocked, so the bubble's clock would not advance. Instead of polling, wait for the connection's
	// state changes; nothing here kicks it, except that an idle connection is told to connect, which
	// any call would do.
	serveCRI(t, sock, &criServer{})
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a liveness bound: the backoff is at most 3 s
	defer cancel()
	conn := c.conns[0]
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if s == connectivity.Idle {
			conn.Connect()
		}
		if !conn.WaitForStateChange(waitCtx, s) {
			t.Fatalf("no connection to the runtime once it listens: still %v (Status: %v)", s, errOf(c.Status(ctx, false)))
		}
	}
	resp, err := c.Status(ctx, false)
	if err != nil || resp.GetStatus() == nil {
		t.Fatalf("Status once connected to the runtime: %v, %v", resp, err)
	}
	v, err := c.Version(ctx, "v1")
	if err != nil || v.RuntimeVersion != "1.6.20~ds1" {
		t.Errorf("Version: %v, %v", v, err)
	}
	images, err := c.ListImages(ctx, nil)
	if err != nil || len(images) != 1 {
		t.Errorf("ListImages: %v, %v", images, err)
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestClientHungRuntime: a runtime that never answers Status holds a call only until its context's
// deadline, and the error names the endpoint and the call.
func TestClientHungRuntime(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hung.sock")
	hang := make(chan struct{})
	defer close(hang)
	serveCRI(t, sock, &criServer{hang: hang})
	c, err := Dial("unix://"+sock, "", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Status(ctx, false)
	if err == nil || !strings.Contains(err.Error(), "unix://"+sock+": Status: ") || !strings.Contains(err.Error(), "DeadlineExceeded") {
		t.Errorf("Status on a hung runtime: %v, want a deadline error naming the endpoint and the call", err)
	}
}

func TestDialBadEndpoint(t *testing.T) {
	if _, err := Dial("tcp://127.0.0.1:1", "", time.Second); err == nil || !strings.Contains(err.Error(), "tcp://127.0.0.1:1") {
		t.Errorf("Dial(tcp://...) = %v, want an error naming the endpoint", err)
	}
}

func TestVersionSource(t *testing.T) {
	cases := []struct{ raw, want string }{
		{"1.6.20~ds1", "1.6.20"},
		{"1.7.24", "1.7.24"},
		{"v2.0.0-rc.1", "2.0.0-rc.1"},
		{"weird", "weird"},
	}
	for _, tc := range cases {
		if got := runtimeVersionString(tc.raw); got != tc.want {
			t.Errorf("runtimeVersionString(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
	rt := &fakeRuntime{}
	v := NewVersionSource(rt, "unix:///run/crio/crio.sock", time.Second)
	if v.Type() != "cri-o" {
		t.Errorf("type before any answer = %q, want cri-o from the endpoint", v.Type())
	}
	typ, ver, err := v.Version(t.Context())
	if err != nil || typ != "fake" || ver != "1.0" || v.Type() != "fake" {
		t.Errorf("Version() = %q, %q, %v; Type() = %q", typ, ver, err, v.Type())
	}
	// The parsed version is kept between answers; an upgraded runtime's new one replaces it.
	for _, tc := range cases {
		rt.mu.Lock()
		rt.version = tc.raw
		rt.mu.Unlock()
		for range 2 {
			if _, ver, err := v.Version(t.Context()); err != nil || ver != tc.want {
				t.Errorf("Version() answering %q = %q, %v; want %q", tc.raw, ver, err, tc.want)
			}
		}
	}
}

// TestClientConnect: Connect leaves the idle connection connecting by itself, with no call made, so
// that the first call (the start-up's runtime check) finds it ready; without Connect it stays idle
// until a call.
func TestClientConnect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		connect bool
		want    connectivity.State
	}{
		{name: "Connect: ready with no call", connect: true, want: connectivity.Ready},
		{name: "no Connect: idle until a call", connect: false, want: connectivity.Idle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "containerd.sock")
			serveCRI(t, sock, &criServer{})
			c, err := Dial("unix://"+sock, "", 2*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc.connect {
				c.Connect()
			}
			// A liveness bound: a local socket connects in milliseconds.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			conn := c.conns[0]
			s := conn.GetState()
			for s != connectivity.Ready && conn.WaitForStateChange(ctx, s) {
				s = conn.GetState()
			}
			if s != tc.want {
				t.Errorf("connection %v, want %v", s, tc.want)
			}
		})
	}
}
