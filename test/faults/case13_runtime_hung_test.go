package faults

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// hungRuntime is a CRI server that answers Version and never answers anything else (until the test
// ends): a runtime wedged in a way that still accepts connections.
type hungRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
	stop chan struct{}
}

func (h *hungRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "containerd", RuntimeVersion: "1.6.20", RuntimeApiVersion: "v1"}, nil
}

func (h *hungRuntime) hang(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.stop:
		return context.Canceled
	}
}

func (h *hungRuntime) Status(ctx context.Context, _ *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return nil, h.hang(ctx)
}

func (h *hungRuntime) ListImages(ctx context.Context, _ *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return nil, h.hang(ctx)
}

func (h *hungRuntime) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return nil, h.hang(ctx)
}

// TestCase13RuntimeHung: with a runtime that answers Version but never Status (nor ListImages nor
// ImageFsInfo), nodeagent's /healthz answers within 1 s of start, READY=1 reaches systemd within a few
// seconds, the Node registers NotReady saying why, the Lease is created and renewed, and /healthz is
// still 200 a minute later: nothing on the status path waits for the runtime beyond 5 s, and nothing
// waits for it while holding what the sync loop, the Lease or /healthz needs.
func TestCase13RuntimeHung(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "na-hung-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "hung.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	h := &hungRuntime{stop: make(chan struct{})}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, h)
	runtimeapi.RegisterImageServiceServer(srv, h)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { close(h.stop); srv.Stop() })
	notify := framework.ListenTestNotify(t, filepath.Join(dir, "notify.sock"))

	start := time.Now()
	a := startAgentWith(ctx, t, framework.AgentOptions{
		Dir: agentDir(t, nodeRuntimeHung), NodeName: nodeRuntimeHung, Kubeconfig: suite.cp.KubeconfigFor(nodeRuntimeHung),
		RuntimeEndpoint: "unix://" + sock, Args: agentArgs(), Env: []string{notify.Env()},
	})
	healthzAfter := time.Since(start) // StartAgent returns once /healthz answers
	t.Logf("/healthz answered %v after exec", healthzAfter.Round(time.Millisecond))
	if healthzAfter > time.Second {
		t.Errorf("/healthz answered %v after exec, want within 1s", healthzAfter)
	}
	readyAt, err := notify.Wait(ctx, "READY=1")
	if err != nil {
		t.Fatalf("no READY=1: %v", err)
	}
	t.Logf("READY=1 %v after exec", readyAt.Sub(start).Round(time.Millisecond))
	if d := readyAt.Sub(start); d > 3*time.Second {
		t.Errorf("READY=1 %v after exec, want within a few seconds (3s)", d)
	}

	n, _ := framework.WaitNode(ctx, t, suite.cp.AdminClient, nodeRuntimeHung, 20*time.Second, "registered NotReady", func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeReady)
		return c != nil && c.Status == corev1.ConditionFalse
	})
	t.Logf("registered %v after exec: %s", time.Since(start).Round(time.Millisecond), framework.DescribeReady(n))
	if c := framework.NodeCondition(n, corev1.NodeReady); !strings.Contains(c.Message, "container runtime") {
		t.Errorf("Ready message %q does not say the runtime is the problem", c.Message)
	}
	first := framework.WaitLease(ctx, t, suite.cp.AdminClient, nodeRuntimeHung, renewInterval+slack, "Lease created", func(*coordinationv1.Lease) bool { return true })
	createdAt := time.Now()
	framework.WaitLease(ctx, t, suite.cp.AdminClient, nodeRuntimeHung, renewInterval+2*slack, "Lease renewed", func(l *coordinationv1.Lease) bool {
		return l.Spec.RenewTime != nil && first.Spec.RenewTime != nil && l.Spec.RenewTime.After(first.Spec.RenewTime.Time)
	})
	t.Logf("Lease renewed %v after it was first seen", time.Since(createdAt).Round(time.Millisecond))
	framework.WaitNode(ctx, t, suite.cp.AdminClient, nodeRuntimeHung, 30*time.Second, `NotReady "container runtime is down: ... DeadlineExceeded"`, func(n *corev1.Node) bool {
		c := framework.NodeCondition(n, corev1.NodeReady)
		return c != nil && strings.Contains(c.Message, "container runtime is down") && strings.Contains(c.Message, "DeadlineExceeded")
	})

	for time.Since(start) < time.Minute+10*time.Second {
		code, body, err := a.Get(ctx, "/healthz?verbose")
		if err != nil || code != 200 {
			t.Fatalf("/healthz %v after exec: %d %v\n%s", time.Since(start).Round(time.Second), code, err, body)
		}
		time.Sleep(5 * time.Second)
	}
	t.Logf("/healthz 200 throughout the first %v", time.Since(start).Round(time.Second))
}
