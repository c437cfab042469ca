package integration_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodeagent/nodeagent/internal/fulldisk"
	"github.com/nodeagent/nodeagent/test/framework"
)

// Issue 22, items 2–4: the client certificate's failures, against the real kube-apiserver
// (Node,RBAC) and kube-controller-manager's signer and approver.

const currentPEM = "nodeagent-client-current.pem"

// clientCertStatus is /debug/nodestatus's clientCertificate.
type clientCertStatus struct {
	Path         string `json:"path"`
	NotAfter     string `json:"notAfter"`
	Problem      string `json:"problem"`
	RequestError string `json:"requestError"`
	StoreError   string `json:"storeError"`
	Damaged      string `json:"damaged"`
}

func certStatus(ctx context.Context, a *framework.Agent) (clientCertStatus, error) {
	_, body, err := a.Get(ctx, "/debug/nodestatus")
	if err != nil {
		return clientCertStatus{}, fmt.Errorf("/debug/nodestatus: %w", err)
	}
	var r struct {
		Extra struct {
			ClientCertificate clientCertStatus `json:"clientCertificate"`
		} `json:"extra"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return clientCertStatus{}, fmt.Errorf("/debug/nodestatus: %w: %s", err, body)
	}
	return r.Extra.ClientCertificate, nil
}

// waitCertStatus waits until the agent's clientCertificate status satisfies cond.
func waitCertStatus(t *testing.T, a *framework.Agent, timeout time.Duration, what string, cond func(clientCertStatus) bool) clientCertStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last clientCertStatus
	if err := framework.WaitFor(ctx, 250*time.Millisecond, func() (bool, error) {
		st, err := certStatus(ctx, a)
		if err != nil {
			return false, err
		}
		last = st
		return cond(last), nil
	}); err != nil {
		t.Fatalf("nodeagent %s: %s not seen within %v; last clientCertificate status %+v\n%s", a.NodeName, what, timeout, last, a.Logs())
	}
	return last
}

// runStatus runs `nodeagent status` against the agent and returns its output and exit code.
func runStatus(t *testing.T, a *framework.Agent) (string, int) {
	t.Helper()
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	port := a.HealthzURL[strings.LastIndex(a.HealthzURL, ":")+1:]
	out, err := exec.CommandContext(t.Context(), bin, "status", "--healthz-port", port).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// checkProblemReported checks that a credentials problem (what, for the messages) is reported where an
// operator looks: /healthz fails, and `nodeagent status` exits 1 and prints want.
func checkProblemReported(t *testing.T, a *framework.Agent, what, want string) {
	t.Helper()
	if code, _, _ := a.Get(t.Context(), "/healthz"); code == 200 {
		t.Errorf("/healthz = 200 with %s", what)
	}
	if out, code := runStatus(t, a); code != 1 || !strings.Contains(out, want) {
		t.Errorf("nodeagent status with %s: exit %d, want 1 and %q in:\n%s", what, code, want, out)
	}
}

// writeBadBootstrapKubeconfig writes a copy of the control plane's bootstrap kubeconfig changed by edit.
func writeBadBootstrapKubeconfig(t *testing.T, cp *framework.ControlPlane, path string, edit func(server, user string, c *clientcmdapi.Config)) string {
	t.Helper()
	c, err := clientcmd.LoadFromFile(cp.BootstrapKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := c.Contexts[c.CurrentContext]
	edit(ctx.Cluster, ctx.AuthInfo, c)
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBootstrapDiagnostics: a bootstrap token the API server refuses (401) and an API server whose
// certificate the bootstrap kubeconfig's CA does not sign are each said in /debug/nodestatus, in
// `nodeagent status` (exit 1, with the reason) and in nodeagent_certificate_manager_client_errors_total,
// and /healthz fails; no CSR is made.
func TestBootstrapDiagnostics(t *testing.T) {
	t.Parallel()
	cp := startBootstrapControlPlane(t, 0)
	ctrd := startContainerd(t, false)
	otherCA := filepath.Join(t.TempDir(), "other-ca.crt")
	if err := os.WriteFile(otherCA, selfSignedCAPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, reason, want string
		edit               func(cluster, user string, c *clientcmdapi.Config)
	}{
		{name: "diag-401", reason: "unauthorized", want: "401 Unauthorized",
			edit: func(_, user string, c *clientcmdapi.Config) {
				id, _, _ := strings.Cut(c.AuthInfos[user].Token, ".")
				c.AuthInfos[user].Token = id + ".0000000000000000"
			}},
		{name: "diag-unknown-ca", reason: "unknown_authority", want: "not trusted with the CA of the kubeconfig",
			edit: func(cluster, _ string, c *clientcmdapi.Config) {
				c.Clusters[cluster].CertificateAuthorityData = nil
				c.Clusters[cluster].CertificateAuthority = otherCA
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bkc := writeBadBootstrapKubeconfig(t, cp, filepath.Join(dir, "bootstrap.kubeconfig"), tc.edit)
			a := framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
				Dir: dir, NodeName: tc.name, Kubeconfig: filepath.Join(dir, "node.kubeconfig"), RuntimeEndpoint: ctrd.Endpoint,
				Args: []string{"--bootstrap-kubeconfig=" + bkc, "--rotate-certificates=true"},
			})
			st := waitCertStatus(t, a, time.Minute, "the request error", func(s clientCertStatus) bool {
				return strings.Contains(s.RequestError, tc.want)
			})
			if !strings.Contains(st.Problem, tc.want) {
				t.Errorf("clientCertificate.problem = %q, want it to say %q", st.Problem, tc.want)
			}
			checkProblemReported(t, a, "the bootstrap credentials are refused", tc.want)
			m, err := a.Metrics(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if v := m.Value("nodeagent_certificate_manager_client_errors_total", map[string]string{"reason": tc.reason}); v < 1 {
				t.Errorf("nodeagent_certificate_manager_client_errors_total{reason=%q} = %v, want >= 1", tc.reason, v)
			}
			if csrs, _ := cp.NodeCSRs(t.Context(), tc.name); len(csrs) != 0 {
				t.Errorf("%d CSRs, want none", len(csrs))
			}
		})
	}
}

// TestBootstrapDamagedCertificate: after a join, each kind of damage to the stored certificate (a
// truncated PEM, garbage, a key that is not the certificate's, the current link pointing at a
// directory) is met at the next start with the documented fallback: the damaged entry moved aside
// (kept), one log line, one new CSR with the bootstrap token, Ready again. Before, the agent exited 1.
func TestBootstrapDamagedCertificate(t *testing.T) {
	t.Parallel()
	const name = "boot-damaged"
	cp := startBootstrapControlPlane(t, 0)
	ctrd := startContainerd(t, true)
	dir := t.TempDir()
	certDir := filepath.Join(dir, "root", "pki")
	current := filepath.Join(certDir, currentPEM)
	a := startBootstrapAgent(t, cp, name, dir, ctrd)
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 2*time.Minute)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	target := func() string {
		p, err := filepath.EvalSymlinks(current)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i, d := range []struct {
		name   string
		damage func()
	}{
		{"truncated PEM", func() {
			p := target()
			b, _ := os.ReadFile(p)
			if err := os.WriteFile(p, b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage", func() {
			if err := os.WriteFile(target(), []byte("garbage\x00\xff"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"key not the certificate's", func() {
			p := target()
			b, _ := os.ReadFile(p)
			var certs []byte
			for rest := b; ; {
				var blk *pem.Block
				if blk, rest = pem.Decode(rest); blk == nil {
					break
				}
				if blk.Type == "CERTIFICATE" {
					certs = append(certs, pem.EncodeToMemory(blk)...)
				}
			}
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			der, _ := x509.MarshalECPrivateKey(key)
			if err := os.WriteFile(p, append(certs, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})...), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"current link to a directory", func() {
			d := filepath.Join(certDir, "a-directory")
			if err := os.MkdirAll(d, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(current); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(d, current); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		d.damage()
		before, _ := cp.NodeCSRs(t.Context(), name)
		b := startBootstrapAgent(t, cp, name, dir, ctrd)
		waitCSRs(t, cp, name, time.Minute, "one more issued", func(c []certificatesv1.CertificateSigningRequest) bool {
			return len(c) == len(before)+1 && issued(c[len(c)-1])
		})
		framework.WaitReady(t.Context(), t, cp.AdminClient, name, time.Minute)
		st := waitCertStatus(t, b, 30*time.Second, "a valid certificate", func(s clientCertStatus) bool { return s.NotAfter != "" })
		aside, _ := filepath.Glob(current + ".damaged-*")
		if len(aside) != i+1 {
			t.Errorf("%s: moved aside %v, want %d entries", d.name, aside, i+1)
		}
		if !strings.Contains(st.Damaged, "moved aside to "+current+".damaged-") {
			t.Errorf("%s: clientCertificate.damaged = %q", d.name, st.Damaged)
		}
		log := b.Logs()
		log = log[strings.LastIndex(log, "\n=== ")+1:]
		if n := strings.Count(log, "Damaged client certificate moved aside"); n != 1 {
			t.Errorf("%s: %d log lines about the damaged certificate, want 1", d.name, n)
		}
		if _, err := tls.LoadX509KeyPair(current, current); err != nil {
			t.Errorf("%s: new current pair: %v", d.name, err)
		}
		if err := b.Stop(); err != nil {
			t.Errorf("%s: stop: %v", d.name, err)
		}
	}
}

// TestBootstrapCertificateExpired: a certificate that expires while neither its renewal nor a new
// bootstrap CSR is approved (both kubeadm autoapprove bindings removed) makes /healthz fail and
// `nodeagent status` exit 1 saying "client certificate expired at"; it is never reported as
// "no valid client certificate yet", nor "resolved".
func TestBootstrapCertificateExpired(t *testing.T) {
	t.Parallel()
	const name = "boot-expired"
	cp := startBootstrapControlPlane(t, time.Minute)
	ctrd := startContainerd(t, true)
	// Both autoapprove bindings go before the agent starts, so that no CSR of its can be approved
	// by kube-controller-manager; the test approves the first (bootstrap) one itself.
	for _, b := range []string{framework.SelfNodeAutoapproveBinding, framework.NodeAutoapproveBinding} {
		if err := cp.DeleteBootstrapBinding(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	a := startBootstrapAgent(t, cp, name, dir, ctrd)
	csrs := waitCSRs(t, cp, name, time.Minute, "one filed", func(c []certificatesv1.CertificateSigningRequest) bool { return len(c) >= 1 })
	if !strings.HasPrefix(csrs[0].Spec.Username, "system:bootstrap:") {
		t.Fatalf("first CSR %s, want one filed with the bootstrap token", framework.DescribeCSR(csrs[0]))
	}
	if err := cp.ApproveCSR(t.Context(), csrs[0].Name, "TestBootstrapCertificateExpired"); err != nil {
		t.Fatal(err)
	}
	first := csrs[0].Name
	csrs = waitCSRs(t, cp, name, 30*time.Second, "the approved one issued", func(c []certificatesv1.CertificateSigningRequest) bool {
		return len(c) >= 1 && c[0].Name == first && issued(c[0])
	})
	notAfter := issuedCert(t, csrs[0]).NotAfter
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 2*time.Minute)
	time.Sleep(time.Until(notAfter) + 2*time.Second)
	st := waitCertStatus(t, a, 30*time.Second, "expired", func(s clientCertStatus) bool {
		return strings.Contains(s.Problem, "client certificate expired at")
	})
	if !strings.Contains(st.Problem, "refused") {
		t.Errorf("clientCertificate.problem = %q, want it to say requests are refused", st.Problem)
	}
	checkProblemReported(t, a, "the client certificate expired", "client certificate expired at")
	if strings.Contains(a.Logs(), "Client certificate problem resolved") {
		t.Errorf("\"Client certificate problem resolved\" logged while the certificate expired unrenewed")
	}
	csrs, err := cp.NodeCSRs(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csrs {
		if c.Name != first && issued(c) {
			t.Errorf("CSR %s was issued: only the first was approved", framework.DescribeCSR(c))
		}
	}
}

// TestBootstrapDiskFull: with --cert-dir on a full filesystem (a small tmpfs filled up), the agent
// joins with the certificate issued for its one CSR, used from memory: no further CSR, no empty .pem,
// and /debug/nodestatus and the store metric say "no space left on device". Once there is room, the
// certificate is stored and the current link points at it.
func TestBootstrapDiskFull(t *testing.T) {
	t.Parallel()
	const name = "boot-disk-full"
	cp := startBootstrapControlPlane(t, 0)
	ctrd := startContainerd(t, true)
	dir := t.TempDir()
	certDir := filepath.Join(dir, "pki")
	filler := fulldisk.Mount(t, certDir)

	a := framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
		Dir: dir, NodeName: name, Kubeconfig: filepath.Join(dir, "node.kubeconfig"), RuntimeEndpoint: ctrd.Endpoint,
		Args: []string{"--bootstrap-kubeconfig=" + cp.BootstrapKubeconfig(), "--rotate-certificates=true", "--cert-dir=" + certDir},
	})
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 2*time.Minute)
	st := waitCertStatus(t, a, 30*time.Second, "the store error", func(s clientCertStatus) bool { return s.StoreError != "" })
	if !strings.Contains(st.StoreError, "no space left on device") {
		t.Errorf("clientCertificate.storeError = %q, want \"no space left on device\"", st.StoreError)
	}
	time.Sleep(15 * time.Second) // a retry per check period; client-go alone would make a CSR per backoff step
	if csrs, _ := cp.NodeCSRs(t.Context(), name); len(csrs) != 1 {
		t.Errorf("%d CSRs with the disk full, want 1", len(csrs))
	}
	if left, _ := filepath.Glob(filepath.Join(certDir, "nodeagent-client-*")); len(left) != 0 {
		t.Errorf("left in the full cert dir: %v", left)
	}
	m, err := a.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v := m.Value("nodeagent_certificate_manager_client_errors_total", map[string]string{"reason": "store"}); v < 1 {
		t.Errorf("nodeagent_certificate_manager_client_errors_total{reason=store} = %v, want >= 1", v)
	}
	if out, _ := runStatus(t, a); !strings.Contains(out, "not stored") || !strings.Contains(out, "no space left on device") {
		t.Errorf("nodeagent status does not say the certificate is not stored:\n%s", out)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitCertStatus(t, a, 30*time.Second, "stored", func(s clientCertStatus) bool { return s.StoreError == "" })
	if _, err := tls.LoadX509KeyPair(filepath.Join(certDir, currentPEM), filepath.Join(certDir, currentPEM)); err != nil {
		t.Errorf("current pair after freeing space: %v", err)
	}
	if csrs, _ := cp.NodeCSRs(t.Context(), name); len(csrs) != 1 {
		t.Errorf("%d CSRs, want 1", len(csrs))
	}
}

// selfSignedCAPEM is a CA certificate that signed nothing the control plane uses.
func selfSignedCAPEM(t *testing.T) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestBootstrapCertificateRefused: a stored certificate that has not expired but is signed by a CA the
// API server does not trust for clients (the cluster CA replaced) is reported as refused: /healthz
// fails, and /debug/nodestatus and `nodeagent status` say "client certificate refused" with the 401s.
func TestBootstrapCertificateRefused(t *testing.T) {
	t.Parallel()
	const name = "boot-refused"
	cp := startBootstrapControlPlane(t, 0)
	ctrd := startContainerd(t, true)
	dir := t.TempDir()
	certDir := filepath.Join(dir, "root", "pki")
	if err := os.MkdirAll(certDir, 0o750); err != nil {
		t.Fatal(err)
	}
	// A node certificate from another CA, stored as the agent stores its own.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject:   pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pair := filepath.Join(certDir, "nodeagent-client-2026-01-01-00-00-00.pem")
	if err := os.WriteFile(pair, append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...), 0o600); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(certDir, currentPEM)
	if err := os.Symlink(pair, current); err != nil {
		t.Fatal(err)
	}
	kc := writeBadBootstrapKubeconfig(t, cp, filepath.Join(dir, "node.kubeconfig"), func(_, user string, c *clientcmdapi.Config) {
		c.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: current, ClientKey: current}
	})
	a := framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
		Dir: dir, NodeName: name, Kubeconfig: kc, RuntimeEndpoint: ctrd.Endpoint,
		Args: []string{"--bootstrap-kubeconfig=" + cp.BootstrapKubeconfig(), "--rotate-certificates=true"},
	})
	st := waitCertStatus(t, a, time.Minute, "the certificate refused", func(s clientCertStatus) bool {
		return strings.Contains(s.Problem, "client certificate refused")
	})
	if !strings.Contains(st.Problem, "401 Unauthorized") || !strings.Contains(st.Problem, "another-ca") {
		t.Errorf("clientCertificate.problem = %q, want the 401s and the issuer", st.Problem)
	}
	checkProblemReported(t, a, "the certificate refused", "client certificate refused")
}
