package app

import (
	"crypto/tls"
	"fmt"
	"net"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/simulation"
)

// simulateKubeletAPI builds the simulated Nodes' kubelet API from the agent's flags: nil without
// --port. The Nodes' InternalIP is --node-ip, else --address when it is not 0.0.0.0 or ::; the
// serving certificate --tls-cert-file (refused when unreadable or expired), else one self-signed
// certificate for the process, kept in memory.
//
// The Nodes' TokenReviews and SubjectAccessReviews (one per Node and user, cached as the kubelet's
// webhook defaults say) go through a client of their own at --kube-api-qps and --kube-api-burst
// (kubeletAPIAuthConfig): a kubelet's go through its client at its kubeAPIQPS, and one process serves
// the Nodes of a shard; client-go's default of 5 QPS made metrics-server's first scrape of 1000 Nodes
// time out (10 s) on all but ~60 of them, every round, the SubjectAccessReviews cancelled before
// they could be cached (make bench-metrics).
func simulateKubeletAPI(o *simulateOptions, restConfig *rest.Config) (*simulation.KubeletAPI, error) {
	c := o.agent.Config
	if c.Port == nil || *c.Port == 0 {
		return nil, nil
	}
	ip := net.ParseIP(c.Address)
	if c.NodeIP != "" {
		if ip = net.ParseIP(c.NodeIP); ip == nil {
			return nil, fmt.Errorf("--node-ip %q: with --port, one IP address, the simulated Nodes' InternalIP", c.NodeIP)
		}
	}
	if ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("--port %d: give --node-ip (or a specific --address than %q), the address the API server reaches this process at, which every simulated Node reports as its InternalIP", *c.Port, c.Address)
	}
	var cert *tls.Certificate
	var err error
	if c.TLSCertFile != "" {
		cert, err = kubeletserver.LoadCertificate(c.TLSCertFile, c.TLSPrivateKeyFile, clock.RealClock{}.Now())
	} else {
		cert, err = kubeletserver.SelfSignedCertificate("", ip.String(), []net.IP{ip})
	}
	if err != nil {
		return nil, err
	}
	tlsConfig, err := kubeletserver.TLSConfig(kubeletserver.StaticCertificate(cert), c.Authentication.X509.ClientCAFile)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(kubeletAPIAuthConfig(restConfig, *c.KubeAPIQPS, c.KubeAPIBurst))
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", o.agent.Kubeconfig, err)
	}
	auth, err := kubeletserver.BuildAuth(client, c.Authentication, c.Authorization)
	if err != nil {
		return nil, err
	}
	k := &simulation.KubeletAPI{Address: c.Address, NodeIP: ip, FirstPort: int(*c.Port), TLS: tlsConfig, Auth: auth}
	if err := k.Validate(o.nodes); err != nil {
		return nil, err
	}
	return k, nil
}

// kubeletAPIAuthConfig is restConfig with the rate limit of the kubelet API's authentication and
// authorization client: qps and burst.
func kubeletAPIAuthConfig(restConfig *rest.Config, qps float32, burst int32) *rest.Config {
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = qps, int(burst)
	return cfg
}
