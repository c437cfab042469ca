package simulation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
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
//
// Against a web page in a browser on the same host (cross-site requests, DNS rebinding), every request
// must name a loopback host or one of allowedHosts in its Host header (else 403), and a POST must carry
// Content-Type application/json (else 415) and no Origin but a loopback or allowed one (else 403): a
// browser sends neither a JSON content type nor a foreign Origin's request without a CORS preflight,
// which this handler never grants.
func (s *Simulator) Handler(allowedHosts ...string) http.Handler {
	return guard(s.handler(), allowedHosts)
}

// guard refuses requests whose Host is not loopback or allowed, and POSTs that are not JSON or come
// from a foreign Origin (see Handler).
func guard(next http.Handler, allowedHosts []string) http.Handler {
	allowed := func(host string) bool {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if strings.EqualFold(host, "localhost") || slices.ContainsFunc(allowedHosts, func(a string) bool { return strings.EqualFold(a, host) }) {
			return true
		}
		ip := net.ParseIP(host)
		return ip != nil && ip.IsLoopback()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed(r.Host) {
			http.Error(w, fmt.Sprintf("forbidden: Host %q is not a loopback address or an allowed host name", r.Host), http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if origin := r.Header.Get("Origin"); origin != "" {
				u, err := url.Parse(origin)
				if err != nil || !allowed(u.Host) {
					http.Error(w, fmt.Sprintf("forbidden: cross-origin request from %q", origin), http.StatusForbidden)
					return
				}
			}
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				http.Error(w, fmt.Sprintf("unsupported media type %q: send Content-Type: application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Simulator) handler() http.Handler {
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
