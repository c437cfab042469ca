package kubeletserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

func TestLoadCertificate(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("n1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherCert, _, err := certutil.GenerateSelfSignedCertKey("n2", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert, key, other := write("c.crt", certPEM), write("c.key", keyPEM), write("o.crt", otherCert)
	leaf, err := LoadCertificate(cert, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key string
		now             time.Time
		want            string // "" for no error
	}{
		{"valid", cert, key, time.Now(), ""},
		{"expired", cert, key, leaf.Leaf.NotAfter.Add(time.Hour), `--tls-cert-file "` + cert + `": certificate expired at `},
		{"not yet valid", cert, key, leaf.Leaf.NotBefore.Add(-time.Hour), "certificate not valid before"},
		{"missing", filepath.Join(dir, "nope.crt"), key, time.Now(), "no such file or directory"},
		{"key of another certificate", other, key, time.Now(), "private key does not match public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCertificate(tc.cert, tc.key, tc.now)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
