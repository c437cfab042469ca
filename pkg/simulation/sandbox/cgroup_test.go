package sandbox

import (
	"context"
	"strings"
	"testing"
)

// TestCgroupFiles: the container's cgroup files (Program.Cgroup) read at /sys/fs/cgroup, read-only,
// `mount -t cgroup2` listing it (the in-place resize specs' reads); none known without them; and an
// exec into a container whose layer is not known (UnknownLayer) knows none of its files.
func TestCgroupFiles(t *testing.T) {
	cg := map[string]string{"cpu.max": "1000 100000\n", "cpu.weight": "1\n", "memory.max": "max\n"}
	for _, tc := range []struct {
		name, script string
		cgroup       map[string]string
		unknown      bool
		stdout       string
		stderr       string
		exit         int32
		reason       string // not honoured: a prefix of the reason
	}{
		{name: "the resize specs' reads", script: "head -n 1 /sys/fs/cgroup/cpu.max; head -n 1 /sys/fs/cgroup/cpu.weight; head -n 1 /sys/fs/cgroup/memory.max", cgroup: cg,
			stdout: "1000 100000\n1\nmax\n"},
		{name: "mount -t cgroup2", script: "mount -t cgroup2", cgroup: cg, stdout: "cgroup on /sys/fs/cgroup type cgroup2 (ro,nosuid,nodev,noexec,relatime)\n"},
		{name: "cat, a redirection, test", script: `cat /sys/fs/cgroup/memory.max; read x < /sys/fs/cgroup/cpu.max; echo "$x"; [ -f /sys/fs/cgroup/cpu.weight ] && [ -r /sys/fs/cgroup/cpu.weight ] && [ ! -w /sys/fs/cgroup/cpu.weight ]`,
			cgroup: cg, stdout: "max\n1000 100000\n"},
		{name: "read-only", script: "echo 5 > /sys/fs/cgroup/cpu.weight", cgroup: cg, stderr: "sh: can't create /sys/fs/cgroup/cpu.weight: Read-only file system\n", exit: 1},
		{name: "read-only to touch", script: "touch /sys/fs/cgroup/cpu.max", cgroup: cg, stderr: "touch: /sys/fs/cgroup/cpu.max: Read-only file system\n", exit: 1},
		{name: "another cgroup file", script: "cat /sys/fs/cgroup/cpu.stat", cgroup: cg, reason: "uses /sys/fs/cgroup/cpu.stat, a device or kernel file"},
		{name: "listing the cgroup", script: "ls /sys/fs/cgroup", cgroup: cg, reason: "lists /sys/fs/cgroup, a directory of the image"},
		{name: "no cgroup files", script: "head -n 1 /sys/fs/cgroup/cpu.max", reason: "uses /sys/fs/cgroup/cpu.max, a device or kernel file"},
		{name: "no mount without them", script: "mount -t cgroup2", reason: "runs mount -t cgroup2 (only"},
		{name: "mounting", script: "mount -t tmpfs none /mnt", cgroup: cg, reason: "runs mount -t tmpfs none /mnt"},
		{name: "an unknown layer: /tmp", script: "ls /tmp", unknown: true, reason: "lists /tmp, a directory of the image"},
		{name: "an unknown layer: a write", script: "echo x > /tmp/x", unknown: true, reason: "reads /tmp, a file of the image"},
		{name: "an unknown layer: its volumes", script: "echo x > /data/x; cat /data/x", unknown: true, stdout: "x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Program{Command: []string{"sh", "-c", tc.script}, Cgroup: tc.cgroup, UnknownLayer: tc.unknown,
				Mounts: []Mount{{Path: "/data", FS: NewFS(0), Root: "/"}}}
			if tc.unknown {
				p.Rootfs = NewLayer(0)
			}
			got := Run(context.Background(), p, Limits{})
			if tc.reason != "" {
				if got.Honoured || !strings.HasPrefix(got.Reason, tc.reason) {
					t.Fatalf("Run = honoured %v (%s), want not honoured: %s", got.Honoured, got.Reason, tc.reason)
				}
				return
			}
			if !got.Honoured || got.ExitCode != tc.exit {
				t.Fatalf("Run = honoured %v (%s), exit %d; want exit %d", got.Honoured, got.Reason, got.ExitCode, tc.exit)
			}
			var stdout, stderr strings.Builder
			for _, l := range got.Output {
				b := &stdout
				if l.Stderr {
					b = &stderr
				}
				b.WriteString(l.Text + "\n")
			}
			if stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}
}
