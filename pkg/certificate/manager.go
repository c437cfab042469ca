package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Config configures a Manager. NodeName and CertDir are required, and Kubeconfig or
// BootstrapKubeconfig.
type Config struct {
	// NodeName is the node; the certificate's subject is O=system:nodes, CN=system:node:<NodeName>.
	NodeName string
	// Kubeconfig is --kubeconfig: the node's own credentials. With BootstrapKubeconfig it is written
	// (pointing at CertDir's current pair) when missing or when its client certificate is not valid.
	Kubeconfig string
	// BootstrapKubeconfig is --bootstrap-kubeconfig: credentials (a bootstrap token) to request the
	// first certificate with, and again should the current one expire.
	BootstrapKubeconfig string
	// CertDir is --cert-dir, the file store's directory.
	CertDir string
	// Rotate is --rotate-certificates: renew the certificate at 70–90 % of its lifetime. Without it,
	// a certificate is requested only when there is none (TLS bootstrap).
	Rotate bool
	// Registry receives the certificate metrics (nodeagent_certificate_manager_client_*); may be nil.
	Registry metrics.KubeRegistry
	// Event, if set, records an event on the Node (type, reason, message) when the certificate becomes a
	// problem (Healthy turns non-nil) and when it is fine again. SetEvent sets it later.
	Event func(eventType, reason, message string)
	// CheckPeriod is how often the current certificate is compared with the one the connections were
	// made with (5 s; the kubelet's UpdateTransport checks every 10 s); 100 ms until the first certificate.
	CheckPeriod time.Duration
	// PendingThreshold is how long a certificate may be waited for before Healthy reports it: 1 min,
	// or a twentieth of the current certificate's lifetime if shorter.
	PendingThreshold time.Duration
	// Clock defaults to the real clock.
	Clock clock.Clock
	// NewClientset builds the clientset CSRs are made with, from the bootstrap or the node's REST
	// config; default kubernetes.NewForConfig. Tests set it.
	NewClientset func(*restclient.Config) (kubernetes.Interface, error)
}

// Manager obtains and rotates the client certificate (client-go's certificate.Manager over a file
// store), and provides the REST config whose transport presents the current certificate and whose
// connections are closed when it changes.
type Manager struct {
	cfg        Config
	cm         atomic.Pointer[certificate.Manager]
	newCM      func(rotateNow bool) (certificate.Manager, error)
	store      certificate.FileStore
	restConfig *restclient.Config
	dialer     *connrotation.Dialer
	ready      chan struct{}
	readyOnce  sync.Once

	renewErrors *metrics.Counter

	mu             sync.Mutex
	event          func(eventType, reason, message string)
	pending        map[string]time.Time // CSRs created and not yet answered
	lastPendingLog time.Time
	lastNotAfter   time.Time // of the last certificate seen
	lastFailure    string    // the last denied/failed CSR, or renewal error
	waitingSince   time.Time // first CSR since the last certificate was obtained
	rotations      int
}

// New checks the configuration, loads the current certificate (the store's, or the one --kubeconfig
// holds) and, with a bootstrap kubeconfig and no valid certificate, writes --kubeconfig pointing at the
// store's current pair. It makes no API call; Start does. Errors name the flag and the value.
func New(cfg Config) (*Manager, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.CheckPeriod <= 0 {
		cfg.CheckPeriod = 10 * time.Second
	}
	if cfg.PendingThreshold <= 0 {
		cfg.PendingThreshold = time.Minute
	}
	if cfg.NodeName == "" {
		return nil, errors.New("certificate manager: no node name")
	}
	if err := CheckCertDir(cfg.CertDir); err != nil {
		return nil, err
	}
	if cfg.BootstrapKubeconfig != "" {
		if _, err := LoadBootstrapKubeconfig(cfg.BootstrapKubeconfig); err != nil {
			return nil, err
		}
	} else if cfg.Rotate {
		if cfg.Kubeconfig == "" {
			return nil, errors.New("--rotate-certificates=true: no --kubeconfig or --bootstrap-kubeconfig to get a client certificate with")
		}
		if ok, err := clientConfigStillValid(cfg.Kubeconfig, cfg.Clock.Now()); !ok {
			return nil, fmt.Errorf("--rotate-certificates=true: --kubeconfig %q has no valid client certificate (%v) and no --bootstrap-kubeconfig is set", cfg.Kubeconfig, err)
		}
	}
	m := &Manager{cfg: cfg, event: cfg.Event, ready: make(chan struct{}),
		pending: map[string]time.Time{}}

	store, err := certificate.NewFileStore(PairNamePrefix, cfg.CertDir, cfg.CertDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("--cert-dir %q: %w", cfg.CertDir, err)
	}
	certConfig, clientConfig, err := loadClientConfig(cfg.Kubeconfig, cfg.BootstrapKubeconfig, store.CurrentPath(), cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	// The store starts from the kubeconfig's own files when they are not the store's (a hand-made
	// node kubeconfig with --rotate-certificates), as the kubelet's NewKubeletClientCertificateManager.
	if clientConfig.CertFile != store.CurrentPath() {
		if m.store, err = certificate.NewFileStore(PairNamePrefix, cfg.CertDir, cfg.CertDir, clientConfig.CertFile, clientConfig.KeyFile); err != nil {
			return nil, fmt.Errorf("--cert-dir %q: %w", cfg.CertDir, err)
		}
	} else {
		m.store = store
	}

	m.renewErrors = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeagent", Subsystem: "certificate_manager", Name: "client_expiration_renew_errors_total",
		Help: "Counter of client certificate renewal errors.", StabilityLevel: metrics.ALPHA,
	})
	cmConfig := &certificate.Config{
		ClientsetFn: m.clientsetFn(certConfig, clientConfig),
		Template: &x509.CertificateRequest{Subject: pkix.Name{
			CommonName: "system:node:" + cfg.NodeName, Organization: []string{"system:nodes"},
		}},
		SignerName:              certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:               certificate.DefaultKubeletClientGetUsages,
		BootstrapCertificatePEM: clientConfig.CertData,
		BootstrapKeyPEM:         clientConfig.KeyData,
		CertificateStore:        m.store,
		CertificateRenewFailure: renewFailure{m},
		Name:                    "client",
	}
	m.newCM = func(rotateNow bool) (certificate.Manager, error) {
		if !rotateNow {
			return certificate.NewManager(cmConfig)
		}
		// client-go's manager rotates at once a certificate given as BootstrapCertificatePEM when its
		// store has none: give it the current pair that way, through a store that answers "none" once.
		pair, err := os.ReadFile(m.store.CurrentPath())
		if err != nil {
			return nil, err
		}
		c := *cmConfig
		c.BootstrapCertificatePEM, c.BootstrapKeyPEM = splitPair(pair)
		c.CertificateStore = &storeWithoutCurrent{Store: m.store}
		return certificate.NewManager(&c)
	}
	cm, err := m.newCM(false)
	if err != nil {
		return nil, fmt.Errorf("--cert-dir %q: client certificate manager: %w", cfg.CertDir, err)
	}
	m.cm.Store(&cm)
	// Later managers start from the store alone.
	cmConfig.BootstrapCertificatePEM, cmConfig.BootstrapKeyPEM = nil, nil
	if err := m.buildRESTConfig(clientConfig); err != nil {
		return nil, err
	}
	if m.manager().Current() != nil {
		m.readyOnce.Do(func() { close(m.ready) })
	}
	m.registerMetrics()
	return m, nil
}

// clientsetFn mirrors the kubelet's buildClientCertificateManager: CSRs are made with the current
// certificate (the node identity) while there is one, else with the bootstrap credentials, read again
// each time, so that an expired certificate falls back to bootstrapping.
func (m *Manager) clientsetFn(certConfig, clientConfig *restclient.Config) certificate.ClientsetFunc {
	return func(current *tls.Certificate) (kubernetes.Interface, error) {
		config := certConfig
		switch {
		case current != nil:
			config = clientConfig
		case m.cfg.BootstrapKubeconfig != "":
			c, err := LoadBootstrapKubeconfig(m.cfg.BootstrapKubeconfig)
			if err != nil {
				return nil, err
			}
			config = c
		}
		newClientset := m.cfg.NewClientset
		if newClientset == nil {
			newClientset = func(c *restclient.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
		}
		cs, err := newClientset(config)
		if err != nil {
			return nil, err
		}
		return observedClientset{Interface: cs, observe: m.observe}, nil
	}
}

// buildRESTConfig mirrors the kubelet's UpdateTransport/addCertRotation: a transport whose TLS client
// certificate is the manager's current one, dialing through one rotating dialer. Requests wait for the
// first certificate rather than going out anonymous.
func (m *Manager) buildRESTConfig(clientConfig *restclient.Config) error {
	c := restclient.AnonymousClientConfig(clientConfig)
	tlsConfig, err := restclient.TLSConfigFor(c)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: TLS configuration: %w", m.cfg.Kubeconfig, err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := m.manager().Current(); cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil
	}
	m.dialer = connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	c.Transport = waitForCertificate{ready: m.ready, rt: utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         m.dialer.DialContext,
	})}
	c.CertData, c.KeyData, c.CertFile, c.KeyFile = nil, nil, "", ""
	c.CAData, c.CAFile, c.Insecure, c.NextProtos = nil, "", false, nil
	m.restConfig = c
	return nil
}

// waitForCertificate holds requests until the first certificate is available (or the request's
// context ends), so nothing reaches the API server anonymous while bootstrapping.
type waitForCertificate struct {
	ready <-chan struct{}
	rt    http.RoundTripper
}

func (w waitForCertificate) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case <-w.ready:
	case <-req.Context().Done():
		return nil, fmt.Errorf("waiting for a client certificate: %w", req.Context().Err())
	}
	return w.rt.RoundTrip(req)
}

func (w waitForCertificate) WrappedRoundTripper() http.RoundTripper { return w.rt }

// RESTConfig returns a REST config (server, CA, no credentials of its own) whose transport presents
// the current certificate. Set ContentType, QPS, UserAgent, Timeout on copies as needed, but no
// Dial, Transport or TLS option.
func (m *Manager) RESTConfig() *restclient.Config { return restclient.CopyConfig(m.restConfig) }

// CloseAllConns closes every connection made through RESTConfig's transport (the kubelet's
// closeAllConns), which also resets watches.
func (m *Manager) CloseAllConns() { m.dialer.CloseAll() }

// Current is the current certificate, nil while there is none or it has expired.
func (m *Manager) Current() *tls.Certificate { return m.manager().Current() }

// Ready is closed once a certificate is available.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// CurrentPath is the store's <cert-dir>/nodeagent-client-current.pem.
func (m *Manager) CurrentPath() string { return m.store.CurrentPath() }

// SetEvent sets the function that records events on the Node (see Config.Event).
func (m *Manager) SetEvent(f func(eventType, reason, message string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.event = f
}

// Start bootstraps (when there is no valid certificate) and, with Rotate, rotates in the background
// until ctx ends; it watches for a new certificate and then closes the connections made with the old
// one. It returns at once.
func (m *Manager) Start(ctx context.Context) {
	logger := klog.FromContext(ctx)
	current := m.manager().Current()
	if m.cfg.Rotate || current == nil {
		if current == nil {
			logger.Info("No valid client certificate, requesting one with the bootstrap credentials",
				"bootstrapKubeconfig", m.cfg.BootstrapKubeconfig, "certDir", m.cfg.CertDir)
		}
		m.manager().Start()
		go func() {
			<-ctx.Done()
			m.manager().Stop()
		}()
	}
	go m.run(ctx, current)
}

// run mirrors the kubelet's checkNewCertificateAndRotate: when the manager's certificate changes,
// connections made with the previous one are closed. It also reports problems (Healthy) when they
// start and end, and logs CSRs that wait for approval.
func (m *Manager) run(ctx context.Context, last *tls.Certificate) {
	logger := klog.FromContext(ctx)
	var lastProblem error
	var lastProblemLog time.Time
	check := func() {
		curr := m.manager().Current()
		if curr != nil && (last == nil || !curr.Leaf.Equal(last.Leaf)) {
			first := last == nil
			last = curr
			m.mu.Lock()
			m.lastNotAfter = curr.Leaf.NotAfter
			m.mu.Unlock()
			m.mu.Lock()
			m.rotations++
			m.lastFailure = ""
			m.waitingSince = time.Time{}
			m.mu.Unlock()
			if first {
				logger.Info("Client certificate obtained", "subject", curr.Leaf.Subject.String(), "expiration", curr.Leaf.NotAfter.UTC(), "path", m.CurrentPath())
			} else {
				logger.Info("Client certificate rotated, closing the connections made with the previous one", "subject", curr.Leaf.Subject.String(), "expiration", curr.Leaf.NotAfter.UTC())
			}
			m.dialer.CloseAll()
			// Requests wait for the first certificate (waitForCertificate): release them only after the
			// connections are closed, so none made with this certificate is closed under them.
			m.readyOnce.Do(func() { close(m.ready) })
			if !m.cfg.Rotate {
				m.manager().Stop()
			}
		}
		m.logPending(logger)
		problem := m.Healthy()
		if problem == ErrNoCertificateYet {
			problem = nil // Start has said so; not a problem before the pending threshold
		}
		switch {
		case problem != nil && (lastProblem == nil || m.cfg.Clock.Since(lastProblemLog) >= time.Minute):
			logger.Error(problem, "Client certificate problem")
			lastProblemLog = m.cfg.Clock.Now()
			if lastProblem == nil {
				m.emit("Warning", "ClientCertificateProblem", problem.Error())
			}
		case problem == nil && lastProblem != nil:
			logger.Info("Client certificate problem resolved")
			m.emit("Normal", "ClientCertificateOK", "client certificate problem resolved")
		}
		lastProblem = problem
		if m.cfg.Rotate {
			m.abandonStaleRequest(ctx)
		}
	}
	period := m.cfg.CheckPeriod
	for {
		check()
		p := period
		if last == nil {
			p = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(p):
		}
	}
}

// manager is the current client-go certificate manager.
func (m *Manager) manager() certificate.Manager { return *m.cm.Load() }

// abandonStaleRequest replaces client-go's manager, whose wait for a CSR lasts 15 min whatever the
// certificate's lifetime, when a renewal CSR has waited for more than a twentieth of the current
// certificate's lifetime or a quarter of its remaining time (at least 10 s, at most 15 min): the new
// manager (given the current pair as its bootstrap certificate) requests a new certificate at once, so an
// approval that was withheld and is granted again (say the selfnodeclient binding is back) is acted on
// before the certificate expires. The approver does not look at a CSR again once it has skipped it.
func (m *Manager) abandonStaleRequest(ctx context.Context) {
	cert := m.manager().Current()
	name, since, _ := m.pendingSince()
	if since.IsZero() {
		return
	}
	m.mu.Lock()
	lastNotAfter := m.lastNotAfter
	m.mu.Unlock()
	waited := m.cfg.Clock.Since(since)
	if cert == nil {
		// Expired while a CSR made with it waits: start again from the bootstrap credentials.
		if lastNotAfter.IsZero() || !since.Before(lastNotAfter) {
			return
		}
	} else {
		remaining := cert.Leaf.NotAfter.Sub(m.cfg.Clock.Now())
		limit := min(15*time.Minute, max(10*time.Second, min(cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)/20, remaining/4)))
		if waited < limit {
			return
		}
	}
	logger := klog.FromContext(ctx)
	cm, err := m.newCM(cert != nil)
	if err != nil {
		logger.Error(err, "Cannot restart the client certificate manager")
		return
	}
	logger.Info("Certificate signing request not approved in time, requesting a new certificate", "csr", name, "waited", waited.Round(time.Second))
	m.mu.Lock()
	delete(m.pending, name)
	m.mu.Unlock()
	old := m.manager()
	m.cm.Store(&cm)
	old.Stop()
	cm.Start() // Start's goroutine stops the current manager when ctx ends
}

func (m *Manager) emit(eventType, reason, message string) {
	m.mu.Lock()
	f := m.event
	m.mu.Unlock()
	if f != nil {
		f(eventType, reason, message)
	}
}

// observe is told of every CSR the manager creates or reads while waiting for it.
func (m *Manager) observe(csr *certificatesv1.CertificateSigningRequest, created bool) {
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	logger := klog.Background().WithName("client")
	if created {
		m.pending[csr.Name] = m.cfg.Clock.Now()
		if m.waitingSince.IsZero() {
			m.waitingSince = m.pending[csr.Name]
		}
		logger.Info("Certificate signing request created, waiting for approval and issuance", "csr", csr.Name,
			"signerName", csr.Spec.SignerName, "subject", "O=system:nodes, CN=system:node:"+m.cfg.NodeName)
		return
	}
	if _, ok := m.pending[csr.Name]; !ok {
		return
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			delete(m.pending, csr.Name)
			m.lastFailure = fmt.Sprintf("certificate signing request %s %s: %s: %s", csr.Name, denyVerb(c.Type), c.Reason, c.Message)
			logger.Error(nil, "Certificate signing request not granted, retrying with backoff", "csr", csr.Name,
				"condition", c.Type, "reason", c.Reason, "message", c.Message)
			return
		}
	}
	if len(csr.Status.Certificate) > 0 {
		logger.Info("Certificate signing request issued", "csr", csr.Name, "waited", m.cfg.Clock.Since(m.pending[csr.Name]).Round(time.Millisecond))
		delete(m.pending, csr.Name)
	}
}

func denyVerb(t certificatesv1.RequestConditionType) string {
	if t == certificatesv1.CertificateDenied {
		return "denied"
	}
	return "failed"
}

// logPending logs, every minute, that the certificate requested is not there yet (from 30 s on, or a
// twentieth of the current certificate's lifetime if shorter).
func (m *Manager) logPending(logger klog.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Clock.Now()
	after := 30 * time.Second
	if cert := m.manager().Current(); cert != nil {
		after = min(after, cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)/20)
	}
	if m.waitingSince.IsZero() || len(m.pending) == 0 || now.Sub(m.waitingSince) < after || now.Sub(m.lastPendingLog) < time.Minute {
		return
	}
	m.lastPendingLog = now
	var names []string
	for n := range m.pending {
		names = append(names, n)
	}
	logger.Info("Certificate signing request not approved yet: is the CSR approver running, and is this node's identity bound to system:certificates.k8s.io:certificatesigningrequests:selfnodeclient (renewal) or its bootstrap token's group to :nodeclient (bootstrap)?",
		"csr", strings.Join(names, ","), "waiting", now.Sub(m.waitingSince).Round(time.Second))
}

// pendingSince is the oldest unanswered CSR (zero time if none), and since when a certificate has
// been waited for (zero if no CSR is pending).
func (m *Manager) pendingSince() (name string, oldest, waiting time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, t := range m.pending {
		if oldest.IsZero() || t.Before(oldest) {
			name, oldest = n, t
		}
	}
	if len(m.pending) > 0 {
		waiting = m.waitingSince
	}
	return name, oldest, waiting
}

// ErrNoCertificateYet is Healthy's answer while the first certificate is requested, before anything
// went wrong.
var ErrNoCertificateYet = errors.New("no valid client certificate yet (not registered)")

// Healthy is nil while the client certificate is fine, else why not: there is none (yet), a CSR has
// waited for approval longer than PendingThreshold, or the certificate is in the last 10 % of its
// lifetime without having been renewed. The lead adds it as a /healthz check.
func (m *Manager) Healthy() error {
	now := m.cfg.Clock.Now()
	name, _, since := m.pendingSince()
	m.mu.Lock()
	failure := m.lastFailure
	m.mu.Unlock()
	cert := m.manager().Current()
	threshold := m.cfg.PendingThreshold
	if cert != nil && cert.Leaf != nil {
		threshold = min(threshold, cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)/20)
	}
	var pending string
	if !since.IsZero() && now.Sub(since) >= threshold {
		pending = fmt.Sprintf("certificate signing request %s not approved, waiting for a certificate for %s", name, now.Sub(since).Round(time.Second))
	}
	if cert == nil || cert.Leaf == nil {
		if pending == "" && failure == "" {
			return ErrNoCertificateYet
		}
		msg := ErrNoCertificateYet.Error()
		for _, s := range []string{pending, failure} {
			if s != "" {
				msg += ": " + s
			}
		}
		return fmt.Errorf("%w", errors.New(msg))
	}
	lifetime := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
	left := cert.Leaf.NotAfter.Sub(now)
	if left < lifetime/10 {
		why := "--rotate-certificates is off"
		if m.cfg.Rotate {
			why = "not renewed"
			if failure != "" {
				why += ": " + failure
			} else if pending != "" {
				why += ": " + pending
			}
		}
		return fmt.Errorf("client certificate expires at %s (in %s), %s", cert.Leaf.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Second), why)
	}
	if pending != "" {
		return fmt.Errorf("client certificate renewal: %s (current certificate valid until %s)", pending, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// splitPair splits a store file (certificates and a key) into the certificates' PEM and the key's.
func splitPair(data []byte) (certPEM, keyPEM []byte) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return certPEM, keyPEM
		}
		if block.Type == "CERTIFICATE" {
			certPEM = append(certPEM, pem.EncodeToMemory(block)...)
		} else if strings.HasSuffix(block.Type, "PRIVATE KEY") && keyPEM == nil {
			keyPEM = pem.EncodeToMemory(block)
		}
	}
}

// storeWithoutCurrent answers its first Current with NoCertKeyError, so that a new client-go manager
// starts from its BootstrapCertificatePEM and rotates it at once.
type storeWithoutCurrent struct {
	certificate.Store
	asked atomic.Bool
}

func (s *storeWithoutCurrent) Current() (*tls.Certificate, error) {
	if s.asked.CompareAndSwap(false, true) {
		e := certificate.NoCertKeyError("rotate now")
		return nil, &e
	}
	return s.Store.Current()
}

// renewFailure counts renewal errors for client-go's manager into the metric.
type renewFailure struct{ m *Manager }

func (r renewFailure) Inc() { r.m.renewErrors.Inc() }

func (m *Manager) registerMetrics() {
	if m.cfg.Registry == nil {
		return
	}
	leaf := func() *x509.Certificate {
		if c := m.manager().Current(); c != nil {
			return c.Leaf
		}
		return nil
	}
	m.cfg.Registry.MustRegister(m.renewErrors)
	m.cfg.Registry.RawMustRegister(
		metrics.NewGaugeFunc(&metrics.GaugeOpts{
			Namespace: "nodeagent", Subsystem: "certificate_manager", Name: "client_expiration_seconds",
			Help:           "Expiration of the client certificate, in seconds since January 1, 1970 UTC; 0 without one.",
			StabilityLevel: metrics.ALPHA,
		}, func() float64 {
			if l := leaf(); l != nil {
				return float64(l.NotAfter.Unix())
			}
			return 0
		}),
		metrics.NewGaugeFunc(&metrics.GaugeOpts{
			Namespace: "nodeagent", Subsystem: "certificate_manager", Name: "client_ttl_seconds",
			Help:           "Seconds until the client certificate expires (negative if expired); +Inf without one.",
			StabilityLevel: metrics.ALPHA,
		}, func() float64 {
			if l := leaf(); l != nil {
				return math.Trunc(l.NotAfter.Sub(m.cfg.Clock.Now()).Seconds())
			}
			return math.Inf(1)
		}),
		metrics.NewGaugeFunc(&metrics.GaugeOpts{
			Namespace: "nodeagent", Subsystem: "certificate_manager", Name: "client_csr_pending_seconds",
			Help:           "How long the oldest client certificate signing request has waited for approval and issuance; 0 if none waits.",
			StabilityLevel: metrics.ALPHA,
		}, func() float64 {
			if _, _, since := m.pendingSince(); !since.IsZero() {
				return math.Trunc(m.cfg.Clock.Since(since).Seconds())
			}
			return 0
		}),
	)
}

// CheckCertDir creates dir if needed and checks that a file can be written in it. The error names
// --cert-dir.
func CheckCertDir(dir string) error {
	if dir == "" {
		return errors.New("--cert-dir: must not be empty")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("--cert-dir %q: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("--cert-dir %q: not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(filepath.Clean(name))
}
