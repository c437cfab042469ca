package simulation

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

// configMaps is a ConfigMapGetter over a fixed set, counting the reads.
type configMaps struct {
	items map[string]*v1.ConfigMap
	reads int
}

func (c *configMaps) get(_ context.Context, namespace, name string) (*v1.ConfigMap, error) {
	c.reads++
	if name == "secret" {
		return nil, apierrors.NewForbidden(v1.Resource("configmaps"), name, nil)
	}
	if cm, ok := c.items[namespace+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmaps"), name)
}

func configMap(name string, data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "7"}, Data: data}
}

// TestLogConfigMap: AnnotationLogConfigMap's lines, with the other log annotations, and its errors.
func TestLogConfigMap(t *testing.T) {
	cms := &configMaps{items: map[string]*v1.ConfigMap{
		"ns/access": configMap("access", map[string]string{"log": "GET / 200\nGET /a 404\nPOST /b 201\n"}),
		"ns/two":    configMap("two", map[string]string{"a": "1", "b": "2"}),
		"ns/empty":  configMap("empty", map[string]string{"log": ""}),
		"ns/huge":   configMap("huge", map[string]string{"log": strings.Repeat("x", maxLogConfigMapBytes+1)}),
	}}
	// now: 25 s into the current run (started streamT0+1m).
	clk := testingclock.NewFakeClock(streamT0.Add(time.Minute + 25*time.Second))
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		opts    kubeletserver.ContainerLogOpts
		want    string
		wantErr string
	}{
		{name: "every line at the start", ann: map[string]string{AnnotationLogConfigMap: "access/log"},
			want: "GET / 200\nGET /a 404\nPOST /b 201\n"},
		{name: "the only key", ann: map[string]string{AnnotationLogConfigMap: "access"},
			want: "GET / 200\nGET /a 404\nPOST /b 201\n"},
		{name: "log-lines and log-period cycle through them", ann: map[string]string{AnnotationLogConfigMap: "access", AnnotationLogLines: "1", AnnotationLogPeriod: "10s"},
			want: "GET / 200\nGET /a 404\nPOST /b 201\n"},
		{name: "more lines than the ConfigMap has", ann: map[string]string{AnnotationLogConfigMap: "access", AnnotationLogLines: "5", AnnotationLogText: "ignored"},
			want: "GET / 200\nGET /a 404\nPOST /b 201\nGET / 200\nGET /a 404\n"},
		{name: "tail and timestamps", ann: map[string]string{AnnotationLogConfigMap: "access"}, opts: kubeletserver.ContainerLogOpts{Tail: 1, TailSet: true, Timestamps: true},
			want: "2026-11-27T08:01:00Z POST /b 201\n"},
		{name: "two keys, none named", ann: map[string]string{AnnotationLogConfigMap: "two"},
			wantErr: `annotation nodeagent.io/log-configmap "two": configmap "two" has 2 keys (a, b); name one as two/<key>`},
		{name: "no such key", ann: map[string]string{AnnotationLogConfigMap: "two/c"},
			wantErr: `annotation nodeagent.io/log-configmap "two/c": configmap "two" has no key "c" in data`},
		{name: "no such ConfigMap", ann: map[string]string{AnnotationLogConfigMap: "nope/log"},
			wantErr: `annotation nodeagent.io/log-configmap "nope/log": configmaps "nope" not found`},
		{name: "forbidden", ann: map[string]string{AnnotationLogConfigMap: "secret/log"},
			wantErr: `annotation nodeagent.io/log-configmap "secret/log": configmaps "secret" is forbidden`},
		{name: "empty key", ann: map[string]string{AnnotationLogConfigMap: "empty/log"},
			wantErr: `annotation nodeagent.io/log-configmap "empty/log": key "log" is empty`},
		{name: "too big", ann: map[string]string{AnnotationLogConfigMap: "huge/log"},
			wantErr: `annotation nodeagent.io/log-configmap "huge/log": key "log" holds 1048577 bytes, more than 1048576`},
		{name: "no name", ann: map[string]string{AnnotationLogConfigMap: "/log"},
			wantErr: `annotation nodeagent.io/log-configmap "/log": want <configmap>/<key> or <configmap>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &Streaming{Pods: onePod{logPod(tc.ann)}, Clock: clk, ConfigMaps: cms.get}
			rc, err := st.GetContainerLogs(context.Background(), "ns", "p", "c", tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if _, err := rc.(*logStream).WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

// TestLogConfigMapShared: the streams of one version of a ConfigMap share its lines; a new version
// is read anew.
func TestLogConfigMapShared(t *testing.T) {
	cms := &configMaps{items: map[string]*v1.ConfigMap{"ns/access": configMap("access", map[string]string{"log": "a\nb\n"})}}
	st := &Streaming{Pods: onePod{logPod(map[string]string{AnnotationLogConfigMap: "access"})},
		Clock: testingclock.NewFakeClock(streamT0.Add(2 * time.Minute)), ConfigMaps: cms.get}
	open := func() *logStream {
		rc, err := st.GetContainerLogs(context.Background(), "ns", "p", "c", kubeletserver.ContainerLogOpts{})
		if err != nil {
			t.Fatal(err)
		}
		return rc.(*logStream)
	}
	a, b := open(), open()
	if a.spec.from != b.spec.from {
		t.Errorf("two streams of one ConfigMap version hold two copies of its lines")
	}
	cms.items["ns/access"] = configMap("access", map[string]string{"log": "c\n"})
	cms.items["ns/access"].ResourceVersion = "8"
	if c := open(); c.spec.from == a.spec.from || c.spec.from.lines[0] != "c" {
		t.Errorf("a new version of the ConfigMap: lines %q, want [c]", c.spec.from.lines)
	}
}
