package simulation

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// fakeServices is a ServiceLister over a fixed set of Services (by namespace), counting its LISTs.
type fakeServices struct {
	byNS      map[string][]v1.Service
	lists     int
	forbidden bool
}

func (f *fakeServices) list(_ context.Context, namespace, name string, limit int64) ([]v1.Service, error) {
	f.lists++
	if f.forbidden {
		return nil, apierrors.NewForbidden(v1.Resource("services"), "", errors.New("no"))
	}
	var out []v1.Service
	for _, s := range f.byNS[namespace] {
		if (name == "" || s.Name == name) && int64(len(out)) < limit {
			out = append(out, s)
		}
	}
	return out, nil
}

// TestServiceLinks: a container's env gets the docker-link variables of the Services of its pod's
// namespace (with enableServiceLinks, nil meaning true) and those of default/kubernetes always, as the
// kubelet's getServiceEnvVarMap and envvars.FromServices; a headless Service has none; the container's
// own env wins and may reference them. The first case is the e2e spec Pods "should contain environment
// variables for services".
func TestServiceLinks(t *testing.T) {
	svc := func(ns, name, ip string, ports ...v1.ServicePort) v1.Service {
		return v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServiceSpec{ClusterIP: ip, Ports: ports}}
	}
	master := svc("default", "kubernetes", "10.96.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP})
	masterVars := []string{"KUBERNETES_PORT=tcp://10.96.0.1:443", "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1", "KUBERNETES_PORT_443_TCP_PORT=443", "KUBERNETES_PORT_443_TCP_PROTO=tcp",
		"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_SERVICE_PORT_HTTPS=443"}
	fooVars := []string{"FOOSERVICE_PORT=tcp://10.96.7.7:8765", "FOOSERVICE_PORT_8765_TCP=tcp://10.96.7.7:8765",
		"FOOSERVICE_PORT_8765_TCP_ADDR=10.96.7.7", "FOOSERVICE_PORT_8765_TCP_PORT=8765", "FOOSERVICE_PORT_8765_TCP_PROTO=tcp",
		"FOOSERVICE_SERVICE_HOST=10.96.7.7", "FOOSERVICE_SERVICE_PORT=8765"}
	services := map[string][]v1.Service{
		"default": {master, svc("default", "other", "10.96.9.9", v1.ServicePort{Port: 80})},
		"ns": {svc("ns", "fooservice", "10.96.7.7", v1.ServicePort{Port: 8765}),
			svc("ns", "headless", v1.ClusterIPNone, v1.ServicePort{Port: 80}),
			svc("ns", "my-dns", "fd00::a", v1.ServicePort{Name: "dns-udp", Port: 53, Protocol: v1.ProtocolUDP})},
	}
	dnsVars := []string{"MY_DNS_PORT=udp://[fd00::a]:53", "MY_DNS_PORT_53_UDP=udp://[fd00::a]:53", "MY_DNS_PORT_53_UDP_ADDR=fd00::a",
		"MY_DNS_PORT_53_UDP_PORT=53", "MY_DNS_PORT_53_UDP_PROTO=udp", "MY_DNS_SERVICE_HOST=fd00::a", "MY_DNS_SERVICE_PORT=53",
		"MY_DNS_SERVICE_PORT_DNS_UDP=53"}
	for _, tc := range []struct {
		name      string
		namespace string
		links     *bool
		env       []v1.EnvVar
		forbidden bool
		want      []string // sorted
		lists     int
	}{
		{name: "e2e spec: the namespace's services and the master's", namespace: "ns",
			want: slices.Concat(fooVars, masterVars, dnsVars), lists: 2},
		{name: "enableServiceLinks false: the master's only", namespace: "ns", links: ptr.To(false), want: masterVars, lists: 1},
		{name: "namespace default: one LIST", namespace: "default", links: ptr.To(true),
			want: slices.Concat(masterVars, []string{"OTHER_PORT=tcp://10.96.9.9:80", "OTHER_PORT_80_TCP=tcp://10.96.9.9:80",
				"OTHER_PORT_80_TCP_ADDR=10.96.9.9", "OTHER_PORT_80_TCP_PORT=80", "OTHER_PORT_80_TCP_PROTO=tcp",
				"OTHER_SERVICE_HOST=10.96.9.9", "OTHER_SERVICE_PORT=80"}), lists: 1},
		{name: "the container's env wins and references them", namespace: "ns", links: ptr.To(false),
			env: []v1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "mine"}, {Name: "URL", Value: "https://$(KUBERNETES_PORT_443_TCP_ADDR)"}},
			want: slices.Concat([]string{"KUBERNETES_PORT=tcp://10.96.0.1:443", "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
				"KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1", "KUBERNETES_PORT_443_TCP_PORT=443", "KUBERNETES_PORT_443_TCP_PROTO=tcp",
				"KUBERNETES_SERVICE_HOST=mine", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_SERVICE_PORT_HTTPS=443", "URL=https://10.96.0.1"}), lists: 1},
		{name: "Forbidden: none", namespace: "ns", forbidden: true, lists: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &fakeServices{byNS: services, forbidden: tc.forbidden}
			c := &commands{src: &envSources{services: fs.list}}
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: tc.namespace, UID: "uid-svc"},
				Spec: v1.PodSpec{EnableServiceLinks: tc.links}}
			ctr := &v1.Container{Name: "c", Command: []string{"sh", "-c", "env"}, Env: tc.env}
			got, err := runOutput(t, c, p, ctr)
			if err != nil {
				t.Fatal(err)
			}
			var vars []string
			for _, l := range got {
				if name, _, _ := strings.Cut(l, "="); strings.Contains(name, "_PORT") || strings.Contains(name, "_SERVICE_") || name == "URL" {
					vars = append(vars, l)
				}
			}
			slices.Sort(vars)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(vars, want) {
				t.Errorf("service variables\n%q, want\n%q", vars, want)
			}
			if fs.lists != tc.lists {
				t.Errorf("%d LISTs, want %d", fs.lists, tc.lists)
			}
		})
	}
}

// BenchmarkServiceLinks: one run of `sh -c true` with the service links of a namespace of n Services
// (the fake lister's cost only: the LIST's round trip is the API server's).
func BenchmarkServiceLinks(b *testing.B) {
	for _, n := range []int{0, 10, 256} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var svcs []v1.Service
			for i := range n {
				svcs = append(svcs, v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc-" + strconv.Itoa(i)},
					Spec: v1.ServiceSpec{ClusterIP: "10.96.0.2", Ports: []v1.ServicePort{{Name: "http", Port: 80}}}})
			}
			fs := &fakeServices{byNS: map[string][]v1.Service{"ns": svcs}}
			c := &commands{src: &envSources{services: fs.list}}
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-b"}}
			ctr := &v1.Container{Name: "c", Command: []string{"sh", "-c", "true"}}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := c.run(context.Background(), p, ctr, &podCommands{}, 0, time.Unix(0, 0)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSubPathExprRecovers: the e2e spec "should verify that a failing subpath expansion can be modified
// during the lifecycle of a container": the config error is not kept; once the annotation the
// subPathExpr reads is set, the next try makes the container (as the kubelet's next sync).
func TestSubPathExprRecovers(t *testing.T) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-r", Annotations: map[string]string{"notmysubpath": "mypath"}},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "workdir1", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
	ctr := &v1.Container{Name: "c", Command: []string{"sh", "-c", "echo x > /subpath_mount/f; cat /volume_mount/mypath/foo/f"},
		Env: []v1.EnvVar{{Name: "POD_NAME", Value: "foo"},
			{Name: "ANNOTATION", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations['mysubpath']"}}}},
		VolumeMounts: []v1.VolumeMount{{Name: "workdir1", MountPath: "/subpath_mount", SubPathExpr: "$(ANNOTATION)/$(POD_NAME)"},
			{Name: "workdir1", MountPath: "/volume_mount"}}}
	c, pc := &commands{}, &podCommands{}
	for i, tc := range []struct {
		annotation string
		wantErr    string
		want       []string
	}{
		{wantErr: "missing value for ANNOTATION"},
		{wantErr: "missing value for ANNOTATION"},
		{annotation: "mypath", want: []string{"x"}},
	} {
		if tc.annotation != "" {
			p.Annotations["mysubpath"] = tc.annotation
		}
		r, reason, err := c.run(context.Background(), p, ctr, pc, 0, time.Unix(0, 0))
		if err != nil || reason != "" {
			t.Fatalf("try %d: %v %q", i, err, reason)
		}
		if (r.out.CreateError == nil) != (tc.wantErr == "") || (r.out.CreateError != nil && r.out.CreateError.Error() != tc.wantErr) {
			t.Fatalf("try %d: CreateError %v, want %q", i, r.out.CreateError, tc.wantErr)
		}
		var got []string
		for _, l := range r.out.Output {
			got = append(got, l.Text)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("try %d: output %q, want %q", i, got, tc.want)
		}
	}
}
