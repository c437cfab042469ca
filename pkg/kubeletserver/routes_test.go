package kubeletserver

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
)

type kubeletRoute struct {
	path         string
	methods      []string
	subresources []string
}

// kubeletRoutes are the kubelet's paths (pkg/kubelet/server/server.go, v1.37.2) as this server
// answers them, written out apart from the route table: a sample path, the methods it serves (none:
// the kubelet's path that this server does not serve, 404) and the nodes subresources of its
// authorization attributes (auth.go's NodeRequestAttributesGetter, KubeletFineGrainedAuthz on).
var kubeletRoutes = []kubeletRoute{
	{"/healthz", []string{"GET"}, []string{"healthz", "proxy"}},
	{"/healthz/ping", []string{"GET"}, []string{"healthz", "proxy"}},
	{"/healthz/syncloop", []string{"GET"}, []string{"healthz", "proxy"}},
	{"/pods", []string{"GET"}, []string{"pods", "proxy"}},
	{"/pods/", []string{"GET"}, []string{"pods", "proxy"}},
	{"/stats/summary", []string{"GET", "POST"}, []string{"stats"}},
	{"/metrics/resource", []string{"GET"}, []string{"metrics"}},
	{"/metrics/cadvisor", []string{"GET"}, []string{"metrics"}},
	{"/metrics/probes", []string{"GET"}, []string{"metrics"}},
	{"/run/ns/p/c", []string{"POST"}, []string{"proxy"}},
	{"/run/ns/p/uid-name/c", []string{"POST"}, []string{"proxy"}},
	{"/exec/ns/p/c", []string{"GET", "POST"}, []string{"proxy"}},
	{"/exec/ns/p/uid-name/c", []string{"GET", "POST"}, []string{"proxy"}},
	{"/attach/ns/p/c", []string{"GET", "POST"}, []string{"proxy"}},
	{"/attach/ns/p/uid-name/c", []string{"GET", "POST"}, []string{"proxy"}},
	{"/portForward/ns/p", []string{"GET", "POST"}, []string{"proxy"}},
	{"/portForward/ns/p/uid-name", []string{"GET", "POST"}, []string{"proxy"}},
	{"/containerLogs/ns/p/c", []string{"GET"}, []string{"proxy"}},
	// The kubelet's paths that this server does not serve.
	{"/metrics", nil, []string{"metrics"}},
	{"/metrics/slis", nil, []string{"metrics"}},
	{"/stats/", nil, []string{"stats"}},
	{"/allocatedPods", nil, []string{"pods", "proxy"}},
	{"/allocatedPods/ns/p", nil, []string{"pods", "proxy"}},
	{"/runningpods/", nil, []string{"pods", "proxy"}},
	{"/logs/", nil, []string{"log"}},
	{"/logs/syslog", nil, []string{"log"}},
	{"/checkpoint/ns/p/c", nil, []string{"checkpoint"}},
	{"/configz", nil, []string{"configz", "proxy"}},
	{"/statusz", nil, []string{"statusz"}},
	{"/flagz", nil, []string{"configz"}},
	{"/debug/pprof/", nil, []string{"proxy"}},
	{"/debug/flags/v", nil, []string{"proxy"}},
	// Not the kubelet's.
	{"/podsx", nil, []string{"proxy"}},
	{"/exec/ns/p", nil, []string{"proxy"}},
	{"/exec/ns/p/c/d/e", nil, []string{"proxy"}},
	{"/containerLogs/ns/p/c/d", nil, []string{"proxy"}},
	{"/containerLogs/ns//c", nil, []string{"proxy"}},
}

var allMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// routesOnly is the Server's routes without authentication, no provider: every served path answers
// from its handler (a status other than 404 and 405).
func routesOnly(t *testing.T) http.Handler {
	t.Helper()
	srv, err := New(Config{NodeName: "n1", Pods: fakePods{"ns/p": runningPod("ns", "p", "n1")},
		Auth: &Auth{Authenticator: tokenAuth, Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer()}})
	if err != nil {
		t.Fatal(err)
	}
	return srv.routes
}

func serve(h http.Handler, method, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

// TestRoutes: each of the kubelet's paths answers its methods from its handler and every other
// method 405 with Allow; a path this server does not serve answers 404 to every method; and its
// authorization attributes name the kubelet's subresources. It fails when a route is dropped from
// webServices, or a root's subresources change.
func TestRoutes(t *testing.T) {
	h := routesOnly(t)
	for _, tc := range kubeletRoutes {
		t.Run(tc.path, func(t *testing.T) {
			for _, m := range allMethods {
				w := serve(h, m, tc.path)
				switch {
				case len(tc.methods) == 0:
					if w.Code != http.StatusNotFound {
						t.Errorf("%s %s: %d %q, want 404", m, tc.path, w.Code, w.Body)
					}
				case slices.Contains(tc.methods, m):
					if w.Code == http.StatusNotFound || w.Code == http.StatusMethodNotAllowed {
						t.Errorf("%s %s: %d %q, want the route's handler", m, tc.path, w.Code, w.Body)
					}
				default:
					if allow := strings.Join(tc.methods, ", "); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != allow {
						t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", m, tc.path, w.Code, w.Header().Get("Allow"), allow)
					}
				}
				attrs := RequestAttributes("n1", &user.DefaultInfo{Name: "u"}, httptest.NewRequest(m, tc.path, nil))
				var subs []string
				for _, a := range attrs {
					subs = append(subs, a.GetSubresource())
					if a.GetName() != "n1" || a.GetResource() != "nodes" || a.GetAPIVersion() != "v1" || !a.IsResourceRequest() || a.GetPath() != tc.path {
						t.Errorf("%s %s: attributes %+v, want resource nodes/%s of v1 Node n1 at the path", m, tc.path, a, a.GetSubresource())
					}
				}
				if !slices.Equal(subs, tc.subresources) {
					t.Errorf("%s %s: subresources %v, want %v", m, tc.path, subs, tc.subresources)
				}
			}
		})
	}
}

// TestRouteTableCovered: every route of webServices is one of kubeletRoutes, so that a route added
// to the table is added to TestRoutes too.
func TestRouteTableCovered(t *testing.T) {
	sample := strings.NewReplacer("{podNamespace}", "ns", "{podID}", "p", "{uid}", "uid-name", "{containerName}", "c", "{subpath:*}", "ping")
	for _, ws := range webServices {
		for _, rt := range ws.routes {
			path := strings.TrimSuffix(ws.root, "/") + sample.Replace(rt.path)
			i := slices.IndexFunc(kubeletRoutes, func(k kubeletRoute) bool {
				return k.path == path || (rt.path == "/{subpath:*}" && strings.HasPrefix(k.path, ws.root+"/"))
			})
			if i < 0 || !slices.Contains(kubeletRoutes[i].methods, rt.method) {
				t.Errorf("route %s %s (%s) of webServices is not in kubeletRoutes", rt.method, path, rt.operation)
			}
		}
	}
}
