package simulation

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestEphemeralContainerCommand: an ephemeral container's command is interpreted (its log is what it
// writes) whatever the pod's other containers are: one of nginx without a command (`kubectl debug` of a
// web server), the pause image, or a shell with a command.
func TestEphemeralContainerCommand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		image string
		cmd   []string
	}{
		{name: "image without a command", image: "nginx"},
		{name: "pause image", image: "registry.k8s.io/pause:3.10"},
		{name: "shell with a command", image: "busybox", cmd: []string{"/bin/sleep", "10000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := jobPod("debugged", "0", v1.RestartPolicyAlways, emptyDir, tc.cmd, nil)
			p.Spec.Containers[0].Image = tc.image
			ctx := context.Background()
			_ = s.CreatePod(ctx, p)
			s.clk.Step(time.Second)
			if _, err := s.GetPodStatus(ctx, p); err != nil {
				t.Fatal(err)
			}
			p = p.DeepCopy()
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: "debugger", Image: "busybox", Command: []string{"/bin/sh", "-c", "echo polo; sleep infinity"}}}}
			_ = s.UpdatePod(ctx, p)
			s.clk.Step(time.Second)
			r, err := s.GetPodStatus(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Status.EphemeralContainers) != 1 || r.Status.EphemeralContainers[0].State.Running == nil {
				t.Fatalf("ephemeral containers %+v, want debugger running", r.Status.EphemeralContainers)
			}
			var got []string
			for _, l := range s.runOutput(p, "debugger", 0) {
				got = append(got, l.Text)
			}
			if !slices.Equal(got, []string{"polo"}) {
				t.Errorf("debugger's output %q, want [polo]", got)
			}
		})
	}
}

// TestEphemeralContainerLoop: the Ephemeral Containers specs' `while true; do echo polo; sleep 2;
// done` (and loops that only sleep) passes the sandbox's steps while sleeping: it runs until stopped,
// its log is its `polo` lines from its start, and exec answers in it (`/bin/echo marco`); a busy loop
// is still not interpreted (exec answers from the annotation only).
func TestEphemeralContainerLoop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		lines   int // its first output lines, "polo" each
		execErr bool
	}{
		{name: "the spec's polo loop", script: "while true; do echo polo; sleep 2; done", lines: 1000},
		{name: "sleeps only", script: "while true; do sleep 1; done"},
		{name: "a busy loop is not interpreted", script: "while true; do :; done", execErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCommandSim()
			p := jobPod("debugged", "0", v1.RestartPolicyAlways, emptyDir, []string{"/bin/sleep", "10000"}, nil)
			p.Spec.Containers[0].Image = "busybox"
			ctx := context.Background()
			_ = s.CreatePod(ctx, p)
			s.clk.Step(time.Second)
			if _, err := s.GetPodStatus(ctx, p); err != nil {
				t.Fatal(err)
			}
			p = p.DeepCopy()
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: "debugger", Image: "busybox", Command: []string{"/bin/sh", "-c", tc.script}}}}
			_ = s.UpdatePod(ctx, p)
			for _, at := range []time.Duration{time.Second, time.Hour} {
				s.clk.Step(at)
				r, err := s.GetPodStatus(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if !tc.execErr && (len(r.Status.EphemeralContainers) != 1 || r.Status.EphemeralContainers[0].State.Running == nil) {
					t.Fatalf("+%v: ephemeral containers %+v, want debugger running", at, r.Status.EphemeralContainers)
				}
				res, _, err := s.execInContainer(ctx, p, "debugger", []string{"/bin/echo", "marco"})
				if tc.execErr != errors.Is(err, ErrExecNotInterpreted) || !tc.execErr && string(res.Stdout) != "marco\n" {
					t.Errorf("+%v: exec /bin/echo marco: %q, %v; want marco, not interpreted %v", at, res.Stdout, err, tc.execErr)
				}
			}
			out := s.runOutput(p, "debugger", 0)
			if len(out) < tc.lines || tc.lines == 0 && len(out) > 0 {
				t.Fatalf("debugger's output: %d lines, want at least %d", len(out), tc.lines)
			}
			for i, l := range out {
				if l.Text != "polo" || l.Offset != time.Duration(i)*2*time.Second {
					t.Fatalf("line %d: %q at %v, want polo at %v", i, l.Text, l.Offset, time.Duration(i)*2*time.Second)
				}
			}
		})
	}
}
