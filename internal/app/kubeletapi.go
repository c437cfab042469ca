package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/host"
	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/lifecycle"
	"github.com/nodeagent/nodeagent/pkg/node"
)

// kubeletAPI is the agent's kubelet API (--address, --port): the pods bound to its Node from a pod
// informer of its own (spec.nodeName=<node>, as the kubelet's pod source), and what serving needs
// (the serving certificate, the process's Auth, the TLS configuration and the handler), set up by
// the "kubelet API server" Runnable beside the Node's registration, which then opens the listener.
type kubeletAPI struct {
	address string
	port    int
	pods    informers.SharedInformerFactory
	lister  node.IndexedPodLister
	// nodeSynced is the Node informer's HasSynced: the pod informer starts once it is true, as the
	// kubelet's pod source (pkg/kubelet/config NewSourceApiserver waits for nodeHasSynced).
	nodeSynced cache.InformerSynced
	// setUp builds what serving needs for ctrl: newServing, or a test's stand-in.
	setUp func(ctx context.Context, ctrl *node.Controller) (*serving, error)
	ctrl  *node.Controller // the Node's controller (serve), whose handler the API serves
	// served is what setUp built; nil until then. certificateError reads it from /healthz.
	served atomic.Pointer[serving]
	now    func() time.Time
	// onExpired records the Warning Event ServingCertificateExpired, once per expiry (reported).
	onExpired func(message string)
	reported  atomic.Bool
	// stats is the machine's usage from cadvisor, whose manager starts on the first request to
	// /stats/summary, /metrics/resource or /metrics/cadvisor (nil in companion mode, where the
	// kubelet serves it).
	stats *host.Stats
}

// serving is what the kubelet API serves with, built by newServing.
type serving struct {
	auth *kubeletserver.Auth
	tls  *tls.Config
	srv  *kubeletserver.Server
	// manager obtains and renews the serving certificate with --rotate-server-certificates; nil
	// otherwise.
	manager certificate.Manager
	// getCertificate is what TLS serves.
	getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// newKubeletAPI builds the agent's kubelet API without setting it up: the pod informer and its
// lister (which the Node's controller reads) and the stats (which start nothing); nil with --port=0.
// It reads the operator's files first (readServingFiles: the serving certificate and the client CA,
// as the kubelet's InitializeTLS before its Run), so that a bad one refuses to start the agent.
// The rest (newServing) runs in the "kubelet API server" Runnable (addTo), beside the Node's
// registration, as the kubelet's Run starts ListenAndServe in a goroutine of its own next to its
// node status loop: nothing else of the API is on the path to the Node's Ready.
func newKubeletAPI(cfg *config.Completed, deps *Dependencies) (*kubeletAPI, error) {
	c := cfg.Config
	if c.Port == nil || *c.Port == 0 {
		return nil, nil
	}
	pods := informers.NewSharedInformerFactoryWithOptions(deps.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}))
	inf := pods.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(node.PodIndexers()); err != nil {
		return nil, err
	}
	files, err := readServingFiles(cfg, deps)
	if err != nil {
		return nil, err
	}
	k := &kubeletAPI{address: c.Address, port: int(*c.Port), pods: pods, lister: node.IndexedPodLister{Indexer: inf.GetIndexer()},
		nodeSynced: deps.Informers.Core().V1().Nodes().Informer().HasSynced, now: deps.Clock.Now,
		setUp: func(_ context.Context, ctrl *node.Controller) (*serving, error) {
			return newServing(cfg, deps, ctrl, files)
		}}
	if deps.Machine != nil {
		if k.stats, err = host.NewStats(host.StatsConfig{NodeName: cfg.NodeName, RootDir: c.RootDir, Clock: deps.Clock}); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// servingFiles is what the kubelet API reads of the operator's files before the agent runs.
type servingFiles struct {
	// getCertificate serves --tls-cert-file's pair or the self-signed one; nil with
	// --rotate-server-certificates, whose manager (newServing) provides it.
	getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// tls is the server's TLS configuration with --client-ca-file's pool (kubeletserver.TLSConfig),
	// serving getCertificate.
	tls *tls.Config
}

// readServingFiles reads the operator's files of the kubelet API, as the kubelet's InitializeTLS
// before its Run: the serving certificate (--tls-cert-file and --tls-private-key-file, refused when
// unreadable, expired or not yet valid; else the kubelet's self-signed one in --cert-dir, made once)
// and the client CA (--client-ca-file). With --rotate-server-certificates the certificate is the
// manager's, set up beside the registration (newServing). Errors name the flag or field and its
// value and wrap the cause.
func readServingFiles(cfg *config.Completed, deps *Dependencies) (servingFiles, error) {
	c := cfg.Config
	var f servingFiles
	switch {
	case c.ServerTLSBootstrap:
	case c.TLSCertFile != "":
		cert, err := kubeletserver.LoadCertificate(c.TLSCertFile, c.TLSPrivateKeyFile, deps.Clock.Now())
		if err != nil {
			return f, err
		}
		f.getCertificate = kubeletserver.StaticCertificate(cert)
	default:
		cert, err := kubeletserver.SelfSignedCertificate(cfg.EffectiveCertDir(), cfg.NodeName, nil)
		if err != nil {
			return f, fmt.Errorf("--cert-dir %q: %w", cfg.EffectiveCertDir(), err)
		}
		f.getCertificate = kubeletserver.StaticCertificate(cert)
	}
	var err error
	f.tls, err = kubeletserver.TLSConfig(f.getCertificate, c.Authentication.X509.ClientCAFile)
	return f, err
}

// newServing builds what the kubelet API serves with from files, as the kubelet's BuildAuth and
// its server's TLS configuration: with --rotate-server-certificates the serving certificate
// manager (a kubelet-serving CSR), the TLS configuration, the authenticator and authorizer
// (authentication, authorization) and ctrl's handler. Errors name the flag or field and its value.
func newServing(cfg *config.Completed, deps *Dependencies, ctrl *node.Controller, files servingFiles) (*serving, error) {
	c := cfg.Config
	s := &serving{getCertificate: files.getCertificate, tls: files.tls.Clone()}
	if c.ServerTLSBootstrap {
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
		s.manager, s.getCertificate = m, kubeletserver.ManagerCertificate(m)
		s.tls.GetCertificate = s.getCertificate
	}
	if c.Authentication.X509.ClientCAFile == "" {
		// As the kubelet: bearer tokens only. The API server's own requests (kubectl logs, top through
		// metrics-server, the node proxy) carry its --kubelet-client-certificate, refused with 401.
		klog.Background().Info("The kubelet API verifies no client certificate (no --client-ca-file): the API server's requests to it (kubectl logs, exec, top, the node proxy) get 401; give it the CA of the API server's --kubelet-client-certificate (kubeadm: /etc/kubernetes/pki/ca.crt)")
	}
	var err error
	if s.auth, err = kubeletserver.BuildAuth(deps.Client, c.Authentication, c.Authorization); err != nil {
		return nil, err
	}
	if s.srv, err = ctrl.KubeletServer(s.auth); err != nil {
		return nil, err
	}
	return s, nil
}

// certificateError is the serving certificate's /healthz check: an error once the certificate
// served has expired (a --tls-cert-file that expired while the agent runs, or a rotated one not
// renewed in time), nil otherwise (none yet with --rotate-server-certificates is not an error: the
// CSR waits for approval).
func (k *kubeletAPI) certificateError() error {
	s := k.served.Load()
	if s == nil {
		return nil // not set up yet
	}
	cert, err := s.getCertificate(nil)
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

// serve is the Node's controller, whose handler the API serves once set up.
func (k *kubeletAPI) serve(ctrl *node.Controller) { k.ctrl = ctrl }

// addTo adds the pod informer and the kubelet API server to the agent's group. The pod informer
// starts once the Node informer has synced (the kubelet's pod source). The server sets up
// (setUp: certificate, TLS, Auth, handler), then runs the client CA's reload and the serving
// certificate's manager and serves on its listener, all beside the Node's registration; a set-up
// or listener error stops the agent (Run returns it, naming the flag).
func (k *kubeletAPI) addTo(group *lifecycle.Group) {
	group.Add("pod informer", lifecycle.RunnableFunc(func(ctx context.Context) error {
		if !cache.WaitForCacheSync(ctx.Done(), k.nodeSynced) {
			return nil // stopped first
		}
		return lifecycle.Informers{SharedInformerFactory: k.pods}.Run(ctx)
	}))
	if k.stats != nil {
		// Starts nothing: stops cadvisor's manager at the end if a request started it.
		group.Add("cadvisor", lifecycle.RunnableFunc(k.stats.Run))
	}
	group.Add("kubelet API server", lifecycle.RunnableFunc(k.run))
}

// run sets the API up, then runs the client CA's reload (the kubelet's runAuthenticatorCAReload)
// and the serving certificate manager beside the server until ctx ends, and returns the server's
// error; a set-up error is returned at once.
func (k *kubeletAPI) run(ctx context.Context) error {
	s, err := k.setUp(ctx, k.ctrl)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while setting up
		}
		return err
	}
	k.served.Store(s)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { _ = s.auth.Run(ctx) })
	if s.manager != nil {
		s.manager.Start()
		defer s.manager.Stop()
	}
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
	return kubeletserver.Serve(ctx, ln, s.tls, s.srv)
}
