package simulation

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
)

func serve(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w
}

// TestHandlerRefuses: unknown Nodes are 404, bodies that are not a Change are 400, other methods 405,
// each with a message saying why; nothing changes.
func TestHandlerRefuses(t *testing.T) {
	e := newSimEnv(t, nil)
	h := e.sim.Handler()
	for _, tc := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{"POST", "/simulation/nodes/sim-0009", `{"runtimeReady":false}`, 404, `no such simulated node "sim-0009"`},
		{"GET", "/simulation/nodes/nope", "", 404, `no such simulated node "nope"`},
		{"POST", "/simulation/nodes/sim-0001", `{"runtimeready":false}`, 400, `unknown field "runtimeready"`},
		{"POST", "/simulation/nodes/sim-0001", `{"RuntimeReady":false}`, 400, `unknown field "RuntimeReady"`},
		{"POST", "/simulation/nodes/sim-0001", `{"reboot":true}`, 400, `unknown field "reboot"`},
		{"POST", "/simulation/nodes/sim-0001", `{"stopped":"yes"}`, 400, "bad request"},
		{"POST", "/simulation/nodes/sim-0001", `{"stopped":true}{}`, 400, "bad request"},
		{"POST", "/simulation/nodes/sim-0001", `{"stopped":true,"stopped":false}`, 400, `duplicate field "stopped"`},
		{"POST", "/simulation/nodes/sim-0001", `not json`, 400, "bad request"},
		{"POST", "/simulation/nodes/sim-0001", `{}`, 400, "changes nothing"},
		{"POST", "/simulation/nodes/sim-0001", `null`, 400, "changes nothing"},
		{"POST", "/simulation/nodes/sim-0001", strings.Repeat(" ", maxBody+1) + `{"stopped":true}`, 400, "too large"},
		{"PUT", "/simulation/nodes/sim-0001", `{"stopped":true}`, 405, ""},
		{"DELETE", "/simulation/nodes", "", 405, ""},
		{"GET", "/simulation/other", "", 404, ""},
	} {
		w := serve(h, tc.method, tc.path, tc.body)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.says) {
			t.Errorf("%s %s %.40q: %d %q, want %d saying %q", tc.method, tc.path, tc.body, w.Code, strings.TrimSpace(w.Body.String()), tc.code, tc.says)
		}
	}
	if st := e.sim.State("sim-0001"); st.Phase != PhasePending || !st.RuntimeReady || st.MemoryPressure {
		t.Errorf("state after refused requests %+v, want unchanged", st)
	}
}

// TestHandlerControls: GET lists every Node with a summary, GET one returns its state, POST applies a
// change and answers the state after it.
func TestHandlerControls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		e := newSimEnv(t, nil)
		h := e.sim.Handler()
		stop := e.run(ctx)
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()

		w := serve(h, "GET", "/simulation/nodes", "")
		var l List
		if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || w.Code != 200 {
			t.Fatalf("GET /simulation/nodes: %d %v", w.Code, err)
		}
		if l.Summary != (Summary{Total: 3, Running: 3, Ready: 3}) || len(l.Nodes) != 3 || l.Nodes[2].Name != "sim-0002" {
			t.Errorf("list %+v", l)
		}

		w = serve(h, "POST", "/simulation/nodes/sim-0001", `{"memoryPressure":true,"networkReady":false}`)
		var st NodeState
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || w.Code != 200 {
			t.Fatalf("POST: %d %q %v", w.Code, w.Body.String(), err)
		}
		if !st.MemoryPressure || st.NetworkReady || !st.RuntimeReady || st.Phase != PhaseRunning {
			t.Errorf("state after POST %+v", st)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if c := condition(e.node("sim-0001"), v1.NodeReady); c.Status != v1.ConditionFalse {
			t.Errorf("Ready after networkReady false: %s", conditionText(c))
		}

		w = serve(h, "POST", "/simulation/nodes/sim-0002", `{"stopped":true}`)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"phase": "stopped"`) {
			t.Errorf("POST stopped: %d %s", w.Code, w.Body.String())
		}
		w = serve(h, "GET", "/simulation/nodes/sim-0002", "")
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st.Phase != PhaseStopped || !st.Registered {
			t.Errorf("GET sim-0002 after stop: %d %+v %v", w.Code, st, err)
		}
		w = serve(h, "GET", "/simulation/nodes", "")
		if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || l.Summary != (Summary{Total: 3, Running: 2, Stopped: 1, Ready: 2, NotReady: 1}) {
			t.Errorf("summary after the changes %+v %v", l.Summary, err)
		}
		w = serve(h, "POST", "/simulation/nodes/sim-0002", `{"stopped":false}`)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"phase": "running"`) {
			t.Errorf("POST started: %d %s", w.Code, w.Body.String())
		}
	})
}
