package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/host"
	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/lifecycle"
	"github.com/nodeagent/nodeagent/pkg/node"
)

// kubeletAPI is the agent's kubelet API (--address, --port): the pods bound to its Node from a pod
// informer of its own (spec.nodeName=<node>, as the kubelet's pod source), the process's Auth, the
// serving certificate, and the listener, opened by Run.
type kubeletAPI struct {
	address string
	port    int
	pods    informers.SharedInformerFactory
	lister  node.IndexedPodLister
	auth    *kubeletserver.Auth
	tls     *tls.Config
	srv     *kubeletserver.Server // set once the Node's controller is built (serve)
	// serving obtains and renews the serving certificate with --rotate-server-certificates; nil
	// otherwise.
	serving certificate.Manager
	// getCertificate is what TLS serves; now the agent's clock (certificateError).
	getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	now            func() time.Time
	// onExpired records the Warning Event ServingCertificateExpired, once per expiry (reported).
	onExpired func(message string)
	reported  atomic.Bool
	// stats is the machine's usage from cadvisor, whose manager starts on the first request to
	// /stats/summary, /metrics/resource or /metrics/cadvisor (nil in companion mode, where the
	// kubelet serves it).
	stats *host.Stats
}

// newKubeletAPI checks and builds what the agent's kubelet API needs before the Node's controller:
// the serving certificate (--tls-cert-file and --tls-private-key-file, refused when unreadable,
// expired or not yet valid; else the kubelet's self-signed one in --cert-dir), the authenticator
// and authorizer (authentication, authorization), and the pod informer. nil with --port=0.
func newKubeletAPI(cfg *config.Completed, deps *Dependencies) (*kubeletAPI, error) {
	c := cfg.Config
	if c.Port == nil || *c.Port == 0 {
		return nil, nil
	}
	var getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	var serving certificate.Manager
	switch {
	case c.ServerTLSBootstrap:
		// The kubelet's serverTLSBootstrap: a kubelet-serving CSR for the Node's last observed
		// addresses, renewed as it nears expiry; a pair at --tls-cert-file is looked at first.
		nodes := deps.Informers.Core().V1().Nodes().Lister()
		m, err := kubeletserver.NewServingCertificateManager(kubeletserver.ServingCertificateConfig{
			NodeName: cfg.NodeName, Client: deps.Client, CertDir: cfg.EffectiveCertDir(),
			CertFile: c.TLSCertFile, KeyFile: c.TLSPrivateKeyFile,
			Addresses: func() []v1.NodeAddress {
				if n, err := nodes.Get(cfg.NodeName); err == nil {
					return n.Status.Addresses
				}
				return nil
			},
		})
		if err != nil {
			return nil, fmt.Errorf("--rotate-server-certificates: %w", err)
		}
		serving, getCertificate = m, kubeletserver.ManagerCertificate(m)
	case c.TLSCertFile != "":
		cert, err := kubeletserver.LoadCertificate(c.TLSCertFile, c.TLSPrivateKeyFile, deps.Clock.Now())
		if err != nil {
			return nil, err
		}
		getCertificate = kubeletserver.StaticCertificate(cert)
	default:
		cert, err := kubeletserver.SelfSignedCertificate(cfg.EffectiveCertDir(), cfg.NodeName, nil)
		if err != nil {
			return nil, fmt.Errorf("--cert-dir %q: %w", cfg.EffectiveCertDir(), err)
		}
		getCertificate = kubeletserver.StaticCertificate(cert)
	}
	tlsConfig, err := kubeletserver.TLSConfig(getCertificate, c.Authentication.X509.ClientCAFile)
	if err != nil {
		return nil, err
	}
	if c.Authentication.X509.ClientCAFile == "" {
		// As the kubelet: bearer tokens only. The API server's own requests (kubectl logs, top through
		// metrics-server, the node proxy) carry its --kubelet-client-certificate, refused with 401.
		klog.Background().Info("The kubelet API verifies no client certificate (no --client-ca-file): the API server's requests to it (kubectl logs, exec, top, the node proxy) get 401; give it the CA of the API server's --kubelet-client-certificate (kubeadm: /etc/kubernetes/pki/ca.crt)")
	}
	auth, err := kubeletserver.BuildAuth(deps.Client, c.Authentication, c.Authorization)
	if err != nil {
		return nil, err
	}
	pods := informers.NewSharedInformerFactoryWithOptions(deps.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}))
	inf := pods.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(node.PodIndexers()); err != nil {
		return nil, err
	}
	k := &kubeletAPI{address: c.Address, port: int(*c.Port), pods: pods, lister: node.IndexedPodLister{Indexer: inf.GetIndexer()},
		auth: auth, tls: tlsConfig, serving: serving, getCertificate: getCertificate, now: deps.Clock.Now}
	if deps.Machine != nil {
		if k.stats, err = host.NewStats(host.StatsConfig{NodeName: cfg.NodeName, RootDir: c.RootDir, Clock: deps.Clock}); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// certificateError is the serving certificate's /healthz check: an error once the certificate
// served has expired (a --tls-cert-file that expired while the agent runs, or a rotated one not
// renewed in time), nil otherwise (none yet with --rotate-server-certificates is not an error: the
// CSR waits for approval).
func (k *kubeletAPI) certificateError() error {
	cert, err := k.getCertificate(nil)
	if err != nil || cert == nil {
		return nil
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("the kubelet API's serving certificate cannot be parsed: %w", err)
		}
	}
	if now := k.now(); now.After(leaf.NotAfter) {
		err := fmt.Errorf("the kubelet API's serving certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
		if k.onExpired != nil && k.reported.CompareAndSwap(false, true) {
			k.onExpired(err.Error())
		}
		return err
	}
	k.reported.Store(false)
	return nil
}

// serve builds the Node's handler from its controller.
func (k *kubeletAPI) serve(ctrl *node.Controller) error {
	srv, err := ctrl.KubeletServer(k.auth)
	k.srv = srv
	return err
}

// addTo adds the pod informer, the client CA's reload and the listener to the agent's group.
func (k *kubeletAPI) addTo(group *lifecycle.Group) {
	group.Add("pod informer", lifecycle.Informers{SharedInformerFactory: k.pods})
	group.Add("kubelet API authentication", lifecycle.RunnableFunc(k.auth.Run))
	if k.serving != nil {
		group.Add("serving certificate manager", lifecycle.RunnableFunc(func(ctx context.Context) error {
			k.serving.Start()
			<-ctx.Done()
			k.serving.Stop()
			return nil
		}))
	}
	if k.stats != nil {
		// Starts nothing: stops cadvisor's manager at the end if a request started it.
		group.Add("cadvisor", lifecycle.RunnableFunc(k.stats.Run))
	}
	group.Add("kubelet API server", lifecycle.RunnableFunc(func(ctx context.Context) error {
		ln, err := kubeletserver.Listen(k.address, k.port)
		if err != nil {
			return err
		}
		// The process's descriptors less the reserve (kubeletserver.DefaultReserve) for the
		// agent's own: a flood of the port leaves its Lease, status and healthz their descriptors.
		nofile, err := rlimitNofile()
		if err != nil {
			_ = ln.Close()
			return err
		}
		limits, err := kubeletserver.DefaultConnectionLimits(nofile, 1, math.MaxInt, 0)
		if err == nil {
			var pool *kubeletserver.ConnectionPool
			if pool, err = kubeletserver.NewConnectionPool(limits); err == nil {
				ln = pool.Listener(ln)
			}
		}
		if err != nil {
			_ = ln.Close()
			return err
		}
		klog.FromContext(ctx).Info("Starting to listen", "address", k.address, "port", k.port, "maxConnections", limits.Total)
		return kubeletserver.Serve(ctx, ln, k.tls, k.srv)
	}))
}
