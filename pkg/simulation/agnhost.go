package simulation

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// agnhostRepository is the e2e suite's agnhost image, whose entrypoint (/agnhost) is known for the
// subcommands of imageEntrypoints.
const agnhostRepository = "registry.k8s.io/e2e-test-images/agnhost"

// imageEntrypoint is what a known image's entrypoint does with the container's arguments: the command
// the sandbox interprets in its place; when the process has a SIGTERM handler, the code it exits
// with at once on SIGTERM (RunOutcome.ExitsOnSIGTERM, SIGTERMExitCode; nil: PID 1 without one); and,
// for a server, what it answers the kubelet's HTTP, TCP and gRPC probes (serves; nil: none known).
type imageEntrypoint struct {
	command []string
	// build, if set, makes the command from the container and its process's argv (argv0, the
	// subcommand and its arguments), in place of command, for an entrypoint whose effect depends on
	// them; called only to run the container (imageCommand), never to decide (entrypointOf).
	build func(ctr *v1.Container, argv []string) []string
	// args: the subcommand takes arguments; without, a container giving it some is not known.
	args    bool
	sigterm *int32
	// serves answers a probe of the server started with flags (the subcommand's arguments): ok false
	// when the handler is not one it knows the answer of (an exec probe, a TLS server).
	serves func(flags []string, probe *v1.Probe) (b ProbeBehaviour, ok bool)
}

// entrypointKey names a known entrypoint: its image's repository (imageRepository) and the
// subcommand its multi-call binary runs ("" for an image whose entrypoint is one program).
type entrypointKey struct{ repository, subcommand string }

// imageEntrypoints are the entrypoints the sandbox interprets, by image repository and subcommand:
// agnhost's subcommands as the commands doing what they do (k8s.io/kubernetes test/images/agnhost,
// v1.37.2):
//   - with no command and no args, the image's CMD: pause;
//   - entrypoint-tester prints its process's argv as Go's %v of os.Args ("[/agnhost entrypoint-tester
//     a b]", the binary as the container's command names it: /agnhost-2 too) and exits 0;
//   - etc-hosts prints /etc/hosts with fmt.Println (dns printHostsFile: its content and a newline);
//   - pause prints "Paused" and "Signals registered", then waits for SIGINT or SIGTERM, on which it
//     exits 2 (pause.pause; its termination message, "exiting because of signal", is not written);
//   - liveness serves HTTP on 8080: /healthz answers 200 for its first 10 s, then 500; /started 200;
//     /redirect?loc=L redirects to L (liveness.main);
//   - test-webserver serves HTTP on --port (80): the files of the image by path, / its root;
//   - grpc-health-checking serves the gRPC health service on --port (5000), SERVING, NOT_SERVING
//     from --delay-unhealthy-sec on (never when negative, the default), and HTTP on --http-port
//     (8080).
//
// The servers run until they are stopped, without a SIGTERM handler (the Go runtime's default: as PID
// 1 the SIGTERM is ignored and the kubelet kills them at the grace period). And the nonewprivs
// image's entrypoint (nonewprivs).
var imageEntrypoints = map[entrypointKey]imageEntrypoint{
	{agnhostRepository, "etc-hosts"}:            {command: []string{"sh", "-c", "cat /etc/hosts; echo"}},
	{agnhostRepository, "pause"}:                {command: []string{"sh", "-c", "echo Paused; echo Signals registered; sleep infinity"}, sigterm: ptr.To[int32](2)},
	{agnhostRepository, "liveness"}:             {command: []string{"sleep", "infinity"}, args: true, serves: agnhostLiveness},
	{agnhostRepository, "test-webserver"}:       {command: []string{"sleep", "infinity"}, args: true, serves: agnhostTestWebserver},
	{agnhostRepository, "grpc-health-checking"}: {command: []string{"sleep", "infinity"}, args: true, serves: agnhostGRPCHealthChecking},
	{agnhostRepository, "entrypoint-tester"}: {args: true, build: func(_ *v1.Container, argv []string) []string {
		return []string{"echo", "[" + strings.Join(argv, " ") + "]"}
	}},
	{nonewprivsRepository, ""}: {build: nonewprivs},
}

// entrypointImage is how a known image's entrypoint is given its subcommand: a container without a
// command runs entrypoint with its args (nil: the entrypoint takes none, and is known only for a
// container with neither command nor args), one with neither runs cmd (the image's ENTRYPOINT and
// CMD), one whose command names a binary of binaries runs its command and args.
type entrypointImage struct {
	repository      string
	entrypoint, cmd []string
	binaries        map[string]bool
}

// entrypointImages are the repositories of imageEntrypoints (agnhost: the binaries a command may name,
// /agnhost-2 the Containers conformance specs' override of the entrypoint).
var entrypointImages = map[string]entrypointImage{
	agnhostRepository: {repository: agnhostRepository, entrypoint: []string{"/agnhost"}, cmd: []string{"/agnhost", "pause"},
		binaries: map[string]bool{"/agnhost": true, "agnhost": true, "/agnhost-2": true}},
	nonewprivsRepository: {repository: nonewprivsRepository},
}

// processArgv is a container's process argv, head then args, not built: deciding allocates nothing.
type processArgv struct{ head, args []string }

func (a processArgv) len() int { return len(a.head) + len(a.args) }

func (a processArgv) at(i int) string {
	if i < len(a.head) {
		return a.head[i]
	}
	return a.args[i-len(a.head)]
}

// entrypointOf returns the known entrypoint ctr's image runs with ctr's command and args
// (imageEntrypoints), and its process's argv, without building either; ok false when the image or
// subcommand is not known, the command names no binary of the image, or a subcommand that takes no
// arguments is given some. It does not allocate (hasCommand calls it for every pod viewed).
func entrypointOf(ctr *v1.Container) (e imageEntrypoint, argv processArgv, ok bool) {
	img, ok := lookupRepository(entrypointImages, ctr.Image)
	if !ok {
		return e, argv, false
	}
	switch {
	case len(ctr.Command) == 0 && len(ctr.Args) == 0:
		argv.head = img.cmd
	case img.entrypoint == nil:
		return e, argv, false
	case len(ctr.Command) == 0:
		argv = processArgv{head: img.entrypoint, args: ctr.Args}
	case img.binaries[ctr.Command[0]]:
		argv = processArgv{head: ctr.Command, args: ctr.Args}
	default:
		return e, argv, false
	}
	key := entrypointKey{repository: img.repository}
	if img.entrypoint != nil {
		if argv.len() < 2 {
			return e, argv, false
		}
		key.subcommand = argv.at(1)
	}
	e, ok = imageEntrypoints[key]
	if !ok || (!e.args && argv.len() > 2) {
		return imageEntrypoint{}, processArgv{}, false
	}
	return e, argv, true
}

// imageCommand returns what the entrypoint of ctr's image does with its arguments (entrypointOf), the
// command the sandbox interprets for it (built now), and the arguments after the subcommand: for
// agnhost without a command, the args (none: the image's CMD, pause) with the entrypoint /agnhost;
// with a command naming an agnhost binary, that command. ok false when entrypointOf's is.
func imageCommand(ctr *v1.Container) (e imageEntrypoint, command, flags []string, ok bool) {
	e, a, ok := entrypointOf(ctr)
	if !ok {
		return e, nil, nil, false
	}
	argv := slices.Concat(a.head, a.args)
	command = e.command
	if e.build != nil {
		command = e.build(ctr, argv)
	}
	if len(argv) >= 2 {
		flags = argv[2:]
	}
	return e, command, flags, true
}

// nonewprivsRepository is the e2e suite's nonewprivs image: agnhost nonewprivs as a setuid-root
// binary, its entrypoint (test/images/nonewprivs).
const nonewprivsRepository = "registry.k8s.io/e2e-test-images/nonewprivs"

// nonewprivs is the nonewprivs image's entrypoint: it prints "Effective uid: N" and exits 0, N being 0
// (the setuid bit honoured) unless the container's allowPrivilegeEscalation is false, which makes the
// kubelet set no_new_privs (the container's own uid then, id -u's).
func nonewprivs(ctr *v1.Container, _ []string) []string {
	if sc := ctr.SecurityContext; sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		return []string{"sh", "-c", `echo "Effective uid: $(id -u)"`}
	}
	return []string{"echo", "Effective uid: 0"}
}

// flagValue returns the value of --name (or -name) in flags, as --name=V or --name V; def when absent.
func flagValue(flags []string, name, def string) string {
	for i, f := range flags {
		f = strings.TrimPrefix(strings.TrimPrefix(f, "-"), "-")
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
		if f == name && i+1 < len(flags) {
			return flags[i+1]
		}
	}
	return def
}

// probePort returns the port a probe's HTTP, TCP or gRPC handler reaches (a named port is not known:
// ok false), and which handler.
func probePort(probe *v1.Probe) (port int, kind string, ok bool) {
	var p intstr.IntOrString
	switch {
	case probe.HTTPGet != nil:
		p, kind = probe.HTTPGet.Port, "http"
	case probe.TCPSocket != nil:
		p, kind = probe.TCPSocket.Port, "tcp"
	case probe.GRPC != nil:
		return int(probe.GRPC.Port), "grpc", true
	default:
		return 0, "", false
	}
	if p.Type != intstr.Int {
		return 0, "", false
	}
	return p.IntValue(), kind, true
}

var (
	probePassing = ProbeBehaviour{Mode: ProbePass}
	probeRefused = ProbeBehaviour{Mode: ProbeFail} // nothing listens on the port, or the server says no
)

// agnhostLiveness answers as agnhost liveness: HTTP and TCP on 8080 (/healthz 200 while at most 10 s
// have passed since its start, then 500; /started 200; /redirect to a path, what that path answers; a
// redirect elsewhere succeeds, as the kubelet takes a non-local redirect; any other path 404), nothing
// on any other port.
func agnhostLiveness(_ []string, probe *v1.Probe) (ProbeBehaviour, bool) {
	port, kind, ok := probePort(probe)
	if !ok {
		return ProbeBehaviour{}, false
	}
	if port != 8080 || kind == "grpc" {
		return probeRefused, true
	}
	if kind == "tcp" {
		return probePassing, true
	}
	path := probe.HTTPGet.Path
	if p, q, _ := strings.Cut(path, "?"); p == "/redirect" {
		loc, err := url.QueryUnescape(strings.TrimPrefix(q, "loc="))
		if err != nil || !strings.HasPrefix(q, "loc=") {
			return probeRefused, true // 400
		}
		if !strings.HasPrefix(loc, "/") {
			return probePassing, true // the kubelet does not follow a redirect to another host: success, with a warning
		}
		path = loc
	}
	switch path {
	case "/healthz":
		return ProbeBehaviour{Mode: ProbeFailAfter, After: 10*time.Second + time.Nanosecond}, true
	case "/started":
		return probePassing, true
	}
	return probeRefused, true // 404
}

// agnhostTestWebserver answers as agnhost test-webserver: HTTP and TCP on --port (80), / its root
// (200); another path is a file of the image, not known; nothing on any other port.
func agnhostTestWebserver(flags []string, probe *v1.Probe) (ProbeBehaviour, bool) {
	port, kind, ok := probePort(probe)
	if !ok {
		return ProbeBehaviour{}, false
	}
	if strconv.Itoa(port) != flagValue(flags, "port", "80") || kind == "grpc" {
		return probeRefused, true
	}
	if kind == "http" && probe.HTTPGet.Path != "/" && probe.HTTPGet.Path != "" {
		return ProbeBehaviour{}, false
	}
	return probePassing, true
}

// agnhostGRPCHealthChecking answers as agnhost grpc-health-checking without TLS: the gRPC health
// service on --port (5000), SERVING, NOT_SERVING from --delay-unhealthy-sec on when it is not
// negative; TCP on it and on --http-port (8080), whose /make-serving and /make-not-serving answer 200;
// nothing on any other port. A TLS server (--tls-cert-file) is not known.
func agnhostGRPCHealthChecking(flags []string, probe *v1.Probe) (ProbeBehaviour, bool) {
	port, kind, ok := probePort(probe)
	if !ok || flagValue(flags, "tls-cert-file", "") != "" {
		return ProbeBehaviour{}, false
	}
	grpcPort, httpPort := flagValue(flags, "port", "5000"), flagValue(flags, "http-port", "8080")
	switch p := strconv.Itoa(port); {
	case p == grpcPort && kind == "grpc":
		delay, err := strconv.Atoi(flagValue(flags, "delay-unhealthy-sec", "-1"))
		if err != nil {
			return ProbeBehaviour{}, false
		}
		if delay >= 0 {
			return ProbeBehaviour{Mode: ProbeFailAfter, After: time.Duration(delay) * time.Second}, true
		}
		return probePassing, true
	case (p == grpcPort || p == httpPort) && kind == "tcp":
		return probePassing, true
	case p == httpPort && kind == "http":
		if path := probe.HTTPGet.Path; path == "/make-serving" || path == "/make-not-serving" {
			return probePassing, true
		}
		return probeRefused, true // 404
	}
	return probeRefused, true
}

// serverProbes returns the probe answers of a container whose image's entrypoint is a server known to
// the simulator (imageEntrypoint.serves), for its HTTP, TCP and gRPC probes that no nodeagent.io/
// probe annotation sets, before exec's (nil: none).
func serverProbes(p *v1.Pod, ctr *v1.Container, e imageEntrypoint, flags []string, exec func(string, *v1.Probe) (ProbeBehaviour, bool)) func(string, *v1.Probe) (ProbeBehaviour, bool) {
	if e.serves == nil {
		return exec
	}
	return func(kind string, probe *v1.Probe) (ProbeBehaviour, bool) {
		if probe.Exec == nil && !probeAnnotated(p, ctr.Name, kind) {
			if b, ok := e.serves(flags, probe); ok {
				return b, true
			}
		}
		if exec != nil {
			return exec(kind, probe)
		}
		return ProbeBehaviour{}, false
	}
}
