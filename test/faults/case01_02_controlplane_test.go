package faults

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestCase01APIServerStopped is case 1: kube-apiserver stopped for 60 s, then started again on the
// same etcd. nodeagent keeps running, logs the outage, /healthz/syncloop fails during it and
// recovers after, the Lease is renewed within one renew interval of the API server being back,
// and the Node is the same object throughout.
func TestCase01APIServerStopped(t *testing.T) {
	runOutage(t, nodeAPIServer, outage{
		what:     "kube-apiserver stopped",
		duration: 60 * time.Second,
		begin: func() error {
			if err := suite.cp.StopAPIServer(); err != nil {
				t.Logf("kube-apiserver exit: %v", err)
			}
			return nil
		},
		end: func(ctx context.Context) error { return suite.cp.StartAPIServer(ctx) },
		// Should the test fail in between, bring the API server back for the cases after it.
		cleanup: func() { _ = suite.cp.StartAPIServer(context.Background()) },
	})
}

// TestCase02EtcdPaused is case 2: etcd frozen with SIGSTOP for 20 s, then resumed; the same checks
// as case 1.
func TestCase02EtcdPaused(t *testing.T) {
	runOutage(t, nodeEtcd, outage{
		what:     "etcd paused",
		duration: 20 * time.Second,
		begin:    suite.cp.PauseEtcd,
		end:      func(context.Context) error { return suite.cp.ResumeEtcd() },
		cleanup:  func() { _ = suite.cp.ResumeEtcd() },
	})
}

// outage is one control-plane fault: begin starts it (returning once in effect), end ends it
// (returning once the control plane serves again).
type outage struct {
	what     string
	duration time.Duration
	begin    func() error
	end      func(ctx context.Context) error
	cleanup  func()
}

func runOutage(t *testing.T, name string, o outage) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := suite.cp.AdminClient

	a := startAgent(ctx, t, name)
	node := framework.WaitReady(ctx, t, suite.cp.AdminClient, name, time.Minute)
	lease := framework.WaitLease(ctx, t, suite.cp.AdminClient, name, 30*time.Second, "owner reference to the Node",
		framework.LeaseOwnedBy(node))
	waitHealthz(ctx, t, a, "/healthz/syncloop", http.StatusOK, 30*time.Second)
	pid := a.PID

	t.Cleanup(o.cleanup)
	began := time.Now()
	if err := o.begin(); err != nil {
		t.Fatalf("%s: %v", o.what, err)
	}
	inEffect := time.Now()
	t.Logf("%s at %s (took %v)", o.what, began.Format(time.RFC3339Nano), inEffect.Sub(began).Round(time.Millisecond))

	// During the outage: the agent keeps running and serving, and /healthz/syncloop keeps answering
	// 200: its loops are alive, only waiting for the API server (health never means "the API server
	// answers": the systemd watchdog must not kill an agent that only waits, issue 22). The late Lease
	// shows in nodeagent status instead (TestHealthzAPIServerDown).
	var syncloopFailed time.Time
	var syncloopBody string
	for time.Since(inEffect) < o.duration {
		if !a.Running() {
			t.Fatalf("nodeagent exited during the outage: %v", a.Wait(ctx))
		}
		code, body, err := a.Get(ctx, "/healthz/syncloop")
		if err != nil {
			t.Fatalf("nodeagent /healthz/syncloop unreachable during the outage: %v", err)
		}
		if code != http.StatusOK && syncloopFailed.IsZero() {
			syncloopFailed, syncloopBody = time.Now(), body
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !syncloopFailed.IsZero() {
		t.Errorf("/healthz/syncloop failed %v into the outage, want 200 throughout: %s", syncloopFailed.Sub(began).Round(time.Millisecond), syncloopBody)
	} else {
		t.Logf("/healthz/syncloop answered 200 through %v of %s", o.duration, o.what)
	}

	// The control plane serves again when this node's Lease can be read: probe for that while the
	// fault ends (for etcd a read in flight returns as soon as it resumes).
	servingAt := make(chan time.Time, 1)
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	go func() {
		for probeCtx.Err() == nil {
			rctx, cancel := context.WithTimeout(probeCtx, time.Second)
			_, err := framework.GetLease(rctx, suite.cp.AdminClient, name)
			cancel()
			if err == nil {
				servingAt <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := o.end(ctx); err != nil {
		t.Fatalf("end of %s: %v", o.what, err)
	}
	back := time.Now()
	var serving time.Time
	select {
	case serving = <-servingAt:
	case <-time.After(30 * time.Second):
		t.Fatalf("the Lease of %s cannot be read 30 s after the end of %s", name, o.what)
	}
	t.Logf("control plane ready at %s, %v after the outage began; serving the Lease from %s",
		back.Format(time.RFC3339Nano), back.Sub(began).Round(time.Millisecond), serving.Format(time.RFC3339Nano))

	// Lease renewal resumes within one renew interval of the API server serving again: the first
	// renewal the agent started after that moment (its renewTime is the agent's clock when it built
	// the update, so no round trip is counted; an update sent during an etcd pause and applied on
	// resume carries an older renewTime and does not count) comes within one renew interval, plus
	// slack for the lease controller's 4 % jitter and the GET it may make first.
	renewed := framework.WaitLease(ctx, t, suite.cp.AdminClient, name, time.Minute, "renewal after the outage",
		framework.LeaseRenewedAfter(serving))
	resumed := renewed.Spec.RenewTime.Sub(serving)
	t.Logf("figure: Lease renewal resumed %v after the control plane served again (first renewTime after the outage %s; renew interval %v)",
		resumed.Round(time.Millisecond), renewed.Spec.RenewTime.Format(time.RFC3339Nano), renewInterval)
	if resumed > renewInterval+slack {
		t.Errorf("Lease renewal resumed %v after the control plane served again, want within one renew interval (%v, + %v slack)",
			resumed.Round(time.Millisecond), renewInterval, slack)
	}

	waitHealthz(ctx, t, a, "/healthz/syncloop", http.StatusOK, 30*time.Second)
	t.Logf("/healthz/syncloop healthy again %v after the control plane was ready", time.Since(back).Round(time.Millisecond))

	// The Node stays true after the outage: kube-controller-manager, whose own caches lag behind
	// after an outage, may mark it Ready=Unknown; nodeagent must post Ready=True again within one
	// status period each time, and the node must end Ready.
	w, current := watchNode(ctx, t, name)
	if current == nil {
		t.Fatalf("node %s is gone after the outage", name)
	}
	checkStaysReady(t, w, current, renewed.Spec.RenewTime.Time, nodeMonitorGracePeriod+10*time.Second)

	// Same process, same objects, and the outage is in the log.
	if !a.Running() || a.PID != pid {
		t.Errorf("nodeagent restarted or exited (pid %d, was %d, running %v)", a.PID, pid, a.Running())
	}
	after, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != node.UID {
		t.Errorf("Node UID changed from %s to %s: the node got a second object", node.UID, after.UID)
	}
	if renewed.UID != lease.UID {
		t.Errorf("Lease UID changed from %s to %s", lease.UID, renewed.UID)
	}
	creates := auditEvents(t, nodeUser(name), func(e framework.AuditEvent) bool {
		return e.ObjectRef != nil && e.ObjectRef.Resource == "nodes" && (e.Verb == "create" && e.Code() < 300 || e.Verb == "delete")
	})
	if len(creates) != 1 {
		t.Errorf("audit log: %d successful creates/deletes of nodes by %s, want the 1 registration: %+v", len(creates), nodeUser(name), creates)
	}
	errs := errorLines(a.Logs(), began, back)
	if len(errs) == 0 {
		t.Errorf("nodeagent logged no error during %s", o.what)
	} else {
		t.Logf("nodeagent logged %d error lines during the outage; first: %s", len(errs), errs[0].Text)
	}
}

// checkStaysReady follows w (a watch on node from its current state) for window: whenever the node
// is not Ready, nodeagent must make it Ready again within one status period (+ slack, measured on
// the watch); it must be Ready at the end. It reports, as a figure, how long after heartbeat (the
// first Lease renewal after the outage) the Node was first seen Ready again, counted from the later
// of that heartbeat and the moment it was seen not Ready.
func checkStaysReady(t *testing.T, w *nodeWatch, current *corev1.Node, heartbeat time.Time, window time.Duration) {
	t.Helper()
	start := time.Now()
	var notReadySince time.Time
	if !framework.IsReady(current) {
		notReadySince = start
		t.Logf("node not Ready when the control plane came back: %s", framework.DescribeReady(current))
	}
	last, flips := current, 0
	deadline := time.NewTimer(window)
	defer deadline.Stop()
	for done := false; !done; {
		select {
		case ev, ok := <-w.events:
			if !ok {
				t.Fatalf("watch on node %s ended: %v", current.Name, w.err())
			}
			last = ev.Node
			switch {
			case !framework.IsReady(ev.Node) && notReadySince.IsZero():
				notReadySince = ev.Time
				flips++
				t.Logf("node not Ready at %s: %s", ev.Time.Format(time.RFC3339Nano), framework.DescribeReady(ev.Node))
			case framework.IsReady(ev.Node) && !notReadySince.IsZero():
				d := ev.Time.Sub(notReadySince)
				t.Logf("node Ready again %v later", d.Round(time.Millisecond))
				if flips == 1 {
					from := heartbeat
					if notReadySince.After(from) {
						from = notReadySince
					}
					t.Logf("figure: Node Ready again %v after the first heartbeat after the outage (or after it was marked not Ready, if later)",
						ev.Time.Sub(from).Round(time.Millisecond))
				}
				if d > statusFrequency+slack {
					t.Errorf("node was not Ready for %v while nodeagent ran, want it corrected within one status period (%v, + %v slack)",
						d.Round(time.Millisecond), statusFrequency, slack)
				}
				notReadySince = time.Time{}
			}
		case <-deadline.C:
			done = true
		}
	}
	if !framework.IsReady(last) {
		t.Errorf("node not Ready %v after the control plane came back (since %s): %s", window,
			notReadySince.Format(time.RFC3339Nano), framework.DescribeReady(last))
	}
	t.Logf("node %s over %v after the outage: %d times not Ready; now %s", current.Name, time.Since(start).Round(time.Second), flips,
		framework.DescribeReady(last))
}
