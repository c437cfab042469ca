package criruntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criutil "k8s.io/cri-client/pkg/util"
)

// Runtime is the part of CRI nodeagent uses, with the signatures of k8s.io/cri-api's
// RuntimeService and ImageManagerService, so that a real connection (Client) and the CRI fakes of
// k8s.io/cri-api/pkg/apis/testing (through Services) both serve the same per-node code.
type Runtime interface {
	// Status is RuntimeService.Status.
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
	// Version is RuntimeService.Version.
	Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error)
	// ListImages is ImageManagerService.ListImages.
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	// ImageFsInfo is ImageManagerService.ImageFsInfo.
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// Services joins a cri-api RuntimeService and ImageManagerService into a Runtime, e.g. the
// FakeRuntimeService and FakeImageService of k8s.io/cri-api/pkg/apis/testing for a simulated node.
type Services struct {
	internalapi.RuntimeService
	internalapi.ImageManagerService
}

var _ Runtime = Services{}

// maxMsgSize is k8s.io/cri-client's limit on a CRI response (16 MiB).
const maxMsgSize = 16 << 20

// Client is a Runtime over one gRPC connection per endpoint, made once by Dial and kept for the life
// of the process: gRPC reconnects it by itself (100 ms to 3 s backoff, as k8s.io/cri-client) when the
// runtime is absent, restarts or comes up later, so no call ever dials and nothing leaks while the
// runtime is gone. (k8s.io/cri-client's NewRemoteRuntimeService keeps the connection it made when its
// first Version check fails, so calling it until the runtime answers leaks one connection each time.)
type Client struct {
	runtimeEndpoint string
	timeout         time.Duration
	conns           []*grpc.ClientConn
	runtime         runtimeapi.RuntimeServiceClient
	image           runtimeapi.ImageServiceClient

	mu      sync.Mutex
	dialErr error // the last failed dial of either endpoint, cleared by a successful one
}

var _ Runtime = (*Client)(nil)

// Dial returns a Client for the given unix:// endpoints; imageEndpoint "" means runtimeEndpoint.
// timeout bounds each call whose context has no earlier deadline (--runtime-request-timeout). It does
// not connect: the first call does, and gRPC keeps reconnecting after that. It errors only when an
// endpoint is not a usable unix:// URL; the error names the endpoint.
func Dial(runtimeEndpoint, imageEndpoint string, timeout time.Duration) (*Client, error) {
	if imageEndpoint == "" {
		imageEndpoint = runtimeEndpoint
	}
	c := &Client{runtimeEndpoint: runtimeEndpoint, timeout: timeout}
	rconn, err := c.newConn(runtimeEndpoint)
	if err != nil {
		return nil, err
	}
	c.conns = append(c.conns, rconn)
	iconn := rconn
	if imageEndpoint != runtimeEndpoint {
		if iconn, err = c.newConn(imageEndpoint); err != nil {
			_ = rconn.Close()
			return nil, err
		}
		c.conns = append(c.conns, iconn)
	}
	c.runtime = runtimeapi.NewRuntimeServiceClient(rconn)
	c.image = runtimeapi.NewImageServiceClient(iconn)
	return c, nil
}

// newConn makes the lazy gRPC connection to one endpoint, with k8s.io/cri-client's options.
func (c *Client) newConn(endpoint string) (*grpc.ClientConn, error) {
	addr, dialer, err := criutil.GetAddressAndDialer(endpoint)
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %q: %w", endpoint, err)
	}
	recordingDialer := func(ctx context.Context, a string) (net.Conn, error) {
		conn, err := dialer(ctx, a)
		c.mu.Lock()
		c.dialErr = err
		c.mu.Unlock()
		return conn, err
	}
	params := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	params.Backoff.BaseDelay, params.Backoff.MaxDelay = 100*time.Millisecond, 3*time.Second
	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(addr, "unix://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(recordingDialer),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
		grpc.WithConnectParams(params))
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %q: %w", endpoint, err)
	}
	return conn, nil
}

// Connect starts connecting to the endpoints in the background without waiting (gRPC's
// ClientConn.Connect: an idle connection leaves idle mode), so that the first call does not pay
// for the dial and the HTTP/2 handshake, as the kubelet's runtime manager connects at start with
// its first Version call. A call made while connecting waits for it as before.
func (c *Client) Connect() {
	for _, conn := range c.conns {
		conn.Connect()
	}
}

// Close closes the connections. Calls after Close fail.
func (c *Client) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// withTimeout bounds ctx by the client's timeout unless it already has an earlier deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= c.timeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// explain names the endpoint and the call in an error ("unix:///run/containerd/containerd.sock:
// Status: rpc error: ..."), except for a runtime that cannot be reached, whose error is the dial
// error itself, which names the socket ("dial unix /run/containerd/containerd.sock: connect: no such
// file or directory"). It wraps the underlying error.
func (c *Client) explain(call string, err error) error {
	if err == nil {
		return nil
	}
	if status.Code(err) == codes.Unavailable {
		c.mu.Lock()
		dialErr := c.dialErr
		c.mu.Unlock()
		if dialErr != nil {
			return fmt.Errorf("%w", dialErr)
		}
	}
	return fmt.Errorf("%s: %s: %w", c.runtimeEndpoint, call, err)
}

// Status calls RuntimeService.Status.
func (c *Client) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
	return resp, c.explain("Status", err)
}

// Version calls RuntimeService.Version.
func (c *Client) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{Version: apiVersion})
	return resp, c.explain("Version", err)
}

// ListImages calls ImageService.ListImages.
func (c *Client) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.image.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: filter})
	if err != nil {
		return nil, c.explain("ListImages", err)
	}
	return resp.Images, nil
}

// ImageFsInfo calls ImageService.ImageFsInfo.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.image.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	return resp, c.explain("ImageFsInfo", err)
}
