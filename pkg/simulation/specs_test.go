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

// TestSubPathExpr: a volume mount's subPathExpr is expanded from the container's env as the kubelet's
// makeMounts does it; an absolute result, one with "..", or a variable missing or empty is the
// container's CreateContainerConfigError with the kubelet's message. The cases are the e2e Variable
// Expansion subpath specs (test/e2e/common/node/expansion.go).
func TestSubPathExpr(t *testing.T) {
	mounts := func(expr string) []v1.VolumeMount {
		return []v1.VolumeMount{{Name: "workdir1", MountPath: "/subpath_mount", SubPathExpr: expr}, {Name: "workdir1", MountPath: "/volume_mount"}}
	}
	annotation := v1.EnvVar{Name: "ANNOTATION", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations['mysubpath']"}}}
	for _, tc := range []struct {
		name        string
		env         []v1.EnvVar
		annotations map[string]string
		mounts      []v1.VolumeMount
		command     []string // nil: none (the simulation's defaults; the config is made all the same)
		want        []string
		wantErr     string
	}{
		{name: "substituting values in a volume subpath", env: []v1.EnvVar{{Name: "POD_NAME", Value: "var-expansion-1"}},
			mounts: mounts("$(POD_NAME)"), command: []string{"sh", "-c", "test -d /volume_mount/var-expansion-1;echo $?"}, want: []string{"0"}},
		{name: "succeed in writing subpaths", env: []v1.EnvVar{{Name: "POD_NAME", Value: "foo"}, annotation},
			annotations: map[string]string{"mysubpath": "mypath"}, mounts: mounts("$(ANNOTATION)/$(POD_NAME)"),
			command: []string{"sh", "-c", "touch /volume_mount/mypath/foo/test.log && test -f /subpath_mount/test.log; echo $?"}, want: []string{"0"}},
		{name: "backticks", env: []v1.EnvVar{{Name: "POD_NAME", Value: ".."}}, mounts: mounts("$(POD_NAME)"),
			command: []string{"sh", "-c", "true"}, wantErr: "unable to provision SubPath `..`: must not contain '..'"},
		{name: "absolute path", env: []v1.EnvVar{{Name: "POD_NAME", Value: "/tmp"}}, mounts: mounts("$(POD_NAME)"),
			command: []string{"sh", "-c", "true"}, wantErr: "error SubPath `/tmp` must not be an absolute path"},
		{name: "absolute path, no command", env: []v1.EnvVar{{Name: "POD_NAME", Value: "/tmp"}}, mounts: mounts("$(POD_NAME)"),
			wantErr: "error SubPath `/tmp` must not be an absolute path"},
		{name: "failing expansion (the annotation not set yet)", env: []v1.EnvVar{{Name: "POD_NAME", Value: "foo"}, annotation},
			annotations: map[string]string{"notmysubpath": "mypath"}, mounts: mounts("$(ANNOTATION)/$(POD_NAME)"),
			command: []string{"sh", "-c", "tail -f /dev/null"}, wantErr: "missing value for ANNOTATION"},
		{name: "a variable not defined", mounts: mounts("$(B)/$(A)"), command: []string{"sh", "-c", "true"}, wantErr: "missing value for A, B"},
		{name: "an element with .. inside", env: []v1.EnvVar{{Name: "X", Value: "a/../b"}}, mounts: mounts("$(X)"),
			command: []string{"sh", "-c", "true"}, wantErr: "unable to provision SubPath `a/../b`: must not contain '..'"},
		{name: "dots in a name are no backstep", env: []v1.EnvVar{{Name: "X", Value: "a..b"}}, mounts: mounts("$(X)"),
			command: []string{"sh", "-c", "echo x > /subpath_mount/f; cat /volume_mount/a..b/f"}, want: []string{"x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "var-expansion-1", Namespace: "ns", UID: "uid-sp", Annotations: tc.annotations},
				Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "workdir1", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
			ctr := &v1.Container{Name: "c", Command: tc.command, Env: tc.env, VolumeMounts: tc.mounts}
			r, reason, err := (&commands{}).run(context.Background(), p, ctr, &podCommands{}, 0, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" {
				if r.out.CreateError == nil || r.out.CreateError.Error() != tc.wantErr {
					t.Fatalf("CreateError %v, want %q", r.out.CreateError, tc.wantErr)
				}
				return
			}
			if reason != "" || r.out.CreateError != nil {
				t.Fatalf("not run: %q %v", reason, r.out.CreateError)
			}
			var got []string
			for _, l := range r.out.Output {
				got = append(got, l.Text)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("output %q, want %q", got, tc.want)
			}
		})
	}
}
