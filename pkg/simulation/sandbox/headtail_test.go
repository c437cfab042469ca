package sandbox

import (
	"context"
	"strings"
	"testing"
)

// TestHeadTail: busybox's head and tail over the run's files and /dev/null, and tail -f, which runs
// until stopped (the Variable Expansion spec's `tail -f /dev/null`).
func TestHeadTail(t *testing.T) {
	const twelve = `seq 12 > /tmp/n; printf 'a\nb\nc\n' > /data/abc; `
	for _, tc := range []struct {
		name, script string
		stdout       string
		stderr       string
		exit         int32
		forever      bool
		reason       string // not honoured: a prefix of the reason
	}{
		{name: "head -n 1", script: twelve + "head -n 1 /data/abc", stdout: "a\n"},
		{name: "head: 10 lines", script: twelve + "head /tmp/n", stdout: "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"},
		{name: "head -n1 -N", script: twelve + "head -n1 /tmp/n; head -2 /data/abc", stdout: "1\na\nb\n"},
		{name: "head -n -2: all but the last 2", script: twelve + "head -n -10 /tmp/n", stdout: "1\n2\n"},
		{name: "head -c", script: twelve + "head -c 3 /data/abc", stdout: "a\nb"},
		{name: "tail: 10 lines", script: twelve + "tail /tmp/n", stdout: "3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"},
		{name: "tail -n 2, -1, -n +3", script: twelve + "tail -n 2 /data/abc; tail -1 /tmp/n; tail -n +11 /tmp/n", stdout: "b\nc\n12\n11\n12\n"},
		{name: "tail -c", script: twelve + "tail -c 4 /data/abc", stdout: "b\nc\n"},
		{name: "a last line without a newline", script: "printf 'x\\ny' > /tmp/f; tail -n 1 /tmp/f; echo; head -n 1 /tmp/f", stdout: "y\nx\n"},
		{name: "several files", script: twelve + "head -n 1 /data/abc /tmp/n", stdout: "==> /data/abc <==\na\n\n==> /tmp/n <==\n1\n"},
		{name: "-q", script: twelve + "tail -q -n 1 /data/abc /tmp/n", stdout: "c\n12\n"},
		{name: "a missing file", script: "head -n 1 /data/none", stderr: "head: can't open '/data/none': No such file or directory\n", exit: 1},
		{name: "a bad number", script: "tail -n x /tmp", stderr: "tail: invalid number 'x'\n", exit: 1},
		{name: "the standard input", script: "head -n 1 <<EOF\nin\nput\nEOF", stdout: "in\n"},
		{name: "in a command substitution", script: twelve + `[ "$(head -n 1 /data/abc)" = a ] && exit 4`, exit: 4},
		{name: "/dev/null is readable and empty", script: "cat /dev/null; head -n 1 /dev/null; tail /dev/null; [ -z \"$(cat /dev/null)\" ] && exit 5", exit: 5},
		{name: "tail -f /dev/null runs until stopped", script: "echo started; tail -f /dev/null; echo never", stdout: "started\n", forever: true},
		{name: "tail -f a file of its own layer", script: "echo x > /tmp/log; tail -f /tmp/log", stdout: "x\n", forever: true},
		{name: "tail -F", script: "tail -F /dev/null", forever: true},
		{name: "tail -f a file of a volume", script: twelve + "tail -f /data/abc", reason: "runs tail -f /data/abc, following a file of a volume"},
		{name: "a file of the image", script: "head -n 1 /etc/passwd", reason: "reads /etc/passwd, a file of the image"},
		{name: "writing /dev/null's programs", script: "echo x > /dev/null; cat /dev/null", stdout: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Program{Command: sh(tc.script), Mounts: []Mount{{Path: "/data", FS: NewFS(0), Root: "/"}}}
			got := Run(context.Background(), p, Limits{})
			if tc.reason != "" {
				if got.Honoured || !strings.HasPrefix(got.Reason, tc.reason) {
					t.Fatalf("Run = honoured %v (%s), want not honoured: %s", got.Honoured, got.Reason, tc.reason)
				}
				return
			}
			if !got.Honoured || got.Forever != tc.forever || got.ExitCode != tc.exit {
				t.Fatalf("Run = honoured %v (%s), forever %v, exit %d; want forever %v, exit %d", got.Honoured, got.Reason, got.Forever, got.ExitCode, tc.forever, tc.exit)
			}
			var stdout, stderr strings.Builder
			for _, l := range got.Output {
				b := &stdout
				if l.Stderr {
					b = &stderr
				}
				b.WriteString(l.Text)
				if !l.Partial {
					b.WriteString("\n")
				}
			}
			if stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}
}

// TestIPLinkAdd: `ip link add NAME type dummy` is refused to a process without CAP_NET_ADMIN with the
// kernel's EPERM as busybox prints it, and succeeds with it; any other ip command is not honoured.
func TestIPLinkAdd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   string
		netAdmin bool
		honoured bool
		exit     uint8
		stderr   string
	}{
		{"unprivileged: EPERM", "ip link add dummy0 type dummy", false, true, 1, "ip: RTNETLINK answers: Operation not permitted"},
		{"unprivileged, || true (the spec's)", "ip link add dummy0 type dummy || true", false, true, 0, "ip: RTNETLINK answers: Operation not permitted"},
		{"NET_ADMIN: added", "ip link add dummy0 type dummy", true, true, 0, ""},
		{"ip addr: not honoured", "ip addr", true, false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Run(context.Background(), &Program{Command: []string{"sh", "-c", tc.script}, NetAdmin: tc.netAdmin}, Limits{})
			if res.Honoured != tc.honoured {
				t.Fatalf("honoured %v (%s), want %v", res.Honoured, res.Reason, tc.honoured)
			}
			if !tc.honoured {
				return
			}
			var stderr []string
			for _, l := range res.Output {
				if l.Stderr {
					stderr = append(stderr, l.Text)
				}
			}
			if uint8(res.ExitCode) != tc.exit || strings.Join(stderr, "\n") != tc.stderr {
				t.Errorf("exit %d stderr %q, want %d %q", res.ExitCode, stderr, tc.exit, tc.stderr)
			}
		})
	}
}
