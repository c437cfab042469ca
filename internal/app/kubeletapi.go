package app

import (
	"context"
	"crypto/tls"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/config"
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
	var cert *tls.Certificate
	var err error
	if c.TLSCertFile != "" {
		if cert, err = kubeletserver.LoadCertificate(c.TLSCertFile, c.TLSPrivateKeyFile, deps.Clock.Now()); err != nil {
			return nil, err
		}
	} else if cert, err = kubeletserver.SelfSignedCertificate(cfg.EffectiveCertDir(), cfg.NodeName, nil); err != nil {
		return nil, fmt.Errorf("--cert-dir %q: %w", cfg.EffectiveCertDir(), err)
	}
	tlsConfig, err := kubeletserver.TLSConfig(kubeletserver.StaticCertificate(cert), c.Authentication.X509.ClientCAFile)
	if err != nil {
		return nil, err
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
	return &kubeletAPI{address: c.Address, port: int(*c.Port), pods: pods, lister: node.IndexedPodLister{Indexer: inf.GetIndexer()},
		auth: auth, tls: tlsConfig}, nil
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
	group.Add("kubelet API server", lifecycle.RunnableFunc(func(ctx context.Context) error {
		ln, err := kubeletserver.Listen(k.address, k.port)
		if err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Starting to listen", "address", k.address, "port", k.port)
		return kubeletserver.Serve(ctx, ln, k.tls, k.srv)
	}))
}
