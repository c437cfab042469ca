// Package sandbox interprets a simulated container's command in simulated time, so that the command
// decides how long the container runs and how it exits, as a real container's process would: the
// container's command and args are interpreted with mvdan.cc/sh/v3 (its syntax and interp packages:
// a POSIX/Bash parser and interpreter in Go), with every one of the interpreter's handlers replaced:
//
//   - no process is ever started: the programs a container's shell commonly runs (sleep, true, false,
//     expr, touch, cat, head, tail, mkdir, rm, env, printenv, hostname, id, sysctl, seq, basename, dirname, mount,
//     `ip link add`) are implemented
//     here; any other program makes the command not honoured (Result.Honoured false);
//   - no file of the host is opened, stat'ed or listed: files live in in-memory file systems (FS), one
//     per volume the caller mounts (an emptyDir per pod, the Node's host file system for hostPath); a
//     file of the image (anything outside the volumes that the run did not write) is not known, and
//     reading it makes the command not honoured;
//   - sleep N advances the run's simulated time, never the real clock; a sleep past Limits.Horizon
//     (sleep infinity, sleep 1000000 with a shorter horizon) means the container runs until stopped;
//   - loops that sleep: a run that reaches Limits.Steps or Limits.RealTime while it is sleeping (its
//     simulated time advanced within its last SleepWindow steps: `while true; do echo polo; sleep 2;
//     done`) runs until stopped, as past the horizon (Result.Cut); what it did is known up to the
//     simulated time it reached, or, when its output passed MaxOutputBytes, up to the time of the
//     first line that did not fit (its first lines are kept, not its last): its Output and its Layer's
//     changes up to there, nothing after. A busy loop (no sleep in its last SleepWindow steps) is not
//     honoured: the sandbox cannot tell whether, or how, it would end;
//   - what would run concurrently (pipelines, background jobs, coprocesses, process substitution) and
//     what evaluates text as code at run time (eval, source, trap) is not honoured, nor are builtins
//     that look at the host (command, type, hash, ulimit, kill, ...);
//   - each run is bounded: Limits.Steps (commands and loop iterations), Limits.RealTime (wall clock),
//     Limits.Memory and the FS sizes. Memory is bounded before it is allocated: a guard in front of
//     every statement bounds what its expansions may allocate (words, assignments, here-documents,
//     brace expansions) from the variables' sizes, with what the run holds (its variables, the
//     command substitutions being filled, the function calls' parameters and frames), and each
//     command's arguments and output are bounded before it runs (memory.go); a run past the limit
//     stops before the allocation. Runner bounds all runs of a process together (Budget: the runs'
//     memory summed, the runs interpreting at once);
//   - nothing of the host is told: $$ is the container's PID (1), $PPID 0, ~root /root and any other
//     ~user not honoured (the image's users are not known), -O and -G true of every file the run
//     sees (the container's user, root, made them); indirect expansions ${!name} and name references
//     (declare -n), through which the interpreter would read its host's $$ and $PPID, are not
//     honoured.
//
// The result of one run (Run) is the run's simulated duration and exit code, that it runs until
// stopped, or that the command cannot be honoured, with the reason; and what it wrote: each line of its
// standard output and error with its simulated time (the last MaxOutputBytes of them, output.go), and
// its termination message file's content at the exit (Program.TerminationMessagePath). KWOK users describe the same
// outcomes with Stages (a delay and a patch of the container status); here the pod's own command does.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// Limits bound one run. A zero field takes its Default value.
type Limits struct {
	// Steps is the most commands (builtins, programs, function calls) and loop iterations one run may
	// take; more: not honoured.
	Steps int
	// RealTime is the most wall-clock time one run may take; more: not honoured.
	RealTime time.Duration
	// Memory is the most bytes the run may hold: its shell variables (names and values, the
	// container's environment included), the expansions of the statement it runs (an upper bound from
	// the variables' sizes, checked before the statement expands), the output of the command
	// substitutions being filled, the arguments and output of the command it runs, the output it
	// recorded (Result.Output, at most MaxOutputBytes and two lines being written), and 8 KiB per
	// function call and 4 KiB per command substitution in progress (the interpreter's own state). A
	// run that would pass it stops before the allocation: not honoured, Result.Limit.
	Memory int64
	// Horizon is the simulated time past which a run that is still sleeping counts as running until
	// stopped.
	Horizon time.Duration
	// ScriptBytes is the longest script (the command and args together) interpreted.
	ScriptBytes int
}

// DefaultLimits are the limits of a zero Limits field.
var DefaultLimits = Limits{
	Steps:       10000,
	RealTime:    500 * time.Millisecond,
	Memory:      1 << 20,
	Horizon:     366 * 24 * time.Hour,
	ScriptBytes: 64 << 10,
}

func (l Limits) withDefaults() Limits {
	if l.Steps <= 0 {
		l.Steps = DefaultLimits.Steps
	}
	if l.RealTime <= 0 {
		l.RealTime = DefaultLimits.RealTime
	}
	if l.Memory <= 0 {
		l.Memory = DefaultLimits.Memory
	}
	if l.Horizon <= 0 {
		l.Horizon = DefaultLimits.Horizon
	}
	if l.ScriptBytes <= 0 {
		l.ScriptBytes = DefaultLimits.ScriptBytes
	}
	return l
}

// Mount is a volume mounted in the container: the directory Root of FS at Path (absolute).
type Mount struct {
	Path     string
	FS       *FS
	Root     string
	ReadOnly bool
}

// Program is one run of a container: its command and args as the kubelet hands them to the runtime
// (the $(VAR) references expanded), its environment, its mounts and working directory.
type Program struct {
	Command, Args []string
	// Env is the container's environment, NAME=value, as the kubelet makes it (env, the downward API's
	// values, JOB_COMPLETION_INDEX...); HOME, PATH and HOSTNAME are given defaults when absent.
	Env        []string
	Mounts     []Mount
	WorkingDir string // "": /
	Hostname   string
	// Seed makes $RANDOM's sequence (the same seed, the same numbers).
	Seed uint64
	// Now is the simulated time when the run starts (file times).
	Now time.Time
	// PID is the shell's process ID in the container ($$; $PPID is 0): 0 means 1, the container's
	// first process. With a PID namespace shared by the pod's containers (shareProcessNamespace) the
	// pod's pause process is 1 and the caller gives another.
	PID int
	// UID, GID and Groups are the process's user, primary group and supplementary groups (`id`), as
	// the runtime sets them from the container's effective securityContext; 0, 0, none by default
	// (the image's USER and /etc/group are not known).
	UID, GID int64
	Groups   []int64
	// Cgroup are the files of the container's cgroup (v2) as runc writes them from the resources the
	// kubelet gives the container (cpu.max, cpu.weight, memory.max: file name to content), read-only
	// at /sys/fs/cgroup (and `mount -t cgroup2` lists it); nil: /sys/fs/cgroup is not known.
	Cgroup map[string]string
	// UnknownLayer: the container's own layer is not known (an exec into a container whose command is
	// not interpreted): nothing of it but the directories of its mount points, so that a read of any
	// other path of it (/tmp included) is a file the simulator does not know (not honoured).
	UnknownLayer bool
	// Sysctls are the container's namespaced kernel parameters the pod sets (securityContext.sysctls),
	// by their dotted name (kernel.shm_rmid_forced): what `sysctl NAME` and /proc/sys/NAME answer.
	// Any other kernel parameter is not known (not honoured).
	Sysctls map[string]string
	// Rootfs, when set, is the container's own layer the run starts from (kubectl exec and exec probes:
	// the layer of the container's run at their time, Timeline.StateAt); nil: an empty layer, whose
	// changes Result.Layer records.
	Rootfs *FS
	// TerminationMessagePath is the container's terminationMessagePath ("": none): an empty file of the
	// container's own layer when the run starts (the kubelet mounts one there), which the run may
	// write even under /dev; Result.TerminationMessage is its content at the exit.
	TerminationMessagePath string
	// ReadOnlyRootfs is the container's securityContext.readOnlyRootFilesystem: a write to its own layer
	// (outside every volume and the terminationMessagePath the kubelet mounts) fails with EROFS ("Read-only
	// file system"), as runc mounts the rootfs read-only; its volumes keep their own ReadOnly.
	ReadOnlyRootfs bool
	// NetAdmin: the process holds CAP_NET_ADMIN in the pod's network namespace (a privileged container,
	// or one whose capabilities add NET_ADMIN or ALL): `ip link add` is permitted (progIP).
	NetAdmin bool
}

// Result is what one run comes to.
type Result struct {
	// Honoured is false when the command cannot be interpreted faithfully; Reason says why (an unknown
	// program, a file of the image, a limit reached...), and the caller falls back to its default.
	Honoured bool
	Reason   string
	// Forever: the run does not end by itself (it sleeps past the horizon, or it is Cut).
	Forever bool
	// Cut: a Forever run that reached Limits.Steps or Limits.RealTime while it was sleeping (it slept
	// within its last SleepWindow steps): it counts as running until stopped, and what it did is known
	// up to Duration only: its Output (the lines written up to Duration) and its Layer's changes (at or
	// before Duration). See the package doc's "Loops that sleep".
	Cut bool
	// Duration is the run's simulated time until it exits (the sum of its sleeps); for a Cut run the
	// simulated time up to which it is known. ExitCode is its code.
	Duration time.Duration
	ExitCode int32
	// Steps is the number of steps taken.
	// Limit: the run broke one of its Limits (steps, real time, memory, script size); Reason says which.
	// Such a run is stopped before it takes more, and running it again takes as much again: a caller
	// does not run the same command again for the same container.
	Limit bool
	Steps int
	// Output is what the run wrote to its standard output and error, line by line with its simulated
	// time: the last MaxOutputBytes of it; Dropped is how many lines before were not kept. Kept for a
	// run not honoured too, up to where it stopped.
	Output  []Line
	Dropped int
	// TerminationMessage is the last MaxTerminationMessageBytes of Program.TerminationMessagePath's
	// file at the run's exit ("" for a run that does not exit by itself).
	TerminationMessage string
	// Layer is what the run did to its container's own layer, in simulated time (nil with
	// Program.Rootfs set): at most Limits.Memory bytes of changes, past which its writes fail with
	// ENOSPC.
	Layer *Timeline
}

// ErrNoCommand: the container's spec has no command (its image's entrypoint, unknown to the simulator,
// would run); reported as a Result not honoured with this reason.
var ErrNoCommand = errors.New("no command in the container's spec (the image's entrypoint is not known)")

// notHonoured is a handler's error that stops the run: the command cannot be honoured.
type notHonoured struct {
	reason string
	limit  bool // a limit of Limits
}

func (e *notHonoured) Error() string { return e.reason }

func refuse(format string, a ...any) error { return &notHonoured{reason: fmt.Sprintf(format, a...)} }

// refuseLimit is refuse for a run that breaks one of its Limits.
func refuseLimit(format string, a ...any) error {
	return &notHonoured{reason: fmt.Sprintf(format, a...), limit: true}
}

// errForever stops a run that sleeps past the horizon.
var errForever = errors.New("sleeps past the horizon")

// errCut stops a run that reaches its step limit while it sleeps (Result.Cut).
var errCut = errors.New("reached its step limit while sleeping")

// SleepWindow returns how recent a run's last sleep must be, in steps, for a run that reaches its
// step or real-time limit to be Cut (running until stopped) rather than not honoured: a tenth of
// lim.Steps (1 000 by default), so that a loop whose every iteration sleeps is Cut, and a busy loop
// (none of whose last 1 000 steps slept) is not honoured.
func SleepWindow(lim Limits) int { return max(lim.withDefaults().Steps/10, 1) }

// stepName is the command Run inserts at the top of every loop body and condition, so that each
// iteration is a step (counted and checked) even when it runs no command.
const stepName = "__nodeagent_sandbox_step"

// tmpDir is the interpreter's directory for its FIFOs (process substitution, refused anyway): a path
// that cannot exist on any Unix host (/dev/null is not a directory), so that nothing is ever made there.
const tmpDir = "/dev/null/nodeagent-sandbox"

// shells are the programs whose -c script is interpreted.
var shells = map[string]bool{"sh": true, "bash": true, "ash": true, "dash": true, "ksh": true}

// binDirs are the directories a program may be named from (/bin/sleep is sleep).
var binDirs = map[string]bool{"/bin": true, "/usr/bin": true, "/usr/local/bin": true, "/sbin": true, "/usr/sbin": true, "/usr/local/sbin": true}

// refusedBuiltins are the builtins that evaluate text as code, look at the host, or manage jobs.
var refusedBuiltins = map[string]string{
	"eval": "evaluates text as code", "source": "reads a script", ".": "reads a script", "trap": "evaluates text as code",
	"command": "looks programs up on the host", "type": "looks programs up on the host", "hash": "looks programs up on the host",
	"builtin": "runs builtins indirectly", "enable": "changes builtins", "ulimit": "changes the process's limits", "kill": "signals processes",
	"bg": "manages jobs", "fg": "manages jobs", "jobs": "manages jobs", "disown": "manages jobs", "suspend": "manages jobs",
	"alias": "defines aliases", "unalias": "defines aliases", "bind": "is interactive", "complete": "is interactive", "compgen": "is interactive",
	"compopt": "is interactive", "history": "is interactive", "fc": "is interactive", "logout": "is interactive", "newgrp": "changes groups",
}

// Run interprets one run of p within lim and returns its outcome. It never starts a process nor
// touches the host's file system; ctx cancels it (then not honoured). Safe for concurrent use (runs
// over the same FS see each other's files).
func Run(ctx context.Context, p *Program, lim Limits) (res Result) {
	lim = lim.withDefaults()
	script, params, reason := shellScript(p)
	if reason != "" {
		return Result{Reason: reason}
	}
	if n := len(script); n > lim.ScriptBytes {
		return Result{Reason: fmt.Sprintf("the command is %d bytes, more than %d", n, lim.ScriptBytes), Limit: true}
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	if err != nil {
		return Result{Reason: fmt.Sprintf("the command does not parse: %v", err)}
	}
	if reason := check(file); reason != "" {
		return Result{Reason: reason}
	}
	guarded := guards(file)
	// $RANDOM's generator seeded from p.Seed (assigning RANDOM seeds it).
	seed, err := syntax.NewParser().Parse(strings.NewReader("RANDOM="+strconv.FormatUint(p.Seed>>1, 10)), "")
	if err != nil {
		return Result{Reason: fmt.Sprintf("seeding $RANDOM: %v", err)}
	}
	file.Stmts = append(seed.Stmts, file.Stmts...)
	ctx, cancel := context.WithTimeout(ctx, lim.RealTime)
	defer cancel()
	r := &run{p: p, lim: lim, rootfs: p.Rootfs, guarded: guarded, levels: []level{{}}, funcs: funcNames(file)}
	var layer *Timeline
	if r.rootfs == nil {
		r.rootfs, layer = NewLayer(lim.Memory), NewTimeline(lim.Memory)
		r.rootfs.Record(layer, func() time.Duration { return time.Duration(r.sleptNow.Load()) })
	}
	r.out = &output{now: func() time.Duration { r.mu.Lock(); defer r.mu.Unlock(); return r.slept }}
	if p.TerminationMessagePath != "" && path.IsAbs(p.TerminationMessagePath) {
		r.termPath = path.Clean(p.TerminationMessagePath)
	}
	for _, a := range params {
		r.params += int64(len(a)) + 1
	}
	r.prepareRootfs()
	r.makeProcSys()
	r.makeCgroup()
	defer func() {
		if v := recover(); v != nil {
			res = Result{Reason: fmt.Sprintf("the interpreter failed: %v", v), Steps: r.steps}
		}
	}()
	env := &sandboxEnv{vars: r.environ(), hideTMPDIR: true, run: r}
	runner, err := interp.New(
		interp.Env(env),
		func(ir *interp.Runner) error { ir.Dir = r.workingDir(); return nil }, // no stat of a host directory
		interp.Params(append([]string{"--"}, params...)...),
		interp.StdIO(nil, topOut{r.out}, topErr{r.out}),
		interp.CallHandler(r.call),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return r.exec }),
		interp.OpenHandler(r.open),
		interp.ReadDirHandler2(r.readDir),
		interp.StatHandler(r.stat),
		interp.AccessHandler(r.access),
	)
	if err != nil {
		return Result{Reason: fmt.Sprintf("the interpreter: %v", err)}
	}
	runner.Reset()
	env.hideTMPDIR = false // the interpreter has read its FIFO directory; the script sees the container's TMPDIR
	err = runner.Run(ctx, file)
	res = Result{Steps: r.steps, Duration: r.slept}
	switch {
	case r.refused != nil:
		res.Reason, res.Limit = r.refused.reason, r.refused.limit
	case r.forever:
		res.Honoured, res.Forever, res.Cut = true, true, r.cut
	case ctx.Err() != nil && r.sleeping():
		res.Honoured, res.Forever, res.Cut = true, true, true
	case ctx.Err() != nil:
		res.Reason, res.Limit = fmt.Sprintf("took more than %v of real time", lim.RealTime), true
	case err == nil:
		res.Honoured = true
	default:
		var status interp.ExitStatus
		if errors.As(err, &status) {
			res.Honoured, res.ExitCode = true, int32(status)
		} else {
			res.Reason = fmt.Sprintf("the interpreter: %v", err)
		}
	}
	if !res.Honoured {
		res.Duration = 0
	}
	res.Output, res.Dropped = r.out.result()
	if res.Cut {
		// Known up to where it reached, or, when its output passed MaxOutputBytes, up to the time of
		// the first line that did not fit: its first lines, not its last, so that its log from its
		// start is what the command wrote.
		if first, end, ok := r.out.firstLines(); ok {
			res.Output, res.Dropped, res.Duration = first, 0, end
		}
		layer.cut(res.Duration)
	}
	res.Layer = layer
	if res.Honoured && !res.Forever {
		res.TerminationMessage = r.terminationMessage()
	}
	return res
}

// shellScript returns the script to interpret for p and its positional parameters: a shell's -c
// script (sh -c 'script' name args...), else the command and args as one simple command, quoted.
func shellScript(p *Program) (string, []string, string) {
	if len(p.Command) == 0 {
		return "", nil, ErrNoCommand.Error()
	}
	argv := append(append([]string{}, p.Command...), p.Args...)
	prog := argv[0]
	if dir, base := path.Split(prog); dir == "" || binDirs[path.Clean(dir)] {
		prog = base
	}
	if prog == "busybox" && len(argv) > 1 && shells[argv[1]] {
		argv, prog = argv[1:], argv[1]
	}
	if shells[prog] {
		flags := "" // the options before the script, in order
		for i := 1; i < len(argv); i++ {
			a := argv[i]
			if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
				break
			}
			if strings.Trim(a[1:], "eucx") != "" {
				return "", nil, fmt.Sprintf("%s option %q is not interpreted", prog, a)
			}
			flags += strings.ReplaceAll(a[1:], "c", "")
			if !strings.ContainsRune(a, 'c') {
				continue
			}
			if i+1 >= len(argv) {
				return "", nil, fmt.Sprintf("%s -c without a script", prog)
			}
			script := argv[i+1]
			if flags != "" {
				script = "set -" + flags + "\n" + script
			}
			var params []string
			if i+2 < len(argv) {
				params = argv[i+3:] // argv[i+2] is $0
			}
			return script, params, ""
		}
		return "", nil, fmt.Sprintf("%s without -c reads a script file or its standard input", prog)
	}
	words := make([]string, len(argv))
	for i, a := range argv {
		q, err := syntax.Quote(a, syntax.LangBash)
		if err != nil {
			return "", nil, fmt.Sprintf("argument %d cannot be quoted: %v", i, err)
		}
		words[i] = q
	}
	return strings.Join(words, " "), nil, ""
}

// check refuses what the sandbox does not interpret (see the package doc) before anything runs, and
// puts a step at the top of every loop's condition and body.
func check(file *syntax.File) string {
	var reason string
	step := &syntax.Stmt{Cmd: &syntax.CallExpr{Args: []*syntax.Word{{Parts: []syntax.WordPart{&syntax.Lit{Value: stepName}}}}}}
	syntax.Walk(file, func(n syntax.Node) bool {
		if reason != "" {
			return false
		}
		switch n := n.(type) {
		case *syntax.Stmt:
			if n.Background || n.Coprocess || n.Disown {
				reason = "runs a background job"
			}
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				reason = "runs a pipeline (its commands would run concurrently)"
			}
		case *syntax.Lit:
			for _, m := range braceSeq.FindAllStringSubmatch(n.Value, -1) {
				from, _ := strconv.ParseInt(m[1], 10, 64)
				to, _ := strconv.ParseInt(m[2], 10, 64)
				if to-from > maxBraceWords || from-to > maxBraceWords {
					reason = fmt.Sprintf("expands a brace sequence %s of more than %d words", m[0], maxBraceWords)
				}
			}
		case *syntax.CoprocClause:
			reason = "runs a coprocess"
		case *syntax.ProcSubst:
			reason = "uses a process substitution"
		case *syntax.DeclClause:
			for _, a := range n.Args {
				if f := a.Value.Lit(); a.Naked && a.Value != nil && strings.HasPrefix(f, "-") && strings.Contains(f, "n") || n.Variant.Value == "nameref" {
					reason = "makes a name reference (" + n.Variant.Value + " -n; the interpreter would read $$ or $PPID of the host through it)"
				}
			}
		case *syntax.UnaryTest:
			if n.Op == syntax.TsUsrOwn || n.Op == syntax.TsGrpOwn {
				n.Op = syntax.TsExists // every file the run sees is its user's (root's), and its group's
			}
		case *syntax.ArithmExp:
			hostVarsArith(n.X)
		case *syntax.ArithmCmd:
			hostVarsArith(n.X)
		case *syntax.LetClause:
			for _, x := range n.Exprs {
				hostVarsArith(x)
			}
		case *syntax.CStyleLoop:
			hostVarsArith(n.Init)
			hostVarsArith(n.Cond)
			hostVarsArith(n.Post)
		case *syntax.ParamExp:
			if n.Param != nil && hostVars[n.Param.Value] != "" {
				n.Param = &syntax.Lit{ValuePos: n.Param.ValuePos, ValueEnd: n.Param.ValueEnd, Value: hostVars[n.Param.Value]}
			}
			if n.Excl && n.Index == nil && n.Names == 0 {
				reason = "uses an indirect expansion ${!name} (the interpreter would read $$ or $PPID of the host through it)"
			}
			if w := n.Repl; w != nil && w.All && w.With != nil && len(w.With.Parts) > 0 &&
				(len(w.With.Parts) != 1 || w.With.Lit() == "" || len(w.With.Lit()) > 16) {
				reason = "replaces every match with an expansion or a long text (${x//p/...})"
			}
		case *syntax.WhileClause:
			n.Cond = append([]*syntax.Stmt{step}, n.Cond...)
			n.Do = append([]*syntax.Stmt{step}, n.Do...)
		case *syntax.ForClause:
			n.Do = append([]*syntax.Stmt{step}, n.Do...)
		}
		return true
	})
	if reason != "" {
		return "the command " + reason
	}
	return ""
}

// hostVars are the interpreter's special parameters that tell the host's facts (the simulator's
// process IDs), and the variables Run gives in their place: the container's.
var hostVars = map[string]string{"$": pidVar, "PPID": ppidVar}

const (
	pidVar  = "__nodeagent_sandbox_pid"
	ppidVar = "__nodeagent_sandbox_ppid"
)

// hostVarsArith renames the host's special parameters named in an arithmetic expression ($((PPID))).
func hostVarsArith(x syntax.ArithmExpr) {
	switch x := x.(type) {
	case *syntax.BinaryArithm:
		hostVarsArith(x.X)
		hostVarsArith(x.Y)
	case *syntax.UnaryArithm:
		hostVarsArith(x.X)
	case *syntax.ParenArithm:
		hostVarsArith(x.X)
	case *syntax.Word:
		if len(x.Parts) == 1 {
			if l, ok := x.Parts[0].(*syntax.Lit); ok && hostVars[l.Value] != "" {
				x.Parts[0] = &syntax.Lit{ValuePos: l.ValuePos, ValueEnd: l.ValueEnd, Value: hostVars[l.Value]}
			}
		}
	}
}

// funcNames returns the names of the functions file declares.
func funcNames(file *syntax.File) map[string]bool {
	names := map[string]bool{}
	syntax.Walk(file, func(n syntax.Node) bool {
		if f, ok := n.(*syntax.FuncDecl); ok {
			names[f.Name.Value] = true
		}
		return true
	})
	return names
}

// braceSeq matches a numeric brace sequence {from..to} or {from..to..step}.
var braceSeq = regexp.MustCompile(`\{(-?[0-9]{1,18})\.\.(-?[0-9]{1,18})(\.\.-?[0-9]+)?\}`)

// maxBraceWords is the longest brace sequence interpreted (the interpreter's own limit of one
// expansion is 16384 words, past which it prints an error and goes on).
const maxBraceWords = 16384

// run is the state of one Run.
type run struct {
	p      *Program
	lim    Limits
	rootfs *FS // the container's writable layer: what the run writes outside its volumes

	guarded []guarded       // the statements' guards, by ID
	funcs   map[string]bool // the functions the script declares

	mu       sync.Mutex
	steps    int
	slept    time.Duration
	sleptNow atomic.Int64 // slept, read by the layer's recorder without mu
	lastNap  int          // steps at the run's latest sleep of a positive time
	forever  bool
	cut      bool // forever, because it reached a limit while sleeping (Result.Cut)
	refused  *notHonoured
	out      *output // the run's standard output and error
	termPath string  // the termination message file (cleaned; "": none)
	sysctlFS *FS     // the run's /proc/sys (makeProcSys, at the start)
	cgroupFS *FS     // the run's /sys/fs/cgroup (makeCgroup, at the start)
	dev      *FS     // the run's /dev/null for programs that read it (devFS)
	devOnce  sync.Once
	levels   []level     // the command substitutions being filled, levels[0] the run's top
	frames   []frame     // the function calls
	depths   map[int]int // the level of each statement at its latest guard
	params   int64       // an upper bound of the positional parameters (the script's, set's)
}

// stop records why the run stops (the first reason wins) and returns the error that stops it.
func (r *run) stop(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked(err)
}

// stopLocked is stop with r.mu held.
func (r *run) stopLocked(err error) error {
	var nh *notHonoured
	switch {
	case r.refused != nil || r.forever:
	case errors.As(err, &nh):
		r.refused = nh
	case errors.Is(err, errForever):
		r.forever = true
	case errors.Is(err, errCut):
		r.forever, r.cut = true, true
	}
	return err
}

// call runs before every command: it counts the step, bounds the memory the command's arguments
// and output take with what the run holds (guardCall), and refuses builtins the sandbox does not
// honour.
func (r *run) call(ctx context.Context, args []string) ([]string, error) {
	r.mu.Lock()
	if r.refused != nil {
		r.mu.Unlock()
		return nil, r.refused
	}
	r.steps++
	steps := r.steps
	var err error
	if steps <= r.lim.Steps && args[0] != stepName {
		err = r.guardCall(ctx, r.funcs[args[0]], args)
	}
	sleeping := r.sleepingLocked()
	r.mu.Unlock()
	if steps > r.lim.Steps {
		if sleeping {
			return nil, r.stop(errCut)
		}
		return nil, r.stop(refuseLimit("took more than %d steps", r.lim.Steps))
	}
	if err != nil {
		return nil, r.stop(err)
	}
	if args[0] == stepName {
		return []string{":"}, nil
	}
	if why, ok := refusedBuiltins[args[0]]; ok {
		return nil, r.stop(refuse("the builtin %s %s", args[0], why))
	}
	if args[0] == "pwd" && slices.Contains(args[1:], "-P") {
		return nil, r.stop(refuse("the builtin pwd -P resolves symbolic links on the host"))
	}
	if args[0] == "printf" && len(args) > 1 {
		if n := printfWidth(args[1], args[2:]); n > r.lim.Memory {
			return nil, r.stop(refuseLimit("printf would format more than %d bytes", r.lim.Memory))
		}
	}
	if args[0] == "[" || args[0] == "test" {
		args = ownerTests(args)
	}
	return args, nil
}

// ownerTests returns the args of a test or [ command with its -O and -G operators (the file is owned
// by the user, by the user's group) made -e: every file a run sees is its user's (the container's
// root) and its group's; the interpreter would ask the host's user database. The operators are found
// as the interpreter's parser finds them (a unary operator at the start of an expression, followed by
// a word).
func ownerTests(args []string) []string {
	a := args[1:]
	if args[0] == "[" && len(a) > 0 && a[len(a)-1] == "]" {
		a = a[:len(a)-1]
	}
	if !slices.Contains(a, "-O") && !slices.Contains(a, "-G") {
		return args
	}
	out := slices.Clone(args)
	pos := 0
	var classic func(pastAndOr bool)
	base := func() {
		if pos >= len(a) || a[pos] == ")" {
			return
		}
		switch v := a[pos]; {
		case v == "!":
			pos++
			classic(false)
		case v == "(":
			pos++
			classic(false)
			if pos < len(a) && a[pos] == ")" {
				pos++
			}
		case unaryTestOps[v]:
			pos++
			if pos < len(a) {
				if v == "-O" || v == "-G" {
					out[pos] = "-e" // out is args: one ahead of a
				}
				pos++
			}
		default:
			pos++
		}
	}
	classic = func(pastAndOr bool) {
		if pastAndOr {
			base()
		} else {
			classic(true)
		}
		if pos >= len(a) || a[pos] == ")" {
			return
		}
		op := a[pos]
		pos++
		if op == "-a" || op == "-o" {
			classic(false)
		} else {
			pos++
		}
	}
	for start := -1; pos < len(a) && pos != start; {
		start = pos
		classic(false)
	}
	return out
}

// unaryTestOps are the unary operators of test and [ (the interpreter's testUnaryOp).
var unaryTestOps = map[string]bool{"-e": true, "-a": true, "-f": true, "-d": true, "-c": true, "-b": true, "-p": true, "-S": true,
	"-L": true, "-h": true, "-k": true, "-g": true, "-u": true, "-G": true, "-O": true, "-N": true, "-r": true, "-w": true, "-x": true,
	"-s": true, "-t": true, "-z": true, "-n": true, "-o": true, "-v": true, "-R": true}

// printfWidth returns an upper bound of the widths and precisions format asks for (each * taken from
// the args), plus the args' lengths.
func printfWidth(format string, args []string) int64 {
	var total int64
	for _, a := range args {
		total += int64(len(a))
		if n, err := strconv.ParseInt(strings.TrimSpace(a), 10, 64); err == nil && n > 0 {
			total += n // a width given through *
		}
	}
	num := int64(0)
	for i := 0; i < len(format); i++ {
		if c := format[i]; c >= '0' && c <= '9' {
			num = min(num*10+int64(c-'0'), 1<<40)
			continue
		}
		total += num
		num = 0
	}
	return total + num + int64(len(format))
}

// exec runs a program: one of those the sandbox implements, or none (not honoured).
func (r *run) exec(ctx context.Context, args []string) error {
	name := args[0]
	if dir, base := path.Split(name); dir != "" {
		if !binDirs[path.Clean(dir)] {
			return r.stop(refuse("runs %s, a program of the image", name))
		}
		name = base
	}
	prog, ok := programs[name]
	if !ok {
		return r.stop(refuse("runs %s, a program the sandbox does not implement", args[0]))
	}
	err := prog(ctx, r, args)
	var nh *notHonoured
	if errors.As(err, &nh) || errors.Is(err, errForever) {
		return r.stop(err)
	}
	return err
}

// sleep advances the run's simulated time by d; past the horizon, the run stops and runs for ever.
func (r *run) sleep(d time.Duration) error {
	r.mu.Lock()
	r.slept += d
	r.sleptNow.Store(int64(r.slept))
	if d > 0 {
		r.lastNap = r.steps
	}
	past := r.slept > r.lim.Horizon || r.slept < 0
	r.mu.Unlock()
	if past {
		return errForever
	}
	return nil
}

// sleeping reports whether the run's simulated time advanced within its last SleepWindow steps.
func (r *run) sleeping() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sleepingLocked()
}

func (r *run) sleepingLocked() bool {
	return r.slept > 0 && r.steps-r.lastNap <= SleepWindow(r.lim)
}

// resolve returns the file system holding the absolute path p and p's path within it; rootfs true for
// the container's own layer (outside every volume).
func (r *run) resolve(p string) (fsys *FS, inner string, readOnly, rootfs bool) {
	p = path.Clean(p)
	best := -1
	for i, m := range r.p.Mounts {
		mp := path.Clean(m.Path)
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && (best < 0 || len(mp) > len(path.Clean(r.p.Mounts[best].Path))) {
			best = i
		}
	}
	if best < 0 {
		return r.rootfs, p, r.p.ReadOnlyRootfs, true
	}
	m := r.p.Mounts[best]
	rel := strings.TrimPrefix(p, path.Clean(m.Path))
	return m.FS, path.Join("/", m.Root, rel), m.ReadOnly, false
}

// abs makes p absolute against the handler context's directory.
func abs(ctx context.Context, p string) string {
	if !path.IsAbs(p) {
		p = path.Join(interp.HandlerCtx(ctx).Dir, p)
	}
	return path.Clean(p)
}

// prepareRootfs makes the directories the container's layer is known to have: /, /tmp, the working
// directory, and the parents of the mount points.
func (r *run) prepareRootfs() {
	if !r.p.UnknownLayer {
		_ = r.rootfs.MkdirAll("/tmp")
	}
	if r.termPath != "" {
		_ = r.rootfs.MkdirAll(path.Dir(r.termPath))
		_ = r.rootfs.Touch(r.termPath, r.p.Now)
	}
	_ = r.rootfs.MkdirAll(r.workingDir())
	for _, m := range r.p.Mounts {
		_ = r.rootfs.MkdirAll(path.Dir(path.Clean(m.Path)))
		if m.FS != nil {
			_ = m.FS.MkdirAll(m.Root)
		}
	}
}

func (r *run) workingDir() string {
	if r.p.WorkingDir != "" && path.IsAbs(r.p.WorkingDir) {
		return path.Clean(r.p.WorkingDir)
	}
	return "/"
}

// unknown is the refusal of a path of the image the run did not write.
func unknown(p string) error {
	return refuse("reads %s, a file of the image (not known to the simulator)", p)
}

// guardFile is what a guard's path reads: "1" (the guard is the redirection 1>&1).
type guardFile struct{ *strings.Reader }

func (guardFile) Write([]byte) (int, error) { return 0, syscall.EBADF }
func (guardFile) Close() error              { return nil }

// discard is /dev/null and the standard outputs opened by name.
type discard struct{}

func (discard) Read([]byte) (int, error)    { return 0, io.EOF }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) Close() error                { return nil }
func isDevOut(p string) bool {
	return p == "/dev/stdout" || p == "/dev/stderr" || p == "/dev/fd/1" || p == "/dev/fd/2"
}
func writing(flag int) bool {
	return flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0
}
func roErr(op, p string) error                  { return pathErr(op, p, syscall.EROFS) }
func (r *run) now() time.Time                   { return r.p.Now.Add(r.slept) }
func (r *run) refuseUnknown(p string) error     { return r.stop(unknown(p)) }
func (r *run) refusef(f string, a ...any) error { return r.stop(refuse(f, a...)) }

// open is the interpreter's OpenHandler: redirections and $(<file).
func (r *run) open(ctx context.Context, name string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	if id, ok := strings.CutPrefix(name, guardDir); ok && flag == os.O_RDONLY {
		n, err := strconv.Atoi(id)
		if err != nil {
			n = -1
		}
		if err := r.guard(ctx, n); err != nil {
			return nil, err
		}
		return guardFile{strings.NewReader("1")}, nil // 1>&1
	}
	p := abs(ctx, name)
	if fsys, inner, ok := r.kernelFile(p); ok {
		if writing(flag) {
			return nil, &fs.PathError{Op: r.shellName() + ":", Path: "can't create " + name, Err: busyboxErrno{syscall.EROFS}}
		}
		return fsys.OpenFile(inner, flag, perm)
	}
	switch {
	case p == r.termPath:
		if !writing(flag) {
			if err := r.guardRead(ctx, r.rootfs, p); err != nil {
				return nil, r.stop(err)
			}
		}
		return r.rootfs.OpenFile(p, flag, perm)
	case isDevOut(p) && writing(flag):
		// The run's standard output or error by name: the log, when that is where the descriptor goes.
		hc := interp.HandlerCtx(ctx)
		w := hc.Stdout
		if p == "/dev/stderr" || p == "/dev/fd/2" {
			w = hc.Stderr
		}
		switch w := w.(type) {
		case topOut:
			return w, nil
		case topErr:
			return w, nil
		}
		return discard{}, nil
	case p == "/dev/null" || isDevOut(p):
		return discard{}, nil
	case strings.HasPrefix(p, "/dev/") || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/"):
		return nil, r.refusef("uses %s, a device or kernel file", p)
	}
	fsys, inner, ro, rootfs := r.resolve(p)
	if ro && writing(flag) {
		// busybox ash's words for a redirection it cannot open: "/bin/sh: can't create /file: Read-only
		// file system" (the interpreter prints a PathError as "Op Path: Err").
		return nil, &fs.PathError{Op: r.shellName() + ":", Path: "can't create " + name, Err: busyboxErrno{syscall.EROFS}}
	}
	if rootfs && !writing(flag) && !fsys.Known(inner) {
		return nil, r.refuseUnknown(p)
	}
	if rootfs && writing(flag) && !fsys.Known(path.Dir(inner)) {
		return nil, r.refuseUnknown(path.Dir(p)) // a directory of the image, or none
	}
	if !writing(flag) {
		if err := r.guardRead(ctx, fsys, inner); err != nil {
			return nil, r.stop(err)
		}
	}
	f, err := fsys.OpenFile(inner, flag, perm)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Path = p
		}
	}
	return f, err
}

// shellName is the shell's $0 as busybox prefixes its messages with it: the program's first word.
func (r *run) shellName() string {
	if len(r.p.Command) > 0 {
		return r.p.Command[0]
	}
	if len(r.p.Args) > 0 {
		return r.p.Args[0]
	}
	return "sh"
}

// busyboxErrno is an errno printed in busybox's words ("Read-only file system"), still matching it
// with errors.Is.
type busyboxErrno struct{ syscall.Errno }

func (e busyboxErrno) Error() string { return describe(e.Errno) }
func (e busyboxErrno) Unwrap() error { return e.Errno }

// readDir is the interpreter's ReadDirHandler2: globbing.
func (r *run) readDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	p := abs(ctx, name)
	fsys, inner, _, rootfs := r.resolve(p)
	if rootfs {
		return nil, r.refusef("lists %s, a directory of the image (not known to the simulator)", p)
	}
	return fsys.ReadDir(inner)
}

// stat is the interpreter's StatHandler: test -e/-f/-d..., cd.
func (r *run) stat(ctx context.Context, name string, _ bool) (fs.FileInfo, error) {
	p := abs(ctx, name)
	if p == "/dev/null" || isDevOut(p) {
		return fileInfo{name: path.Base(p)}, nil
	}
	if fsys, inner, ok := r.kernelFile(p); ok {
		return fsys.Stat(inner)
	}
	fsys, inner, _, rootfs := r.resolve(p)
	if rootfs && !fsys.Known(inner) {
		return nil, r.refuseUnknown(p)
	}
	return fsys.Stat(inner)
}

// access is the interpreter's AccessHandler: test -r/-w/-x.
func (r *run) access(ctx context.Context, name string, mode interp.AccessMode) error {
	p := abs(ctx, name)
	if p == "/dev/null" || isDevOut(p) {
		return nil
	}
	if _, _, ok := r.kernelFile(p); ok {
		if mode&interp.AccessWrite != 0 {
			return roErr("access", p)
		}
		return nil
	}
	fsys, inner, ro, rootfs := r.resolve(p)
	if rootfs && !fsys.Known(inner) {
		return r.refuseUnknown(p)
	}
	info, err := fsys.Stat(inner)
	if err != nil {
		return err
	}
	if mode&interp.AccessWrite != 0 && ro {
		return roErr("access", p)
	}
	if mode&interp.AccessExec != 0 && !info.IsDir() {
		return pathErr("access", p, fs.ErrPermission)
	}
	return nil
}

// environ returns the run's environment: the container's, with HOME, PATH, HOSTNAME defaulted and
// the identity variables the interpreter would otherwise read from the host process.
func (r *run) environ() []string {
	env := append([]string{}, r.p.Env...)
	has := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		has[k] = true
	}
	def := func(k, v string) {
		if !has[k] {
			env = append(env, k+"="+v)
		}
	}
	def("HOME", "/root")
	def("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	def("HOSTNAME", r.p.Hostname)
	def("UID", "0")
	def("EUID", "0")
	def("GID", "0")
	return env
}

// sandboxEnv is the interpreter's Environ over the container's environment. While hideTMPDIR, TMPDIR
// reads as tmpDir: the interpreter reads it once, at its reset, as the directory of its FIFOs.
type sandboxEnv struct {
	run        *run
	vars       []string
	hideTMPDIR bool
	once       sync.Once
	list       expand.Environ
}

func (e *sandboxEnv) environ() expand.Environ {
	e.once.Do(func() { e.list = expand.ListEnviron(e.vars...) })
	return e.list
}

func (e *sandboxEnv) Get(name string) expand.Variable {
	str := func(s string) expand.Variable {
		return expand.Variable{Set: true, ReadOnly: true, Kind: expand.String, Str: s}
	}
	switch {
	case name == "TMPDIR" && e.hideTMPDIR:
		return expand.Variable{Set: true, Exported: true, Kind: expand.String, Str: tmpDir}
	case name == pidVar:
		return str(strconv.Itoa(e.run.pid()))
	case name == ppidVar:
		return str("0") // the container runtime's, outside the container's PID namespace
	case strings.HasPrefix(name, "HOME "): // ~user: the interpreter would ask the host's user database
		user := strings.TrimPrefix(name, "HOME ")
		if user == "root" {
			return str("/root")
		}
		_ = e.run.stop(refuse("expands ~%s, a user of the image (its /etc/passwd is not known to the simulator)", user))
		return str("~" + user)
	}
	return e.environ().Get(name)
}

func (e *sandboxEnv) Each(f func(name string, vr expand.Variable) bool) { e.environ().Each(f) }

func (r *run) pid() int {
	if r.p.PID > 0 {
		return r.p.PID
	}
	return 1
}

// Seed returns a run's $RANDOM seed from the strings that name the run.
func Seed(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}
