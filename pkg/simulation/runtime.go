package simulation

import (
	"context"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
)

// What a simulated runtime says when it is made not ready through the control API. The network's are
// containerd's own words when its CNI config is missing, so the Ready message reads as a real node's.
const (
	RuntimeNotReadyReason  = "SimulatedRuntimeNotReady"
	RuntimeNotReadyMessage = "runtime made not ready through the simulation API"
	NetworkNotReadyReason  = "NetworkPluginNotReady"
	NetworkNotReadyMessage = "Network plugin returns error: cni plugin not initialized"
)

// runtimeShared is what every simulated runtime answers alike, built once from the template: the four
// possible RuntimeStatus values (runtime ready or not × network ready or not), the Version answer,
// the handlers and features, and the image list. Read-only: shared by every Node's CRI fakes.
type runtimeShared struct {
	statuses [2][2]*runtimeapi.RuntimeStatus // [runtimeReady][networkReady]
	version  *runtimeapi.VersionResponse
	handlers []*runtimeapi.RuntimeHandler
	features *runtimeapi.RuntimeFeatures
	images   map[string]*runtimeapi.Image
}

func newRuntimeShared(t *Template) *runtimeShared {
	s := &runtimeShared{
		version: &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: t.RuntimeName, RuntimeVersion: t.RuntimeVersion, RuntimeApiVersion: "v1"},
		images:  map[string]*runtimeapi.Image{},
	}
	for _, rr := range []bool{false, true} {
		for _, nr := range []bool{false, true} {
			st := &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
				{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true},
			}}
			if !rr {
				st.Conditions[0].Reason, st.Conditions[0].Message = RuntimeNotReadyReason, RuntimeNotReadyMessage
				st.Conditions[0].Status = false
			}
			if !nr {
				st.Conditions[1].Reason, st.Conditions[1].Message = NetworkNotReadyReason, NetworkNotReadyMessage
				st.Conditions[1].Status = false
			}
			s.statuses[b2i(rr)][b2i(nr)] = st
		}
	}
	for _, h := range t.RuntimeHandlers {
		rh := &runtimeapi.RuntimeHandler{Name: h.Name, Features: &runtimeapi.RuntimeHandlerFeatures{}}
		if f := h.Features; f != nil {
			rh.Features.RecursiveReadOnlyMounts = f.RecursiveReadOnlyMounts != nil && *f.RecursiveReadOnlyMounts
			rh.Features.UserNamespaces = f.UserNamespaces != nil && *f.UserNamespaces
		}
		s.handlers = append(s.handlers, rh)
	}
	if f := t.Features; f != nil && f.SupplementalGroupsPolicy != nil {
		s.features = &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: *f.SupplementalGroupsPolicy}
	}
	for _, img := range t.Images {
		ri := &runtimeapi.Image{Id: img.Names[0], Size: uint64(img.SizeBytes)}
		for _, name := range img.Names {
			if strings.Contains(name, "@") {
				ri.RepoDigests = append(ri.RepoDigests, name)
			} else {
				ri.RepoTags = append(ri.RepoTags, name)
			}
		}
		s.images[ri.Id] = ri
	}
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// simRuntime is one simulated Node's container runtime: its own FakeRuntimeService and
// FakeImageService (k8s.io/cri-api/pkg/apis/testing), whose Status the control API flips. On top of the fakes it answers Version with the template's runtime, adds the
// template's handlers and features to Status, lists images in a stable order (the fake's map order
// would make every sync see a changed image list) and forgets the fakes' call log after each call
// (it grows forever otherwise).
type simRuntime struct {
	runtime *critest.FakeRuntimeService
	images  *critest.FakeImageService
	shared  *runtimeShared
}

func newSimRuntime(shared *runtimeShared) *simRuntime {
	rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	rs.FakeStatus = shared.statuses[1][1]
	is.Images = shared.images // read-only, shared: ListImages only reads it
	return &simRuntime{runtime: rs, images: is, shared: shared}
}

var _ criruntime.Runtime = (*simRuntime)(nil)

// setReady makes the fake's next Status answer RuntimeReady and NetworkReady as given.
func (r *simRuntime) setReady(runtimeReady, networkReady bool) {
	r.runtime.Lock()
	r.runtime.FakeStatus = r.shared.statuses[b2i(runtimeReady)][b2i(networkReady)]
	r.runtime.Unlock()
}

func (r *simRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	resp, err := r.runtime.Status(ctx, verbose)
	r.forgetRuntimeCalls()
	if err != nil {
		return nil, err
	}
	resp.RuntimeHandlers, resp.Features = r.shared.handlers, r.shared.features
	return resp, nil
}

func (r *simRuntime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	_, err := r.runtime.Version(ctx, apiVersion) // the fake's injected errors still apply
	r.forgetRuntimeCalls()
	if err != nil {
		return nil, err
	}
	return r.shared.version, nil
}

func (r *simRuntime) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	images, err := r.images.ListImages(ctx, filter)
	r.forgetImageCalls()
	slices.SortFunc(images, func(a, b *runtimeapi.Image) int { return strings.Compare(a.Id, b.Id) })
	return images, err
}

func (r *simRuntime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	resp, err := r.images.ImageFsInfo(ctx)
	r.forgetImageCalls()
	return resp, err
}

func (r *simRuntime) forgetRuntimeCalls() {
	r.runtime.Lock()
	r.runtime.Called = r.runtime.Called[:0]
	r.runtime.Unlock()
}

func (r *simRuntime) forgetImageCalls() {
	r.images.Lock()
	r.images.Called = r.images.Called[:0]
	r.images.Unlock()
}
