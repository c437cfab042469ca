package simulation

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
			s := newCommandSim()
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "srv", Namespace: "ns", UID: "uid-srv", Annotations: tc.ann},
				Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyAlways,
					Containers: []v1.Container{{Name: "c", Image: agnhostImage, Command: tc.command, Args: tc.args,
						LivenessProbe: tc.liveness, ReadinessProbe: tc.readness}}}}
			s.startPod(t, p)
			c := s.podStatusAt(t, p, tc.at).Status.Containers[0]
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

// TestImageRepository: an image reference's repository as github.com/distribution/reference's
// ParseNormalizedNamed(image).Name() gives it (v0.6.0, each want checked against it), for the pause and
// entrypoint tables' lookups; and NormalizeImage on the same references.
func TestImageRepository(t *testing.T) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		image, want, normalized string
	}{
		{"busybox", "docker.io/library/busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox", "docker.io/library/busybox:1.36"},
		{"busybox" + digest, "docker.io/library/busybox", "docker.io/library/busybox" + digest},
		{"busybox:1.36" + digest, "docker.io/library/busybox", "docker.io/library/busybox:1.36" + digest},
		{"library/busybox", "docker.io/library/busybox", "docker.io/library/busybox:latest"},
		{"user/app", "docker.io/user/app", "docker.io/user/app:latest"},
		{"docker.io/busybox", "docker.io/library/busybox", "docker.io/library/busybox:latest"},
		{"docker.io/library/busybox:latest", "docker.io/library/busybox", "docker.io/library/busybox:latest"},
		{"index.docker.io/user/app:v1", "docker.io/user/app", "docker.io/user/app:v1"},
		{"index.docker.io/busybox", "docker.io/library/busybox", "docker.io/library/busybox:latest"},
		{"localhost/app", "localhost/app", "localhost/app:latest"},
		{"localhost:5000/app:v1", "localhost:5000/app", "localhost:5000/app:v1"},
		{"myregistry:5000/ns/app" + digest, "myregistry:5000/ns/app", "myregistry:5000/ns/app" + digest},
		{"[::1]:5000/app:v1", "[::1]:5000/app", "[::1]:5000/app:v1"},
		{"Foo/bar", "Foo/bar", "Foo/bar:latest"}, // an upper-case first component is a domain
		{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause", "registry.k8s.io/pause:3.10"},
		{agnhostImage, agnhostRepository, agnhostImage},
	} {
		t.Run(tc.image, func(t *testing.T) {
			if got := imageRepository(tc.image); got != tc.want {
				t.Errorf("imageRepository = %q, want %q", got, tc.want)
			}
			if got := NormalizeImage(tc.image); got != tc.normalized {
				t.Errorf("NormalizeImage = %q, want %q", got, tc.normalized)
			}
			m := map[string]int{tc.want: 1}
			if v, ok := lookupRepository(m, tc.image); !ok || v != 1 {
				t.Errorf("lookupRepository = %v %v, want 1 true", v, ok)
			}
		})
	}
}

// TestHasCommandAllocs: deciding whether a pod's run is interpreted (hasCommand, at every view of
// every pod) allocates nothing: for an image the sandbox does not know, short or with a registry, and
// for agnhost entrypoint-tester, whose command (its printed argv) is built only when it runs.
func TestHasCommandAllocs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ctr     v1.Container
		decides bool
	}{
		{"an image with a registry", v1.Container{Image: "registry.example/app:1"}, false},
		{"a docker.io short name", v1.Container{Image: "busybox:1.36"}, false},
		{"a docker.io name with a long path", v1.Container{Image: "someorganisation/some-rather-long-repository-name-beyond-32-bytes:v1"}, false},
		{"agnhost entrypoint-tester", v1.Container{Image: agnhostImage, Args: []string{"entrypoint-tester", "override", "arguments"}}, true},
		{"agnhost netexec", v1.Container{Image: agnhostImage, Args: []string{"netexec", "--http-port=8080"}}, false},
		{"agnhost's image defaults", v1.Container{Image: agnhostImage}, true},
		{"the pause image", v1.Container{Image: "registry.k8s.io/pause:3.10"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ctr.Name = "c"
			p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{tc.ctr}}}
			if got := hasCommand(p); got != tc.decides {
				t.Errorf("hasCommand = %v, want %v", got, tc.decides)
			}
			if n := testing.AllocsPerRun(100, func() { hasCommand(p) }); n != 0 {
				t.Errorf("hasCommand allocates %v times, want 0", n)
			}
		})
	}
}

// TestEntrypointDecidesAsItRuns: for every known entrypoint (imageEntrypoints), and the ways a
// container selects it or not (its image's defaults, args, a command naming a binary of the image or
// another, arguments a subcommand may not take), the decision looked up without building anything
// (commandDecides) is what running the container decides (commands.run interprets it): the table and
// the builders cannot drift.
func TestEntrypointDecidesAsItRuns(t *testing.T) {
	images := map[string]string{agnhostRepository: agnhostImage, nonewprivsRepository: "registry.k8s.io/e2e-test-images/nonewprivs:1.3"}
	for key := range imageEntrypoints {
		img := entrypointImages[key.repository]
		image, ok := images[key.repository]
		if !ok {
			t.Fatalf("no image for repository %q: add one to this test", key.repository)
		}
		ctrs := map[string]v1.Container{"neither command nor args": {}, "args x": {Args: []string{"x"}}, "command sh": {Command: []string{"sh", "-c", "exit 3"}}}
		if key.subcommand != "" {
			ctrs["args "+key.subcommand] = v1.Container{Args: []string{key.subcommand}}
			ctrs["args "+key.subcommand+" --port=81"] = v1.Container{Args: []string{key.subcommand, "--port=81"}}
			for bin := range img.binaries {
				ctrs["command "+bin+" "+key.subcommand] = v1.Container{Command: []string{bin, key.subcommand}}
				ctrs["command "+bin+", args "+key.subcommand+" a"] = v1.Container{Command: []string{bin}, Args: []string{key.subcommand, "a"}}
			}
		}
		for name, ctr := range ctrs {
			t.Run(key.repository+" "+key.subcommand+": "+name, func(t *testing.T) {
				ctr.Name, ctr.Image = "c", image
				p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: v1.PodSpec{Containers: []v1.Container{ctr}}}
				r, why, err := (&commands{}).run(context.Background(), p, &p.Spec.Containers[0], &podCommands{}, 0, time.Unix(0, 0))
				if err != nil {
					t.Fatal(err)
				}
				// Interpreted, or given to the sandbox which told why it cannot honour the command.
				ran := r.ok || why != ""
				if decides := commandDecides(&p.Spec.Containers[0]); decides != ran {
					t.Errorf("commandDecides = %v, but running it: interpreted %v, not honoured %q (%+v)", decides, r.ok, why, r.out)
				}
			})
		}
	}
}
