package certificate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	restclient "k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeagent/nodeagent/internal/fulldisk"
)

// events records the events a Manager emits.
type events struct {
	mu   sync.Mutex
	list []string // "type reason: message"
}

func (e *events) record(eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, eventType+" "+reason+": "+message)
}

func (e *events) reasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.list {
		out = append(out, strings.SplitN(strings.SplitN(ev, ":", 2)[0], " ", 2)[1])
	}
	return out
}

// TestExpiredIsAProblem (issue 22, item 2): once the certificate has expired and no new one came (the
// renewal CSRs are never approved), Healthy is ErrCertificateExpired with the time and the reason,
// never ErrNoCertificateYet (which the health check lets pass), and no "problem resolved" event is
// emitted at the expiry.
func TestExpiredIsAProblem(t *testing.T) { inBubble(t, testExpiredIsAProblem) }

func testExpiredIsAProblem(t *testing.T) {
	s := newSigner(t, 3*time.Second)
	s.decide = func(n int) (bool, string) { return n == 0, "" } // only the first CSR is approved
	cfg := setup(t, s)
	ev := &events{}
	cfg.Event = ev.record
	m := start(t, cfg)
	waitReady(t, m, 10*time.Second)
	notAfter := m.Current().Leaf.NotAfter
	// Every check period from the expiry to 30 s after it.
	time.Sleep(time.Until(notAfter) + time.Millisecond)
	for end := notAfter.Add(30 * time.Second); time.Now().Before(end); time.Sleep(cfg.CheckPeriod) {
		synctest.Wait()
		err := m.Healthy()
		if !errors.Is(err, ErrCertificateExpired) {
			t.Fatalf("Healthy() %v after the expiry = %v, want ErrCertificateExpired", time.Since(notAfter), err)
		}
	}
	err := m.Healthy()
	for _, want := range []string{"client certificate expired at " + notAfter.UTC().Format(time.RFC3339), "refused", "certificate signing request csr-", "waiting for approval"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Healthy() = %q, lacks %q", err, want)
		}
	}
	if st := m.Status(); st.Problem != err.Error() || st.NotAfter != "" {
		t.Errorf("Status() = %+v, want the problem and no current certificate", st)
	}
	got := ev.reasons()
	if len(got) == 0 || got[0] != "ClientCertificateProblem" {
		t.Errorf("events %v, want a ClientCertificateProblem first", got)
	}
	for _, r := range got {
		if r == "ClientCertificateOK" {
			t.Errorf("events %v: ClientCertificateOK while the certificate expired unrenewed", ev.list)
		}
	}
}

// writePair writes a store file (certificate then key) at name in dir and points the current link at
// it, as client-go's file store does.
func writePair(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p, filepath.Join(dir, PairNamePrefix+"-current.pem")); err != nil {
		t.Fatal(err)
	}
}

// pairPEM is a certificate for system:node:n1 signed by s, valid for an hour, and its key (or another
// key, if mismatched).
func pairPEM(t *testing.T, s *signer, mismatched bool) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(99),
		Subject:   pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, s.ca, &key.PublicKey, s.key)
	if err != nil {
		t.Fatal(err)
	}
	if mismatched {
		key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
}

// TestDamagedCertificateBootstrapsAgain (issue 22, item 3): with a bootstrap kubeconfig, a damaged
// current certificate (truncated PEM, garbage, a key that is not the certificate's, the link pointing
// at a directory) does not stop New: it is moved aside (kept, under a .damaged- name), said once in
// Status, and one CSR with the bootstrap token replaces it.
func TestDamagedCertificateBootstrapsAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, s *signer, dir string)
	}{
		{"truncated PEM", func(t *testing.T, s *signer, dir string) {
			p := pairPEM(t, s, false)
			writePair(t, dir, PairNamePrefix+"-2000-01-01-00-00-00.pem", p[:len(p)/2])
		}},
		{"garbage", func(t *testing.T, s *signer, dir string) {
			writePair(t, dir, PairNamePrefix+"-2000-01-01-00-00-00.pem", []byte("\x00\x01garbage\xff not PEM at all"))
		}},
		{"key not the certificate's", func(t *testing.T, s *signer, dir string) {
			writePair(t, dir, PairNamePrefix+"-2000-01-01-00-00-00.pem", pairPEM(t, s, true))
		}},
		{"current link to a directory", func(t *testing.T, s *signer, dir string) {
			d := filepath.Join(dir, "somedir")
			if err := os.MkdirAll(d, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(d, filepath.Join(dir, PairNamePrefix+"-current.pem")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s := newSigner(t, time.Hour)
				cfg := setup(t, s)
				tc.damage(t, s, cfg.CertDir)
				current := filepath.Join(cfg.CertDir, PairNamePrefix+"-current.pem")
				if err := writeKubeconfig(mustBootstrap(t, cfg), cfg.Kubeconfig, current); err != nil {
					t.Fatal(err)
				}
				m := start(t, cfg)
				waitReady(t, m, 10*time.Second)
				if n := len(s.requests()); n != 1 {
					t.Errorf("%d CSRs, want 1", n)
				}
				if s.configs[0].BearerToken == "" {
					t.Errorf("CSR not made with the bootstrap token")
				}
				aside, _ := filepath.Glob(current + ".damaged-*")
				if len(aside) != 1 {
					t.Fatalf("moved aside: %v, want one %s.damaged-* entry", aside, current)
				}
				st := m.Status()
				if !strings.Contains(st.Damaged, "damaged") || !strings.Contains(st.Damaged, aside[0]) {
					t.Errorf("Status().Damaged = %q, want the damage and %s", st.Damaged, aside[0])
				}
				if _, err := tls.LoadX509KeyPair(current, current); err != nil {
					t.Errorf("new current pair: %v", err)
				}
				if err := m.Healthy(); err != nil {
					t.Errorf("Healthy() = %v", err)
				}
			})
		})
	}
}

func mustBootstrap(t *testing.T, cfg Config) *restclient.Config {
	t.Helper()
	c, err := LoadBootstrapKubeconfig(cfg.BootstrapKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRequestErrorsAreReported (issue 22, item 4): a CSR that cannot be created says why in Healthy,
// Status and nodeagent_certificate_manager_client_errors_total{reason}: a refused bootstrap token
// (401), no permission (403), an API server certificate the kubeconfig's CA does not trust.
func TestRequestErrorsAreReported(t *testing.T) {
	gr := schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}
	for _, tc := range []struct {
		name   string
		err    error
		reason string
		want   string
		// healthy: an unreachable API server is not a credential problem: Healthy stays
		// ErrNoCertificateYet (a join that waits), Status says why.
		healthy bool
	}{
		{"401", apierrors.NewUnauthorized("Unauthorized"), ReasonUnauthorized, "refused the bootstrap credentials", false},
		{"403", apierrors.NewForbidden(gr, "", errors.New("no")), ReasonForbidden, "system:node-bootstrapper", false},
		{"unknown CA", &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/apis/certificates.k8s.io/v1/certificatesigningrequests",
			Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, ReasonUnknownAuthority, "not trusted with the CA of the kubeconfig", false},
		{"unreachable", &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: syscall.ECONNREFUSED}, ReasonRequest, "connection refused", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s := newSigner(t, time.Hour)
				var fail sync.Mutex
				failing := true
				s.createErr = func() error {
					fail.Lock()
					defer fail.Unlock()
					if failing {
						return tc.err
					}
					return nil
				}
				cfg := setup(t, s)
				m := start(t, cfg)
				time.Sleep(5 * time.Second)
				err := m.Healthy()
				if tc.healthy && err != ErrNoCertificateYet {
					t.Errorf("Healthy() = %v, want %v", err, ErrNoCertificateYet)
				}
				if !tc.healthy && (err == nil || errors.Is(err, ErrNoCertificateYet) || !strings.Contains(err.Error(), tc.want)) {
					t.Errorf("Healthy() = %v, want a failure saying %q", err, tc.want)
				}
				if notes := strings.Join(m.Status().Notes(), "\n"); !strings.Contains(notes, tc.want) {
					t.Errorf("Status().Notes() = %q, want %q", notes, tc.want)
				}
				if st := m.Status(); !strings.Contains(st.RequestError, tc.want) {
					t.Errorf("Status().RequestError = %q, want %q", st.RequestError, tc.want)
				}
				n, _ := testutil.GetCounterMetricValue(m.errors.WithLabelValues(tc.reason))
				if n < 1 {
					t.Errorf("client_errors_total{reason=%q} = %v, want at least 1", tc.reason, n)
				}
				// Fixed: the next attempt obtains a certificate and the problem is gone.
				fail.Lock()
				failing = false
				fail.Unlock()
				waitReady(t, m, time.Minute)
				if err := m.Healthy(); err != nil {
					t.Errorf("Healthy() after the fix = %v", err)
				}
				if st := m.Status(); st.RequestError != "" {
					t.Errorf("Status().RequestError after the fix = %q", st.RequestError)
				}
			})
		})
	}
}

// TestStoreFailureKeepsIssuedCertificate (issue 22, item 4): on a full disk (a tmpfs filled up) the
// issued certificate is used from memory (one CSR, no new CSR per retry), no empty or partial .pem is
// left in --cert-dir, Status and the store metric say "no space left on device", and once there is
// room again it is stored and the current link points at it.
func TestStoreFailureKeepsIssuedCertificate(t *testing.T) {
	certDir := filepath.Join(t.TempDir(), "pki")
	filler := fulldisk.Mount(t, certDir)

	inBubble(t, func(t *testing.T) {
		s := newSigner(t, time.Hour)
		cfg := setup(t, s)
		cfg.CertDir = certDir
		m := start(t, cfg)
		waitReady(t, m, 10*time.Second)
		time.Sleep(30 * time.Second) // client-go's manager would retry (and make new CSRs) meanwhile
		synctest.Wait()
		if n := len(s.requests()); n != 1 {
			t.Errorf("%d CSRs with the disk full, want 1 (the issued certificate is kept)", n)
		}
		st := m.Status()
		if !strings.Contains(st.StoreError, "no space left on device") || !strings.Contains(st.StoreError, certDir) {
			t.Errorf("Status().StoreError = %q, want the cert dir and \"no space left on device\"", st.StoreError)
		}
		if err := m.Healthy(); err != nil {
			t.Errorf("Healthy() = %v, want nil: the certificate is valid and in use", err)
		}
		if n, _ := testutil.GetCounterMetricValue(m.errors.WithLabelValues(ReasonStore)); n < 1 {
			t.Errorf("client_errors_total{reason=store} = %v, want at least 1", n)
		}
		left, _ := filepath.Glob(filepath.Join(certDir, PairNamePrefix+"-*"))
		if len(left) != 0 {
			t.Errorf("files left in the full cert dir: %v", left)
		}

		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * cfg.CheckPeriod)
		synctest.Wait()
		if st := m.Status(); st.StoreError != "" {
			t.Errorf("Status().StoreError after freeing space = %q", st.StoreError)
		}
		current, err := tls.LoadX509KeyPair(m.CurrentPath(), m.CurrentPath())
		if err != nil {
			t.Fatalf("current pair after freeing space: %v", err)
		}
		if leaf, _ := x509.ParseCertificate(current.Certificate[0]); !leaf.Equal(m.Current().Leaf) {
			t.Error("stored certificate is not the one in use")
		}
		if n := len(s.requests()); n != 1 {
			t.Errorf("%d CSRs, want 1", n)
		}
	})
}

// TestMoveAsideDamagedKeepsEarlierOnes: two damaged entries moved aside in the same second both stay.
func TestMoveAsideDamagedKeepsEarlierOnes(t *testing.T) {
	dir := t.TempDir()
	current := filepath.Join(dir, PairNamePrefix+"-current.pem")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var moved []string
	for i := range 3 {
		if err := os.WriteFile(current, []byte(fmt.Sprint(i)), 0o600); err != nil {
			t.Fatal(err)
		}
		to, err := moveAsideDamaged(current, now)
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, to)
	}
	for i, p := range moved {
		if b, err := os.ReadFile(p); err != nil || string(b) != fmt.Sprint(i) {
			t.Errorf("%s = %q, %v; want %d", p, b, err, i)
		}
	}
	if want := current + ".damaged-20260102T030405Z-2"; moved[2] != want {
		t.Errorf("third name %s, want %s", moved[2], want)
	}
}

// TestExpiredWithoutRotation: without --rotate-certificates nothing renews the certificate, so once
// it expires Healthy says so and that a restart bootstraps a new one.
func TestExpiredWithoutRotation(t *testing.T) { inBubble(t, testExpiredWithoutRotation) }

func testExpiredWithoutRotation(t *testing.T) {
	s := newSigner(t, 3*time.Second)
	cfg := setup(t, s)
	cfg.Rotate = false
	m := start(t, cfg)
	waitReady(t, m, 10*time.Second)
	time.Sleep(time.Until(m.Current().Leaf.NotAfter) + time.Second)
	synctest.Wait()
	err := m.Healthy()
	if !errors.Is(err, ErrCertificateExpired) || !strings.Contains(err.Error(), "--rotate-certificates is off: restart nodeagent") {
		t.Errorf("Healthy() = %v, want expired and the restart advice", err)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d CSRs, want 1", n)
	}
}

// TestRefusedCertificate (issue 22, item 2, "unusable"): a certificate that has not expired but that
// the API server answers 401 Unauthorized to (three requests in a row) is a failing Healthy saying so;
// one accepted request ends it. Real time and a real TLS server: the transport is the one the agent's
// clients use.
func TestRefusedCertificate(t *testing.T) {
	var mu sync.Mutex
	code := http.StatusUnauthorized
	var presented []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if len(r.TLS.PeerCertificates) > 0 {
			presented = append(presented, r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		w.WriteHeader(code)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()

	s := newSigner(t, time.Hour)
	cfg := setup(t, s)
	caPEM := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	kc := strings.Replace(fmt.Sprintf(bootstrapKubeconfig, caPEM), "https://127.0.0.1:6443", srv.URL, 1)
	if err := os.WriteFile(cfg.BootstrapKubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Registry = nil
	m := start(t, cfg)
	select {
	case <-m.Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("no certificate: %v", m.Healthy())
	}
	client, err := restclient.HTTPClientFor(m.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		t.Helper()
		resp, err := client.Get(srv.URL + "/api/v1/nodes/n1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i := range 3 {
		if err := m.Healthy(); err != nil {
			t.Fatalf("Healthy() after %d refusals = %v, want nil", i, err)
		}
		get()
	}
	err = m.Healthy()
	if !errors.Is(err, ErrCertificateRefused) || !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "system:node:n1") {
		t.Errorf("Healthy() after 3 refusals = %v, want ErrCertificateRefused naming the certificate", err)
	}
	mu.Lock()
	code = http.StatusOK
	if len(presented) != 3 || presented[0] != "system:node:n1" {
		t.Errorf("certificates presented %v, want system:node:n1 each time", presented)
	}
	mu.Unlock()
	get()
	if err := m.Healthy(); err != nil {
		t.Errorf("Healthy() after an accepted request = %v", err)
	}
}
