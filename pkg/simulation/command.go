package simulation

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// EventReasonCommandNotInterpreted is the reason of the Warning Event on a pod one of whose containers'
// command the sandbox cannot honour (once per container): the container then behaves as it would
// without a command (nodeagent.io/ annotations and the simulation's defaults).
const EventReasonCommandNotInterpreted = "CommandNotInterpreted"

// commands interprets the simulated containers' commands (pkg/simulation/sandbox), memoizing each
// run's outcome per pod, and holds the volumes the runs share: an emptyDir per pod, and per Node the
// host file system its hostPath volumes mount.
type commands struct {
	limits sandbox.Limits
	// src is where env and volume sources are read from (nil: ConfigMap and Secret references are
	// left out).
	src    *envSources
	runner *sandbox.Runner // the process's budget of runs (nil: NewRunner's defaults, made at the first run)
	// deviceEnv, if set, is the environment the DRA drivers' CDI specs add to a container (simPods.deviceEnv).
	deviceEnv func(p *v1.Pod, ctr *v1.Container) []string
	// clusterDomain is the domain of a pod's subdomain FQDN in its hosts file ("": cluster.local).
	clusterDomain string

	mu    sync.Mutex
	hosts map[string]*sandbox.FS // by Node name
}

// podCommands is what a pod keeps of its containers' runs: the outcome of each (by container name and
// restart count), the containers already warned of, and its emptyDir volumes. Guarded by
// simPods.mu.
type podCommands struct {
	runs map[runKey]runResult
	// createFailed are the runs whose container could not be created at a view before (CreateError).
	createFailed map[runKey]bool
	warned       map[string]bool
	limited      map[string]string // by container: why a run of its command broke a limit (not run again)
	emptyDir     map[string]*sandbox.FS
	objects      map[string]*sandbox.FS // the ConfigMap, Secret, downwardAPI and projected volumes (objectVolume)
	podIPs       []string
	etcHosts     *sandbox.FS // the pod's hosts file, /hosts, mounted at /etc/hosts (hostsMount)
	hostIPs      []v1.HostIP // the Node's addresses nodeagent gave it at its creation, for the downward API
	// execOnly are the files of the runs whose command is not interpreted, for the commands exec'd into
	// them (unknownRun): one per container, its latest run's.
	execOnly map[runKey]*runFiles
}

type runKey struct {
	container string
	restarts  int32
}

type runResult struct {
	out   RunOutcome
	ok    bool
	files *runFiles // the run's files over its time (an honoured run of a command)
	// postStartFailed: its postStart exec hook failed (the kubelet killed it, RunOutcome ends then).
	postStartFailed bool
}

// hostFS returns the Node's host file system (made at its first hostPath mount).
func (c *commands) hostFS(nodeName string) *sandbox.FS {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hosts == nil {
		c.hosts = map[string]*sandbox.FS{}
	}
	fs := c.hosts[nodeName]
	if fs == nil {
		fs = sandbox.NewFS(0)
		// The Node's own /etc/hosts, which a hostNetwork pod's hosts file starts with (hostsMount).
		if err := fs.MkdirAll(path.Dir(etcHostsPath)); err == nil {
			if f, err := fs.OpenFile(etcHostsPath, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
				_, _ = f.Write([]byte(nodeEtcHosts))
				_ = f.Close()
			}
		}
		c.hosts[nodeName] = fs
	}
	return fs
}

// program returns the sandbox's Program of one run of container c of pod p: its command and args with
// the kubelet's $(VAR) expansion, its environment as the kubelet makes it (containerEnv with the pod's
// service links, serviceEnv: the Services read at each run, as the kubelet at each container start; then the
// devices' env of its claims, as a runtime applies the CDI specs' edits), and its volume mounts
// (volumeMounts, their subPathExpr expanded from the env: mountSubPath). The error is the kubelet's
// message of a container config it cannot make (a missing env source that is not optional, a subPath
// that is absolute or steps back: CreateContainerConfigError).
func (c *commands) program(ctx context.Context, p *v1.Pod, ctr *v1.Container, pc *podCommands, restarts int32, start time.Time) (*sandbox.Program, error) {
	services, err := c.src.serviceEnv(ctx, p)
	if err != nil {
		return nil, err
	}
	env, vars, err := containerEnv(ctx, p, ctr, pc.podIPs, c.src, services)
	if err != nil {
		return nil, err
	}
	if c.deviceEnv != nil { // appended, as a runtime applies the CDI specs' edits to the container's env
		env = append(env, c.deviceEnv(p, ctr)...)
	}
	mapping := func(name string) string {
		if v, ok := vars[name]; ok {
			return v
		}
		return "$(" + name + ")"
	}
	prog := &sandbox.Program{Env: env, WorkingDir: ctr.WorkingDir, Hostname: podHostname(p), Now: start,
		Seed: sandbox.Seed(string(p.UID), ctr.Name, strconv.Itoa(int(restarts))), PID: containerPID(p, ctr),
		TerminationMessagePath: ctr.TerminationMessagePath}
	if sc := ctr.SecurityContext; sc != nil && sc.ReadOnlyRootFilesystem != nil {
		prog.ReadOnlyRootfs = *sc.ReadOnlyRootFilesystem
	}
	prog.UID, prog.GID, prog.Groups = containerIdentity(p, ctr)
	prog.NetAdmin = netAdmin(ctr.SecurityContext)
	prog.Cgroup = cgroupFiles(ctr.Resources)
	if psc := p.Spec.SecurityContext; psc != nil && len(psc.Sysctls) > 0 {
		prog.Sysctls = make(map[string]string, len(psc.Sysctls))
		for _, s := range psc.Sysctls {
			prog.Sysctls[sandbox.SysctlDots(s.Name)] = s.Value
		}
	}
	for _, a := range ctr.Command {
		prog.Command = append(prog.Command, expandVars(a, mapping))
	}
	for _, a := range ctr.Args {
		prog.Args = append(prog.Args, expandVars(a, mapping))
	}
	subPaths, err := mountSubPaths(ctr, vars)
	if err != nil {
		return nil, err
	}
	for i, m := range ctr.VolumeMounts {
		m.SubPath = subPaths[i]
		for _, vol := range p.Spec.Volumes {
			if vol.Name != m.Name {
				continue
			}
			switch {
			case vol.EmptyDir != nil:
				fs := pc.emptyDir[vol.Name]
				if fs == nil {
					fs = sandbox.NewFS(0)
					if pc.emptyDir == nil {
						pc.emptyDir = map[string]*sandbox.FS{}
					}
					pc.emptyDir[vol.Name] = fs
				}
				prog.Mounts = append(prog.Mounts, sandbox.Mount{Path: m.MountPath, FS: fs, Root: path.Join("/", m.SubPath), ReadOnly: m.ReadOnly})
			case vol.HostPath != nil:
				prog.Mounts = append(prog.Mounts, sandbox.Mount{Path: m.MountPath, FS: c.hostFS(p.Spec.NodeName),
					Root: path.Join("/", vol.HostPath.Path, m.SubPath), ReadOnly: m.ReadOnly})
			case vol.ConfigMap != nil || vol.Secret != nil || vol.DownwardAPI != nil || vol.Projected != nil:
				fs, err := c.objectVolume(ctx, p, &vol, pc)
				if err != nil {
					return nil, err
				}
				prog.Mounts = append(prog.Mounts, sandbox.Mount{Path: m.MountPath, FS: fs, Root: path.Join("/", m.SubPath), ReadOnly: true})
			}
		}
	}
	m, ok, err := c.hostsMount(p, ctr, pc)
	if err != nil {
		return nil, err
	}
	if ok {
		prog.Mounts = append(prog.Mounts, m)
	}
	return prog, nil
}

// run interprets run restarts of container ctr of pod p within the process's budget: its outcome (ok
// false: no command, or one the sandbox cannot honour, whose reason it returns). A container one of
// whose runs broke a limit of the sandbox is not interpreted again (the same command would cost as
// much again): its later runs are not honoured, for the same reason. err is the end of the wait for
// the budget (ctx done): nothing ran, and the caller may ask again.
func (c *commands) run(ctx context.Context, p *v1.Pod, ctr *v1.Container, pc *podCommands, restarts int32, start time.Time) (runResult, string, error) {
	if len(p.Status.HostIPs) == 0 && len(pc.hostIPs) > 0 {
		// The first runs start before the pod's status has them: the kubelet gives the downward API the
		// Node's addresses then (getHostIPsAnyWay).
		withHost := *p
		withHost.Status.HostIPs = pc.hostIPs
		p = &withHost
	}
	if len(ctr.Command) == 0 && containerReferencesObjects(ctr) {
		_, vars, err := containerEnv(ctx, p, ctr, pc.podIPs, c.src, nil)
		if err == nil {
			_, err = mountSubPaths(ctr, vars)
		}
		if err != nil {
			return runResult{ok: true, out: RunOutcome{CreateError: err}}, "", nil
		}
	}
	entrypoint, command, flags, known := imageCommand(ctr)
	specCtr := ctr // its probes, as the spec gives them
	if known {     // an entrypoint known to the simulator (imageEntrypoints)
		withCommand := *ctr
		withCommand.Command, withCommand.Args = command, nil
		ctr = &withCommand
	}
	if len(ctr.Command) == 0 {
		if isPauseImage(ctr.Image) && len(ctr.Args) == 0 {
			// /pause: until it is stopped; its SIGTERM handler (sigdown) exits 0 at once.
			return runResult{ok: true, out: RunOutcome{Forever: true, ExitsOnSIGTERM: true}}, "", nil
		}
		return runResult{}, "", nil
	}
	if why := pc.limited[ctr.Name]; why != "" {
		return runResult{}, why, nil
	}
	c.mu.Lock()
	if c.runner == nil {
		c.runner = sandbox.NewRunner(sandbox.Budget{})
	}
	runner := c.runner
	c.mu.Unlock()
	prog, err := c.program(ctx, p, ctr, pc, restarts, start)
	if err != nil {
		// The kubelet cannot create the container (not memoized: asked again at the next view, as the
		// kubelet's next sync tries again).
		return runResult{ok: true, out: RunOutcome{CreateError: err}}, "", nil
	}
	res, err := runner.Run(ctx, prog, c.limits)
	if err != nil {
		return runResult{}, "", fmt.Errorf("container %s: %w", ctr.Name, err)
	}
	if !res.Honoured {
		if res.Limit {
			if pc.limited == nil {
				pc.limited = map[string]string{}
			}
			pc.limited[ctr.Name] = res.Reason
		}
		return runResult{}, res.Reason, nil
	}
	rf := &runFiles{prog: *prog, layer: res.Layer}
	rf.prog.Command, rf.prog.Args = nil, nil
	out := RunOutcome{Forever: res.Forever, Duration: res.Duration, ExitCode: res.ExitCode,
		Output: res.Output, TerminationMessage: res.TerminationMessage}
	if entrypoint.sigterm != nil {
		out.ExitsOnSIGTERM, out.SIGTERMExitCode = true, *entrypoint.sigterm
	}
	if hasExecProbe(ctr) {
		out.Probe = c.probeAnswer(p, ctr, rf)
	}
	if known {
		out.Probe = serverProbes(p, specCtr, entrypoint, flags, out.Probe)
	}
	failed, err := c.postStart(ctx, p, ctr, rf, &out)
	if err != nil {
		return runResult{}, "", fmt.Errorf("container %s: postStart: %w", ctr.Name, err)
	}
	return runResult{ok: true, out: out, files: rf, postStartFailed: failed}, "", nil
}

// hasExecProbe reports whether c has a probe with an exec handler.
func hasExecProbe(c *v1.Container) bool {
	for _, pr := range []*v1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if pr != nil && pr.Exec != nil {
			return true
		}
	}
	return false
}

// containerPID is the shell's PID in container ctr of p: 1, the first process of the container's own
// PID namespace; with shareProcessNamespace the pod's pause process is 1, and each container's first
// process is given 2 onwards in the spec's order (init containers first), as they start in that order.
func containerPID(p *v1.Pod, ctr *v1.Container) int {
	if p.Spec.ShareProcessNamespace == nil || !*p.Spec.ShareProcessNamespace {
		return 1
	}
	pid := 2
	for _, l := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range l {
			if l[i].Name == ctr.Name {
				return pid
			}
			pid++
		}
	}
	return pid
}

// pauseRepositories are the repositories of the pause image (the kubelet's sandbox image, and the e2e
// suite's "notTerminate" container): its entrypoint, /pause, is known to run until it is stopped,
// whatever the pod's owner, and to exit 0 at once on SIGTERM or SIGINT (its sigdown handler), so that a
// kubelet deletes its pod in about a second, not at the grace period (RunOutcome.ExitsOnSIGTERM).
var pauseRepositories = map[string]bool{"registry.k8s.io/pause": true, "k8s.gcr.io/pause": true, "gcr.io/google-containers/pause": true}

// isPauseImage reports whether image is the pause image (its repository one of pauseRepositories);
// it does not allocate.
func isPauseImage(image string) bool {
	pause, _ := lookupRepository(pauseRepositories, image)
	return pause
}

// imageRepository returns the repository of image reference image: its normalized name without tag or
// digest, as containerd gives it (github.com/distribution/reference's ParseNormalizedNamed, then
// Name()): "busybox:1.36", "docker.io/busybox" and "index.docker.io/library/busybox@sha256:…" are
// "docker.io/library/busybox", "user/app" is "docker.io/user/app", "localhost:5000/app:v1"
// "localhost:5000/app". It does not validate image (an invalid reference yields some string), and
// allocates only where the docker.io defaults add to what image spells.
func imageRepository(image string) string {
	prefix, name, _ := splitImage(image)
	if prefix == "" {
		return name
	}
	return prefix + name
}

// Docker Hub's domains and official-image path, as github.com/distribution/reference normalizes them.
const (
	dockerDomain        = "docker.io"
	legacyDockerDomain  = "index.docker.io"
	officialImagePrefix = "docker.io/library/"
)

// splitImage splits image reference image into its normalized repository, prefix+name, and what
// follows it in image: name is image's own spelling (a substring), prefix what the docker.io
// defaults add ("", "docker.io/" or "docker.io/library/", name then without its index.docker.io/
// or docker.io/ domain), suffix the ":tag", "@digest" or ":tag@digest" (possibly ""). The rules are
// distribution/reference's splitDockerDomain: the first path component is a domain when it holds a
// '.' or ':', is "localhost" or has an upper-case letter; otherwise the domain is docker.io, and a
// docker.io repository of one component is under library/.
func splitImage(image string) (prefix, name, suffix string) {
	name, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndexByte(name, ':'); i >= 0 && !strings.Contains(name[i:], "/") {
		name = name[:i]
	}
	suffix = image[len(name):]
	domain, rest, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		return officialImagePrefix, name, suffix
	case domain == dockerDomain || domain == legacyDockerDomain:
		if !strings.Contains(rest, "/") {
			return officialImagePrefix, rest, suffix
		}
		if domain == legacyDockerDomain {
			return dockerDomain + "/", rest, suffix
		}
		return "", name, suffix
	case strings.IndexByte(domain, '.') < 0 && strings.IndexByte(domain, ':') < 0 && domain != "localhost" && strings.ToLower(domain) == domain:
		return dockerDomain + "/", name, suffix
	}
	return "", name, suffix
}

// lookupRepository returns m's value for image's repository (imageRepository), and whether m has
// one, without allocating: a key the docker.io defaults lengthen is built on the stack.
func lookupRepository[V any](m map[string]V, image string) (V, bool) {
	prefix, name, _ := splitImage(image)
	if prefix == "" {
		v, ok := m[name]
		return v, ok
	}
	var buf [128]byte
	v, ok := m[string(append(append(buf[:0], prefix...), name...))]
	return v, ok
}

// podHostname is the pod's host name as the kubelet gives it (spec.hostname, else the pod's name,
// cut to 63 characters).
func podHostname(p *v1.Pod) string {
	h := p.Name
	if p.Spec.Hostname != "" {
		h = p.Spec.Hostname
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// fieldRefValue is a downward API field's value (the kubelet's podFieldSelectorRuntimeValue and
// fieldpath.ExtractFieldPathAsString); ok false for a field not known here.
func fieldRefValue(p *v1.Pod, fieldPath string, podIPs []string) (string, bool) {
	if len(podIPs) == 0 {
		for _, ip := range p.Status.PodIPs {
			podIPs = append(podIPs, ip.IP)
		}
	}
	var hostIPs []string
	for _, ip := range p.Status.HostIPs {
		hostIPs = append(hostIPs, ip.IP)
	}
	first := func(l []string) string {
		if len(l) > 0 {
			return l[0]
		}
		return ""
	}
	switch fieldPath {
	case "metadata.name":
		return p.Name, true
	case "metadata.namespace":
		return p.Namespace, true
	case "metadata.uid":
		return string(p.UID), true
	case "spec.nodeName":
		return p.Spec.NodeName, true
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, true
	case "status.podIP":
		return first(podIPs), true
	case "status.podIPs":
		return strings.Join(podIPs, ","), true
	case "status.hostIP":
		return first(hostIPs), len(hostIPs) > 0
	case "status.hostIPs":
		return strings.Join(hostIPs, ","), len(hostIPs) > 0
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.Labels, "metadata.annotations": p.Annotations} {
		if key, ok := strings.CutPrefix(fieldPath, prefix+"['"); ok && strings.HasSuffix(key, "']") {
			return m[strings.TrimSuffix(key, "']")], true
		}
	}
	return "", false
}

// expandVars replaces the $(VAR) references in input with mapping's values, $$ with $, as the
// kubelet's expansion.Expand (k8s.io/kubernetes third_party/forked/golang/expansion) does: a reference
// mapping does not know is kept as written.
func expandVars(input string, mapping func(string) string) string {
	if !strings.Contains(input, "$") {
		return input
	}
	var buf bytes.Buffer
	checkpoint := 0
	for cursor := 0; cursor < len(input); cursor++ {
		if input[cursor] == '$' && cursor+1 < len(input) {
			buf.WriteString(input[checkpoint:cursor])
			read, isVar, advance := syntaxWrap(input[cursor+1:])
			if isVar {
				buf.WriteString(mapping(read))
			} else {
				buf.WriteString(read)
			}
			cursor += advance
			checkpoint = cursor + 1
		}
	}
	return buf.String() + input[checkpoint:]
}

// syntaxWrap reads what follows a $: "$" (an escaped $), "(NAME)" (a reference), else the $ and the
// next character as they are; it returns the read text, whether it is a variable name, and how many
// bytes it used.
func syntaxWrap(input string) (string, bool, int) {
	switch input[0] {
	case '$':
		return "$", false, 1
	case '(':
		for i := 1; i < len(input); i++ {
			if input[i] == ')' {
				return input[1:i], true, i + 1
			}
		}
		return "$(", false, 1
	default:
		return "$" + input[:1], false, 1
	}
}

// netAdmin reports whether a container with securityContext sc holds CAP_NET_ADMIN: privileged, or
// its capabilities add NET_ADMIN (CAP_NET_ADMIN) or ALL, and do not drop it (the runtime's default
// set has no NET_ADMIN).
func netAdmin(sc *v1.SecurityContext) bool {
	if sc == nil {
		return false
	}
	if sc.Privileged != nil && *sc.Privileged {
		return true
	}
	if sc.Capabilities == nil {
		return false
	}
	has := func(l []v1.Capability) bool {
		for _, c := range l {
			if n := strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_"); n == "NET_ADMIN" || n == "ALL" {
				return true
			}
		}
		return false
	}
	return has(sc.Capabilities.Add) && !has(sc.Capabilities.Drop)
}
