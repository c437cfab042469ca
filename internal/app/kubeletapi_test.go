package app

import (
	"crypto/tls"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

// TestKubeletAPICertificateError: a serving certificate that expires while the agent runs fails
// /healthz and records one Warning Event per expiry.
func TestKubeletAPICertificateError(t *testing.T) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("n1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var events []string
	k := &kubeletAPI{now: func() time.Time { return now }, onExpired: func(m string) { events = append(events, m) }}
	if err := k.certificateError(); err != nil {
		t.Fatalf("not set up yet: %v", err)
	}
	k.served.Store(&serving{getCertificate: kubeletserver.StaticCertificate(&cert)})
	if err := k.certificateError(); err != nil {
		t.Fatalf("a valid certificate: %v", err)
	}
	now = now.Add(2 * 365 * 24 * time.Hour) // past the self-signed year
	for range 3 {
		if err := k.certificateError(); err == nil {
			t.Fatal("an expired certificate: no error")
		}
	}
	if len(events) != 1 {
		t.Errorf("events %q, want one ServingCertificateExpired", events)
	}
}
