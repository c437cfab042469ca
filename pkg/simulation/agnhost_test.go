package simulation

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

const agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.56"

func httpProbe(path string, port int, initialDelay, failureThreshold int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}},
		InitialDelaySeconds: initialDelay, FailureThreshold: failureThreshold}
}

// TestAgnhostServerProbes: the kubelet's HTTP, TCP and gRPC probes of agnhost's servers answer as the
// servers do (test/images/agnhost liveness, test-webserver, grpc-health-checking), through simPods:
// the sig-node Probing conformance specs' pods, each at the spec's observation times.
func TestAgnhostServerProbes(t *testing.T) {
	grpc := func(port int32, initialDelay int32) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: port}}, InitialDelaySeconds: initialDelay, TimeoutSeconds: 5, FailureThreshold: 1}
	}
	tcp := &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, InitialDelaySeconds: 15, FailureThreshold: 1}
	grpcCommand := []string{"/agnhost", "grpc-health-checking"}
	for _, tc := range []struct {
		name               string
		command, args      []string
		liveness, readness *v1.Probe
		ann                map[string]string
		at                 time.Duration
		restarts           int32
		ready              bool
	}{
		// "should be restarted with a /healthz http liveness probe": /healthz 500 after 10 s.
		{name: "liveness /healthz: restarted at the first probe", args: []string{"liveness"}, liveness: httpProbe("/healthz", 8080, 15, 1), at: 16 * time.Second, restarts: 1},
		{name: "liveness /healthz: not before it", args: []string{"liveness"}, liveness: httpProbe("/healthz", 8080, 15, 1), at: 14 * time.Second},
		// "should have monotonically increasing restart count": each run fails 10 s after its start.
		{name: "liveness /healthz: restarts keep coming (the spec wants 5 within its 6 min)", args: []string{"liveness"}, liveness: httpProbe("/healthz", 8080, 5, 1), at: 5 * time.Minute, restarts: 6},
		{name: "liveness: a local redirect to /healthz fails", args: []string{"liveness"}, liveness: httpProbe("/redirect?loc=%2Fhealthz", 8080, 15, 1), at: 16 * time.Second, restarts: 1},
		{name: "liveness: a redirect to another host succeeds", args: []string{"liveness"}, liveness: httpProbe("/redirect?loc=http%3A%2F%2F0.0.0.0%2F", 8080, 15, 1), at: 2 * time.Minute},
		{name: "liveness: tcp 8080 served", args: []string{"liveness"}, liveness: tcp, at: 2 * time.Minute},
		{name: "liveness: another port refused", args: []string{"liveness"}, liveness: httpProbe("/started", 8081, 15, 1), at: 16 * time.Second, restarts: 1},
		{name: "liveness: an annotation answers instead", args: []string{"liveness"}, liveness: httpProbe("/healthz", 8080, 15, 1), ann: map[string]string{AnnotationLivenessProbe: "pass"}, at: 2 * time.Minute},
		// "with readiness probe that fails should never be ready and never restart": port 81.
		{name: "test-webserver: readiness on port 81 never ready", args: []string{"test-webserver"}, readness: httpProbe("/", 81, 0, 3), at: time.Minute},
		{name: "test-webserver: readiness on port 80 ready", args: []string{"test-webserver"}, readness: httpProbe("/", 80, 0, 3), at: time.Minute, ready: true},
		{name: "test-webserver --port=8000: readiness on port 8000 ready", args: []string{"test-webserver", "--port=8000"}, readness: httpProbe("/", 8000, 0, 3), at: time.Minute, ready: true},
		// "should be restarted with a GRPC liveness probe" (port 2333), "should *not* be ..." (5000).
		{name: "grpc-health-checking: the wrong port restarts", command: grpcCommand, liveness: grpc(2333, 60), at: 61 * time.Second, restarts: 1},
		{name: "grpc-health-checking: 5000 serving", command: grpcCommand, liveness: grpc(5000, 15), at: 3 * time.Minute},
		{name: "grpc-health-checking --delay-unhealthy-sec 20: restarted", command: append(grpcCommand, "--delay-unhealthy-sec", "20"), liveness: grpc(5000, 15), at: 26 * time.Second, restarts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			clk := testingclock.NewFakeClock(start)
			s := newSimPods(Behaviour{}, "fakeRuntime", record.NewFakeRecorder(100), clk)
			s.commands = &commands{}
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "srv", Namespace: "ns", UID: "uid-srv", Annotations: tc.ann},
				Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyAlways,
					Containers: []v1.Container{{Name: "c", Image: agnhostImage, Command: tc.command, Args: tc.args,
						LivenessProbe: tc.liveness, ReadinessProbe: tc.readness}}}}
			ctx := context.Background()
			if err := s.CreatePod(ctx, p); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetPodStatus(ctx, p); err != nil {
				t.Fatal(err)
			}
			clk.SetTime(start.Add(tc.at))
			r, err := s.GetPodStatus(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			c := r.Status.Containers[0]
			if c.RestartCount != tc.restarts || (tc.readness != nil && c.Ready != tc.ready) {
				t.Errorf("at +%v: restarts %d ready %v, want %d %v (state %+v)", tc.at, c.RestartCount, c.Ready, tc.restarts, tc.ready, c.State)
			}
		})
	}
}

// TestImageCommand: which containers' entrypoints are known, and their flags.
func TestImageCommand(t *testing.T) {
	for _, tc := range []struct {
		name          string
		image         string
		command, args []string
		want          bool
		flags         []string
	}{
		{"agnhost etc-hosts", agnhostImage, nil, []string{"etc-hosts"}, true, []string{}},
		{"agnhost pause with an argument: not known", agnhostImage, nil, []string{"pause", "x"}, false, nil},
		{"agnhost liveness by digest", "registry.k8s.io/e2e-test-images/agnhost@sha256:abc", nil, []string{"liveness"}, true, []string{}},
		{"/agnhost grpc-health-checking with flags", agnhostImage, []string{"/agnhost", "grpc-health-checking"}, []string{"--port=6000"}, true, []string{"--port=6000"}},
		{"agnhost netexec: not known", agnhostImage, nil, []string{"netexec"}, false, nil},
		{"sh in agnhost: not an entrypoint", agnhostImage, []string{"sh", "-c", "true"}, nil, false, nil},
		{"busybox", "busybox", nil, []string{"liveness"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, flags, ok := imageCommand(&v1.Container{Image: tc.image, Command: tc.command, Args: tc.args})
			if ok != tc.want || (ok && len(flags) != len(tc.flags)) {
				t.Errorf("imageCommand = %v %q, want %v %q", ok, flags, tc.want, tc.flags)
			}
		})
	}
}

// TestAgnhostEntrypoint: the Containers conformance specs' pods: agnhost's image defaults (ENTRYPOINT
// /agnhost, CMD pause) and entrypoint-tester printing its argv, the container's command and args
// overriding them.
func TestAgnhostEntrypoint(t *testing.T) {
	for _, tc := range []struct {
		name          string
		command, args []string
		want          string // the first line of the output
		forever       bool
	}{
		{name: "image defaults: pause", want: "Paused", forever: true},
		{name: "override arguments", args: []string{"entrypoint-tester", "override", "arguments"}, want: "[/agnhost entrypoint-tester override arguments]"},
		{name: "override command", command: []string{"/agnhost-2"}, args: []string{"entrypoint-tester"}, want: "[/agnhost-2 entrypoint-tester]"},
		{name: "override command and arguments", command: []string{"/agnhost-2"}, args: []string{"entrypoint-tester", "override", "arguments"}, want: "[/agnhost-2 entrypoint-tester override arguments]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: agnhostImage, Command: tc.command, Args: tc.args}}}}
			r, why, err := (&commands{}).run(context.Background(), p, &p.Spec.Containers[0], &podCommands{}, 0, time.Unix(0, 0))
			if err != nil || !r.ok {
				t.Fatalf("not interpreted: %q %v", why, err)
			}
			if len(r.out.Output) == 0 || r.out.Output[0].Text != tc.want || r.out.Forever != tc.forever || r.out.ExitCode != 0 {
				t.Errorf("run = %+v, want first line %q, forever %v, exit 0", r.out, tc.want, tc.forever)
			}
		})
	}
}

// TestNonewprivs: the Security Context AllowPrivilegeEscalation specs' nonewprivs image prints its
// effective uid: 0 (its setuid bit) unless allowPrivilegeEscalation is false, then runAsUser's.
func TestNonewprivs(t *testing.T) {
	uid := int64(1000)
	for _, tc := range []struct {
		name string
		ape  *bool
		want string
	}{
		{"unset: escalates", nil, "Effective uid: 0"},
		{"true: escalates", ptrTo(true), "Effective uid: 0"},
		{"false: no_new_privs", ptrTo(false), "Effective uid: 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/e2e-test-images/nonewprivs:1.3",
					SecurityContext: &v1.SecurityContext{AllowPrivilegeEscalation: tc.ape, RunAsUser: &uid}}}}}
			r, why, err := (&commands{}).run(context.Background(), p, &p.Spec.Containers[0], &podCommands{}, 0, time.Unix(0, 0))
			if err != nil || !r.ok {
				t.Fatalf("not interpreted: %q %v", why, err)
			}
			if len(r.out.Output) != 1 || r.out.Output[0].Text != tc.want || r.out.Forever || r.out.ExitCode != 0 {
				t.Errorf("run = %+v, want %q and exit 0", r.out, tc.want)
			}
		})
	}
}

// TestNetAdmin: CAP_NET_ADMIN from the container's securityContext (the Security Context "privileged"
// specs' `ip link add`).
func TestNetAdmin(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   *v1.SecurityContext
		want bool
	}{
		{"none", nil, false},
		{"privileged: false", &v1.SecurityContext{Privileged: ptrTo(false)}, false},
		{"privileged", &v1.SecurityContext{Privileged: ptrTo(true)}, true},
		{"adds NET_ADMIN", &v1.SecurityContext{Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}}}, true},
		{"adds CAP_NET_ADMIN", &v1.SecurityContext{Capabilities: &v1.Capabilities{Add: []v1.Capability{"CAP_NET_ADMIN"}}}, true},
		{"adds ALL, drops NET_ADMIN", &v1.SecurityContext{Capabilities: &v1.Capabilities{Add: []v1.Capability{"ALL"}, Drop: []v1.Capability{"NET_ADMIN"}}}, false},
		{"adds NET_RAW", &v1.SecurityContext{Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_RAW"}}}, false},
	} {
		if got := netAdmin(tc.sc); got != tc.want {
			t.Errorf("%s: netAdmin = %v, want %v", tc.name, got, tc.want)
		}
	}
}
