package simulation

import (
	"bufio"
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

	"github.com/nodeagent/nodeagent/pkg/config"
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
//	POST /simulation/pods/{namespace}/{name}  apply a ContainerChange to a pod on one of the Nodes, e.g.
//	                               {"container":"web","crash":2}; answers its PodState (404: not on this simulator)
//	POST /simulation/nodes/{name}/devices  apply a DeviceHealthChange to a device of the Node, e.g.
//	                               {"driver":"gpu.example.com","device":"gpu-0","health":"Unhealthy"}; answers
//	                               {"pods": [namespace/name, ...]}, the pods using it
//	POST /simulation/nodes/{name}/slices  apply a NodeDevicesChange: the Node's slice of a driver lists only
//	                               the template's devices named, e.g. {"driver":"gpu.example.com","devices":["gpu-0"]}
//
// An unknown Node is 404; a body that is not a JSON Change (an unknown or mis-cased field, a value of
// the wrong type) or names no field ({}, null) is 400; each with a one-line plain-text message. A
// Change that names fields already at the values given is applied as any other (idempotent): 200 with
// the state. Another method on a known path is 405 (with Allow), whatever its Content-Type; an
// unknown path is 404.
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
		if r.Method == http.MethodPost { // other methods change nothing: the mux answers 405
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
		adopted := s.adoptedNodes()
		l := List{Nodes: make([]NodeState, 0, len(s.nodes)+len(adopted))}
		for _, n := range append(slices.Clip(s.nodes), adopted...) {
			if r.Context().Err() != nil {
				return // the client is gone: each Node's state costs its controller's Status
			}
			l.Nodes = append(l.Nodes, n.state())
		}
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
		writeList(w, l)
	})
	mux.HandleFunc("GET "+Path+"nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, ok := s.lookup(name); !ok {
			http.Error(w, fmt.Sprintf("%s %q", ErrUnknownNode, name), http.StatusNotFound)
			return
		}
		writeJSON(w, s.State(name))
	})
	mux.HandleFunc("POST "+Path+"nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, ok := s.lookup(name); !ok {
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
	mux.HandleFunc("POST "+Path+"pods/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		c, ok := decodeBody[ContainerChange](w, r, `ContainerChange {"container": NAME, "crash": EXIT_CODE, "stop": true, "ready": BOOL}`)
		if !ok {
			return
		}
		st, err := s.SetPodContainer(r.Context(), r.PathValue("namespace"), r.PathValue("name"), c)
		answer(w, st, err)
	})
	mux.HandleFunc("POST "+Path+"nodes/{name}/devices", func(w http.ResponseWriter, r *http.Request) {
		c, ok := decodeBody[DeviceHealthChange](w, r, `DeviceHealthChange {"driver": DRIVER, "device": NAME, "health": "Healthy"|"Unhealthy"|"Unknown", "message": TEXT}`)
		if !ok {
			return
		}
		pods, err := s.SetDeviceHealth(r.PathValue("name"), c)
		answer(w, struct {
			Pods []string `json:"pods"`
		}{Pods: append([]string{}, pods...)}, err)
	})
	mux.HandleFunc("POST "+Path+"nodes/{name}/slices", func(w http.ResponseWriter, r *http.Request) {
		c, ok := decodeBody[NodeDevicesChange](w, r, `NodeDevicesChange {"driver": DRIVER, "devices": [NAME, ...] or null}`)
		if !ok {
			return
		}
		answer(w, c, s.SetNodeDevices(r.PathValue("name"), c))
	})
	s.installUsage(mux)
	return mux
}

// decodeChange strictly decodes a Change: unknown, duplicate or mis-cased fields are errors
// (encoding/json alone would take "RuntimeReady" for runtimeReady), and so is a Change that names no
// field.
func decodeChange(r io.Reader) (Change, error) {
	var c Change
	data, err := io.ReadAll(r)
	if err != nil {
		return c, err
	}
	if err := config.UnmarshalStrict(data, &c); errors.Is(err, config.ErrStrict) {
		return c, fmt.Errorf("%w (known fields: runtimeReady, networkReady, memoryPressure, diskPressure, pidPressure, stopped)", err)
	} else if err != nil {
		return c, fmt.Errorf("body is not a JSON object of booleans runtimeReady, networkReady, memoryPressure, diskPressure, pidPressure, stopped: %w", err)
	}
	if c.Empty() {
		return c, errors.New("the body names no field, so it changes nothing: give at least one of runtimeReady, networkReady, memoryPressure, diskPressure, pidPressure, stopped")
	}
	return c, nil
}

// decodeBody strictly decodes the request's body (at most maxBody bytes) into a T: unknown, duplicate
// or mis-cased fields are errors (config.UnmarshalStrict). On an error it answers 400 "bad request:
// body is not a JSON <shape>: <error>" and returns false; the handler then returns.
func decodeBody[T any](w http.ResponseWriter, r *http.Request, shape string) (T, bool) {
	var v T
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		err = config.UnmarshalStrict(data, &v)
	}
	if err != nil {
		http.Error(w, "bad request: body is not a JSON "+shape+": "+err.Error(), http.StatusBadRequest)
		return v, false
	}
	return v, true
}

// answer writes a control-API change's result: 404 when err wraps ErrUnknownPod or ErrUnknownNode, 400
// "bad request: <err>" for any other error, else v as JSON.
func answer(w http.ResponseWriter, v any, err error) {
	switch {
	case errors.Is(err, ErrUnknownPod) || errors.Is(err, ErrUnknownNode):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
	default:
		writeJSON(w, v)
	}
}

// writeList writes l as writeJSON would (indented by two spaces), one Node at a time, so that a list of
// thousands of Nodes costs one Node's encoding at a time instead of the whole list encoded, then
// indented into a second buffer (about 8 MiB of garbage per request at 2000 Nodes; a burst of them set
// the heap's goal and the RSS peak: issue 27, item 10).
func writeList(w http.ResponseWriter, l List) {
	w.Header().Set("Content-Type", "application/json")
	summary, err := json.MarshalIndent(l.Summary, "  ", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	defer bw.Flush()
	bw.WriteString("{\n  \"summary\": ")
	bw.Write(summary)
	if len(l.Nodes) == 0 {
		empty, _ := json.Marshal(l.Nodes) // null or []
		bw.WriteString(",\n  \"nodes\": " + string(empty) + "\n}\n")
		return
	}
	bw.WriteString(",\n  \"nodes\": [\n")
	for i, n := range l.Nodes {
		b, err := json.MarshalIndent(n, "    ", "  ")
		if err != nil {
			return // cannot happen: NodeState has no value json cannot encode
		}
		bw.WriteString("    ")
		bw.Write(b)
		if i < len(l.Nodes)-1 {
			bw.WriteString(",")
		}
		bw.WriteString("\n")
	}
	bw.WriteString("  ]\n}\n")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
