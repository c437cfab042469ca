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
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// signer is a test CA answering CSRs through a fake clientset's reactor: decide says, for the n-th CSR
// (from 0), whether to approve it, deny it (message) or leave it pending.
type signer struct {
	t        *testing.T
	key      *ecdsa.PrivateKey
	ca       *x509.Certificate
	lifetime time.Duration
	decide   func(n int) (approve bool, denyMessage string)

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
		if csr.Name == "" {
			csr.Name = fmt.Sprintf("csr-%d", time.Now().UnixNano())
		}
		s.mu.Lock()
		n := len(s.csrs)
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
	s.mu.Unlock()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: req.Subject,
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
func TestBootstrap(t *testing.T) {
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
	waitReady(t, m2, time.Second)
	if !m2.Current().Leaf.Equal(leaf) {
		t.Error("restart did not reuse the stored certificate")
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d CSRs after a restart, want 1", n)
	}
}

// TestRotation: a certificate is renewed at 70–90 % of its lifetime with a CSR made with the current
// certificate (the node's identity), and the manager switches to the new one.
func TestRotation(t *testing.T) {
	s := newSigner(t, 4*time.Second)
	cfg := setup(t, s)
	m := start(t, cfg)
	waitReady(t, m, 10*time.Second)
	first := m.Current()
	deadline := time.Now().Add(10 * time.Second)
	for m.Current() == first || m.Current() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("not rotated within 10 s; CSRs: %d", len(s.requests()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	rotatedAt := time.Since(first.Leaf.NotBefore)
	// NotBefore is backdated 1 s: the lifetime is 5 s, 70–90 % is 3.5–4.5 s (plus the CSR round trip).
	if rotatedAt < 3400*time.Millisecond || rotatedAt > 5*time.Second {
		t.Errorf("rotated %v after NotBefore, want 70–90 %% of 5s", rotatedAt)
	}
	s.mu.Lock()
	second := s.configs[1]
	s.mu.Unlock()
	if second.BearerToken != "" || second.CertFile != filepath.Join(cfg.CertDir, "nodeagent-client-current.pem") {
		t.Errorf("renewal CSR made with %+v, want the current certificate", second)
	}
	// Wait for run to see it.
	deadline = time.Now().Add(2 * time.Second)
	for {
		m.mu.Lock()
		n := m.rotations
		m.mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run saw %d certificates, want 2", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeniedThenApproved: a denied CSR is reported with its name and message and retried with backoff.
func TestDeniedThenApproved(t *testing.T) {
	s := newSigner(t, time.Hour)
	s.decide = func(n int) (bool, string) {
		if n == 0 {
			return false, "not this one"
		}
		return true, ""
	}
	cfg := setup(t, s)
	m := start(t, cfg)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := m.Healthy()
		if err != nil && strings.Contains(err.Error(), "denied: TestDenied: not this one") {
			if !strings.Contains(err.Error(), s.requests()[0].Name) {
				t.Errorf("Healthy() = %v, lacks the CSR's name %s", err, s.requests()[0].Name)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Healthy() = %v, want the denial", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitReady(t, m, 10*time.Second)
	if n := len(s.requests()); n != 2 {
		t.Errorf("%d CSRs, want 2", n)
	}
	if v, _ := testutil.GetCounterMetricValue(m.renewErrors); v < 1 {
		t.Errorf("renew errors %v, want >= 1", v)
	}
}

// TestPending: a CSR that is not approved is reported by Healthy and the pending metric, without
// crashing or spinning.
func TestPending(t *testing.T) {
	s := newSigner(t, time.Hour)
	s.decide = func(int) (bool, string) { return false, "" }
	cfg := setup(t, s)
	cfg.PendingThreshold = 200 * time.Millisecond
	m := start(t, cfg)
	time.Sleep(1500 * time.Millisecond)
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
}

// TestExpiredKubeconfigBootstrapsAgain: a --kubeconfig whose certificate has expired is replaced
// through the bootstrap credentials.
func TestExpiredKubeconfigBootstrapsAgain(t *testing.T) {
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
	time.Sleep(3200 * time.Millisecond) // expired
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
