package simulation

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceLister lists the Services of a namespace: all of them with name "", else only that one (a
// list with the field selector metadata.name), at most limit. The simulator's client.
type ServiceLister func(ctx context.Context, namespace, name string, limit int64) ([]v1.Service, error)

// serviceListLimit bounds one LIST of a namespace's Services for the service links of one container
// run: the first serviceListLimit of them (by name, as the API server lists them) make the variables
// (the kubelet's informer holds them all). Each Service adds about 7 variables, 16 µs and 10 KB to a
// run (BenchmarkServiceLinks): a namespace's Services cost a run at most about 4 ms and 2.5 MB.
const serviceListLimit = 256

// masterServiceName is the master service of namespace default whose variables every container gets,
// enableServiceLinks or not (the kubelet's masterServices).
const masterServiceName = "kubernetes"

// serviceEnv returns the service links of a container of pod p, NAME to value, as the kubelet's
// getServiceEnvVarMap makes them: the master service default/kubernetes always, and with
// spec.enableServiceLinks (nil: true, the API's default) every Service of p's namespace (one of the
// namespace named kubernetes replacing the master's), each with a cluster IP (not "None"), as
// envvars.FromServices names them (FOO_SERVICE_HOST, FOO_SERVICE_PORT, FOO_SERVICE_PORT_<port name>,
// FOO_PORT, FOO_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}). One bounded LIST of the namespace (and a
// GET-like LIST of the master service outside namespace default) per call. src nil or without a
// lister: none. A Forbidden read (the simulator's identity may not list Services) leaves them out
// from then on; another error is the kubelet's ("failed to list services when setting up env vars"),
// its container's CreateContainerConfigError.
func (src *envSources) serviceEnv(ctx context.Context, p *v1.Pod) (map[string]string, error) {
	if src == nil || src.services == nil || src.servicesForbidden.Load() {
		return nil, nil
	}
	list := func(namespace, name string) ([]v1.Service, error) {
		if src.servicesForbidden.Load() {
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(ctx, objectGetTimeout)
		defer cancel()
		svcs, err := src.services(ctx, namespace, name, serviceListLimit)
		if apierrors.IsForbidden(err) {
			src.servicesForbidden.Store(true)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("failed to list services when setting up env vars: %w", err)
		}
		return svcs, nil
	}
	links := p.Spec.EnableServiceLinks == nil || *p.Spec.EnableServiceLinks
	byName := map[string]*v1.Service{}
	if p.Namespace != metav1.NamespaceDefault || !links {
		master, err := list(metav1.NamespaceDefault, masterServiceName)
		if err != nil {
			return nil, err
		}
		for i := range master {
			if master[i].Name == masterServiceName && serviceIPSet(&master[i]) {
				byName[masterServiceName] = &master[i]
			}
		}
	}
	if links {
		svcs, err := list(p.Namespace, "")
		if err != nil {
			return nil, err
		}
		for i := range svcs {
			if serviceIPSet(&svcs[i]) {
				byName[svcs[i].Name] = &svcs[i]
			}
		}
	}
	env := map[string]string{}
	for _, s := range byName {
		serviceLinkVars(s, env)
	}
	return env, nil
}

// serviceIPSet is v1helper.IsServiceIPSet: a cluster IP, not "None".
func serviceIPSet(s *v1.Service) bool {
	return s.Spec.ClusterIP != v1.ClusterIPNone && s.Spec.ClusterIP != ""
}

// serviceLinkVars adds service s's variables to env, as the kubelet's envvars.FromServices names them
// (k8s.io/kubernetes pkg/kubelet/envvars is not importable here: k8s.io/kubernetes is not a module
// this one requires).
func serviceLinkVars(s *v1.Service, env map[string]string) {
	prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
	ip := s.Spec.ClusterIP
	env[prefix+"_SERVICE_HOST"] = ip
	if len(s.Spec.Ports) == 0 {
		return
	}
	env[prefix+"_SERVICE_PORT"] = strconv.Itoa(int(s.Spec.Ports[0].Port))
	for i := range s.Spec.Ports {
		sp := &s.Spec.Ports[i]
		port := strconv.Itoa(int(sp.Port))
		if sp.Name != "" {
			env[prefix+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(sp.Name, "-", "_"))] = port
		}
		proto := strings.ToLower(string(v1.ProtocolTCP))
		if sp.Protocol != "" {
			proto = strings.ToLower(string(sp.Protocol))
		}
		url := proto + "://" + net.JoinHostPort(ip, port)
		if i == 0 {
			env[prefix+"_PORT"] = url
		}
		pp := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
		env[pp] = url
		env[pp+"_PROTO"] = proto
		env[pp+"_PORT"] = port
		env[pp+"_ADDR"] = ip
	}
}
