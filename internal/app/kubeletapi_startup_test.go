package app

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/criruntime"
	"github.com/nodeagent/nodeagent/pkg/lifecycle"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
)

// testHost is a machine of 2 CPUs and 4 GiB with no pressure.
type testHost struct{}

func (testHost) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	return &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 4 << 30, MachineID: "m", SystemUUID: "u", BootID: "b"}, nil
}
func (testHost) EphemeralStorageCapacity() (resource.Quantity, error) {
	return resource.MustParse("10Gi"), nil
}
func (testHost) KernelVersion() string                    { return "6.1.0" }
func (testHost) OSImage() string                          { return "test" }
func (testHost) ValidateNodeIP(net.IP) error              { return nil }
func (testHost) LookupIP(string) ([]net.IP, error)        { return []net.IP{net.ParseIP("10.0.0.1")}, nil }
func (testHost) ResolveAddress(ip net.IP) (net.IP, error) { return ip, nil }
func (testHost) IsUnderMemoryPressure() bool              { return false }
func (testHost) IsUnderDiskPressure() bool                { return false }
func (testHost) IsUnderPIDPressure() bool                 { return false }
func (testHost) RunningInUserNamespace() *bool            { return nil }

// TestKubeletAPIBesideRegistration: the kubelet API is set up beside the Node's registration, as the
// kubelet's Run starts ListenAndServe in a goroutine next to its node status loop. Each case runs
// the agent's group (the Node informer, the Node's step queue over a fake API server and runtime,
// and the kubelet API's Runnables from addTo) in a synctest bubble, the API's flags given as on the
// command line (config.Load, config.Complete, newKubeletAPI). A slow set-up must not delay the
// Node's create (it is created at once, the API still unset); a failing one must still stop Run
// with an error naming the flag and wrapping the cause.
func TestKubeletAPIBesideRegistration(t *testing.T) {
	for _, tc := range []struct {
		name string
		// flags are the kubelet API's (DIR is the test's directory).
		flags []string
		// setUpDelay delays the set-up by that much (fake time) before the real one; setUpErr, when
		// set, is what the set-up then returns instead of the real one's result.
		setUpDelay time.Duration
		setUpErr   error
		// wantNewErr are substrings of newKubeletAPI's error (the operator's files, read before the
		// agent runs); wantErr of Run's; none: Run returns nil when stopped. wantIs is wrapped by it.
		wantNewErr []string
		wantErr    []string
		wantIs     error
		wantNode   bool // the Node created at once (at 0 s); else not looked at (a failing set-up races it)
		// nodeSyncAt, when set, is when the Node informer counts as synced (else its own HasSynced):
		// the pod informer must not list before it, and must list after.
		nodeSyncAt time.Duration
	}{
		{
			name: "a set-up that takes an hour: the Node is created at once, the API not set up yet",
			// The set-up would fail, but only once the hour has passed.
			flags:      []string{"--cert-dir=DIR/pki"},
			setUpDelay: time.Hour, setUpErr: errors.New("authorization: unreachable"), wantNode: true,
		},
		{
			name:       "the pod informer waits for the Node informer's sync, as the kubelet's pod source",
			flags:      []string{"--cert-dir=DIR/pki"},
			setUpDelay: time.Hour, wantNode: true, nodeSyncAt: time.Minute,
		},
		{
			name:     "a set-up that fails beside the registration: Run fails with its error, naming the API",
			flags:    []string{"--cert-dir=DIR/pki"},
			setUpErr: fs.ErrPermission,
			wantErr:  []string{"kubelet API server: "}, wantIs: fs.ErrPermission,
		},
		{
			name:       "an unreadable --tls-cert-file refuses to start, naming the flag and wrapping the cause",
			flags:      []string{"--tls-cert-file=DIR/none.crt", "--tls-private-key-file=DIR/none.key"},
			wantNewErr: []string{`--tls-cert-file "`, "none.crt"}, wantIs: fs.ErrNotExist,
		},
		{
			name:       "an unreadable --client-ca-file refuses to start, naming the field and wrapping the cause",
			flags:      []string{"--cert-dir=DIR/pki", "--client-ca-file=DIR/none-ca.crt"},
			wantNewErr: []string{`authentication.x509.clientCAFile "`, "none-ca.crt"}, wantIs: fs.ErrNotExist,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--hostname-override=n1", "--root-dir=" + filepath.Join(dir, "root"), "--port=10250", "--address=127.0.0.1"}
			for _, f := range tc.flags {
				args = append(args, strings.ReplaceAll(f, "DIR", dir))
			}
			opts, err := config.Load(args)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Complete(opts)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now() // the bubble's start: what the Node's create is timed from
				_, ctx := ktesting.NewTestContext(t)
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				client := fake.NewClientset()
				deps := &Dependencies{Clock: clock.RealClock{}, Client: client, HeartbeatClient: client,
					Informers: informers.NewSharedInformerFactory(client, 0)}
				k, err := newKubeletAPI(cfg, deps)
				if len(tc.wantNewErr) > 0 {
					if err == nil {
						t.Fatalf("newKubeletAPI: nil, want an error with %q", tc.wantNewErr)
					}
					for _, w := range tc.wantNewErr {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("newKubeletAPI: %v, want it to contain %q", err, w)
						}
					}
					if !errors.Is(err, tc.wantIs) {
						t.Errorf("newKubeletAPI: %v, want it to wrap %v", err, tc.wantIs)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				setUp := k.setUp
				var setUpDone bool
				k.setUp = func(ctx context.Context, ctrl *node.Controller) (*serving, error) {
					select {
					case <-time.After(tc.setUpDelay):
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					s, err := setUp(ctx, ctrl)
					setUpDone = true
					if tc.setUpErr != nil {
						return nil, tc.setUpErr
					}
					return s, err
				}
				q, err := node.NewQueue(node.QueueConfig{})
				if err != nil {
					t.Fatal(err)
				}
				rt := critest.NewFakeRuntimeService()
				rt.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
					{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true}}}
				ctrl, err := node.New(node.Config{NodeName: "n1", RegisterNode: true, NodeIPs: []net.IP{net.ParseIP("10.0.0.1")},
					NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: time.Minute, NodeLeaseDurationSeconds: 40,
					KubeletPort: 10250, Host: testHost{},
					Runtime: criruntime.Services{RuntimeService: rt, ImageManagerService: critest.NewFakeImageService()}},
					node.Dependencies{Client: client, HeartbeatClient: client, NodeLister: deps.Informers.Core().V1().Nodes().Lister(),
						Cache: nodecache.New(clock.RealClock{}), Recorder: record.NewFakeRecorder(100), Clock: clock.RealClock{}, Queue: q,
						Pods: k.lister})
				if err != nil {
					t.Fatal(err)
				}
				k.serve(ctrl)
				if tc.nodeSyncAt > 0 {
					k.nodeSynced = func() bool { return time.Since(t0) >= tc.nodeSyncAt }
				}
				podsListed := func() bool {
					for _, a := range client.Actions() {
						if a.GetResource().Resource == "pods" && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
							return true
						}
					}
					return false
				}
				group := lifecycle.Group{}
				group.Add("node informer", lifecycle.Informers{SharedInformerFactory: deps.Informers})
				if err := q.Start(ctrl); err != nil {
					t.Fatal(err)
				}
				group.Add("node step queue", q)
				k.addTo(&group)
				errc := make(chan error, 1)
				go func() { errc <- group.Run(ctx) }()
				synctest.Wait()
				if _, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); tc.wantNode && err != nil {
					t.Errorf("at %v: Node not created (%v), want it created at once", time.Since(t0), err)
				}
				if d := time.Since(t0); tc.wantNode && d != 0 {
					t.Errorf("the Node's create waited %v for the kubelet API's set-up, want 0", d)
				}
				if tc.wantNode && (setUpDone || k.served.Load() != nil) {
					t.Errorf("at %v: the API set up already (done %v), want it still setting up", time.Since(t0), setUpDone)
				}
				if tc.nodeSyncAt > 0 {
					if podsListed() {
						t.Errorf("at %v: pods listed before the Node informer synced (at %v)", time.Since(t0), tc.nodeSyncAt)
					}
					time.Sleep(tc.nodeSyncAt + time.Second) // the wait polls every 100 ms
					synctest.Wait()
					if !podsListed() {
						t.Errorf("at %v: pods not listed, the Node informer synced at %v", time.Since(t0), tc.nodeSyncAt)
					}
				}
				if len(tc.wantErr) == 0 {
					cancel()
				}
				select {
				case err = <-errc:
				case <-time.After(time.Minute):
					cancel()
					<-errc
					t.Fatalf("Run still running a minute after the start, want it stopped by the set-up's error")
				}
				if len(tc.wantErr) == 0 {
					if err != nil {
						t.Errorf("Run: %v, want nil once stopped", err)
					}
					return
				}
				if err == nil {
					t.Fatalf("Run: nil, want an error with %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Run: %v, want it to contain %q", err, w)
					}
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("Run: %v, want it to wrap %v", err, tc.wantIs)
				}
			})
		})
	}
}
