package simulation

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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
	statuses  [2][2]*runtimeapi.RuntimeStatus  // [runtimeReady][networkReady]
	responses [2][2]*runtimeapi.StatusResponse // the same with the handlers and features
	imageList []*runtimeapi.Image              // images sorted by ID
	version   *runtimeapi.VersionResponse
	handlers  []*runtimeapi.RuntimeHandler
	features  *runtimeapi.RuntimeFeatures
	images    map[string]*runtimeapi.Image
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
	for id := range s.images {
		s.imageList = append(s.imageList, s.images[id])
	}
	slices.SortFunc(s.imageList, func(a, b *runtimeapi.Image) int { return strings.Compare(a.Id, b.Id) })
	for rr := range 2 {
		for nr := range 2 {
			s.responses[rr][nr] = &runtimeapi.StatusResponse{Status: s.statuses[rr][nr], RuntimeHandlers: s.handlers, Features: s.features}
		}
	}
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// simRuntime is one simulated Node's container runtime, in memory: Status answers one of the four
// shared RuntimeStatus values (the control API flips which), with the template's handlers and
// features; Version the template's runtime; ListImages the template's images, sorted by ID once for
// every Node (a stable order: a changed order would read as a changed image list); ImageFsInfo an
// empty answer. Every answer is shared and read-only, so a Node costs one pointer here.
type simRuntime struct {
	shared *runtimeShared
	status atomic.Pointer[runtimeapi.StatusResponse]
}

func newSimRuntime(shared *runtimeShared) *simRuntime {
	r := &simRuntime{shared: shared}
	r.status.Store(shared.responses[1][1])
	return r
}

var _ criruntime.Runtime = (*simRuntime)(nil)

// setReady makes the next Status answer RuntimeReady and NetworkReady as given; it reports whether
// that changed the answer.
func (r *simRuntime) setReady(runtimeReady, networkReady bool) bool {
	next := r.shared.responses[b2i(runtimeReady)][b2i(networkReady)]
	return r.status.Swap(next) != next
}

// Status is RuntimeService.Status: the current shared answer, or ctx's error.
func (r *simRuntime) Status(ctx context.Context, _ bool) (*runtimeapi.StatusResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r.status.Load(), nil
}

// Version is RuntimeService.Version: the template's runtime name and version.
func (r *simRuntime) Version(ctx context.Context, _ string) (*runtimeapi.VersionResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r.shared.version, nil
}

// ListImages is ImageManagerService.ListImages: the template's images sorted by ID (filters ignored).
func (r *simRuntime) ListImages(ctx context.Context, _ *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r.shared.imageList, nil
}

// ImageFsInfo is ImageManagerService.ImageFsInfo: no filesystems.
func (r *simRuntime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &runtimeapi.ImageFsInfoResponse{}, nil
}
