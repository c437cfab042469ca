package integration_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestKubeletAPIServingCertificate (issue 36): with --rotate-server-certificates the agent requests
// its serving certificate as the kubelet does (a kubernetes.io/kubelet-serving CSR from
// system:node:<name> for the Node's IP), serves it once the test approves it, and requests and
// serves the next one before it expires (kube-controller-manager signing for 3 min, backdated 5 min:
// due for renewal within ~2.5 min). An expired --tls-cert-file is refused at start.
func TestKubeletAPIServingCertificate(t *testing.T) {
	t.Parallel()
	const name = "serving-cert"
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir(), NodeNames: []string{name},
		Bootstrap: &framework.BootstrapOptions{SigningDuration: 3 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)

	t.Run("expired --tls-cert-file refused", func(t *testing.T) {
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		writeExpiredCert(t, certFile, keyFile)
		bin, err := framework.BuildAgent()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), bin, "--kubeconfig="+cp.KubeconfigFor(name), "--hostname-override="+name,
			"--root-dir="+filepath.Join(dir, "root"), "--healthz-port=0", "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err = cmd.Run()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 ||
			!strings.Contains(stderr.String(), `--tls-cert-file "`+certFile+`": certificate expired at `) {
			t.Errorf("nodeagent with an expired --tls-cert-file: %v, want exit 1 naming the file and its expiry; stderr %q", err, stderr.String())
		}
	})

	c := startContainerd(t, false)
	ip := hostAddress(t)
	port := framework.FreePort()
	framework.StartTestAgent(t.Context(), t, framework.AgentOptions{Dir: t.TempDir(), NodeName: name,
		Kubeconfig: cp.KubeconfigFor(name), RuntimeEndpoint: c.Endpoint,
		Args: []string{"--rotate-server-certificates", "--address=" + ip, "--node-ip=" + ip, "--port=" + strconv.Itoa(port)}})
	caPEM, err := os.ReadFile(cp.ClusterCAFile())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)

	var serials []string
	for round := 1; round <= 2; round++ {
		// The round-th kubelet-serving CSR: for the Node's IP, from its identity; approved by the test.
		var csr certificatesv1.CertificateSigningRequest
		err := framework.WaitFor(t.Context(), 500*time.Millisecond, func() (bool, error) {
			csrs, err := servingCSRs(t.Context(), cp, name)
			if err != nil {
				return false, err
			}
			if len(csrs) < round {
				return false, nil
			}
			csr = csrs[round-1]
			return true, nil
		})
		if err != nil {
			t.Fatalf("CSR %d: %v", round, err)
		}
		req, _ := pem.Decode(csr.Spec.Request)
		cr, err := x509.ParseCertificateRequest(req.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if csr.Spec.Username != "system:node:"+name || !slices.ContainsFunc(cr.IPAddresses, func(a net.IP) bool { return a.String() == ip }) {
			t.Errorf("CSR %d: user %s, IPs %v; want system:node:%s and %s", round, csr.Spec.Username, cr.IPAddresses, name, ip)
		}
		if err := cp.ApproveCSR(t.Context(), csr.Name, "TestKubeletAPIServingCertificate"); err != nil {
			t.Fatal(err)
		}
		// The served certificate: the cluster CA's, for the IP, a new one each round.
		err = framework.WaitFor(t.Context(), 500*time.Millisecond, func() (bool, error) {
			conn, err := tls.Dial("tcp", net.JoinHostPort(ip, strconv.Itoa(port)), &tls.Config{RootCAs: roots, ServerName: ip})
			if err != nil {
				return false, err
			}
			defer conn.Close()
			leaf := conn.ConnectionState().PeerCertificates[0]
			serial := leaf.SerialNumber.String()
			if slices.Contains(serials, serial) {
				return false, errors.New("still the previous certificate")
			}
			serials = append(serials, serial)
			t.Logf("round %d: serving %s, valid until %s", round, serial, leaf.NotAfter.Format(time.RFC3339))
			return true, nil
		})
		if err != nil {
			t.Fatalf("round %d: the approved certificate is not served: %v", round, err)
		}
	}
}

// servingCSRs lists the kubelet-serving CSRs of system:node:<name>, oldest first.
func servingCSRs(ctx context.Context, cp *framework.ControlPlane, name string) ([]certificatesv1.CertificateSigningRequest, error) {
	list, err := cp.AdminClient.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		if c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:"+name {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b certificatesv1.CertificateSigningRequest) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out, nil
}

// writeExpiredCert writes a self-signed certificate that expired an hour ago, and its key.
func writeExpiredCert(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "expired"},
		NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
}
