// Package criruntime watches the container runtime over CRI: a Poller calls RuntimeService.Status
// every 5 s and records the result in a State (the kubelet's runtimeState, pkg/kubelet/runtime.go),
// which the Ready setter reads. Client connects to the runtime lazily, so a runtime that is down at
// start or restarts later is reconnected without restarting the agent.
package criruntime

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/clock"
)

// ErrNetworkUnknown is the network error before the first Status, as the kubelet's.
var ErrNetworkUnknown = errors.New("network state unknown")

// Handler is a runtime handler reported by CRI Status, as kubecontainer.RuntimeHandler.
type Handler struct {
	Name                            string
	SupportsRecursiveReadOnlyMounts bool
	SupportsUserNamespaces          bool
}

// Features are the runtime features reported by CRI Status, as kubecontainer.RuntimeFeatures.
type Features struct {
	SupplementalGroupsPolicy bool
}

// State is the kubelet's runtimeState: what the last CRI Status calls said, behind a sync.RWMutex.
// The zero value is not usable; call NewState.
type State struct {
	mu                       sync.RWMutex
	clock                    clock.PassiveClock
	lastBaseRuntimeSync      time.Time
	baseRuntimeSyncThreshold time.Duration
	networkError             error
	runtimeError             error
	storageError             error
	statusError              error // the last failed Status call; nil after a successful one
	handlers                 []Handler
	features                 *Features
}

// NewState returns a State that reports "container runtime is down" once the last successful sync is
// older than threshold (the kubelet's maxWaitForContainerRuntime, 30 s), and ErrNetworkUnknown until
// the first Status.
func NewState(clk clock.PassiveClock, threshold time.Duration) *State {
	return &State{clock: clk, baseRuntimeSyncThreshold: threshold, networkError: ErrNetworkUnknown}
}

// SetRuntimeSync records a successful runtime sync at t, and clears the status error.
func (s *State) SetRuntimeSync(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastBaseRuntimeSync = t
	s.statusError = nil
}

// SetStatusError records why the last CRI Status call failed (nil: it answered). RuntimeErrors adds
// it to "container runtime is down", so that the Ready message says why (the kubelet exits at start
// when its runtime cannot be reached; nodeagent stays up and says so).
func (s *State) SetStatusError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statusError = err
}

// StatusError returns why the last CRI Status call failed, or nil when it answered (or none was made).
func (s *State) StatusError() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.statusError
}

// LastRuntimeSync returns when the runtime last answered Status with RuntimeReady; zero before.
func (s *State) LastRuntimeSync() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastBaseRuntimeSync
}

// SetNetworkState records the network error; nil means the runtime network is ready.
func (s *State) SetNetworkState(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.networkError = err
}

// SetRuntimeState records the runtime error; nil means the runtime is ready.
func (s *State) SetRuntimeState(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runtimeError = err
}

// SetStorageState records the storage error; nil means storage is fine.
func (s *State) SetStorageState(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.storageError = err
}

// SetRuntimeHandlers stores a copy of handlers sorted by name, so node status does not flap on order.
func (s *State) SetRuntimeHandlers(handlers []Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = append([]Handler(nil), handlers...)
	sort.Slice(s.handlers, func(i, j int) bool { return s.handlers[i].Name < s.handlers[j].Name })
}

// RuntimeHandlers returns the runtime handlers of the last successful sync, sorted by name.
func (s *State) RuntimeHandlers() []Handler {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.handlers
}

// SetRuntimeFeatures stores the runtime features of the last successful sync.
func (s *State) SetRuntimeFeatures(f *Features) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.features = f
}

// RuntimeFeatures returns the runtime features of the last successful sync, or nil.
func (s *State) RuntimeFeatures() *Features {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.features
}

// RuntimeErrors returns an aggregate of: "container runtime status check may not have completed yet"
// (no Status call has answered yet) or "container runtime is down" (the last successful sync is older
// than the threshold, or no call has ever succeeded and the last one failed), followed by ": <why>"
// when the last Status call failed; and the runtime error. It returns nil when the runtime is healthy.
// Mirrors runtimeState.runtimeErrors, which has no "<why>".
func (s *State) RuntimeErrors() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var errs []error
	down := func() error {
		if s.statusError != nil {
			return fmt.Errorf("container runtime is down: %w", s.statusError)
		}
		return errors.New("container runtime is down")
	}
	switch {
	case s.lastBaseRuntimeSync.IsZero() && s.statusError != nil:
		errs = append(errs, down())
	case s.lastBaseRuntimeSync.IsZero():
		errs = append(errs, errors.New("container runtime status check may not have completed yet"))
	case !s.lastBaseRuntimeSync.Add(s.baseRuntimeSyncThreshold).After(s.clock.Now()):
		errs = append(errs, down())
	}
	if s.runtimeError != nil {
		errs = append(errs, s.runtimeError)
	}
	return utilerrors.NewAggregate(errs)
}

// NetworkErrors returns the network error as an aggregate, or nil. Mirrors runtimeState.networkErrors.
func (s *State) NetworkErrors() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.networkError == nil {
		return nil
	}
	return utilerrors.NewAggregate([]error{s.networkError})
}

// StorageErrors returns the storage error as an aggregate, or nil. Mirrors runtimeState.storageErrors.
func (s *State) StorageErrors() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.storageError == nil {
		return nil
	}
	return utilerrors.NewAggregate([]error{s.storageError})
}

// String summarises the state for logs.
func (s *State) String() string {
	return fmt.Sprintf("runtime=%v network=%v", s.RuntimeErrors(), s.NetworkErrors())
}
