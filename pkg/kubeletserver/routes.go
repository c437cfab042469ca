package kubeletserver

import (
	"net/http"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// webService is one of the kubelet's go-restful WebServices (or a handler it installs with
// restfulCont.Handle) in pkg/kubelet/server/server.go: the root path, the nodes subresources a
// request under it is authorized against (the kubelet's NodeRequestAttributesGetter in auth.go, tried
// in order), and its routes. A webService without routes is one the kubelet serves and this server
// does not: its requests are authorized as the kubelet authorizes them and then answer 404.
type webService struct {
	// root is the kubelet's path constant ("/pods", "/stats/", "/metrics"...); a request is under it
	// as the kubelet's isSubpath says (the path itself, or below it after a "/").
	root string
	// subresources are the nodes subresources of the request's authorization attributes.
	subresources []string
	// routes are the methods and paths served under root, as the WebService's ws.GET/ws.POST.
	routes []route
}

// route is one method and path template of a webService, as go-restful's ws.Route: the template is
// below the root, each variable a whole segment ("/{podNamespace}/{podID}/{containerName}"), ""
// the root itself (with or without a trailing "/"), "/{subpath:*}" any path below the root.
type route struct {
	method    string
	path      string
	operation string // the kubelet's Operation name
	serve     func(s *Server, w http.ResponseWriter, r *http.Request, p pathParams)
}

// pathParams are the template variables of a matched route (go-restful's PathParameter).
type pathParams struct {
	namespace, pod, container string // {podNamespace}, {podID}, {containerName}
	uid                       types.UID
}

// The kubelet's paths (pkg/kubelet/server/server.go and auth.go) that are not in resourcemetrics.
const (
	healthzPath       = "/healthz"
	podsPath          = "/pods"
	allocatedPodsPath = "/allocatedPods"
	runningPodsPath   = "/runningpods/"
	statsPath         = "/stats/"
	metricsPath       = "/metrics"
	logsPath          = "/logs/"
	checkpointPath    = "/checkpoint/"
	configzPath       = "/configz"
	statuszPath       = "/statusz"
	flagzPath         = "/flagz"
	runPath           = "/run"
	execPath          = "/exec"
	attachPath        = "/attach"
	portForwardPath   = "/portForward"
	containerLogsPath = "/containerLogs"
)

// getAndPost returns a route for GET and one for POST of each template (the kubelet's exec, attach
// and portForward register both).
func getAndPost(operation string, serve func(*Server, http.ResponseWriter, *http.Request, pathParams), paths ...string) []route {
	out := make([]route, 0, 2*len(paths))
	for _, p := range paths {
		out = append(out, route{http.MethodGet, p, operation, serve}, route{http.MethodPost, p, operation, serve})
	}
	return out
}

const (
	containerRoute    = "/{podNamespace}/{podID}/{containerName}"
	containerUIDRoute = "/{podNamespace}/{podID}/{uid}/{containerName}"
	podRoute          = "/{podNamespace}/{podID}"
	podUIDRoute       = "/{podNamespace}/{podID}/{uid}"
)

// webServices is the kubelet's API as this server serves it, in one list: every root the kubelet's
// InstallAuthNotRequiredHandlers, InstallAuthRequiredHandlers and NodeRequestAttributesGetter name,
// with its authorization subresources and the routes served here (KubeletFineGrainedAuthz on, as
// locked since 1.36; the kubelet's debugging handlers enabled). A path under no root is authorized as
// nodes/proxy and answers 404; a path under a root that matches a route only for other methods
// answers 405 with Allow, as go-restful does.
var webServices = []webService{
	{root: healthzPath, subresources: []string{"healthz", "proxy"}, routes: []route{
		{http.MethodGet, "", "healthz", (*Server).serveHealthz},
		{http.MethodGet, "/{subpath:*}", "healthz", (*Server).serveHealthz},
	}},
	{root: podsPath, subresources: []string{"pods", "proxy"}, routes: []route{
		{http.MethodGet, "", "getPods", func(s *Server, w http.ResponseWriter, r *http.Request, _ pathParams) { s.getPods(w, r) }},
	}},
	{root: allocatedPodsPath, subresources: []string{"pods", "proxy"}}, // KubeletAllocatedPodsEndpoint: not served
	{root: runningPodsPath, subresources: []string{"pods", "proxy"}},   // the kubelet's test-only /runningpods/: not served
	{root: statsPath, subresources: []string{"stats"}, routes: []route{
		{http.MethodGet, "/summary", "getSummary", (*Server).serveSummary},
		{http.MethodPost, "/summary", "getSummary", (*Server).serveSummary},
	}},
	{root: metricsPath, subresources: []string{"metrics"}, routes: []route{
		{http.MethodGet, "/resource", "metricsResource", (*Server).serveMetricsResource},
		{http.MethodGet, "/cadvisor", "metricsCadvisor", (*Server).serveMetricsCadvisor},
		{http.MethodGet, "/probes", "metricsProbes", (*Server).serveMetricsProbes},
	}},
	{root: logsPath, subresources: []string{"log"}},                 // the Node's /var/log: not served
	{root: checkpointPath, subresources: []string{"checkpoint"}},    // ContainerCheckpoint: not served
	{root: configzPath, subresources: []string{"configz", "proxy"}}, // not served
	{root: statuszPath, subresources: []string{"statusz"}},          // not served
	{root: flagzPath, subresources: []string{"configz"}},            // not served
	{root: runPath, subresources: []string{"proxy"}, routes: []route{
		{http.MethodPost, containerRoute, "getRun", (*Server).serveRun},
		{http.MethodPost, containerUIDRoute, "getRun", (*Server).serveRun},
	}},
	{root: execPath, subresources: []string{"proxy"}, routes: getAndPost("getExec", (*Server).serveExec, containerRoute, containerUIDRoute)},
	{root: attachPath, subresources: []string{"proxy"}, routes: getAndPost("getAttach", (*Server).serveAttach, containerRoute, containerUIDRoute)},
	{root: portForwardPath, subresources: []string{"proxy"}, routes: getAndPost("getPortForward", (*Server).servePortForward, podRoute, podUIDRoute)},
	{root: containerLogsPath, subresources: []string{"proxy"}, routes: []route{
		{http.MethodGet, containerRoute, "getContainerLogs", (*Server).serveContainerLogs},
	}},
}

// defaultSubresources are the subresources of a path under no root: the kubelet's default.
var defaultSubresources = []string{"proxy"}

// isSubpath is the kubelet's: subpath is path (without its trailing "/") or below it.
func isSubpath(subpath, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return subpath == path || (strings.HasPrefix(subpath, path) && subpath[len(path)] == '/')
}

// webServiceOf returns the webService whose root holds path, and the rest of path below the root.
func webServiceOf(path string) (*webService, string, bool) {
	for i := range webServices {
		ws := &webServices[i]
		if isSubpath(path, ws.root) {
			return ws, path[len(strings.TrimSuffix(ws.root, "/")):], true
		}
	}
	return nil, "", false
}

// match reports whether rest (the path below the root) matches the route's template, and its
// variables. A segment never holds a "/", so a container name with one matches no route (404), as
// in go-restful; a variable segment must not be empty.
func (rt *route) match(rest string) (pathParams, bool) {
	var p pathParams
	if rt.path == "" {
		return p, rest == "" || rest == "/"
	}
	if rt.path == "/{subpath:*}" {
		return p, len(rest) > 1 && rest[0] == '/'
	}
	if rest == "" || rest[0] != '/' {
		return p, false
	}
	tmpl := strings.Split(rt.path[1:], "/")
	segs := strings.Split(rest[1:], "/")
	if len(tmpl) != len(segs) {
		return p, false
	}
	for i, t := range tmpl {
		seg := segs[i]
		if !strings.HasPrefix(t, "{") {
			if seg != t {
				return p, false
			}
			continue
		}
		if seg == "" {
			return p, false
		}
		switch t {
		case "{podNamespace}":
			p.namespace = seg
		case "{podID}":
			p.pod = seg
		case "{uid}":
			p.uid = types.UID(seg)
		case "{containerName}":
			p.container = seg
		}
	}
	return p, true
}

// router dispatches a request to the route of webServices that its path and method match: 404 when
// no route's path matches, 405 with Allow (the methods whose routes match the path) when only the
// method does not. The path is not cleaned (no redirect).
type router struct{ s *Server }

func (rt router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws, rest, ok := webServiceOf(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	var allow []string
	for i := range ws.routes {
		route := &ws.routes[i]
		p, ok := route.match(rest)
		if !ok {
			continue
		}
		if route.method == r.Method {
			route.serve(rt.s, w, r, p)
			return
		}
		if !slices.Contains(allow, route.method) {
			allow = append(allow, route.method)
		}
	}
	if len(allow) > 0 {
		methodNotAllowed(w, strings.Join(allow, ", "))
		return
	}
	http.NotFound(w, r)
}

func methodNotAllowed(w http.ResponseWriter, allowed string) {
	w.Header().Set("Allow", allowed)
	writeErrorString(w, http.StatusMethodNotAllowed, "Method Not Allowed")
}
