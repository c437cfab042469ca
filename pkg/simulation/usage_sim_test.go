package simulation

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// podsByName is a node.PodLister over a fixed set of pods.
type podsByName []*v1.Pod

func (l podsByName) Get(namespace, name string) (*v1.Pod, error) {
	for _, p := range l {
		if p.Namespace == namespace && p.Name == name {
			return p, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
}

func (l podsByName) OnNode(node string) ([]*v1.Pod, error) {
	var out []*v1.Pod
	for _, p := range l {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, nil
}

// TestHandlerUsage: the control API's usage paths set a pod's and a Node's simulated usage at run
// time and show it; bad changes are 400 naming the field and the value, pods and Nodes that are not
// this simulator's 404.
func TestHandlerUsage(t *testing.T) {
	web := running(usagePod(nil, withResources("app", rl("1", "1Gi"), nil), withResources("side", nil, nil)), time.Now().Add(-time.Minute))
	web.Spec.NodeName = "sim-0001"
	foreign := web.DeepCopy()
	foreign.Name, foreign.Spec.NodeName = "foreign", "other-node"
	e := newSimEnv(t, func(c *Config) { c.Dependencies.Pods = podsByName{web, foreign} })
	h := e.sim.Handler()

	for _, tc := range []struct {
		method, path, body string
		wantCode           int
		want               []string // in the body
	}{
		{"GET", "/simulation/usage/pods/ns/web", "", 200, []string{`"name": "app",`, `"cpu": "100m",`, `"memory": "107374182"`, `"name": "side",`, `"cpu": "1m",`, `"memory": "1Mi"`}},
		{"POST", "/simulation/usage/pods/ns/web", `{"cpu":"800m","memory":"300Mi"}`, 200, []string{`"cpu": "800m",`, `"memory": "300Mi"`}},
		{"POST", "/simulation/usage/pods/ns/web", `{"container":"side","cpu":"2"}`, 200, []string{`"cpu": "2",`}},
		{"POST", "/simulation/usage/pods/ns/web", `{"cpu":"fast"}`, 400, []string{`bad request: bad usage change: cpu "fast" is not a positive quantity such as 800m or 2`}},
		{"POST", "/simulation/usage/pods/ns/web", `{"container":"nope","cpu":"1"}`, 400, []string{`pod ns/web has no container "nope"`}},
		{"POST", "/simulation/usage/pods/ns/web", `{"cpus":"1"}`, 400, []string{`bad request: body is not a JSON UsageChange`}},
		{"POST", "/simulation/usage/pods/ns/web", `{}`, 400, []string{`give cpu, memory or both`}},
		{"POST", "/simulation/usage/pods/ns/absent", `{"cpu":"1"}`, 404, []string{`no such pod on this simulator's Nodes: ns/absent`}},
		{"POST", "/simulation/usage/pods/ns/foreign", `{"cpu":"1"}`, 404, []string{`ns/foreign is bound to "other-node"`}},
		{"POST", "/simulation/usage/nodes/sim-0001", `{"memory":"1Gi"}`, 200, []string{`"baseCPU": "100m"`, `"baseMemory": "1Gi"`}},
		{"POST", "/simulation/usage/nodes/sim-0001", `{"container":"app","cpu":"1"}`, 400, []string{`a Node's usage has no container`}},
		{"POST", "/simulation/usage/nodes/sim-9999", `{"cpu":"1"}`, 404, []string{`no such simulated node "sim-9999"`}},
		{"GET", "/simulation/usage/nodes/sim-9999", "", 404, []string{`no such simulated node "sim-9999"`}},
	} {
		w := serve(h, tc.method, tc.path, tc.body)
		if w.Code != tc.wantCode {
			t.Errorf("%s %s %s: %d %q, want %d", tc.method, tc.path, tc.body, w.Code, w.Body.String(), tc.wantCode)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(w.Body.String(), s) {
				t.Errorf("%s %s %s: body %q, want %q in it", tc.method, tc.path, tc.body, w.Body.String(), s)
			}
		}
	}

	w := serve(h, "GET", "/simulation/usage/nodes/sim-0001", "")
	var s statsv1alpha1.Summary
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || w.Code != http.StatusOK {
		t.Fatalf("GET the Node's Summary: %d %v", w.Code, err)
	}
	got := fmt.Sprintf("%s pods=%d", s.Node.NodeName, len(s.Pods))
	if got != "sim-0001 pods=1" || len(s.Pods[0].Containers) != 2 {
		t.Fatalf("Summary %s, want sim-0001 with web's two containers", got)
	}
	app, side := s.Pods[0].Containers[0], s.Pods[0].Containers[1]
	if *app.CPU.UsageNanoCores != 800_000_000 || *side.CPU.UsageNanoCores != 2_000_000_000 || *app.Memory.WorkingSetBytes != 300<<20 {
		t.Errorf("containers app %d nanocores %d bytes, side %d nanocores: want 800m 300Mi, 2", *app.CPU.UsageNanoCores, *app.Memory.WorkingSetBytes, *side.CPU.UsageNanoCores)
	}
	if *s.Node.CPU.UsageNanoCores != 2_900_000_000 || *s.Node.Memory.WorkingSetBytes != 1<<30+300<<20+300<<20 {
		t.Errorf("node %d nanocores %d bytes: want 100m + 2.8 and 1Gi + 600Mi", *s.Node.CPU.UsageNanoCores, *s.Node.Memory.WorkingSetBytes)
	}
	g, err := e.sim.StatsSummary("sim-0001")
	if err != nil {
		t.Fatal(err)
	}
	if s2, err := g.GetStatsSummary(t.Context()); err != nil || len(s2.Pods) != 1 {
		t.Errorf("StatsSummary: %v %v", s2, err)
	}
	if _, err := e.sim.StatsSummary("sim-9999"); err == nil {
		t.Error("StatsSummary of a Node not the simulator's: no error")
	}
}
