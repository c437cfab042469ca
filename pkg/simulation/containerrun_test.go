package simulation

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

// TestContainerRun: the run whose log the kubelet API serves is found among the pod's containers, init
// containers and ephemeral containers, as the kubelet's validateContainerLogStatus looks in all three
// (an ephemeral container's log: `kubectl logs -c debugger`, the e2e's "Ephemeral Containers" specs).
func TestContainerRun(t *testing.T) {
	running := func(name string, at time.Time) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}
	}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: map[string]string{AnnotationLogText: "polo"}},
		Status: v1.PodStatus{
			InitContainerStatuses: []v1.ContainerStatus{{Name: "init", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				StartedAt: metav1.NewTime(streamT0), FinishedAt: metav1.NewTime(streamT0.Add(time.Second))}}}},
			ContainerStatuses:          []v1.ContainerStatus{running("c", streamT0.Add(2*time.Second))},
			EphemeralContainerStatuses: []v1.ContainerStatus{running("debugger", streamT0.Add(time.Minute))},
		}}
	for _, tc := range []struct {
		name, container string
		previous        bool
		want            run
		wantErr         string
		wantLog         string
	}{
		{name: "container", container: "c", want: run{started: streamT0.Add(2 * time.Second)}},
		{name: "init container", container: "init", want: run{started: streamT0, ended: streamT0.Add(time.Second)}},
		{name: "ephemeral container", container: "debugger", want: run{started: streamT0.Add(time.Minute)},
			wantLog: "polo container=debugger restart=0 line=0\n"},
		{name: "ephemeral container, previous", container: "debugger", previous: true, wantErr: `previous terminated container "debugger" in pod "p" not found`},
		{name: "no such container", container: "x", wantErr: `container "x" in pod "p" is waiting to start: ContainerCreating`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := containerRun(p, tc.container, tc.previous)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("containerRun: error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("containerRun: %v", err)
			}
			if got.restart != tc.want.restart || !got.started.Equal(tc.want.started) || !got.ended.Equal(tc.want.ended) {
				t.Errorf("containerRun: %+v, want %+v", got, tc.want)
			}
			if tc.wantLog == "" {
				return
			}
			st := &Streaming{Pods: onePod{p}, Clock: testingclock.NewFakeClock(streamT0.Add(2 * time.Minute))}
			rc, err := st.GetContainerLogs(context.Background(), "ns", "p", tc.container, kubeletserver.ContainerLogOpts{})
			if err != nil {
				t.Fatalf("GetContainerLogs: %v", err)
			}
			b, _ := io.ReadAll(rc)
			if !strings.Contains(string(b), tc.wantLog) {
				t.Errorf("GetContainerLogs: %q, want %q", b, tc.wantLog)
			}
		})
	}
}
