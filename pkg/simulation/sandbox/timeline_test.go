package sandbox

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// outputText is a run's output, its lines joined with newlines.
func outputText(res Result) string {
	var b strings.Builder
	for _, l := range res.Output {
		b.WriteString(l.Text)
		if !l.Partial {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestLayerTimeline: a run's changes to its own layer are recorded with their simulated times, so that
// the layer at any time of the run is made again (the conformance spec's liveness command: the file is
// there for 10 s, then removed); a command run later against that state (kubectl exec) sees it, and
// its own changes, recorded in a timeline of their own, are seen by the next one after it.
func TestLayerTimeline(t *testing.T) {
	res := Run(context.Background(), &Program{Command: sh("echo ok > /tmp/health; mkdir -p /work/d; echo a > /work/d/f; sleep 10; rm -rf /tmp/health; mv /work/d /work/e; sleep 600")}, Limits{})
	if !res.Honoured || res.Layer.Len() == 0 {
		t.Fatalf("%+v", res)
	}
	for _, tc := range []struct {
		at   time.Duration
		cmd  string
		want string
	}{
		{0, "cat /tmp/health; ls /work", "ok\nd\n"},
		{9 * time.Second, "cat /tmp/health && cat /work/d/f", "ok\na\n"},
		{10 * time.Second, "test -e /tmp/health || echo gone; ls /work; cat /work/e/f", "gone\ne\na\n"},
		{time.Hour, "ls /tmp; echo end", "end\n"},
	} {
		state := StateAt(tc.at, 0, res.Layer)
		got := Run(context.Background(), &Program{Command: sh(tc.cmd), Rootfs: state}, Limits{})
		if !got.Honoured || outputText(got) != tc.want {
			t.Errorf("at %v, %q: %q (%+v), want %q", tc.at, tc.cmd, outputText(got), got.Reason, tc.want)
		}
	}
	// An exec's writes, recorded at its time, are seen by a later exec, not an earlier one.
	execs := NewTimeline(0)
	state := StateAt(5*time.Second, 0, res.Layer)
	state.Record(execs, func() time.Duration { return 5 * time.Second })
	if got := Run(context.Background(), &Program{Command: sh("echo x > /tmp/mark; mv /work/d/f /work/g"), Rootfs: state}, Limits{}); !got.Honoured || got.ExitCode != 0 {
		t.Fatalf("exec: %+v", got)
	}
	for _, tc := range []struct {
		at   time.Duration
		want string
	}{{4 * time.Second, "ok\nd\n"}, {6 * time.Second, "ok\nd\ng\nx\n"}, {11 * time.Second, "e\ng\nx\n"}} {
		got := Run(context.Background(), &Program{Command: sh("cat /tmp/health 2>/dev/null; ls /work; cat /tmp/mark 2>/dev/null; true"), Rootfs: StateAt(tc.at, 0, res.Layer, execs)}, Limits{})
		if outputText(got) != tc.want {
			t.Errorf("at %v: %q (%s), want %q", tc.at, outputText(got), got.Reason, tc.want)
		}
	}
}

// TestLayerTimelineBounded: the layer's changes are held up to the limit: a command that rewrites a file
// without end gets ENOSPC past it, as on a full disk (the interpreter's echo does not report its write
// errors: the file stays empty).
func TestLayerTimelineBounded(t *testing.T) {
	res := Run(context.Background(), &Program{Command: sh(`i=0; while [ $i -lt 400 ]; do echo 0123456789012345678901234567890123456789 > /tmp/f; i=$((i+1)); done; cat /tmp/f; exit 3`)},
		Limits{Memory: 32 << 10, RealTime: 10 * time.Second})
	if !res.Honoured || res.ExitCode != 3 || res.Layer.Bytes() > 32<<10 || len(res.Output) != 0 {
		t.Fatalf("%+v (layer %d bytes)", res, res.Layer.Bytes())
	}
}

// TestLsMvCp: ls, mv and cp over volumes and the container's own layer, as busybox's.
func TestLsMvCp(t *testing.T) {
	vol := NewFS(0)
	for _, tc := range []struct {
		cmd  string
		want []string
		code int32
	}{
		{"touch /v/b /v/a; mkdir /v/d; ls /v", []string{"a", "b", "d"}, 0},
		{"mv /v/a /v/d; ls /v/d; ls /v", []string{"a", "b", "d"}, 0},
		{"cp /v/b /tmp/c; mv /tmp/c /v/c; ls /v /tmp", []string{"/v:", "b", "c", "d", "", "/tmp:"}, 0},
		{"ls /v/nope", []string{"ls: /v/nope: No such file or directory"}, 1},
		{"mv /v/zz /v/y", []string{"mv: can't rename '/v/zz': No such file or directory"}, 1},
	} {
		res := Run(context.Background(), &Program{Command: sh(tc.cmd), Mounts: []Mount{{Path: "/v", FS: vol, Root: "/"}}}, Limits{})
		var got []string
		for _, l := range res.Output {
			got = append(got, l.Text)
		}
		if !res.Honoured || res.ExitCode != tc.code || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q exit %d (%s), want %q exit %d", tc.cmd, got, res.ExitCode, res.Reason, tc.want, tc.code)
		}
	}
	if res := Run(context.Background(), &Program{Command: sh("ls /etc")}, Limits{}); res.Honoured {
		t.Errorf("ls of a directory of the image honoured: %+v", res)
	}
}
