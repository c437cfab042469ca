package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// e2e fixtures of k8s.io/kubernetes v1.37.2 test/e2e/framework/job/fixtures.go.
const (
	failOddSucceedEven = `
			if [ $(expr ${JOB_COMPLETION_INDEX} % 2) -ne 0 ]; then
				exit 1
			else
				exit 0
			fi
			`
	failOncePerIndex = `
			if [[ -r /data/foo-$JOB_COMPLETION_INDEX ]]
			then
				exit 0
			else
				touch /data/foo-$JOB_COMPLETION_INDEX
				exit 42
			fi
		`
	notTerminateOncePerIndex = `
			if [[ -r /data/foo-$JOB_COMPLETION_INDEX ]]
			then
				exit 0
			else
				touch /data/foo-$JOB_COMPLETION_INDEX
				sleep 1000000
			fi
		`
)

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		args    []string
		env     []string
		want    Result // Steps not compared
	}{
		{name: "exit 0", command: sh("exit 0"), want: Result{Honoured: true}},
		{name: "exit 1", command: sh("exit 1"), want: Result{Honoured: true, ExitCode: 1}},
		{name: "exit 300 wraps", command: sh("exit 300"), want: Result{Honoured: true, ExitCode: 44}},
		{name: "false", command: []string{"false"}, want: Result{Honoured: true, ExitCode: 1}},
		{name: "/bin/true", command: []string{"/bin/true"}, want: Result{Honoured: true}},
		{name: "sleep as the command", command: []string{"sleep", "300"}, want: Result{Honoured: true, Duration: 300 * time.Second}},
		{name: "sleep 1000000 is within the horizon", command: []string{"sleep", "1000000"}, want: Result{Honoured: true, Duration: 1000000 * time.Second}},
		{name: "sleep infinity", command: []string{"sleep", "infinity"}, want: Result{Honoured: true, Forever: true}},
		{name: "sleep past the horizon", command: []string{"sleep", "400d"}, want: Result{Honoured: true, Forever: true}},
		{name: "sleeps add up, then exit", command: sh("sleep 1.5; sleep 2m; exit 3"), want: Result{Honoured: true, Duration: 2*time.Minute + 1500*time.Millisecond, ExitCode: 3}},
		{name: "bad sleep", command: sh("sleep x"), want: Result{Honoured: true, ExitCode: 1}},
		{name: "failOddSucceedEven odd", command: []string{"sh", "-c"}, args: []string{failOddSucceedEven}, env: []string{"JOB_COMPLETION_INDEX=3"}, want: Result{Honoured: true, ExitCode: 1}},
		{name: "failOddSucceedEven even", command: []string{"sh", "-c"}, args: []string{failOddSucceedEven}, env: []string{"JOB_COMPLETION_INDEX=4"}, want: Result{Honoured: true}},
		{name: "args via $0 and $1", command: []string{"sh", "-c", `exit $1`, "name", "7"}, want: Result{Honoured: true, ExitCode: 7}},
		{name: "bash -ec stops at a failure", command: []string{"bash", "-ec", "false; exit 5"}, want: Result{Honoured: true, ExitCode: 1}},
		{name: "arithmetic and variables", command: sh(`a=6; b=$((a * 7)); [ "$b" -eq 42 ] && exit $((b - 40))`), want: Result{Honoured: true, ExitCode: 2}},
		{name: "expr", command: sh(`[ "$(expr 7 + 3 \* 2)" = 13 ] && [ "$(expr length hello)" = 5 ] && expr 3 \> 2 >/dev/null && ! expr 0 \& 1 >/dev/null`), want: Result{Honoured: true}},
		{name: "expr division by zero", command: sh(`expr 1 / 0`), want: Result{Honoured: true, ExitCode: 2}},
		{name: "[[ ]] and test", command: sh(`[[ abc == a* ]] && test -n x && [ -z "" ] && exit 9`), want: Result{Honoured: true, ExitCode: 9}},
		{name: "a loop of sleeps", command: sh(`i=0; while [ $i -lt 5 ]; do sleep 10; i=$((i+1)); done`), want: Result{Honoured: true, Duration: 50 * time.Second}},
		{name: "env and $RANDOM in range", command: sh(`[ "$FOO" = bar ] && [ $RANDOM -ge 0 ] && [ $RANDOM -lt 32768 ] && exit $(( $RANDOM / 32768 + 4 ))`), env: []string{"FOO=bar"}, want: Result{Honoured: true, ExitCode: 4}},
		{name: "randomlySucceedOrFail is honoured", command: sh(`exit $(( $RANDOM / 16384 ))`), want: Result{Honoured: true, ExitCode: 0}},
		{name: "replace every match with a short text, or delete it", command: sh(`x=a-b-c; [ "${x//-/_}" = a_b_c ] && [ "${x//-/}" = abc ]`), want: Result{Honoured: true}},
		{name: "sh -eu -c", command: []string{"sh", "-eu", "-c", `exit $UNSET_VAR_X`}, want: Result{Honoured: true, ExitCode: 1}},
		{name: "sh -o is not interpreted", command: []string{"sh", "-o", "pipefail", "-c", "exit 0"}, want: Result{Reason: `sh option "-o" is not interpreted`}},
		{name: "a function", command: sh(`f() { return 4; }; f; exit $?`), want: Result{Honoured: true, ExitCode: 4}},
		{name: "writes outside the volumes are the container's own", command: sh(`echo hi > /tmp/x && [ "$(cat /tmp/x)" = hi ]`), want: Result{Honoured: true}},
		{name: "output to /dev/null", command: sh(`echo hi >/dev/null 2>&1; printf '%s\n' a b >&2`), want: Result{Honoured: true}},
		// Not honoured.
		{name: "no command", want: Result{Reason: ErrNoCommand.Error()}},
		{name: "unknown program", command: sh("wget http://example.com"), want: Result{Reason: "runs wget, a program the sandbox does not implement"}},
		{name: "a program of the image", command: []string{"/app/server"}, want: Result{Reason: "runs /app/server, a program of the image"}},
		{name: "a pipeline", command: sh("echo a | cat"), want: Result{Reason: "the command runs a pipeline (its commands would run concurrently)"}},
		{name: "a background job", command: sh("sleep 5 & wait"), want: Result{Reason: "the command runs a background job"}},
		{name: "eval", command: sh(`eval "exit 1"`), want: Result{Reason: "the builtin eval evaluates text as code"}},
		{name: "a script file", command: []string{"/bin/sh", "/run.sh"}, want: Result{Reason: "sh without -c reads a script file or its standard input"}},
		{name: "a syntax error", command: sh("if then"), want: Result{Reason: "the command does not parse: 1:1: `if` must be followed by a statement list"}},
		{name: "expr regexp", command: sh("expr abc : 'a'"), want: Result{Reason: "runs expr : (regular expressions are not interpreted)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Run(context.Background(), &Program{Command: tc.command, Args: tc.args, Env: tc.env, Seed: 1}, Limits{})
			got.Steps, got.Output, got.Dropped, got.Layer = 0, nil, 0, nil // the output: TestRunOutput; the layer: TestLayerTimeline
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Run(%q %q) = %+v, want %+v", tc.command, tc.args, got, tc.want)
			}
		})
	}
}

// TestRunVolumes: the e2e's marker-file fixtures over an emptyDir (or hostPath) FS: the first run
// writes the marker and fails (or sleeps), the next sees it and succeeds; a read-only mount cannot be
// written.
func TestRunVolumes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		script      string
		first, next Result
	}{
		{"failOncePerIndex", failOncePerIndex, Result{Honoured: true, ExitCode: 42}, Result{Honoured: true}},
		{"notTerminateOncePerIndex", notTerminateOncePerIndex, Result{Honoured: true, Duration: 1000000 * time.Second}, Result{Honoured: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := NewFS(0)
			p := &Program{Command: []string{"/bin/sh", "-c"}, Args: []string{tc.script}, Env: []string{"JOB_COMPLETION_INDEX=2"},
				Mounts: []Mount{{Path: "/data", FS: vol, Root: "/"}}}
			for i, want := range []Result{tc.first, tc.next} {
				got := Run(context.Background(), p, Limits{})
				got.Steps, got.Layer = 0, nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("run %d: %+v, want %+v", i, got, want)
				}
			}
			if !vol.Exists("/foo-2") {
				t.Errorf("no marker /foo-2 in the volume")
			}
		})
	}
	host := NewFS(0)
	ro := &Program{Command: sh(`touch /data/x`), Mounts: []Mount{{Path: "/data", FS: host, Root: "/tmp/job-e2e/abc", ReadOnly: true}}}
	if got := Run(context.Background(), ro, Limits{}); !got.Honoured || got.ExitCode != 1 {
		t.Errorf("touch on a read-only mount: %+v, want honoured, exit 1", got)
	}
	rw := &Program{Command: sh(`mkdir -p /data/d && touch /data/d/x && [ -f /data/d/x ] && rm -r /data/d && [ ! -e /data/d ]`),
		Mounts: []Mount{{Path: "/data", FS: host, Root: "/tmp/job-e2e/abc"}}}
	if got := Run(context.Background(), rw, Limits{}); !got.Honoured || got.ExitCode != 0 {
		t.Errorf("files in a hostPath mount: %+v, want honoured, exit 0", got)
	}
	if !host.Exists("/tmp/job-e2e/abc") {
		t.Errorf("the hostPath's directory is not in the Node's FS")
	}
}

// TestRunEscapes: hostile commands are refused or bounded; none touches the host, none runs long.
func TestRunEscapes(t *testing.T) {
	dir := t.TempDir()
	canary := dir + "/canary"
	if err := os.WriteFile(canary, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command []string
		reason  string // a prefix of Result.Reason; "": honoured, with exit code exit
		exit    int32
	}{
		// The container's facts, not the host's.
		{"$$ is the container's PID 1", sh("exit $(($$ % 256))"), "", 1},
		{"${$} too", sh("[ ${$} = 1 ] && exit 7"), "", 7},
		{"$PPID is 0", sh(`[ "$PPID" = 0 ] && exit $((PPID + 8))`), "", 8},
		{"$$ cannot be assigned", sh("__nodeagent_sandbox_pid=5; exit $$"), "", 1},
		{"~user: a user of the image", sh("x=~nobody; exit 3"), "expands ~nobody, a user of the image", 0},
		{"~root is /root", sh("[ ~root/x = /root/x ] && exit 9"), "", 9},
		{"~ is $HOME", sh("HOME=/h; [ ~/x = /h/x ] && exit 10"), "", 10},
		{"-O and -G: the container's user owns its files", sh("touch /tmp/f && [ -O /tmp/f ] && [[ -G /tmp/f ]] && test -O /tmp/f -a -G /tmp/f && exit 11"), "", 11},
		{"-O as a string", sh(`[ x != -O ] && [ -n -O ] && [ -O ] && exit 12`), "", 12},
		{"an indirect expansion", sh("x=PPID; exit ${!x}"), "the command uses an indirect expansion", 0},
		{"a name reference", sh("declare -n x=PPID; exit $x"), "the command makes a name reference (declare -n", 0},
		// Refused or bounded.
		{"cat /etc/passwd", sh("cat /etc/passwd"), "reads /etc/passwd, a file of the image", 0},
		{"read /etc/passwd by redirection", sh("x=$(</etc/passwd); echo $x"), "reads /etc/passwd, a file of the image", 0},
		{"test a host file", sh("[ -f " + canary + " ] && exit 3"), "reads " + canary + ", a file of the image", 0},
		{"/bin/rm -rf /", []string{"/bin/rm", "-rf", "/"}, "removes /, the image's files", 0},
		{"rm a host file", []string{"rm", "-f", canary}, "reads " + canary + ", a file of the image", 0},
		{"write in a host directory", sh("echo x > " + dir + "/new"), "reads " + dir + ", a file of the image", 0},
		{"fork bomb", sh(":(){ :|:& };:"), "the command runs a background job", 0},
		{"pipe bomb", sh("f(){ f|f; }; f"), "the command runs a pipeline", 0},
		{"recursion", sh("f(){ f; }; f"), "would hold more than 1048576 bytes (calling f, ", 0}, // its frames
		// Steps bound these (steps, not time: a loaded machine under -race may take more than the
		// default 500 ms of real time for 10 000 steps; TestRunRealTime checks the real-time bound).
		{"endless loop", sh("while :; do :; done"), "took more than 10000 steps", 0},
		{"endless loop without commands", sh("while [[ 1 ]]; do x=1; done"), "took more than 10000 steps", 0},
		{"a busy loop after a sleep", sh("sleep 5; while :; do :; done"), "took more than 10000 steps", 0},
		{"a busy loop that slept long ago", sh("i=0; while :; do [ $i -lt 10 ] && sleep 1; i=$((i+1)); done"), "took more than 10000 steps", 0},
		{"1 GB string by doubling", sh("a=x; while [[ 1 ]]; do a=$a$a; done"), "would hold more than 1048576 bytes (the statement at 1:24)", 0},
		{"1 GB string by printf", sh("printf '%01000000000d' 0 >/dev/null"), "would hold more than 1048576 bytes (printf's arguments and output)", 0},
		{"1 GB string by printf *", sh("x=$(printf '%*s' 1000000000 '')"), "would hold more than 1048576 bytes (printf's arguments and output)", 0},
		{"1 GB string by replacement", sh("a=$(seq 1 2000); b=${a//?/$a$a}"), "the command replaces every match with an expansion", 0},
		{"1 GB by brace expansion", sh("echo {1..1000000000} >/dev/null"), "the command expands a brace sequence {1..1000000000} of more than 16384 words", 0},
		{"seq", sh("seq 1 1000000000 >/dev/null"), "would hold more than 1048576 bytes (seq's arguments and output)", 0},
		{"a fifo on the host", sh("cat <(echo x)"), "the command uses a process substitution", 0},
		{"eval of a pipeline", sh("eval ':|:'"), "the builtin eval evaluates text as code", 0},
		{"a trap", sh("trap 'rm -rf /' EXIT"), "the builtin trap evaluates text as code", 0},
		{"source a host file", sh(". /etc/profile"), "the builtin . reads a script", 0},
		{"command -v looks at the host", sh("command -v ls"), "the builtin command looks programs up on the host", 0},
		{"network", sh("nc -l 8080"), "runs nc, a program the sandbox does not implement", 0},
		{"/dev/tcp", sh("echo x > /dev/tcp/127.0.0.1/80"), "uses /dev/tcp/127.0.0.1/80, a device or kernel file", 0},
		{"/proc", sh("cat /proc/self/environ"), "uses /proc/self/environ, a device or kernel file", 0},
		{"glob the host", sh("echo /*"), "lists /, a directory of the image", 0},
		{"pwd -P resolves links on the host", sh("cd /tmp && pwd -P"), "the builtin pwd -P resolves symbolic links on the host", 0},
		{"cd to the host", sh("cd /etc && exit 3"), "reads /etc, a file of the image", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			lim := Limits{}
			if strings.HasSuffix(tc.reason, "steps") {
				lim.RealTime = time.Minute
			}
			got := Run(context.Background(), &Program{Command: tc.command}, lim)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			switch {
			case tc.reason == "" && (!got.Honoured || got.ExitCode != tc.exit):
				t.Errorf("Run(%q) = %+v, want honoured, exit %d", tc.command, got, tc.exit)
			case tc.reason != "" && (got.Honoured || !strings.HasPrefix(got.Reason, tc.reason)):
				t.Errorf("Run(%q) = %+v, want not honoured: %q...", tc.command, got, tc.reason)
			}
			if took > 20*time.Second {
				t.Errorf("Run(%q) took %v", tc.command, took)
			}
			if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 256<<20 {
				t.Errorf("Run(%q) allocated %d MiB", tc.command, grew>>20)
			}
		})
	}
	if b, err := os.ReadFile(canary); err != nil || string(b) != "x" {
		t.Errorf("the host's canary file changed: %q %v", b, err)
	}
	if _, err := os.Stat(dir + "/new"); err == nil {
		t.Errorf("a file was made on the host")
	}
}

// TestRunRealTime: a run is cut at Limits.RealTime, whatever it does.
func TestRunRealTime(t *testing.T) {
	start := time.Now()
	got := Run(context.Background(), &Program{Command: sh("while [[ 1 ]]; do x=1; done")}, Limits{Steps: 1 << 30, RealTime: 50 * time.Millisecond})
	if got.Honoured || got.Reason != "took more than 50ms of real time" {
		t.Errorf("Run = %+v, want not honoured: took more than 50ms of real time", got)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v", took)
	}
}

// TestRunRandomSeeded: the same seed gives the same $RANDOM numbers; another seed other numbers.
func TestRunRandomSeeded(t *testing.T) {
	run := func(seed uint64) int32 {
		return Run(context.Background(), &Program{Command: sh("exit $(( RANDOM % 200 ))"), Seed: seed}, Limits{}).ExitCode
	}
	if a, b := run(7), run(7); a != b {
		t.Errorf("seed 7: %d then %d", a, b)
	}
	differ := false
	for s := uint64(1); s < 20 && !differ; s++ {
		differ = run(s) != run(s+100)
	}
	if !differ {
		t.Errorf("$RANDOM the same whatever the seed")
	}
}

// TestRunCut: a run that reaches its step or real-time limit while it sleeps (a loop whose
// iterations sleep) runs until stopped, known up to the simulated time it reached (or up to its
// first MaxOutputBytes of output): its log from its start, its files up to there. A busy loop is
// still not honoured (TestRunEscapes).
func TestRunCut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		lim     Limits
		line    string        // every line of the output ("": none)
		every   time.Duration // the time between two lines
		minTime time.Duration // Duration at least
		file    string        // /tmp/n at Duration and at any later time
	}{
		{name: "the Ephemeral Containers spec's loop", script: "while true; do echo polo; sleep 2; done", line: "polo", every: 2 * time.Second, minTime: 2000 * time.Second},
		{name: "sleeps only", script: "while true; do sleep 1; done", minTime: 2000 * time.Second},
		{name: "until false", script: "until false; do sleep 10; done", minTime: 20000 * time.Second},
		{name: "a counter in a file", script: "i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 1; done", minTime: 1000 * time.Second, file: "counted"},
		{name: "cut by real time", script: "while true; do echo polo; sleep 2; done", lim: Limits{Steps: 1 << 30, RealTime: 30 * time.Millisecond}, line: "polo", every: 2 * time.Second, minTime: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim
			if lim.RealTime == 0 {
				lim.RealTime = time.Minute
			}
			got := Run(context.Background(), &Program{Command: sh(tc.script)}, lim)
			if !got.Honoured || !got.Forever || !got.Cut || got.Limit {
				t.Fatalf("Run = honoured %v, forever %v, cut %v, limit %v (%s); want honoured, running until stopped, cut", got.Honoured, got.Forever, got.Cut, got.Limit, got.Reason)
			}
			if got.Duration < tc.minTime {
				t.Errorf("known up to %v, want at least %v", got.Duration, tc.minTime)
			}
			if tc.line == "" && len(got.Output) > 0 {
				t.Errorf("output %v, want none", got.Output[0])
			}
			if tc.line != "" {
				if len(got.Output) == 0 || got.Dropped != 0 {
					t.Fatalf("%d lines, %d dropped; want the first lines", len(got.Output), got.Dropped)
				}
				for i, l := range got.Output {
					if l.Text != tc.line || l.Offset != time.Duration(i)*tc.every {
						t.Fatalf("line %d = %q at %v, want %q at %v", i, l.Text, l.Offset, tc.line, time.Duration(i)*tc.every)
					}
				}
				if last := got.Output[len(got.Output)-1].Offset; last > got.Duration || got.Duration-last > tc.every {
					t.Errorf("last line at %v, known up to %v: a line missing from the known time", last, got.Duration)
				}
			}
			if tc.file != "" {
				want := fmt.Sprintf("%d\n", got.Duration/time.Second) // i written at i-1 s; cut right after its sleep to Duration
				for _, at := range []time.Duration{got.Duration, got.Duration + time.Hour} {
					b, err := readFile(StateAt(at, 1<<20, got.Layer), "/tmp/n")
					if err != nil || string(b) != want {
						t.Errorf("/tmp/n at %v = %q %v, want %q", at, b, err, want)
					}
				}
			}
		})
	}
}

// readFile returns the content of name in f.
func readFile(f *FS, name string) ([]byte, error) {
	h, err := f.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = h.Close() }()
	return io.ReadAll(h)
}
