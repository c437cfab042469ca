package simulation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

// KubeletAPI is the kubelet's API of the simulated Nodes: one listener per Node on the process's
// address, Node j of the shard on FirstPort+j, so that the API server's node proxy and every client
// of status.daemonEndpoints reach each Node at its own InternalIP and port with no Node name in
// the path (/api/v1/nodes/N/proxy/pods lists N's pods). Every Node reports NodeIP as its
// InternalIP and its port in daemonEndpoints. The adopted Nodes (Config.Adopt) follow the shard's
// template Nodes: the k-th slot on FirstPort+Nodes+k (adoptedPort), opened when the Node is adopted
// and closed when it is released; one whose creator set addresses keeps them.
type KubeletAPI struct {
	// Address is the IP the listeners bind (--address); NodeIP the InternalIP every simulated Node
	// reports, reachable from the API server (--node-ip, the pod IP in the StatefulSet).
	Address string
	NodeIP  net.IP
	// FirstPort is the port of the shard's first Node (--port); the shard uses FirstPort to
	// FirstPort+Nodes-1.
	FirstPort int
	// TLS is the serving configuration (kubeletserver.TLSConfig); Auth the process's one
	// authenticator and authorizer (kubeletserver.BuildAuth).
	TLS  *tls.Config
	Auth *kubeletserver.Auth
	// PortForwardTargets are the addresses a port-forward to a simulated pod may reach, by name
	// (--port-forward-target NAME=host:port): a pod's AnnotationPortForward can pick one by name, never
	// give an address. Nil: every port is answered in memory (PortAnswer).
	PortForwardTargets map[string]string
	// Connections caps the connections each Node's listener and all of them hold open
	// (kubeletserver.DefaultConnectionLimits from the process's RLIMIT_NOFILE,
	// --max-connections-per-node, --reserved-file-descriptors): a flood of one Node's port is
	// that Node's alone. The zero value: no cap.
	Connections kubeletserver.ConnectionLimits
}

// Validate checks the addresses and the port range of a shard of nodes Nodes.
func (k *KubeletAPI) Validate(nodes int) error {
	switch {
	case net.ParseIP(k.Address) == nil:
		return fmt.Errorf("--address %q: must be an IP address", k.Address)
	case k.NodeIP == nil || k.NodeIP.IsUnspecified():
		return fmt.Errorf("--node-ip %q: the simulated Nodes' InternalIP must be an address of this process the API server reaches", k.NodeIP)
	case k.FirstPort < 1 || k.FirstPort+nodes-1 > 65535:
		return fmt.Errorf("--port %d: the shard's %d Nodes take ports %d to %d, which must be within 1 to 65535", k.FirstPort, nodes, k.FirstPort, k.FirstPort+nodes-1)
	case k.TLS == nil || k.Auth == nil:
		return errors.New("simulation: KubeletAPI needs TLS and Auth")
	}
	if k.Connections != (kubeletserver.ConnectionLimits{}) {
		return k.Connections.Validate()
	}
	return nil
}

// port is the port of the shard's Node j.
func (k *KubeletAPI) port(j int) int32 { return int32(k.FirstPort + j) }

// ServeKubeletAPI opens every simulated Node's listener and serves its kubelet API until ctx ends
// (a lifecycle.Runnable of the process). It returns the first listen error, having closed the
// listeners it opened; nil once ctx ended. A Node's server reads the pods bound to it from
// Config.Dependencies.Pods and answers for them through Streaming.
func (s *Simulator) ServeKubeletAPI(ctx context.Context) error {
	k := s.cfg.KubeletAPI
	if k == nil {
		return errors.New("simulation: no KubeletAPI configured")
	}
	if _, _, err := s.kubeletAPIShared(); err != nil {
		return err
	}
	listeners := make([]net.Listener, 0, len(s.nodes))
	handlers := make([]http.Handler, 0, len(s.nodes))
	closeAll := func() {
		for _, ln := range listeners {
			_ = ln.Close()
		}
	}
	for j, n := range s.nodes {
		ln, srv, err := s.listenKubeletAPI(n.name, int(k.port(j)))
		if err != nil {
			closeAll()
			return err
		}
		listeners, handlers = append(listeners, ln), append(handlers, srv)
	}
	klog.FromContext(ctx).Info("Serving the kubelet's API of every simulated node", "address", k.Address, "nodeIP", k.NodeIP,
		"firstPort", k.FirstPort, "lastPort", int(k.FirstPort)+len(s.nodes)-1,
		"maxConnectionsPerNode", k.Connections.PerNode, "maxConnections", k.Connections.Total)
	var wg sync.WaitGroup
	errs := make(chan error, len(listeners))
	for j := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := kubeletserver.Serve(ctx, listeners[j], k.TLS, handlers[j]); err != nil {
				errs <- fmt.Errorf("simulated node %s: %w", s.nodes[j].name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if len(listeners) == 0 {
		// Adopted Nodes only (--nodes=0): each serves its own (serveAdoptedKubeletAPI) until ctx ends.
		<-ctx.Done()
	}
	return <-errs
}

// kubeletAPIShared returns what every Node's kubelet API shares, built once: the provider answering
// for the pods (Streaming) and the connection pool (nil: no cap). It errors when the pods' informer is
// missing or the connection limits are invalid.
func (s *Simulator) kubeletAPIShared() (*Streaming, *kubeletserver.ConnectionPool, error) {
	s.apiOnce.Do(func() {
		k := s.cfg.KubeletAPI
		if s.cfg.Dependencies.Pods == nil {
			s.apiErr = errors.New("simulation: the kubelet's API needs Dependencies.Pods (the pod informer)")
			return
		}
		provider := &Streaming{Pods: s.cfg.Dependencies.Pods, Clock: s.cfg.Dependencies.Clock, PortForwardTargets: k.PortForwardTargets}
		if s.pods != nil && s.pods.commands != nil {
			provider.Output = s.pods.runOutput
			provider.Exec = func(ctx context.Context, p *v1.Pod, container string, cmd []string) (ExecResult, error) {
				res, changed, err := s.pods.execInContainer(ctx, p, container, cmd)
				if changed {
					s.notifyPod(p) // its exec probes may answer otherwise from now on
				}
				return res, err
			}
		}
		if c := s.cfg.Dependencies.Client; c != nil {
			provider.ConfigMaps = getConfigMap(c)
		}
		s.apiProvider = provider
		if k.Connections != (kubeletserver.ConnectionLimits{}) {
			s.apiPool, s.apiErr = kubeletserver.NewConnectionPool(k.Connections)
		}
	})
	return s.apiProvider, s.apiPool, s.apiErr
}

// listenKubeletAPI opens the kubelet API's listener of the simulated Node name on port (under the
// connection pool's caps) and returns it with the Node's handler. Errors name the Node.
func (s *Simulator) listenKubeletAPI(name string, port int) (net.Listener, http.Handler, error) {
	k := s.cfg.KubeletAPI
	provider, pool, err := s.kubeletAPIShared()
	if err != nil {
		return nil, nil, err
	}
	stats, err := s.StatsSummary(name)
	if err != nil {
		return nil, nil, err
	}
	probes, err := s.ProbeCounts(name)
	if err != nil {
		return nil, nil, err
	}
	srv, err := kubeletserver.New(kubeletserver.Config{
		NodeName: name, Pods: s.cfg.Dependencies.Pods, Auth: k.Auth,
		ContainerLogs: provider, Runner: provider, Attacher: provider, PortForwarder: provider,
		StatsSummary: stats, Probes: probes,
		SyncLoop: func(*http.Request) error {
			if c := s.Controller(name); c != nil {
				return c.Healthy()
			}
			return nil
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("simulated node %s: %w", name, err)
	}
	ln, err := kubeletserver.Listen(k.Address, port)
	if err != nil {
		return nil, nil, fmt.Errorf("simulated node %s: %w", name, err)
	}
	if pool != nil {
		ln = pool.Listener(ln)
	}
	return ln, srv, nil
}

// adoptedPort is the kubelet API's port of the adopted Node in slot: past the template Nodes' ports,
// FirstPort+Nodes+slot, or 0 past 65535.
func (k *KubeletAPI) adoptedPort(nodes, slot int) int {
	if p := k.FirstPort + nodes + slot; p <= 65535 {
		return p
	}
	return 0
}

// serveAdoptedKubeletAPI opens and serves the kubelet API of the adopted Node n on its port
// (KubeletAPI.adoptedPort) until ctx ends or releaseNode stops it, and records the port in n for its
// daemonEndpoints. A port that cannot be listened on is logged and leaves the Node without the API
// (port 0), as the template Nodes when --port cannot be served.
func (s *Simulator) serveAdoptedKubeletAPI(ctx context.Context, n *simNode) {
	k := s.cfg.KubeletAPI
	logger := klog.FromContext(ctx)
	port := k.adoptedPort(s.cfg.Nodes, n.slot)
	if port == 0 {
		logger.Info("Adopted node serves no kubelet API: no port left past 65535", "node", n.name, "slot", n.slot)
		return
	}
	ln, srv, err := s.listenKubeletAPI(n.name, port)
	if err != nil {
		logger.Error(err, "Adopted node serves no kubelet API", "node", n.name, "port", port)
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	n.kubeletPort = int32(port)
	n.stopAPI = func() { cancel(); <-done }
	go func() {
		defer close(done)
		if err := kubeletserver.Serve(sctx, ln, k.TLS, srv); err != nil {
			logger.Error(err, "Adopted node's kubelet API stopped", "node", n.name, "port", port)
		}
	}()
}

// KubeletAPIAccess is what the kubelet's API needs besides Access: TokenReview and
// SubjectAccessReview, as the kubelet's webhook authentication and authorization.
var KubeletAPIAccess = []authorizationv1.ResourceAttributes{
	{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
	{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
}

// declaredFeaturesSetter declares, in status.declaredFeatures, what the Nodes' kubelet API takes as
// the kubelet does: kubectl's WebSockets (kubeletserver.FeatureExtendWebSocketsToKubelet), so that
// the API server proxies them to the Node instead of translating them itself. The kubelet declares
// the features of its nodedeclaredfeatures registry that its configuration enables; the simulated
// Nodes declare this one only.
func declaredFeaturesSetter(_ context.Context, n *v1.Node) error {
	if !slices.Contains(n.Status.DeclaredFeatures, kubeletserver.FeatureExtendWebSocketsToKubelet) {
		n.Status.DeclaredFeatures = append(n.Status.DeclaredFeatures, kubeletserver.FeatureExtendWebSocketsToKubelet)
		slices.Sort(n.Status.DeclaredFeatures)
	}
	return nil
}
