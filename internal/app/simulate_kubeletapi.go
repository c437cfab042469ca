package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/spf13/pflag"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/simulation"
)

// The ConfigMap where kube-apiserver publishes its --client-ca-file for aggregated API servers
// (k8s.io/apiserver/pkg/server/options DelegatingAuthenticationOptions), and the key of that CA.
const (
	authenticationConfigMapNamespace = metav1.NamespaceSystem
	authenticationConfigMapName      = "extension-apiserver-authentication"
	authenticationClientCAKey        = "client-ca-file"
)

// kubeletAPIHost is what simulateKubeletAPI asks of this machine: the node IP when none is given
// (chooseHostIP) and whether a port can be listened on (listen). hostKubeletAPI is the real one;
// tests replace it.
type kubeletAPIHost struct {
	chooseHostIP func() (net.IP, error)
	listen       func(address string, port int) (net.Listener, error)
}

// hostKubeletAPI chooses the node IP as the kubelet does without --node-ip, the address of the
// default route's interface (k8s.io/apimachinery/pkg/util/net ChooseHostInterface), and listens
// with kubeletserver.Listen.
var hostKubeletAPI = kubeletAPIHost{chooseHostIP: utilnet.ChooseHostInterface, listen: kubeletserver.Listen}

// kubeletAPIUnavailable is why a simulation serves no kubelet API although --port asks for it: a
// fact of this machine or cluster (no node IP found, no client CA, ports taken), not a mistake of the
// command line.
type kubeletAPIUnavailable struct{ err error }

func (e *kubeletAPIUnavailable) Error() string { return e.err.Error() }
func (e *kubeletAPIUnavailable) Unwrap() error { return e.err }

// simulateKubeletAPI builds the simulated Nodes' kubelet API from the agent's flags: nil with
// --port=0. It is on by default (--port 10250: the shard's Nodes on 10250 to 10250+--nodes−1),
// with what a kubelet under kubeadm would use when a flag is not given:
//   - the Nodes' InternalIP is --node-ip, else --address when it is not 0.0.0.0 or ::, else the
//     kubelet's choice (the address of the default route's interface, host.chooseHostIP);
//   - the listeners bind --address when given, else that node IP;
//   - client certificates (the API server's --kubelet-client-certificate) are verified against
//     --client-ca-file, else the client-ca-file of ConfigMap kube-system/extension-apiserver-authentication,
//     followed as it changes (k8s.io/apiserver's ConfigMapCAController, as aggregated API servers
//     find the cluster's client CA; reading it needs the Role extension-apiserver-authentication-reader,
//     docs/simulation.md's RBAC);
//   - the serving certificate is --tls-cert-file (refused when unreadable or expired), else one
//     self-signed certificate for the node IP, kept in memory.
//
// When this machine or cluster cannot give one of them (no default route, the ConfigMap unreadable
// or without the key, a port taken), it logs why in one line and returns nil, nil: the simulation
// runs without the kubelet API and its Nodes say port 0. A bad flag value is an error naming it.
//
// The Nodes' TokenReviews and SubjectAccessReviews (one per Node and user, cached as the kubelet's
// webhook defaults say) go through a client of their own at --kube-api-qps and --kube-api-burst
// (kubeletAPIAuthConfig): a kubelet's go through its client at its kubeAPIQPS, and one process serves
// the Nodes of a shard; client-go's default of 5 QPS made metrics-server's first scrape of 1000 Nodes
// time out (10 s) on all but ~60 of them, every round, the SubjectAccessReviews cancelled before
// they could be cached (make bench-metrics).
func simulateKubeletAPI(ctx context.Context, o *simulateOptions, restConfig *rest.Config, host kubeletAPIHost) (*simulation.KubeletAPI, error) {
	c := o.agent.Config
	if c.Port == nil || *c.Port == 0 {
		return nil, nil
	}
	client, err := kubernetes.NewForConfig(kubeletAPIAuthConfig(restConfig, *c.KubeAPIQPS, c.KubeAPIBurst))
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", o.agent.Kubeconfig, err)
	}
	k, err := buildSimulateKubeletAPI(ctx, o, client, host)
	var unavailable *kubeletAPIUnavailable
	if errors.As(err, &unavailable) {
		klog.FromContext(ctx).Info("The simulated Nodes serve no kubelet API (kubectl logs, exec, port-forward and top do not reach them; their daemonEndpoints say port 0); --port=0 turns it off without this message",
			"reason", unavailable.Error())
		return nil, nil
	}
	if err == nil {
		ca := c.Authentication.X509.ClientCAFile
		if ca == "" {
			ca = "ConfigMap " + authenticationConfigMapNamespace + "/" + authenticationConfigMapName
		}
		klog.FromContext(ctx).Info("The simulated Nodes serve the kubelet API", "nodeIP", k.NodeIP, "address", k.Address,
			"ports", fmt.Sprintf("%d-%d", k.FirstPort, k.FirstPort+o.nodes-1), "clientCA", ca)
	}
	return k, err
}

func buildSimulateKubeletAPI(ctx context.Context, o *simulateOptions, client kubernetes.Interface, host kubeletAPIHost) (*simulation.KubeletAPI, error) {
	c := o.agent.Config
	port := int(*c.Port)
	ip := net.ParseIP(c.Address)
	switch {
	case c.NodeIP != "":
		if ip = net.ParseIP(c.NodeIP); ip == nil {
			return nil, fmt.Errorf("--node-ip %q: with --port, one IP address, the simulated Nodes' InternalIP", c.NodeIP)
		}
	case ip == nil:
		return nil, fmt.Errorf("--address %q: must be an IP address", c.Address)
	case ip.IsUnspecified():
		chosen, err := host.chooseHostIP()
		if err != nil {
			return nil, &kubeletAPIUnavailable{fmt.Errorf("no --node-ip, and the kubelet's choice (the address of the default route's interface) found none: %w", err)}
		}
		ip = chosen
	}
	address := c.Address
	if a := net.ParseIP(address); a != nil && a.IsUnspecified() && (o.agent.Flags == nil || !o.agent.Flags.Changed("address")) {
		address = ip.String()
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
	var ca kubeletserver.ClientCA
	if c.Authentication.X509.ClientCAFile == "" {
		if ca, err = clusterClientCA(ctx, client); err != nil {
			return nil, &kubeletAPIUnavailable{err}
		}
	}
	tlsConfig, err := kubeletserver.TLSConfig(kubeletserver.StaticCertificate(cert), c.Authentication.X509.ClientCAFile)
	if err != nil {
		return nil, err
	}
	var auth *kubeletserver.Auth
	if ca != nil {
		// Client certificates are asked for and verified by the authenticator against the CA as it
		// is now, as with --client-ca-file.
		tlsConfig.ClientAuth = tls.RequestClientCert
		auth, err = kubeletserver.BuildAuthWithClientCA(client, c.Authentication, c.Authorization, ca)
	} else {
		auth, err = kubeletserver.BuildAuth(client, c.Authentication, c.Authorization)
	}
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
	k := &simulation.KubeletAPI{Address: address, NodeIP: ip, FirstPort: port, TLS: tlsConfig, Auth: auth, Connections: conns}
	if err := k.Validate(o.nodes); err != nil {
		return nil, err
	}
	if err := portsFree(host.listen, address, port, o.nodes); err != nil {
		return nil, &kubeletAPIUnavailable{err}
	}
	return k, nil
}

// clusterClientCA finds the cluster's client CA as an aggregated API server does
// (DelegatingAuthenticationOptions): the client-ca-file of ConfigMap
// kube-system/extension-apiserver-authentication, read once here to say at start whether it is there,
// then followed by k8s.io/apiserver's ConfigMapCAController (run by the Auth). It errors, naming the
// ConfigMap, when the ConfigMap cannot be read, has no client-ca-file or holds no certificate.
func clusterClientCA(ctx context.Context, client kubernetes.Interface) (kubeletserver.ClientCA, error) {
	where := fmt.Sprintf("no --client-ca-file, and the cluster's client CA (%q of ConfigMap %s/%s)", authenticationClientCAKey, authenticationConfigMapNamespace, authenticationConfigMapName)
	cm, err := client.CoreV1().ConfigMaps(authenticationConfigMapNamespace).Get(ctx, authenticationConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s cannot be read (the simulation's identity needs the Role extension-apiserver-authentication-reader there, docs/simulation.md#rbac): %w", where, err)
	}
	bundle := cm.Data[authenticationClientCAKey]
	if bundle == "" {
		return nil, fmt.Errorf("%s is not there: the API server runs without --client-ca-file", where)
	}
	if _, err := certutil.ParseCertsPEM([]byte(bundle)); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", authenticationConfigMapNamespace, authenticationConfigMapName, authenticationClientCAKey, client)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return ca, nil
}

// portsFree checks that ports first to first+n−1 of address can be listened on, closing each at
// once: the simulation's listeners open later, with the Nodes (Simulator.ServeKubeletAPI). It errors
// with the first port that cannot.
func portsFree(listen func(string, int) (net.Listener, error), address string, first, n int) error {
	for p := first; p < first+n; p++ {
		ln, err := listen(address, p)
		if err != nil {
			return fmt.Errorf("the shard's %d Nodes take ports %d to %d of %s: %w", n, first, first+n-1, address, err)
		}
		_ = ln.Close()
	}
	return nil
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
