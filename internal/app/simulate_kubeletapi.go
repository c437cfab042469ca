package app

import (
	"crypto/tls"
	"fmt"
	"net"
	"syscall"

	"github.com/spf13/pflag"

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
	nofile, err := o.kubeletAPIConns.nofileLimit()
	if err != nil {
		return nil, err
	}
	conns, err := kubeletserver.DefaultConnectionLimits(nofile, o.nodes, o.kubeletAPIConns.perNode, o.kubeletAPIConns.reserve)
	if err != nil {
		return nil, fmt.Errorf("--nodes %d --max-connections-per-node %d --reserved-file-descriptors %d: %w", o.nodes, o.kubeletAPIConns.perNode, o.kubeletAPIConns.reserve, err)
	}
	k := &simulation.KubeletAPI{Address: c.Address, NodeIP: ip, FirstPort: int(*c.Port), TLS: tlsConfig, Auth: auth, Connections: conns}
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

// kubeletAPIConnOptions are the flags of the simulated Nodes' kubelet API connections
// (kubeletserver.ConnectionLimits): 0 derives each from the process's RLIMIT_NOFILE.
type kubeletAPIConnOptions struct {
	perNode, reserve int
	// nofile reads RLIMIT_NOFILE (replaced in tests); nil: rlimitNofile.
	nofile func() (uint64, error)
}

// addFlags adds --max-connections-per-node and --reserved-file-descriptors to fs.
func (c *kubeletAPIConnOptions) addFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.perNode, "max-connections-per-node", c.perNode, "With --port: the most connections one simulated Node's kubelet API holds open; more wait in the listen backlog until one of its own closes (as clients of a kubelet out of descriptors), so that a flood of one Node's port is that Node's alone. 0: an eighth of the connections all Nodes may hold (RLIMIT_NOFILE less --reserved-file-descriptors and one listener per Node), at least 16.")
	fs.IntVar(&c.reserve, "reserved-file-descriptors", c.reserve, "With --port: file descriptors of the process no kubelet API connection may take (the clients of the API server, the healthz port, files); every Node's connections together hold at most RLIMIT_NOFILE less these and one listener per Node. 0: a tenth of RLIMIT_NOFILE, at least 1024 and at most half.")
}

func (c *kubeletAPIConnOptions) nofileLimit() (uint64, error) {
	if c.nofile != nil {
		return c.nofile()
	}
	return rlimitNofile()
}

// rlimitNofile is the process's soft RLIMIT_NOFILE (which the Go runtime raised to the hard limit
// at start).
func rlimitNofile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	return rl.Cur, nil
}
