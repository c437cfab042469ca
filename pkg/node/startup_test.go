package node

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
)

// TestStartupOrder: one test per rule of the start-up order (startup.go), each in a synctest bubble
// and timed from Start. A rule broken shows as a Node created, or a status posted, too early or too
// late.
func TestStartupOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup changes the env before Start and returns what to do at 2 s (or nil).
		informer   bool // play the Node informer (the fast update reads the lister)
		setup      func(e *env, release chan struct{}) func()
		gateLease  bool          // the Lease's first write waits for release (never released)
		notBefore  time.Duration // the Node is not created before this
		createdBy  time.Duration // ... and is created by this
		wantReady  v1.ConditionStatus
		readyBy    time.Duration // Ready as wantReady by this
		wantWrites []string      // the API writes' first entries, in order, the Lease's left out (they run beside)
	}{
		{
			name: "the runtime is checked before the Node is built: a hung runtime delays it to the call's timeout, and it registers NotReady",
			setup: func(e *env, _ chan struct{}) func() {
				e.ctrl.cfg.Runtime = hungRuntime{e.ctrl.cfg.Runtime}
				e.ctrl.poller = mustPoller(e.t, e.ctrl)
				return nil
			},
			notBefore: StatusCallTimeout, createdBy: StartupWait, wantReady: v1.ConditionFalse, readyBy: StartupWait,
			wantWrites: []string{"create nodes"},
		},
		{
			name:      "the Node's create does not wait for the Lease's first write: a Lease write that is never answered does not delay it",
			gateLease: true, notBefore: 0, createdBy: 0, wantReady: v1.ConditionTrue, readyBy: 0,
			wantWrites: []string{"create nodes"},
		},
		{
			name:      "registration is its own step before the first status sync: the Node is created, then its status patched, never the other way",
			createdBy: 0, wantReady: v1.ConditionTrue, readyBy: 0,
			wantWrites: []string{"create nodes"},
		},
		{
			name: "the fast update starts after registration: a network that turns ready at 2 s is posted Ready within a tick, not at the 5 s poll",
			setup: func(e *env, _ chan struct{}) func() {
				e.setRuntimeStatus(true, false)
				return func() { e.setRuntimeStatus(true, true) }
			},
			informer: true, createdBy: 0, wantReady: v1.ConditionTrue, readyBy: 2*time.Second + 2*100*time.Millisecond,
			wantWrites: []string{"create nodes", "patch nodes/status"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				release := make(chan struct{})
				var wrap func(kubernetes.Interface) kubernetes.Interface
				if tc.gateLease {
					wrap = func(c kubernetes.Interface) kubernetes.Interface { return gatedLeases{Interface: c, release: release} }
				}
				e := newEnvWith(t, nil, wrap)
				var at2s func()
				if tc.setup != nil {
					at2s = tc.setup(e, release)
				}
				start := time.Now()
				stop := e.run(ctx)
				defer func() { close(release); stop() }()
				var created, readyAt time.Duration = -1, -1
				for time.Since(start) <= 10*time.Second {
					synctest.Wait()
					if tc.informer {
						e.syncInformer()
					}
					n := e.node()
					if n != nil && created < 0 {
						created = time.Since(start)
					}
					if n != nil && readyAt < 0 {
						if r := ready(n); r != nil && r.Status == tc.wantReady {
							readyAt = time.Since(start)
						}
					}
					if at2s != nil && time.Since(start) >= 2*time.Second {
						at2s()
						at2s = nil
					}
					time.Sleep(50 * time.Millisecond)
				}
				if created < tc.notBefore || created > tc.createdBy {
					t.Errorf("Node created %v after start, want between %v and %v", created, tc.notBefore, tc.createdBy)
				}
				if readyAt < 0 || readyAt > tc.readyBy {
					t.Errorf("Ready %s %v after start, want by %v", tc.wantReady, readyAt, tc.readyBy)
				}
				var w []string
				leaseWritten := false
				for _, write := range e.writes() {
					if strings.HasSuffix(write, " leases") {
						leaseWritten = true
						continue
					}
					w = append(w, write)
				}
				if len(w) < len(tc.wantWrites) || strings.Join(w[:len(tc.wantWrites)], ",") != strings.Join(tc.wantWrites, ",") {
					t.Errorf("API writes other than the Lease's %v, want them to begin with %v", w, tc.wantWrites)
				}
				if !tc.gateLease && !leaseWritten {
					t.Errorf("API writes %v: no Lease write", e.writes())
				}
				for i, w := range e.writes() {
					if w == "create nodes" {
						break
					}
					if strings.HasPrefix(w, "patch nodes") {
						t.Errorf("write %d %q before the Node's create", i, w)
					}
				}
			})
		})
	}
}
