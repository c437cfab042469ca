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
	return serveAs(h, method, path, body, "application/json")
}

func serveAs(h http.Handler, method, path, body, contentType string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Host = "127.0.0.1:10248"
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	h.ServeHTTP(w, r)
	return w
}

// TestHandlerMethodsAndNoops (issue 27, item 9): a method other than GET, HEAD and POST is 405 with
// Allow on a known path whatever its Content-Type (none, a form's, JSON), through the loopback handler
// and the pod-proxy one, and 404 on an unknown path; a body naming no field is 400; a body naming fields
// already at their values is applied as any other (200, the state), as docs/simulation.md says.
func TestHandlerMethodsAndNoops(t *testing.T) {
	e := newSimEnv(t, nil)
	for name, h := range map[string]http.Handler{
		"loopback": e.sim.Handler(),
	} {
		for _, method := range []string{"PUT", "DELETE", "PATCH", "OPTIONS"} {
			for _, ct := range []string{"", "text/plain", "application/json"} {
				for path, allow := range map[string]string{"/simulation/nodes/sim-0001": "GET, HEAD, POST", "/simulation/nodes": "GET, HEAD"} {
					w := serveAs(h, method, path, `{"stopped":true}`, ct)
					if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != allow {
						t.Errorf("%s: %s %s Content-Type %q: %d Allow %q, want 405 Allow %q", name, method, path, ct, w.Code, w.Header().Get("Allow"), allow)
					}
				}
			}
		}
		if w := serveAs(h, "PUT", "/simulation/other", "", ""); w.Code != http.StatusNotFound {
			t.Errorf("%s: PUT /simulation/other: %d, want 404", name, w.Code)
		}
		if w := serve(h, "POST", "/simulation/nodes/sim-0001", `{}`); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "names no field") {
			t.Errorf("%s: POST {}: %d %q, want 400 naming no field", name, w.Code, w.Body.String())
		}
		// The Node is pending (not run here): runtimeReady is already true, memoryPressure already false.
		w := serve(h, "POST", "/simulation/nodes/sim-0001", `{"runtimeReady":true,"memoryPressure":false}`)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"runtimeReady": true`) {
			t.Errorf("%s: POST of the values the Node has: %d %q, want 200 with the state", name, w.Code, w.Body.String())
		}
	}
	if st := e.sim.State("sim-0001"); st.Phase != PhasePending {
		t.Errorf("state after the refused methods %+v, want pending (not stopped)", st)
	}
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
		{"POST", "/simulation/nodes/sim-0001", `{}`, 400, "names no field"},
		{"POST", "/simulation/nodes/sim-0001", `null`, 400, "names no field"},
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

// TestWriteListAsWriteJSON: the streamed list is byte for byte what encoding/json's indented Encoder
// writes, for no, one and several Nodes.
func TestWriteListAsWriteJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 22, 0, 0, 0, time.UTC)
	for _, l := range []List{
		{},
		{Summary: Summary{Total: 1, Running: 1, Ready: 1}, Nodes: []NodeState{{Name: "sim-0000", Phase: PhaseRunning, Ready: "True", LastSync: at}}},
		{Summary: Summary{Total: 3, Pending: 1, Stopped: 1, Running: 1, NotReady: 3}, Nodes: []NodeState{
			{Name: "sim-0000", Phase: PhasePending}, {Name: "sim-0001", Phase: PhaseStopped, MemoryPressure: true, Registered: true, Ready: "Unknown", LastLeaseRenew: at},
			{Name: "sim-0002", Phase: PhaseRunning, RuntimeReady: true, NetworkReady: true}}},
	} {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(want, l)
		writeList(got, l)
		if got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != "application/json" {
			t.Errorf("writeList:\n%s\nwant (writeJSON):\n%s", got.Body, want.Body)
		}
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

// TestHandlerRefusesCrossSite: what a web page in a browser on the host could send is refused before
// anything changes: a foreign Host (DNS rebinding), a foreign Origin, a POST that is not JSON (a
// "simple" cross-site request needs no preflight); loopback hosts and the allowed names are served.
func TestHandlerRefusesCrossSite(t *testing.T) {
	sim := newSimEnv(t, nil).sim
	h := sim.Handler("sim.example")
	for _, tc := range []struct {
		name, method, host, origin, contentType string
		wantCode                                int
	}{
		{"foreign host (DNS rebinding)", "POST", "evil.example:10248", "", "application/json", http.StatusForbidden},
		{"foreign host, read", "GET", "evil.example", "", "", http.StatusForbidden},
		{"foreign origin", "POST", "127.0.0.1:10248", "http://evil.example", "application/json", http.StatusForbidden},
		{"text/plain from a form", "POST", "127.0.0.1:10248", "", "text/plain", http.StatusUnsupportedMediaType},
		{"no content type", "POST", "localhost:10248", "", "", http.StatusUnsupportedMediaType},
		{"loopback, JSON", "POST", "127.0.0.1:10248", "", "application/json; charset=utf-8", http.StatusOK},
		{"IPv6 loopback with a loopback origin", "POST", "[::1]:10248", "http://localhost:10248", "application/json", http.StatusOK},
		{"allowed host name", "POST", "sim.example:10248", "", "application/json", http.StatusOK},
		{"loopback read", "GET", "localhost", "", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := ""
			path := Path + "nodes"
			if tc.method == "POST" {
				body, path = `{"memoryPressure":true}`, Path+"nodes/"+sim.Names()[0]
			}
			r := httptest.NewRequest(tc.method, path, strings.NewReader(body))
			r.Host = tc.host
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantCode {
				t.Errorf("%s %s Host %q Origin %q Content-Type %q: %d %q, want %d", tc.method, path, tc.host, tc.origin, tc.contentType,
					w.Code, strings.TrimSpace(w.Body.String()), tc.wantCode)
			}
		})
	}
}
