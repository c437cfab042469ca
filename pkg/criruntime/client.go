package criruntime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// ErrNotConnected is returned by Client calls while no connection to the runtime could be made.
var ErrNotConnected = errors.New("not connected to the container runtime")

// Runtime is the part of CRI nodeagent uses: runtime status and version, image list and image filesystem.
type Runtime interface {
	Status(ctx context.Context) (*runtimeapi.StatusResponse, error)
	Version(ctx context.Context) (*runtimeapi.VersionResponse, error)
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// Client is a Runtime over k8s.io/cri-client that connects on first use and again after a failed
// connect; once connected, gRPC itself reconnects (100 ms to 3 s backoff) when the runtime restarts.
type Client struct {
	runtimeEndpoint, imageEndpoint string
	timeout                        time.Duration
	// dial is remote.NewRemoteRuntimeService/NewRemoteImageService; replaced in tests.
	dialRuntime func(ctx context.Context, endpoint string, timeout time.Duration) (internalapi.RuntimeService, error)
	dialImage   func(ctx context.Context, endpoint string, timeout time.Duration) (internalapi.ImageManagerService, error)

	mu      sync.Mutex
	runtime internalapi.RuntimeService
	image   internalapi.ImageManagerService
}

// NewClient returns a Client for the given unix:// endpoints; imageEndpoint "" means runtimeEndpoint.
// timeout bounds each CRI call (the kubelet's --runtime-request-timeout). It does not dial.
func NewClient(runtimeEndpoint, imageEndpoint string, timeout time.Duration) *Client {
	if imageEndpoint == "" {
		imageEndpoint = runtimeEndpoint
	}
	return &Client{
		runtimeEndpoint: runtimeEndpoint,
		imageEndpoint:   imageEndpoint,
		timeout:         timeout,
		dialRuntime: func(ctx context.Context, ep string, t time.Duration) (internalapi.RuntimeService, error) {
			return remote.NewRemoteRuntimeService(ctx, ep, t, nil, false)
		},
		dialImage: func(ctx context.Context, ep string, t time.Duration) (internalapi.ImageManagerService, error) {
			return remote.NewRemoteImageService(ctx, ep, t, nil, false)
		},
	}
}

// connect returns the connected services, dialing those not yet connected. A dial is bounded by 2 s
// so that a missing socket fails fast; the error wraps ErrNotConnected and the dial error.
func (c *Client) connect(ctx context.Context) (internalapi.RuntimeService, internalapi.ImageManagerService, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runtime == nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		rs, err := c.dialRuntime(dctx, c.runtimeEndpoint, c.timeout)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: runtime endpoint %s: %w", ErrNotConnected, c.runtimeEndpoint, err)
		}
		c.runtime = rs
	}
	if c.image == nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		is, err := c.dialImage(dctx, c.imageEndpoint, c.timeout)
		if err != nil {
			return c.runtime, nil, fmt.Errorf("%w: image endpoint %s: %w", ErrNotConnected, c.imageEndpoint, err)
		}
		c.image = is
	}
	return c.runtime, c.image, nil
}

// Status calls RuntimeService.Status (not verbose).
func (c *Client) Status(ctx context.Context) (*runtimeapi.StatusResponse, error) {
	rs, _, err := c.connect(ctx)
	if rs == nil {
		return nil, err
	}
	return rs.Status(ctx, false)
}

// Version calls RuntimeService.Version for CRI v1.
func (c *Client) Version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	rs, _, err := c.connect(ctx)
	if rs == nil {
		return nil, err
	}
	return rs.Version(ctx, "v1")
}

// ListImages calls ImageService.ListImages without a filter.
func (c *Client) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	_, is, err := c.connect(ctx)
	if is == nil {
		return nil, err
	}
	return is.ListImages(ctx, nil)
}

// ImageFsInfo calls ImageService.ImageFsInfo.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	_, is, err := c.connect(ctx)
	if is == nil {
		return nil, err
	}
	return is.ImageFsInfo(ctx)
}
