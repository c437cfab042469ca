package simulation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	kjson "sigs.k8s.io/json"
)

// Path is the subtree the control API is served under.
const Path = "/simulation/"

// maxBody bounds a control request's body.
const maxBody = 64 << 10

// List is the answer of GET /simulation/nodes.
type List struct {
	Summary Summary     `json:"summary"`
	Nodes   []NodeState `json:"nodes"`
}

// Summary counts the simulated Nodes by phase and by their last posted Ready status.
type Summary struct {
	Total    int `json:"total"`
	Pending  int `json:"pending"`
	Running  int `json:"running"`
	Stopped  int `json:"stopped"`
	Ready    int `json:"ready"`
	NotReady int `json:"notReady"`
}

// Handler serves the control API (mount it at Path, loopback only):
//
//	GET  /simulation/nodes         every Node's state and a summary (List)
//	GET  /simulation/nodes/{name}  one Node's state (NodeState)
//	POST /simulation/nodes/{name}  apply a Change given as JSON, e.g. {"runtimeReady":false}; answers the state after
//
// An unknown Node is 404; a body that is not a JSON Change (an unknown or mis-cased field, a value of
// the wrong type) or changes nothing is 400; each with a one-line plain-text message.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path+"nodes", func(w http.ResponseWriter, r *http.Request) {
		l := List{Nodes: s.States()}
		for _, n := range l.Nodes {
			l.Summary.Total++
			switch n.Phase {
			case PhasePending:
				l.Summary.Pending++
			case PhaseRunning:
				l.Summary.Running++
			case PhaseStopped:
				l.Summary.Stopped++
			}
			if n.Ready == "True" {
				l.Summary.Ready++
			} else {
				l.Summary.NotReady++
			}
		}
		writeJSON(w, l)
	})
	mux.HandleFunc("GET "+Path+"nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, ok := s.byName[name]; !ok {
			http.Error(w, fmt.Sprintf("%s %q", ErrUnknownNode, name), http.StatusNotFound)
			return
		}
		writeJSON(w, s.State(name))
	})
	mux.HandleFunc("POST "+Path+"nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, ok := s.byName[name]; !ok {
			http.Error(w, fmt.Sprintf("%s %q", ErrUnknownNode, name), http.StatusNotFound)
			return
		}
		c, err := decodeChange(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		st, err := s.Set(r.Context(), name, c)
		if errors.Is(err, ErrUnknownNode) {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, st)
	})
	return mux
}

// decodeChange strictly decodes a Change: unknown, duplicate or mis-cased fields are errors
// (encoding/json alone would take "RuntimeReady" for runtimeReady), and so is a Change of nothing.
func decodeChange(r io.Reader) (Change, error) {
	var c Change
	data, err := io.ReadAll(r)
	if err != nil {
		return c, err
	}
	strictErrs, err := kjson.UnmarshalStrict(data, &c)
	if err != nil {
		return c, fmt.Errorf("body is not a JSON object of booleans runtimeReady, networkReady, memoryPressure, diskPressure, pidPressure, stopped: %w", err)
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, 0, len(strictErrs))
		for _, e := range strictErrs {
			msgs = append(msgs, e.Error())
		}
		return c, fmt.Errorf("%s (known fields: runtimeReady, networkReady, memoryPressure, diskPressure, pidPressure, stopped)", strings.Join(msgs, ", "))
	}
	if c.Empty() {
		return c, errors.New("the body changes nothing: give at least one of runtimeReady, networkReady, memoryPressure, diskPressure, pidPressure, stopped")
	}
	return c, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
