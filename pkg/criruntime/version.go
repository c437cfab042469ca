package criruntime

import (
	"context"
	"strings"
	"sync"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// VersionSource answers the VersionInfo setter: the runtime's type and version from CRI Version.
// The type is remembered from the last answer, and guessed from the endpoint before the first
// ("containerd" for .../containerd.sock, "cri-o" for .../crio.sock), so that a runtime that is down
// still reads "containerd://Unknown" as the kubelet's does.
type VersionSource struct {
	runtime Runtime
	timeout time.Duration

	mu          sync.Mutex
	runtimeType string
	// raw and parsed are the last RuntimeVersion answered and its runtimeVersionString: the version
	// seldom changes, and parsing it at every status sync was a few per cent of the simulator's CPU.
	raw, parsed string
}

// NewVersionSource returns a VersionSource over runtime for the given endpoint; timeout bounds each
// Version call (5 s for the status path).
func NewVersionSource(runtime Runtime, endpoint string, timeout time.Duration) *VersionSource {
	typ := "containerd"
	if strings.Contains(endpoint, "crio") {
		typ = "cri-o"
	}
	return &VersionSource{runtime: runtime, timeout: timeout, runtimeType: typ}
}

// Version calls CRI Version and returns the runtime's type (RuntimeName) and its version as the
// kubelet reports it: parsed as semver, else as a generic version, so Debian's "1.6.20~ds1" reads
// "1.6.20" (the kubelet's newRuntimeVersion); the raw string when neither parses. On error it returns
// the last known type and the call's error.
func (v *VersionSource) Version(ctx context.Context) (runtimeType, version string, err error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	resp, err := v.runtime.Version(ctx, "v1")
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		return v.runtimeType, "", err
	}
	if resp.GetRuntimeName() != "" {
		v.runtimeType = resp.GetRuntimeName()
	}
	if raw := resp.GetRuntimeVersion(); raw != v.raw || v.parsed == "" {
		v.raw, v.parsed = raw, runtimeVersionString(raw)
	}
	return v.runtimeType, v.parsed, nil
}

// runtimeVersionString mirrors the kubelet's newRuntimeVersion(...).String().
func runtimeVersionString(raw string) string {
	if ver, err := utilversion.ParseSemantic(raw); err == nil {
		return ver.String()
	}
	if ver, err := utilversion.ParseGeneric(raw); err == nil {
		return ver.String()
	}
	return raw
}

// Type returns the runtime's type as of the last Version answer (guessed from the endpoint before).
func (v *VersionSource) Type() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.runtimeType
}
