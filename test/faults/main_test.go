package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/test/framework"
)

// Timing of the agents under test: the status frequency is shorter than the default (10 s) so that
// the suite stays within minutes; the Lease keeps the product's default duration (40 s, renewed every
// 10 s), because "renewal resumes within one renew interval" relies on the component-helpers lease
// controller's retry backoff (capped at 7 s) being shorter than the renew interval, as it is with the
// kubelet's defaults. The syncloop check's bounds are 3× each period: 6 s for status, 30 s for the Lease.
const (
	statusFrequency      = 2 * time.Second
	leaseDurationSeconds = 40
	renewInterval        = leaseDurationSeconds * time.Second / 4 // the kubelet's renewIntervalFraction 0.25
	// nodeMonitorGracePeriod is kube-controller-manager's --node-monitor-grace-period: 20 s instead
	// of the default 40 s (50 s since 1.32), to keep case 9 short.
	nodeMonitorGracePeriod = 20 * time.Second
	// slack is added to a bound the issue states in the agent's own periods ("within one status
	// period") when the test measures it from the cluster's side: it covers the request round
	// trips and the watch delivery between the agent's action and the test seeing it, on a loaded
	// 2-core machine. It never stretches a bound by a period.
	slack = time.Second
)

// Node names, one per case; each is a node identity (system:node:<name>) of the shared control plane.
const (
	nodeAPIServer   = "fault-apiserver"
	nodeEtcd        = "fault-etcd"
	nodeRuntime     = "fault-runtime"
	nodeDeleteNode  = "fault-delete-node"
	nodeDeleteLease = "fault-delete-lease"
	nodeAdminEdit   = "fault-admin-edit"
	nodeAPIErrors   = "fault-api-errors"
	nodeRBAC        = "fault-rbac" // runs as the DaemonSet's ServiceAccount, not as a node identity
	nodeKilled      = "fault-killed"
	nodeBadInput    = "fault-bad-input"
	nodeSoak        = "fault-soak"
	// Issue 16's runtime cases.
	nodeRuntimeAbsent = "fault-runtime-absent"
	nodeRuntimeHung   = "fault-runtime-hung"
)

// suite is what TestMain starts once for every case: a control plane with kube-controller-manager
// (node lifecycle controller) and a containerd whose CNI config makes NetworkReady true.
var suite struct {
	dir  string
	cp   *framework.ControlPlane
	ctrd *framework.Containerd
}

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

// runSuite starts the shared components, runs the tests and stops everything. The working
// directory (logs of every component and agent) is removed after a pass, unless FAULTS_KEEP_LOGS
// is set, and kept after a failure.
func runSuite(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodeagent-faults-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "faults: %v\n", err)
		return 1
	}
	suite.dir = dir
	code := 1
	defer func() {
		if code == 0 && os.Getenv("FAULTS_KEEP_LOGS") == "" {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "faults: logs kept in %s\n", dir)
		}
	}()
	if err := startSuite(); err != nil {
		fmt.Fprintf(os.Stderr, "faults: %v\n", err)
		stopSuite()
		return code
	}
	code = m.Run()
	stopSuite()
	return code
}

func startSuite() error {
	// A cold build of the binaries takes minutes; after that start-up takes seconds.
	if _, err := framework.EnsureBinaries(); err != nil {
		return err
	}
	if _, err := framework.BuildAgent(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var err error
	suite.cp, err = framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: filepath.Join(suite.dir, "controlplane"),
		NodeNames: []string{nodeAPIServer, nodeEtcd, nodeRuntime, nodeDeleteNode, nodeDeleteLease, nodeAdminEdit,
			nodeAPIErrors, nodeKilled, nodeBadInput, nodeSoak, nodeRuntimeAbsent, nodeRuntimeHung},
		ControllerManager:      true,
		NodeMonitorGracePeriod: nodeMonitorGracePeriod,
	})
	if err != nil {
		return err
	}
	suite.ctrd, err = framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: filepath.Join(suite.dir, "containerd"), CNI: true})
	if err != nil {
		return err
	}
	if err := suite.ctrd.WaitNetwork(ctx, true); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "faults: control plane, kube-controller-manager and containerd ready in %v (dir %s)\n",
		time.Since(start).Round(time.Millisecond), suite.dir)
	return nil
}

func stopSuite() {
	if suite.ctrd != nil {
		suite.ctrd.Close()
	}
	if suite.cp != nil {
		suite.cp.Stop()
	}
}

// agentDir returns a directory for one agent of test t under the suite directory (kept on failure).
func agentDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(suite.dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}
