package sandbox

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRunOutput: each line the command writes to its standard output or error is recorded with its
// simulated time (the sleeps before it); the termination message file's content at the exit is the
// Result's; what is recorded is bounded.
func TestRunOutput(t *testing.T) {
	long := strings.Repeat("x", MaxLineBytes+10)
	for _, tc := range []struct {
		name     string
		command  []string
		env      []string
		termPath string
		want     []Line
		dropped  int
		message  string
		exit     int32
	}{
		{name: "echo, sleep, echo, exit 1", command: sh(`echo hello $POD_NAME; sleep 2; echo bye; exit 1`), env: []string{"POD_NAME=p1"},
			want: []Line{{Text: "hello p1"}, {Offset: 2 * time.Second, Text: "bye"}}, exit: 1},
		{name: "stderr and printf without a newline", command: sh(`printf 'a\nb'; sleep 1; echo oops >&2; sleep 1; printf 'c\n'`),
			want: []Line{{Text: "a"}, {Offset: time.Second, Stderr: true, Text: "oops"}, {Offset: 2 * time.Second, Text: "bc"}}},
		{name: "env, printenv, cat of a file", command: sh(`echo x > /tmp/f; cat /tmp/f; printenv A; env`), env: []string{"A=1"},
			want: []Line{{Text: "x"}, {Text: "1"}, {Text: "A=1"}, {Text: "EUID=0"}, {Text: "GID=0"}, {Text: "HOME=/root"}, {Text: "HOSTNAME="},
				{Text: "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, {Text: "UID=0"}}},
		{name: "/dev/stdout and /dev/stderr by name", command: sh(`echo a > /dev/stdout; echo b >/dev/stderr; echo c 2>/dev/null >/dev/stderr; x=$(echo d > /dev/stdout)`),
			want: []Line{{Text: "a"}, {Stderr: true, Text: "b"}}},
		{name: "a command substitution is not output", command: sh(`x=$(echo inner); echo "got $x"`), want: []Line{{Text: "got inner"}}},
		{name: "the last line without a newline is partial", command: sh(`printf done`), want: []Line{{Partial: true, Text: "done"}}},
		{name: "a long line is cut as containerd cuts it", command: []string{"echo", long},
			want: []Line{{Partial: true, Text: long[:MaxLineBytes]}, {Text: long[MaxLineBytes:]}}},
		{name: "the termination message file", command: sh(`echo out; echo -n DONE > /dev/termination-log; exit 2`), termPath: DefaultTerminationMessagePath,
			want: []Line{{Text: "out"}}, message: "DONE", exit: 2},
		{name: "a custom termination path, its last 4096 bytes", command: sh(`printf "%05000d" 7 > /tmp/msg`), termPath: "/tmp/msg",
			message: strings.Repeat("0", MaxTerminationMessageBytes-1) + "7"},
		{name: "no termination path: /dev/termination-log is a device", command: sh(`echo x > /dev/termination-log`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Run(context.Background(), &Program{Command: tc.command, Env: tc.env, TerminationMessagePath: tc.termPath}, Limits{})
			if tc.name == "no termination path: /dev/termination-log is a device" {
				if got.Honoured {
					t.Errorf("Run = %+v, want not honoured", got)
				}
				return
			}
			if !got.Honoured || got.ExitCode != tc.exit {
				t.Fatalf("Run = %+v, want honoured, exit %d", got, tc.exit)
			}
			if !reflect.DeepEqual(got.Output, tc.want) || got.Dropped != tc.dropped || got.TerminationMessage != tc.message {
				t.Errorf("Output = %+v, dropped %d, message %q; want %+v, %d, %q", got.Output, got.Dropped, got.TerminationMessage, tc.want, tc.dropped, tc.message)
			}
		})
	}
}

// TestRunOutputBounded: a command writing without end keeps the last MaxOutputBytes of its lines,
// empty lines counted at lineCost each; its memory counts them.
func TestRunOutputBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		last   string
	}{
		{name: "many empty lines", script: `i=0; while [ $i -lt 9000 ]; do echo; i=$((i+1)); done`, last: ""},
		{name: "many long lines", script: `i=0; while [ $i -lt 400 ]; do printf "%01000d\n" $i; i=$((i+1)); done`, last: strings.Repeat("0", 997) + "399"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Run(context.Background(), &Program{Command: sh(tc.script)}, Limits{Steps: 100000, RealTime: time.Minute})
			if !got.Honoured {
				t.Fatalf("Run = %s", got.Reason)
			}
			var held int64
			for _, l := range got.Output {
				held += int64(len(l.Text)) + lineCost
			}
			if held > MaxOutputBytes || got.Dropped == 0 || len(got.Output) == 0 || got.Output[len(got.Output)-1].Text != tc.last {
				t.Errorf("%d lines (%d bytes held), %d dropped; want at most %d bytes, some dropped, the last kept", len(got.Output), held, got.Dropped, MaxOutputBytes)
			}
		})
	}
	// The output held counts against the run's memory: a run allowed less than its output stops.
	got := Run(context.Background(), &Program{Command: sh(`i=0; while [ $i -lt 100 ]; do printf "%01000d\n" 1; i=$((i+1)); done`)}, Limits{Memory: 48 << 10})
	if got.Honoured || !got.Limit {
		t.Errorf("Run with 48 KiB writing 100 KB: honoured %v, limit %v (%s); want stopped at its memory limit", got.Honoured, got.Limit, got.Reason)
	}
}
