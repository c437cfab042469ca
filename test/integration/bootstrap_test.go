package integration_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/test/framework"
)

// startBootstrapControlPlane starts a control plane of the test's own in bootstrap mode (kubeadm's
// TLS bootstrap set-up) with the given --cluster-signing-duration.
func startBootstrapControlPlane(t *testing.T, signing time.Duration) *framework.ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir(),
		Bootstrap: &framework.BootstrapOptions{SigningDuration: signing}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	return cp
}

// startBootstrapAgent starts nodeagent with only a bootstrap kubeconfig (--kubeconfig does not exist
// yet in dir) and --rotate-certificates.
func startBootstrapAgent(t *testing.T, cp *framework.ControlPlane, name, dir string, c *framework.Containerd) *framework.Agent {
	t.Helper()
	return framework.StartTestAgent(t.Context(), t, framework.AgentOptions{
		Dir: dir, NodeName: name, Kubeconfig: filepath.Join(dir, "node.kubeconfig"), RuntimeEndpoint: c.Endpoint,
		Args: []string{"--bootstrap-kubeconfig=" + cp.BootstrapKubeconfig(), "--rotate-certificates=true"},
	})
}

// waitCSRs waits until the node's CSRs satisfy cond and returns them.
func waitCSRs(t *testing.T, cp *framework.ControlPlane, name string, timeout time.Duration, what string,
	cond func([]certificatesv1.CertificateSigningRequest) bool) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last []certificatesv1.CertificateSigningRequest
	err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) {
		csrs, err := cp.NodeCSRs(ctx, name)
		if err != nil {
			return false, err
		}
		last = csrs
		return cond(csrs), nil
	})
	if err != nil {
		var desc []string
		for _, c := range last {
			desc = append(desc, framework.DescribeCSR(c))
		}
		t.Fatalf("CSRs of %s: %s not seen within %v: %v; last: %v", name, what, timeout, err, desc)
	}
	return last
}

func issued(c certificatesv1.CertificateSigningRequest) bool { return len(c.Status.Certificate) > 0 }

func issuedCert(t *testing.T, c certificatesv1.CertificateSigningRequest) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(c.Status.Certificate)
	if b == nil {
		t.Fatalf("CSR %s: no certificate", c.Name)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// waitLog waits until the agent's log matches re.
func waitLog(t *testing.T, a *framework.Agent, re *regexp.Regexp, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := framework.WaitFor(ctx, 500*time.Millisecond, func() (bool, error) { return re.MatchString(a.Logs()), nil }); err != nil {
		t.Fatalf("nodeagent %s: no log line matching %q within %v", a.NodeName, re, timeout)
	}
}

// errorLines are the klog error lines (E<mmdd> ...) of a log since the last start (the framework writes
// a "=== <time>: <command line>" line at each start of the same agent directory).
func errorLines(log string) []string {
	if i := strings.LastIndex(log, "\n=== "); i >= 0 {
		log = log[i+1:]
	}
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if len(l) > 5 && l[0] == 'E' && l[1] >= '0' && l[1] <= '9' {
			out = append(out, l)
		}
	}
	return out
}

// TestBootstrapJoinRestartRotate: started with only a bootstrap kubeconfig, the agent gets its client
// certificate from the real kube-controller-manager signer through a CSR made with the bootstrap token,
// writes it under --cert-dir and --kubeconfig pointing at it, registers as system:node:<name> (Node,RBAC +
// NodeRestriction) and is Ready. Restarted, it reuses the stored certificate (no new CSR). With
// --cluster-signing-duration=3m it then renews its certificate in the same process, through a CSR made
// as the node, while the Lease keeps being renewed and the Node stays Ready, with no error log line.
func TestBootstrapJoinRestartRotate(t *testing.T) {
	t.Parallel()
	const name = "boot-join"
	cp := startBootstrapControlPlane(t, 3*time.Minute)
	ctrd := startContainerd(t, true)
	dir := t.TempDir()
	start := time.Now()
	a := startBootstrapAgent(t, cp, name, dir, ctrd)
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 2*time.Minute)
	t.Logf("bootstrap: Ready %v after start", time.Since(start).Round(time.Millisecond))

	csrs := waitCSRs(t, cp, name, 30*time.Second, "one issued", func(c []certificatesv1.CertificateSigningRequest) bool {
		return len(c) == 1 && issued(c[0])
	})
	tokenID, _, _ := strings.Cut(cp.BootstrapToken(), ".")
	if u := csrs[0].Spec.Username; u != "system:bootstrap:"+tokenID {
		t.Errorf("bootstrap CSR %s made by %q, want system:bootstrap:%s", csrs[0].Name, u, tokenID)
	}
	first := issuedCert(t, csrs[0])
	t.Logf("bootstrap CSR %s: %s, certificate %s, valid %s to %s", csrs[0].Name, framework.DescribeCSR(csrs[0]),
		first.Subject, first.NotBefore.UTC().Format(time.TimeOnly), first.NotAfter.UTC().Format(time.TimeOnly))

	// Files: <cert-dir>/nodeagent-client-current.pem, a link to a 0600 pair, and --kubeconfig pointing at it.
	current := filepath.Join(a.RootDir, "pki", "nodeagent-client-current.pem")
	if target, err := os.Readlink(current); err != nil {
		t.Errorf("%s: %v", current, err)
	} else if fi, err := os.Stat(current); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s -> %s: mode %v, %v; want 0600", current, target, fi.Mode().Perm(), err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "node.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if u := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; u.ClientCertificate != current || u.ClientKey != current {
		t.Errorf("written kubeconfig's user %+v, want client-certificate and client-key %s", u, current)
	}
	if c := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]; c.Server != cp.APIServerURL {
		t.Errorf("written kubeconfig's server %q, want %q", c.Server, cp.APIServerURL)
	}
	// It registered as system:node:<name> (audit log: its own Node created with the node identity).
	creates, err := framework.ReadAuditEventsBy(cp.AuditLogPath, "system:node:"+name, func(e framework.AuditEvent) bool {
		return e.Is("create", "nodes", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(creates) != 1 || creates[0].Code() != 201 {
		t.Errorf("node creates by system:node:%s: %d (first code %v), want one 201", name, len(creates), creates)
	}
	if len(errorLines(a.Logs())) > 0 {
		t.Errorf("error lines while bootstrapping:\n%s", strings.Join(errorLines(a.Logs()), "\n"))
	}

	// Restart: the stored certificate is reused.
	if err := a.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	restarted := time.Now()
	a2 := startBootstrapAgent(t, cp, name, dir, ctrd)
	rctx, rcancel := context.WithTimeout(t.Context(), time.Minute)
	err = a2.WaitHTTP(rctx, "/readyz", 200)
	rcancel()
	if err != nil {
		t.Fatalf("restarted agent: %v", err)
	}
	framework.WaitLeaseRenewals(t.Context(), t, cp.AdminClient, name, 1, time.Minute)
	// Without the stored certificate, the restarted agent would bootstrap again: a CSR by the bootstrap
	// token's identity, filed at start. The rotation's CSR (the node's identity) comes at 70 % of the
	// lifetime or later, however long the restart took. Neither check depends on that time.
	renewalPoint := first.NotBefore.Add(first.NotAfter.Sub(first.NotBefore) * 7 / 10)
	all, err := cp.NodeCSRs(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	var bootstrapped, early []string
	for _, c := range all {
		if c.Spec.Username == csrs[0].Spec.Username {
			bootstrapped = append(bootstrapped, c.Name)
		}
		if c.CreationTimestamp.Time.Before(renewalPoint.Truncate(time.Second)) {
			early = append(early, c.Name)
		}
	}
	if len(bootstrapped) != 1 || len(early) != 1 {
		t.Errorf("after a restart: CSRs by %s %q, CSRs filed before the renewal point (%s) %q; want only the first bootstrap CSR in each (the stored certificate reused)",
			csrs[0].Spec.Username, bootstrapped, renewalPoint.UTC().Format(time.TimeOnly), early)
	}
	t.Logf("restart: ready %v after start, no new CSR", time.Since(restarted).Round(time.Millisecond))

	// Rotation, in this process: at 70–90 % of 8 min (3 m + 5 m backdating) after NotBefore.
	csrs = waitCSRs(t, cp, name, 4*time.Minute, "a renewal issued", func(c []certificatesv1.CertificateSigningRequest) bool {
		return len(c) >= 2 && issued(c[1])
	})
	renewal := csrs[1]
	if u := renewal.Spec.Username; u != "system:node:"+name {
		t.Errorf("renewal CSR %s made by %q, want system:node:%s", renewal.Name, u, name)
	}
	second := issuedCert(t, renewal)
	at := renewal.CreationTimestamp.Time
	t.Logf("renewal CSR %s at %.0f%% of the lifetime (%s after issue); new certificate valid to %s", renewal.Name,
		100*float64(at.Sub(first.NotBefore))/float64(first.NotAfter.Sub(first.NotBefore)), at.Sub(first.NotBefore.Add(5*time.Minute)).Round(time.Second),
		second.NotAfter.UTC().Format(time.TimeOnly))
	waitLog(t, a2, regexp.MustCompile(`Client certificate rotated, closing the connections`), 30*time.Second)
	rotated := time.Now()
	// The Lease keeps being renewed with the new certificate (connections closed and re-made), the Node Ready.
	framework.WaitLeaseRenewals(t.Context(), t, cp.AdminClient, name, 2, time.Minute)
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 10*time.Second)
	ms, err := a2.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v := ms.Value("nodeagent_certificate_manager_client_expiration_seconds", nil); int64(v) != second.NotAfter.Unix() {
		t.Errorf("nodeagent_certificate_manager_client_expiration_seconds = %v, want the new certificate's %d", v, second.NotAfter.Unix())
	}
	if v := ms.Value("nodeagent_certificate_manager_client_expiration_renew_errors_total", nil); v != 0 {
		t.Errorf("renew errors %v, want 0", v)
	}
	if l := errorLines(a2.Logs()); len(l) > 0 {
		t.Errorf("error lines around the rotation:\n%s", strings.Join(l, "\n"))
	}
	t.Logf("rotation: Lease renewed twice and Node Ready within %v after the switch", time.Since(rotated).Round(time.Second))
}

// TestBootstrapRenewalApprovalWithheld: with the selfnodeclient binding removed, a renewal CSR is not
// approved: the agent says so in its log, its pending metric and an event while the current certificate
// is valid, and renews as soon as the binding is back.
func TestBootstrapRenewalApprovalWithheld(t *testing.T) {
	t.Parallel()
	const name = "boot-withheld"
	cp := startBootstrapControlPlane(t, 3*time.Minute)
	if err := cp.DeleteBootstrapBinding(t.Context(), framework.SelfNodeAutoapproveBinding); err != nil {
		t.Fatal(err)
	}
	ctrd := startContainerd(t, true)
	a := startBootstrapAgent(t, cp, name, t.TempDir(), ctrd)
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 2*time.Minute)
	csrs := waitCSRs(t, cp, name, 4*time.Minute, "a renewal pending", func(c []certificatesv1.CertificateSigningRequest) bool {
		return len(c) >= 2 && issued(c[0]) && !issued(c[1])
	})
	first := issuedCert(t, csrs[0])
	waitLog(t, a, regexp.MustCompile(`Certificate signing request not approved yet`), time.Minute)
	framework.WaitMetrics(t.Context(), t, a, 10*time.Second, "a CSR pending", func(m *framework.Metrics) bool {
		return m.Value("nodeagent_certificate_manager_client_csr_pending_seconds", nil) >= 10
	})
	if time.Now().After(first.NotAfter) {
		t.Fatalf("the certificate expired (%s) before the problem was reported", first.NotAfter)
	}
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, time.Second)
	t.Logf("withheld: renewal pending, reported %s before expiry", time.Until(first.NotAfter).Round(time.Second))

	if err := cp.CreateBootstrapBinding(t.Context(), framework.SelfNodeAutoapproveBinding); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitLog(t, a, regexp.MustCompile(`Client certificate rotated, closing the connections`), 2*time.Minute)
	t.Logf("renewed %v after the binding was back (%s before the old certificate's expiry)",
		time.Since(back).Round(time.Second), time.Until(first.NotAfter).Round(time.Second))
	framework.WaitLeaseRenewals(t.Context(), t, cp.AdminClient, name, 1, time.Minute)
	framework.WaitReady(t.Context(), t, cp.AdminClient, name, 10*time.Second)
	events, err := framework.ListNodeEvents(t.Context(), cp.AdminClient, name)
	if err != nil {
		t.Fatal(err)
	}
	if framework.EventCount(events, "ClientCertificateProblem") == 0 {
		t.Errorf("no ClientCertificateProblem event on the Node")
	}
}
