package simulation

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeObjects are the ConfigMaps and Secrets of namespace ns a test's getters read, counting the reads.
type fakeObjects struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	gets       int
	forbidden  bool // Secrets: Forbidden
}

func (f *fakeObjects) sources() *envSources {
	return &envSources{
		configMaps: func(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
			f.gets++
			if cm, ok := f.configMaps[ns+"/"+name]; ok {
				return cm, nil
			}
			return nil, apierrors.NewNotFound(v1.Resource("configmaps"), name)
		},
		secrets: func(_ context.Context, ns, name string) (*v1.Secret, error) {
			f.gets++
			if f.forbidden {
				return nil, apierrors.NewForbidden(v1.Resource("secrets"), name, errors.New("no"))
			}
			if s, ok := f.secrets[ns+"/"+name]; ok {
				return s, nil
			}
			return nil, apierrors.NewNotFound(v1.Resource("secrets"), name)
		},
		allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")},
	}
}

func newFakeObjects() *fakeObjects {
	return &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{"ns/cm": {Data: map[string]string{"a": "1", "b": "two", "x-y": "dash"}}},
		secrets:    map[string]*v1.Secret{"ns/s": {Data: map[string][]byte{"pw": []byte("hunter2")}}},
	}
}

func yes() *bool { b := true; return &b }

// TestContainerEnvSources: the kubelet's makeEnvironmentVariables over ConfigMaps, Secrets and
// resource fields: envFrom first (with the prefix; keys that are not C identifiers kept, as v1.37's
// relaxed names), env replacing them; optional sources missing set nothing; a missing source that is
// not optional is the kubelet's error; each object read once per container.
func TestContainerEnvSources(t *testing.T) {
	cmKey := func(name, key string, optional bool) *v1.EnvVarSource {
		s := &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key}}
		if optional {
			s.ConfigMapKeyRef.Optional = yes()
		}
		return s
	}
	secretKey := func(name, key string, optional bool) *v1.EnvVarSource {
		s := &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key}}
		if optional {
			s.SecretKeyRef.Optional = yes()
		}
		return s
	}
	res := func(r, divisor string) *v1.EnvVarSource {
		s := &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: r}}
		if divisor != "" {
			s.ResourceFieldRef.Divisor = resource.MustParse(divisor)
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		forbidden bool
		envFrom   []v1.EnvFromSource
		env       []v1.EnvVar
		want      []string
		wantErr   string
		wantGets  int
	}{
		{name: "configMapKeyRef and secretKeyRef, $(VAR) of them", env: []v1.EnvVar{
			{Name: "A", ValueFrom: cmKey("cm", "a", false)}, {Name: "PW", ValueFrom: secretKey("s", "pw", false)},
			{Name: "B", ValueFrom: cmKey("cm", "b", false)}, {Name: "REF", Value: "$(A)-$(PW)"}},
			want: []string{"A=1", "PW=hunter2", "B=two", "REF=1-hunter2"}, wantGets: 2},
		{name: "envFrom with prefix, env replaces", envFrom: []v1.EnvFromSource{
			{Prefix: "P_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}},
			{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "s"}}}},
			env:  []v1.EnvVar{{Name: "pw", Value: "$(P_a)"}},
			want: []string{"P_a=1", "P_b=two", "P_x-y=dash", "pw=1"}, wantGets: 2},
		{name: "optional missing: nothing set", envFrom: []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: yes()}}},
			env:  []v1.EnvVar{{Name: "K", ValueFrom: cmKey("cm", "missing", true)}, {Name: "S", ValueFrom: secretKey("nope", "k", true)}, {Name: "E"}},
			want: []string{"E="}, wantGets: 3},
		{name: "Secrets forbidden: left out, read once", forbidden: true, env: []v1.EnvVar{
			{Name: "PW", ValueFrom: secretKey("s", "pw", false)}, {Name: "PW2", ValueFrom: secretKey("other", "pw", false)}, {Name: "A", ValueFrom: cmKey("cm", "a", false)}},
			want: []string{"A=1"}, wantGets: 2},
		{name: "missing ConfigMap", env: []v1.EnvVar{{Name: "A", ValueFrom: cmKey("nope", "a", false)}},
			wantErr: `configmap "nope" not found`, wantGets: 1},
		{name: "missing key of a ConfigMap", env: []v1.EnvVar{{Name: "A", ValueFrom: cmKey("cm", "zz", false)}},
			wantErr: "couldn't find key zz in ConfigMap ns/cm", wantGets: 1},
		{name: "missing key of a Secret", env: []v1.EnvVar{{Name: "A", ValueFrom: secretKey("s", "zz", false)}},
			wantErr: "couldn't find key zz in Secret ns/s", wantGets: 1},
		{name: "missing Secret of envFrom", envFrom: []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}},
			wantErr: `secret "nope" not found`, wantGets: 1},
		{name: "resourceFieldRef: limits, requests, divisor, allocatable for a limit not set", env: []v1.EnvVar{
			{Name: "CPU_LIMIT", ValueFrom: res("limits.cpu", "")}, {Name: "CPU_REQ_M", ValueFrom: res("requests.cpu", "1m")},
			{Name: "MEM_LIMIT_MI", ValueFrom: res("limits.memory", "1Mi")}, {Name: "MEM_REQ", ValueFrom: res("requests.memory", "")}},
			want: []string{"CPU_LIMIT=1", "CPU_REQ_M=250", "MEM_LIMIT_MI=8192", "MEM_REQ=33554432"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := newFakeObjects()
			objs.forbidden = tc.forbidden
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
			ctr := &v1.Container{Name: "c", EnvFrom: tc.envFrom, Env: tc.env, Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")},
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("32Mi")}}}
			env, _, err := containerEnv(context.Background(), p, ctr, nil, objs.sources(), nil)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(env, tc.want) {
				t.Errorf("env %q, want %q", env, tc.want)
			}
			if objs.gets != tc.wantGets {
				t.Errorf("%d GETs, want %d", objs.gets, tc.wantGets)
			}
		})
	}
}

// TestSimPodsCreateContainerConfigError: a container whose env names a ConfigMap that does not exist
// waits with the kubelet's CreateContainerConfigError and message, told in a Failed Event, and is
// asked again within createRetry; once the ConfigMap exists it starts then (not at the pod's start).
func TestSimPodsCreateContainerConfigError(t *testing.T) {
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	recorder := record.NewFakeRecorder(20)
	s := newSimPods(Behaviour{}, "fakeRuntime", recorder, clk)
	objs := newFakeObjects()
	s.commands = &commands{src: objs.sources()}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID("uid-p")},
		Spec: v1.PodSpec{NodeName: "sim-0000", RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "c", Image: "busybox",
			Command: []string{"sh", "-c", "echo $A; sleep 5"},
			Env:     []v1.EnvVar{{Name: "A", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "late"}, Key: "a"}}}}}}}}
	ctx := context.Background()
	if err := s.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	r, err := s.GetPodStatus(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	w := r.Status.Containers[0].State.Waiting
	if w == nil || w.Reason != ReasonCreateContainerConfigError || w.Message != `configmap "late" not found` {
		t.Fatalf("state %+v, want waiting CreateContainerConfigError", r.Status.Containers[0].State)
	}
	if r.RecheckAfter <= 0 || r.RecheckAfter > createRetry {
		t.Errorf("recheck after %v, want within %v", r.RecheckAfter, createRetry)
	}
	var failed bool
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; e == `Warning Failed Error: configmap "late" not found` {
			failed = true
		}
	}
	if !failed {
		t.Error("no Failed Event")
	}
	clk.Step(20 * time.Second)
	objs.configMaps["ns/late"] = &v1.ConfigMap{Data: map[string]string{"a": "here"}}
	if r, err = s.GetPodStatus(ctx, p); err != nil {
		t.Fatal(err)
	}
	run := r.Status.Containers[0].State.Running
	if run == nil || !run.StartedAt.Equal(clk.Now()) {
		t.Fatalf("state %+v, want running since %v", r.Status.Containers[0].State, clk.Now())
	}
	out := s.runOutput(p, "c", 0)
	if len(out) != 1 || out[0].Text != "here" {
		t.Errorf("output %+v, want the ConfigMap's value", out)
	}
	clk.Step(5 * time.Second)
	if r, err = s.GetPodStatus(ctx, p); err != nil {
		t.Fatal(err)
	}
	if term := r.Status.Containers[0].State.Terminated; term == nil || !strings.EqualFold(term.Reason, "Completed") {
		t.Errorf("state %+v, want completed 5 s after its start", r.Status.Containers[0].State)
	}
}

// TestObjectVolumes: ConfigMap (items), Secret, downwardAPI and projected volumes are what the kubelet's
// volume manager writes, mounted read-only (subPath too) in the command's sandbox; a missing ConfigMap
// that is not optional is a mount error (ContainerCreating, FailedMount).
func TestObjectVolumes(t *testing.T) {
	objs := newFakeObjects()
	c := &commands{src: objs.sources()}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-v", Labels: map[string]string{"app": "web", "tier": "x"}},
		Spec: v1.PodSpec{Volumes: []v1.Volume{
			{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"},
				Items: []v1.KeyToPath{{Key: "b", Path: "sub/bee"}}}}},
			{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
			{Name: "dapi", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
			{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}},
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}}}, // left out, as kube-root-ca.crt without its publisher
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s"}}}}}}},
			{Name: "missing", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}},
		}}}
	mounts := []v1.VolumeMount{{Name: "cm", MountPath: "/etc/cm"}, {Name: "sec", MountPath: "/etc/sec"}, {Name: "dapi", MountPath: "/etc/pod"},
		{Name: "proj", MountPath: "/proj"}, {Name: "proj", MountPath: "/one", SubPath: "a"}}
	script := `cat /etc/cm/sub/bee; cat /etc/sec/pw; cat /etc/pod/labels; echo; cat /etc/pod/name; echo; cat /proj/a /proj/pw; echo; ls /proj; cat /one
echo x > /etc/cm/new || echo read-only`
	ctr := &v1.Container{Name: "c", Command: []string{"sh", "-c", script}, VolumeMounts: mounts}
	pc := &podCommands{}
	r, reason, err := c.run(context.Background(), p, ctr, pc, 0, time.Unix(0, 0))
	if err != nil || reason != "" {
		t.Fatal(err, reason)
	}
	var got []string
	for _, l := range r.out.Output {
		got = append(got, l.Text)
	}
	want := []string{`twohunter2app="web"`, `tier="x"`, "p", "1hunter2", "a", "b", "pw", "x-y",
		"sh: can't create /etc/cm/new: Read-only file system", "1read-only"} // the files' values without a newline, as written
	if !slices.Equal(got, want) {
		t.Errorf("output\n%q, want\n%q", got, want)
	}
	gets := objs.gets
	if _, _, err := c.run(context.Background(), p, ctr, pc, 1, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if objs.gets != gets {
		t.Errorf("the restart read the objects again (%d GETs, then %d)", gets, objs.gets)
	}
	ctr.VolumeMounts = append(ctr.VolumeMounts, v1.VolumeMount{Name: "missing", MountPath: "/m"})
	r, _, _ = c.run(context.Background(), p, ctr, pc, 2, time.Unix(0, 0))
	if r.out.CreateError == nil || !isMountError(r.out.CreateError) ||
		r.out.CreateError.Error() != `MountVolume.SetUp failed for volume "missing" : configmap "nope" not found` {
		t.Errorf("CreateError %v, want the mount error", r.out.CreateError)
	}
}
