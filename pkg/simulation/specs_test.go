package simulation

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// runOutput runs container ctr of p once (restart 0) and returns its output's lines, or its
// CreateError.
func runOutput(t *testing.T, c *commands, p *v1.Pod, ctr *v1.Container) ([]string, error) {
	t.Helper()
	r, reason, err := c.run(context.Background(), p, ctr, &podCommands{}, 0, time.Unix(0, 0))
	if err != nil || reason != "" {
		t.Fatalf("run: %v %s", err, reason)
	}
	if r.out.CreateError != nil {
		return nil, r.out.CreateError
	}
	var got []string
	for _, l := range r.out.Output {
		got = append(got, l.Text)
	}
	return got, nil
}

// TestReadOnlyRootFilesystem: securityContext.readOnlyRootFilesystem makes the container's own layer
// refuse writes with busybox's "Read-only file system" (the e2e spec Kubelet "read only busybox
// container should not write to root filesystem"); its volumes stay writable unless mounted readOnly.
func TestReadOnlyRootFilesystem(t *testing.T) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-ro"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
	for _, tc := range []struct {
		name     string
		readOnly *bool
		mounts   []v1.VolumeMount
		script   string
		want     []string
	}{
		{name: "e2e spec", readOnly: ptr.To(true), script: "echo test > /file; sleep 1",
			want: []string{"/bin/sh: can't create /file: Read-only file system"}},
		{name: "touch and mkdir in the layer", readOnly: ptr.To(true), script: "touch /tmp/x; mkdir -p /a/b; echo $?",
			want: []string{"touch: /tmp/x: Read-only file system", "mkdir: can't create directory '/a/b': Read-only file system", "1"}},
		{name: "a volume stays writable", readOnly: ptr.To(true), mounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			script: "echo ok > /data/f && cat /data/f", want: []string{"ok"}},
		{name: "a readOnly volume", readOnly: ptr.To(true), mounts: []v1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}},
			script: "echo ok > /data/f", want: []string{"/bin/sh: can't create /data/f: Read-only file system"}},
		{name: "false: the layer is writable", readOnly: ptr.To(false), script: "echo test > /file && cat /file", want: []string{"test"}},
		{name: "unset: the layer is writable", script: "echo test > /file && cat /file", want: []string{"test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctr := &v1.Container{Name: "c", Command: []string{"/bin/sh", "-c", tc.script}, VolumeMounts: tc.mounts,
				SecurityContext: &v1.SecurityContext{ReadOnlyRootFilesystem: tc.readOnly}}
			got, err := runOutput(t, &commands{}, p, ctr)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("output %q, want %q", got, tc.want)
			}
		})
	}
}
