package certificate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
)

// The tests run the manager, client-go's certificate manager and the fake clientset in a synctest
// bubble: all of them use the time package (no clock to inject into client-go's manager), so fake
// time drives the rotation deadline, CSR backoff and the pending threshold, and the certificates the
// signer issues are dated in the bubble's time too.

// inBubble runs f in a synctest bubble.
//
// client-go's manager reports errors through utilruntime.HandleError, whose rate limiter remembers the
// time of the last error across calls: with each bubble's clock starting again at 2000-01-01 (and the
// real clock outside), it would sleep for the difference. Errors are only logged meanwhile.
//
// client-go's manager.Stop does not interrupt its wait for the rotation deadline (a select on a timer
// and a template change only), so that goroutine outlives Stop until the deadline. A bubble's
// goroutines must all have exited when it ends: the last cleanup (after the managers' contexts are
// cancelled) lets a day of fake time pass for them.
func inBubble(t *testing.T, f func(t *testing.T)) {
	handlers := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(ctx context.Context, err error, msg string, kv ...any) {
		klog.FromContext(ctx).Error(err, msg, kv...)
	}}
	defer func() { utilruntime.ErrorHandlers = handlers }()
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(func() { time.Sleep(24 * time.Hour) }) // runs last
		f(t)
	})
}

// signer is a test CA answering CSRs through a fake clientset's reactor: decide says, for the n-th CSR
// (from 0), whether to approve it, deny it (message) or leave it pending.
type signer struct {
	t        *testing.T
	key      *ecdsa.PrivateKey
	ca       *x509.Certificate
	lifetime time.Duration
	decide   func(n int) (approve bool, denyMessage string)
	// createErr, if set, is the error creating a CSR answers (nil: the CSR is created).
	createErr func() error

	mu      sync.Mutex
	csrs    []*certificatesv1.CertificateSigningRequest
	configs []*restclient.Config // the REST config of each clientset made
}

func newSigner(t *testing.T, lifetime time.Duration) *signer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return &signer{t: t, key: key, ca: ca, lifetime: lifetime,
		decide: func(int) (bool, string) { return true, "" }}
}

func (s *signer) clientset(c *restclient.Config) (kubernetes.Interface, error) {
	s.mu.Lock()
	s.configs = append(s.configs, c)
	s.mu.Unlock()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "certificatesigningrequests", func(a clienttesting.Action) (bool, runtime.Object, error) {
		csr := a.(clienttesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		s.mu.Lock()
		if s.createErr != nil {
			if err := s.createErr(); err != nil {
				s.mu.Unlock()
				return true, nil, err
			}
		}
		n := len(s.csrs)
		if csr.Name == "" {
			// Not the time: in a bubble two CSRs may be made at the same instant.
			csr.Name = fmt.Sprintf("csr-%d", n)
		}
		s.csrs = append(s.csrs, csr.DeepCopy())
		s.mu.Unlock()
		approve, deny := s.decide(n)
		switch {
		case deny != "":
			csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied,
				Status: "True", Reason: "TestDenied", Message: deny}}
		case approve:
			csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved,
				Status: "True", Reason: "TestApproved"}}
			csr.Status.Certificate = s.sign(csr.Spec.Request)
		}
		return false, nil, nil // the tracker stores the (mutated) object
	})
	return cs, nil
}

func (s *signer) sign(request []byte) []byte {
	block, _ := pem.Decode(request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		s.t.Error(err)
		return nil
	}
	now := time.Now()
	s.mu.Lock()
	lifetime := s.lifetime
	serial := int64(len(s.csrs)) + 1
	s.mu.Unlock()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: req.Subject,
		NotBefore: now.Add(-time.Second), NotAfter: now.Add(lifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, s.ca, req.PublicKey, s.key)
	if err != nil {
		s.t.Error(err)
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (s *signer) requests() []*certificatesv1.CertificateSigningRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*certificatesv1.CertificateSigningRequest(nil), s.csrs...)
}

const bootstrapKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: %q}}]
users: [{name: u, user: {token: abcdef.0123456789abcdef}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// setup writes a bootstrap kubeconfig and returns a Config for node "n1" in a temporary directory.
func setup(t *testing.T, s *signer) Config {
	// The fake clientset's watch sends no initial-events bookmark.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	dir := t.TempDir()
	caPEM := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ca.Raw}))
	bkc := filepath.Join(dir, "bootstrap.kubeconfig")
	if err := os.WriteFile(bkc, fmt.Appendf(nil, bootstrapKubeconfig, caPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	return Config{NodeName: "n1", Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: bkc,
		CertDir: filepath.Join(dir, "pki"), Rotate: true, NewClientset: s.clientset,
		CheckPeriod: 50 * time.Millisecond, Registry: metrics.NewKubeRegistry()}
}

func start(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.Start(ctx)
	return m
}

// waitReady waits for m's first certificate for at most timeout of the bubble's time.
func waitReady(t *testing.T, m *Manager, timeout time.Duration) {
	t.Helper()
	select {
	case <-m.Ready():
	case <-time.After(timeout):
		t.Fatalf("no certificate after %v: %v", timeout, m.Healthy())
	}
}

// TestBootstrap: with only a bootstrap kubeconfig, a CSR as the kubelet's is made with the bootstrap
// credentials, and the issued certificate is stored with a -current.pem link, mode 0600, and
// --kubeconfig is written to point at it with the bootstrap kubeconfig's server and CA.
func TestBootstrap(t *testing.T) { inBubble(t, testBootstrap) }

func testBootstrap(t *testing.T) {
	s := newSigner(t, time.Hour)
	cfg := setup(t, s)
	m := start(t, cfg)
	waitReady(t, m, 10*time.Second)

	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d CSRs, want 1", len(reqs))
	}
	csr := reqs[0]
	if csr.Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" {
		t.Errorf("signerName %q", csr.Spec.SignerName)
	}
	if fmt.Sprint(csr.Spec.Usages) != "[digital signature client auth]" {
		t.Errorf("usages %v, want [digital signature client auth]", csr.Spec.Usages)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.CommonName != "system:node:n1" || fmt.Sprint(req.Subject.Organization) != "[system:nodes]" {
		t.Errorf("subject %v, want O=system:nodes, CN=system:node:n1", req.Subject)
	}
	if k, ok := req.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", req.PublicKey)
	}
	if s.configs[0].BearerToken != "abcdef.0123456789abcdef" {
		t.Errorf("first CSR not made with the bootstrap token: %+v", s.configs[0])
	}

	current := filepath.Join(cfg.CertDir, "nodeagent-client-current.pem")
	target, err := os.Readlink(current)
	if err != nil {
		t.Fatalf("%s is not a link: %v", current, err)
	}
	fi, err := os.Stat(current)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s (%s) mode %v, want 0600", current, target, fi.Mode().Perm())
	}
	kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if u := kc.AuthInfos[ctx.AuthInfo]; u.ClientCertificate != current || u.ClientKey != current {
		t.Errorf("kubeconfig user %+v, want client-certificate and client-key %s", u, current)
	}
	if c := kc.Clusters[ctx.Cluster]; c.Server != "https://127.0.0.1:6443" || len(c.CertificateAuthorityData) == 0 {
		t.Errorf("kubeconfig cluster %+v, want the bootstrap kubeconfig's server and CA", c)
	}
	if err := m.Healthy(); err != nil {
		t.Errorf("Healthy() = %v", err)
	}
	leaf := m.Current().Leaf
	want := fmt.Sprintf(`# HELP nodeagent_certificate_manager_client_expiration_seconds [ALPHA] Expiration of the client certificate, in seconds since January 1, 1970 UTC; 0 without one.
# TYPE nodeagent_certificate_manager_client_expiration_seconds gauge
nodeagent_certificate_manager_client_expiration_seconds %d
# HELP nodeagent_certificate_manager_client_expiration_renew_errors_total [ALPHA] Counter of client certificate renewal errors.
# TYPE nodeagent_certificate_manager_client_expiration_renew_errors_total counter
nodeagent_certificate_manager_client_expiration_renew_errors_total 0
`, leaf.NotAfter.Unix())
	if err := testutil.GatherAndCompare(cfg.Registry, strings.NewReader(want),
		"nodeagent_certificate_manager_client_expiration_seconds", "nodeagent_certificate_manager_client_expiration_renew_errors_total"); err != nil {
		t.Error(err)
	}

	// A restart reuses the stored certificate: no new CSR.
	m2 := start(t, Config{NodeName: "n1", Kubeconfig: cfg.Kubeconfig, BootstrapKubeconfig: cfg.BootstrapKubeconfig,
		CertDir: cfg.CertDir, Rotate: true, NewClientset: s.clientset, CheckPeriod: 50 * time.Millisecond})
	select {
	case <-m2.Ready(): // at once: New found the stored certificate
	default:
		t.Fatalf("restart: not ready at once with the stored certificate: %v", m2.Healthy())
	}
	if !m2.Current().Leaf.Equal(leaf) {
		t.Error("restart did not reuse the stored certificate")
	}
	// Nothing is requested until the rotation deadline, 70 % (42 min) of the lifetime at the earliest.
	time.Sleep(40 * time.Minute)
	synctest.Wait()
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d CSRs in the 40 min after a restart, want 1", n)
	}
	if !m2.Current().Leaf.Equal(leaf) || !m.Current().Leaf.Equal(leaf) {
		t.Error("certificate changed before the rotation deadline")
	}
}

// TestRotation: a certificate is renewed at 70–90 % of its lifetime with a CSR made with the current
// certificate (the node's identity), and the manager switches to the new one.
func TestRotation(t *testing.T) { inBubble(t, testRotation) }

func testRotation(t *testing.T) {
	s := newSigner(t, 4*time.Second)
	cfg := setup(t, s)
	m := start(t, cfg)
	waitReady(t, m, 10*time.Second)
	first := m.Current()
	// The bubble's time only moves when every goroutine waits, so the CSR round trip takes no time and
	// the rotation is seen within the polling step.
	const step = 10 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for m.Current() == first || m.Current() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("not rotated within 10 s; CSRs: %d", len(s.requests()))
		}
		time.Sleep(step)
	}
	rotatedAt := time.Since(first.Leaf.NotBefore)
	// NotBefore is backdated 1 s: the lifetime is 5 s, 70–90 % is 3.5–4.5 s.
	if rotatedAt < 3500*time.Millisecond || rotatedAt > 4500*time.Millisecond+step {
		t.Errorf("rotated %v after NotBefore, want 70–90 %% of 5s", rotatedAt)
	}
	if n := len(s.requests()); n != 2 {
		t.Errorf("%d CSRs after one rotation, want 2", n)
	}
	s.mu.Lock()
	second := s.configs[1]
	s.mu.Unlock()
	if second.BearerToken != "" || second.CertFile != filepath.Join(cfg.CertDir, "nodeagent-client-current.pem") {
		t.Errorf("renewal CSR made with %+v, want the current certificate", second)
	}
	// run sees it within a check period.
	time.Sleep(cfg.CheckPeriod)
	synctest.Wait()
	m.mu.Lock()
	n := m.rotations
	m.mu.Unlock()
	if n != 2 {
		t.Fatalf("run saw %d certificates a check period after the rotation, want 2", n)
	}
}

// TestDeniedThenApproved: a denied CSR is reported with its name and message and retried with backoff.
func TestDeniedThenApproved(t *testing.T) { inBubble(t, testDeniedThenApproved) }

func testDeniedThenApproved(t *testing.T) {
	s := newSigner(t, time.Hour)
	s.decide = func(n int) (bool, string) {
		if n == 0 {
			return false, "not this one"
		}
		return true, ""
	}
	cfg := setup(t, s)
	m := start(t, cfg)
	started := time.Now()
	synctest.Wait() // the first CSR is made and denied without time passing
	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d CSRs, want 1", len(reqs))
	}
	err := m.Healthy()
	if err == nil || !strings.Contains(err.Error(), "denied: TestDenied: not this one") {
		t.Fatalf("Healthy() = %v, want the denial", err)
	}
	if !strings.Contains(err.Error(), "certificate signing request "+reqs[0].Name+" denied") {
		t.Errorf("Healthy() = %v, lacks the CSR's name %s", err, reqs[0].Name)
	}
	if v, _ := testutil.GetCounterMetricValue(m.renewErrors); v != 1 {
		t.Errorf("renew errors %v, want 1", v)
	}
	// With backoff: no second CSR for a second.
	time.Sleep(time.Second)
	synctest.Wait()
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d CSRs a second after the denial, want 1 (backoff)", n)
	}
	waitReady(t, m, 10*time.Second)
	if n := len(s.requests()); n != 2 {
		t.Errorf("%d CSRs, want 2", n)
	}
	if d := time.Since(started); d > 5*time.Second {
		t.Errorf("certificate after %v, want the retry within 5 s", d)
	}
	if err := m.Healthy(); err != nil {
		t.Errorf("Healthy() after the approval = %v", err)
	}
}

// TestPending: a CSR that is not approved is reported by Healthy and the pending metric, without
// crashing or spinning.
func TestPending(t *testing.T) { inBubble(t, testPending) }

func testPending(t *testing.T) {
	s := newSigner(t, time.Hour)
	s.decide = func(int) (bool, string) { return false, "" }
	cfg := setup(t, s)
	cfg.PendingThreshold = 200 * time.Millisecond
	m := start(t, cfg)
	time.Sleep(150 * time.Millisecond)
	if err := m.Healthy(); err != ErrNoCertificateYet {
		t.Errorf("Healthy() before the pending threshold = %v, want %v", err, ErrNoCertificateYet)
	}
	time.Sleep(1350 * time.Millisecond) // 1.5 s
	err := m.Healthy()
	if err == nil || !strings.Contains(err.Error(), "not approved, waiting for a certificate for") || !strings.Contains(err.Error(), "no valid client certificate") {
		t.Errorf("Healthy() = %v, want a CSR not approved", err)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d CSRs while one is pending, want 1", n)
	}
	if err := testutil.GatherAndCompare(cfg.Registry, strings.NewReader(`# HELP nodeagent_certificate_manager_client_csr_pending_seconds [ALPHA] How long the oldest client certificate signing request has waited for approval and issuance; 0 if none waits.
# TYPE nodeagent_certificate_manager_client_csr_pending_seconds gauge
nodeagent_certificate_manager_client_csr_pending_seconds 1
`), "nodeagent_certificate_manager_client_csr_pending_seconds"); err != nil {
		t.Error(err)
	}
	// Still the one CSR ten minutes on (client-go's manager waits 15 min for it).
	time.Sleep(10 * time.Minute)
	synctest.Wait()
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d CSRs after 10 min pending, want 1", n)
	}
	if err := testutil.GatherAndCompare(cfg.Registry, strings.NewReader(`# HELP nodeagent_certificate_manager_client_csr_pending_seconds [ALPHA] How long the oldest client certificate signing request has waited for approval and issuance; 0 if none waits.
# TYPE nodeagent_certificate_manager_client_csr_pending_seconds gauge
nodeagent_certificate_manager_client_csr_pending_seconds 601
`), "nodeagent_certificate_manager_client_csr_pending_seconds"); err != nil {
		t.Error(err)
	}
}

// TestExpiredKubeconfigBootstrapsAgain: a --kubeconfig whose certificate has expired is replaced
// through the bootstrap credentials.
func TestExpiredKubeconfigBootstrapsAgain(t *testing.T) {
	inBubble(t, testExpiredKubeconfigBootstrapsAgain)
}

func testExpiredKubeconfigBootstrapsAgain(t *testing.T) {
	s := newSigner(t, 3*time.Second) // x509 times are whole seconds
	cfg := setup(t, s)
	cfg.Rotate = false
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.Start(ctx)
	waitReady(t, m, 10*time.Second)
	cancel()
	notAfter := m.Current().Leaf.NotAfter
	if ok, err := clientConfigStillValid(cfg.Kubeconfig, time.Now()); !ok {
		t.Fatalf("kubeconfig not valid with a fresh certificate: %v", err)
	}
	time.Sleep(time.Until(notAfter) + time.Millisecond) // expired
	if ok, _ := clientConfigStillValid(cfg.Kubeconfig, time.Now()); ok {
		t.Fatal("kubeconfig still valid")
	}
	s.mu.Lock()
	s.lifetime = time.Hour
	n := len(s.csrs)
	s.mu.Unlock()
	cfg.Registry = nil
	m2 := start(t, cfg)
	waitReady(t, m2, 10*time.Second)
	if got := len(s.requests()); got != n+1 {
		t.Errorf("%d new CSRs, want 1", got-n)
	}
	s.mu.Lock()
	last := s.configs[len(s.configs)-1]
	s.mu.Unlock()
	if last.BearerToken == "" {
		t.Errorf("CSR after expiry made with %+v, want the bootstrap token", last)
	}
	if !m2.Current().Leaf.NotAfter.After(notAfter) {
		t.Errorf("certificate after bootstrapping again expires at %v, not after the expired one's %v", m2.Current().Leaf.NotAfter, notAfter)
	}
}

// TestNewBadInput: the errors name the flag and the value.
func TestNewBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{NodeName: "n", CertDir: filepath.Join(file, "pki"), BootstrapKubeconfig: file}, `--cert-dir "` + file + `/pki"`},
		{Config{NodeName: "n", CertDir: dir, BootstrapKubeconfig: filepath.Join(dir, "none")}, `--bootstrap-kubeconfig "` + dir + `/none"`},
		{Config{NodeName: "n", CertDir: dir, Rotate: true}, "--rotate-certificates=true: no --kubeconfig or --bootstrap-kubeconfig"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
