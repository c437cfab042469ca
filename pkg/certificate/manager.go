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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// made with, and a certificate kept in memory is written to the store again (10 s, as the kubelet's
	// UpdateTransport checks); 100 ms until the first certificate.
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
	store      *fileStore
	restConfig *restclient.Config
	dialer     *connrotation.Dialer
	ready      chan struct{}
	readyOnce  sync.Once

	renewErrors *metrics.Counter
	errors      *metrics.CounterVec // by reason: see errorsHelp

	// damaged says which damaged certificate New moved aside ("" if none); Start logs it once.
	damaged string

	mu             sync.Mutex
	event          func(eventType, reason, message string)
	pending        map[string]time.Time // CSRs created and not yet answered
	lastPendingLog time.Time
	lastNotAfter   time.Time // of the last certificate seen
	lastFailure    string    // the last denied/failed CSR, or renewal error
	requestError   string    // why the last CSR could not be created ("" once one is)
	requestReason  string    // its Reason* (credential problems fail Healthy, ReasonRequest does not)
	stopped        bool      // the client-go manager was stopped after the first certificate (no rotation)
	refused        int       // 401 answers in a row to the agent's requests
	refusedSince   time.Time // the first of them
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

	store, err := newFileStore(cfg.CertDir, "", "")
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
		if m.store, err = newFileStore(cfg.CertDir, clientConfig.CertFile, clientConfig.KeyFile); err != nil {
			return nil, fmt.Errorf("--cert-dir %q: %w", cfg.CertDir, err)
		}
	} else {
		m.store = store
	}
	// A damaged current pair (truncated or garbage PEM, a key that is not the certificate's, the link
	// pointing at a directory) would make client-go's manager fail, and the agent exit: with bootstrap
	// credentials, move it aside for the operator and bootstrap again, as docs/joining.md says.
	if cfg.BootstrapKubeconfig != "" {
		if _, err := m.store.FileStore.Current(); err != nil {
			var none *certificate.NoCertKeyError
			if !errors.As(err, &none) {
				moved, merr := moveAsideDamaged(m.store.CurrentPath(), cfg.Clock.Now())
				if merr != nil {
					return nil, fmt.Errorf("--cert-dir %q: client certificate %s is damaged (%v) and could not be moved aside: %w", cfg.CertDir, m.store.CurrentPath(), err, merr)
				}
				m.damaged = fmt.Sprintf("client certificate %s was damaged (%v); moved aside to %s, bootstrapping again with --bootstrap-kubeconfig", m.store.CurrentPath(), err, moved)
			}
		}
	}

	m.renewErrors = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "nodeagent", Subsystem: "certificate_manager", Name: "client_expiration_renew_errors_total",
		Help: "Counter of client certificate renewal errors.", StabilityLevel: metrics.ALPHA,
	})
	m.errors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nodeagent", Subsystem: "certificate_manager", Name: "client_errors_total",
		Help: errorsHelp, StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	m.store.failed = func() { m.errors.WithLabelValues(ReasonStore).Inc() }
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
		certPEM, keyPEM, err := m.store.currentPair()
		if err != nil {
			return nil, err
		}
		c := *cmConfig
		c.BootstrapCertificatePEM, c.BootstrapKeyPEM = certPEM, keyPEM
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
	// An expired stored certificate is remembered, so that Healthy says it expired rather than "not
	// yet" while a new one is requested.
	if c, err := m.store.Current(); err == nil && c.Leaf != nil {
		m.lastNotAfter = c.Leaf.NotAfter
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
				m.requestFailed(err, "")
				return nil, err
			}
			config = c
		}
		creds := fmt.Sprintf("the bootstrap credentials of --bootstrap-kubeconfig %q", m.cfg.BootstrapKubeconfig)
		if current != nil || m.cfg.BootstrapKubeconfig == "" {
			creds = "the node's client certificate"
		}
		newClientset := m.cfg.NewClientset
		if newClientset == nil {
			newClientset = func(c *restclient.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
		}
		cs, err := newClientset(config)
		if err != nil {
			m.requestFailed(err, creds)
			return nil, err
		}
		return observedClientset{Interface: cs, observe: m.observe, failed: func(err error) { m.requestFailed(err, creds) }}, nil
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
	c.Transport = waitForCertificate{ready: m.ready, observe: m.observeResponse, rt: utilnet.SetTransportDefaults(&http.Transport{
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
// context ends), so nothing reaches the API server anonymous while bootstrapping, and tells observe
// the status code of every response (a 401 means the certificate presented is refused).
type waitForCertificate struct {
	ready   <-chan struct{}
	observe func(code int)
	rt      http.RoundTripper
}

func (w waitForCertificate) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case <-w.ready:
	case <-req.Context().Done():
		return nil, fmt.Errorf("waiting for a client certificate: %w", req.Context().Err())
	}
	resp, err := w.rt.RoundTrip(req)
	if err == nil && w.observe != nil {
		w.observe(resp.StatusCode)
	}
	return resp, err
}

// refusedAfter is how many 401 answers in a row, to requests made with a valid certificate, make the
// certificate unusable for Healthy.
const refusedAfter = 3

// observeResponse counts the API server's 401 answers in a row (any other status below 500 ends the
// run): the certificate presented is not accepted (signed by a CA the API server's --client-ca-file
// does not hold, e.g. after the cluster CA was replaced).
func (m *Manager) observeResponse(code int) {
	if code >= 500 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if code != http.StatusUnauthorized {
		m.refused, m.refusedSince = 0, time.Time{}
		return
	}
	if m.refused == 0 {
		m.refusedSince = m.cfg.Clock.Now()
	}
	m.refused++
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
	if m.damaged != "" {
		logger.Error(nil, "Damaged client certificate moved aside, bootstrapping again", "problem", m.damaged)
	}
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
	var lastProblem, lastStoreErr error
	var lastProblemLog, lastStoreLog time.Time
	check := func() {
		storeErr := m.store.Persist()
		switch {
		case storeErr != nil && (lastStoreErr == nil || m.cfg.Clock.Since(lastStoreLog) >= time.Minute):
			logger.Error(storeErr, "Client certificate issued but not stored, using it from memory and retrying; a restart before it is stored bootstraps again")
			lastStoreLog = m.cfg.Clock.Now()
			if lastStoreErr == nil {
				m.emit("Warning", "ClientCertificateNotStored", storeErr.Error())
			}
		case storeErr == nil && m.store.takeStored():
			logger.Info("Client certificate stored", "path", m.CurrentPath())
		}
		lastStoreErr = storeErr
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
			m.requestError, m.requestReason = "", ""
			m.refused, m.refusedSince = 0, time.Time{}
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
				m.mu.Lock()
				m.stopped = true
				m.mu.Unlock()
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
		m.requestError, m.requestReason = "", ""
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
			m.errors.WithLabelValues(denyVerb(c.Type)).Inc()
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

// Reasons of nodeagent_certificate_manager_client_errors_total.
const (
	ReasonUnauthorized     = "unauthorized"      // 401: the bootstrap token (or node certificate) refused
	ReasonForbidden        = "forbidden"         // 403: may not create CSRs
	ReasonUnknownAuthority = "unknown_authority" // the API server's certificate is not signed by the kubeconfig's CA
	ReasonRequest          = "request"           // any other error creating a CSR (unreachable, timeout, ...)
	ReasonDenied           = "denied"            // a CSR was denied
	ReasonFailed           = "failed"            // a CSR failed (the signer refused it)
	ReasonStore            = "store"             // an issued certificate could not be written to --cert-dir
)

const errorsHelp = "Errors obtaining or storing the client certificate, by reason: unauthorized (401 creating the CSR), " +
	"forbidden (403), unknown_authority (the API server's certificate is not signed by the kubeconfig's CA), " +
	"request (other errors creating the CSR), denied, failed (the CSR's conditions), store (the issued certificate " +
	"could not be written to --cert-dir)."

// requestFailed records why a CSR could not be created with creds (the reason shows in Healthy,
// Status and the errors metric).
func (m *Manager) requestFailed(err error, creds string) {
	reason, msg := classifyRequestError(err, creds)
	m.errors.WithLabelValues(reason).Inc()
	m.mu.Lock()
	m.requestError, m.requestReason = msg, reason
	m.mu.Unlock()
}

// classifyRequestError says, for an operator, why creating a CSR with creds failed.
func classifyRequestError(err error, creds string) (reason, message string) {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case apierrors.IsUnauthorized(err):
		return ReasonUnauthorized, fmt.Sprintf("the API server refused %s (401 Unauthorized: a bootstrap token unknown, expired or malformed, or a certificate not signed by its client CA): %v", creds, err)
	case apierrors.IsForbidden(err):
		return ReasonForbidden, fmt.Sprintf("%s may not create certificate signing requests (403 Forbidden: is its group bound to ClusterRole system:node-bootstrapper?): %v", creds, err)
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return ReasonUnknownAuthority, fmt.Sprintf("the API server's serving certificate is not trusted with the CA of the kubeconfig (certificate-authority or certificate-authority-data): %v", err)
	case creds == "":
		return ReasonRequest, err.Error()
	}
	return ReasonRequest, fmt.Sprintf("creating a certificate signing request with %s: %v", creds, err)
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

// ErrCertificateExpired is wrapped by Healthy's answer once the certificate has expired and no new
// one has been obtained: every request then goes out without a client certificate (as
// system:anonymous) and is refused.
var ErrCertificateExpired = errors.New("client certificate expired")

// ErrCertificateRefused is wrapped by Healthy's answer when the API server answers 401 Unauthorized to
// requests made with a certificate that has not expired: it is unusable (not signed by a CA the API
// server trusts for clients).
var ErrCertificateRefused = errors.New("client certificate refused")

// Healthy is nil while the client certificate is fine, else why not:
//   - ErrNoCertificateYet: the first certificate is being requested and nothing went wrong (the
//     caller may let this pass while joining);
//   - an error wrapping ErrCertificateExpired: the certificate expired and no new one came, so every
//     request is refused; it says when, and why no new one (the CSR waiting, denied, a request error,
//     a store error, or --rotate-certificates off);
//   - no certificate and a problem: a CSR waiting longer than PendingThreshold, denied or failed, or
//     refused credentials, no permission or an untrusted API server (Reason* other than ReasonRequest);
//   - an error wrapping ErrCertificateRefused: a certificate that has not expired, to which the API
//     server answered 401 Unauthorized the last 3 times in a row (no other answer between);
//   - the certificate in the last 10 % of its lifetime without having been renewed, or its renewal
//     CSR waiting longer than the threshold.
//
// An issued certificate that could not be stored is in use and not a problem here (Status says it).
// internal/app's withCertificate adds it to the /healthz syncloop check. The kubelet has no such check:
// its certificate manager only logs.
func (m *Manager) Healthy() error {
	now := m.cfg.Clock.Now()
	name, _, since := m.pendingSince()
	m.mu.Lock()
	failure, requestError, requestReason, lastNotAfter, stopped := m.lastFailure, m.requestError, m.requestReason, m.lastNotAfter, m.stopped
	refused, refusedSince := m.refused, m.refusedSince
	m.mu.Unlock()
	// A refused credential or an untrusted server is a problem of its own; a request that failed
	// otherwise (the API server unreachable) is only a problem once the certificate has expired (or
	// is about to), not while joining or renewing early: Status says it meanwhile.
	credentialError := requestError != "" && requestReason != ReasonRequest
	if credentialError {
		failure = strings.TrimPrefix(failure+"; "+requestError, "; ")
	}
	cert := m.manager().Current()
	threshold := m.cfg.PendingThreshold
	if cert != nil && cert.Leaf != nil {
		threshold = min(threshold, cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)/20)
	}
	var pending string
	if !since.IsZero() && now.Sub(since) >= threshold {
		pending = fmt.Sprintf("certificate signing request %s not approved, waiting for a certificate for %s", name, now.Sub(since).Round(time.Second))
	}
	if (cert == nil || cert.Leaf == nil) && !lastNotAfter.IsZero() && !now.Before(lastNotAfter) {
		next := "requesting a new one with the bootstrap credentials"
		if pending == "" && name != "" {
			pending = fmt.Sprintf("certificate signing request %s waiting for approval for %s", name, now.Sub(since).Round(time.Second))
		}
		switch {
		case m.cfg.BootstrapKubeconfig == "":
			next = "no --bootstrap-kubeconfig to request a new one with: give --kubeconfig a valid certificate and restart"
		case stopped:
			next = "--rotate-certificates is off: restart nodeagent to bootstrap a new one with --bootstrap-kubeconfig"
		case failure != "" || pending != "" || requestError != "":
			if !credentialError && requestError != "" {
				failure = strings.TrimPrefix(failure+"; "+requestError, "; ")
			}
			next = strings.TrimPrefix(strings.TrimSuffix(pending+"; "+failure, "; "), "; ")
		}
		if store := m.store.storeError(); store != nil {
			next += "; " + store.Error()
		}
		return fmt.Errorf("%w at %s (%s ago), requests are sent without a client certificate and refused: %s", ErrCertificateExpired,
			lastNotAfter.UTC().Format(time.RFC3339), now.Sub(lastNotAfter).Round(time.Second), next)
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
	if refused >= refusedAfter {
		return fmt.Errorf("%w: the API server answered 401 Unauthorized to the last %d requests made with client certificate %q (issuer %q, valid until %s), since %s: is it signed by a CA of the API server's --client-ca-file?",
			ErrCertificateRefused, refused, cert.Leaf.Subject.String(), cert.Leaf.Issuer.String(), cert.Leaf.NotAfter.UTC().Format(time.RFC3339), refusedSince.UTC().Format(time.RFC3339))
	}
	lifetime := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
	left := cert.Leaf.NotAfter.Sub(now)
	if left < lifetime/10 {
		why := "--rotate-certificates is off"
		if m.cfg.Rotate {
			why = "not renewed"
			if !credentialError && requestError != "" {
				failure = strings.TrimPrefix(failure+"; "+requestError, "; ")
			}
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

// Status is the client certificate's state as /debug/nodestatus and `nodeagent status` show it.
type Status struct {
	// Path is the store's current link, <cert-dir>/nodeagent-client-current.pem.
	Path string `json:"path"`
	// NotAfter is the current certificate's expiry (RFC 3339, UTC); empty without one.
	NotAfter string `json:"notAfter,omitempty"`
	// Problem is Healthy's error, if any.
	Problem string `json:"problem,omitempty"`
	// RequestError is why the last certificate signing request could not be created (401, 403, an
	// unknown CA, ...), until one is.
	RequestError string `json:"requestError,omitempty"`
	// StoreError is why the certificate in use (issued, kept in memory) is not stored in --cert-dir.
	StoreError string `json:"storeError,omitempty"`
	// Damaged says which damaged certificate was moved aside at start, and where to.
	Damaged string `json:"damaged,omitempty"`
}

// Status returns the client certificate's state: its path and expiry, Healthy's problem, and the
// diagnostics behind it (why no CSR could be made, why the certificate is not stored, a damaged file
// moved aside).
func (m *Manager) Status() Status {
	st := Status{Path: m.CurrentPath(), Damaged: m.damaged}
	if c := m.Current(); c != nil && c.Leaf != nil {
		st.NotAfter = c.Leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	if err := m.Healthy(); err != nil {
		st.Problem = err.Error()
	}
	m.mu.Lock()
	st.RequestError = m.requestError
	m.mu.Unlock()
	if err := m.store.storeError(); err != nil {
		st.StoreError = err.Error()
	}
	return st
}

// Notes are Status's diagnostics as sentences for an operator (report notes), empty when all is well.
func (s Status) Notes() []string {
	var notes []string
	if s.Problem != "" {
		notes = append(notes, "client certificate: "+s.Problem)
	}
	if s.RequestError != "" && !strings.Contains(s.Problem, s.RequestError) {
		notes = append(notes, "client certificate request: "+s.RequestError)
	}
	if s.StoreError != "" {
		notes = append(notes, "client certificate in use but not stored (a restart would bootstrap again): "+s.StoreError)
	}
	if s.Damaged != "" {
		notes = append(notes, s.Damaged)
	}
	return notes
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
	m.cfg.Registry.MustRegister(m.renewErrors, m.errors)
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
