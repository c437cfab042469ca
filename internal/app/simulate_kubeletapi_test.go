package app

import (
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
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// testCAPEM is a self-signed CA certificate in PEM.
func testCAPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// fakeListener is a net.Listener that only closes.
type fakeListener struct{ net.Listener }

func (fakeListener) Close() error { return nil }

// TestSimulateKubeletAPIDefaults (issue 47): `nodeagent simulate` serves the kubelet API by default
// (--port 10250) wherever it can, with a kubelet's choices for what is not given: the node IP of the
// default route's interface, the listeners on it, the client CA of kube-system's
// extension-apiserver-authentication ConfigMap. What this machine or cluster cannot give turns it off
// with the reason (kubeletAPIUnavailable, logged in one line); a bad flag is an error naming it.
func TestSimulateKubeletAPIDefaults(t *testing.T) {
	caPEM := testCAPEM(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, []byte(caPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	authCM := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, Data: data}
	}
	hostIP := net.ParseIP("192.0.2.7")
	for _, tc := range []struct {
		desc      string
		args      []string
		configMap *corev1.ConfigMap
		chooseErr error
		taken     int // a port the listen probe refuses (0: none)
		// Want: the node IP, the address listened on, the first port, whether client certificates are
		// asked for; or unavailable (off, with a reason containing err), or an error containing err.
		nodeIP, address string
		port            int
		clientCerts     bool
		unavailable     bool
		err             string
	}{
		{desc: "defaults: the default route's address, the ConfigMap's CA", configMap: authCM(map[string]string{"client-ca-file": caPEM}),
			nodeIP: "192.0.2.7", address: "192.0.2.7", port: 10250, clientCerts: true},
		{desc: "--client-ca-file given: no ConfigMap needed", args: []string{"--client-ca-file=" + caFile},
			nodeIP: "192.0.2.7", address: "192.0.2.7", port: 10250, clientCerts: true},
		{desc: "--node-ip and --port given, --address 0.0.0.0 explicit", args: []string{"--node-ip=198.18.0.1", "--port=20000", "--address=0.0.0.0"},
			configMap: authCM(map[string]string{"client-ca-file": caPEM}), nodeIP: "198.18.0.1", address: "0.0.0.0", port: 20000, clientCerts: true},
		{desc: "--address given: the node IP", args: []string{"--address=198.18.0.2"}, configMap: authCM(map[string]string{"client-ca-file": caPEM}),
			nodeIP: "198.18.0.2", address: "198.18.0.2", port: 10250, clientCerts: true},
		{desc: "no default route", chooseErr: errors.New("no default route"), configMap: authCM(map[string]string{"client-ca-file": caPEM}),
			unavailable: true, err: "no --node-ip, and the kubelet's choice (the address of the default route's interface) found none: no default route"},
		{desc: "no ConfigMap", unavailable: true,
			err: `no --client-ca-file, and the cluster's client CA ("client-ca-file" of ConfigMap kube-system/extension-apiserver-authentication) cannot be read`},
		{desc: "the ConfigMap without the client CA", configMap: authCM(map[string]string{"requestheader-client-ca-file": caPEM}), unavailable: true,
			err: "is not there: the API server runs without --client-ca-file"},
		{desc: "the ConfigMap's CA not PEM", configMap: authCM(map[string]string{"client-ca-file": "junk"}), unavailable: true,
			err: `of ConfigMap kube-system/extension-apiserver-authentication)`},
		{desc: "a port taken", args: []string{"--nodes=5"}, configMap: authCM(map[string]string{"client-ca-file": caPEM}), taken: 10253, unavailable: true,
			err: "the shard's 5 Nodes take ports 10250 to 10254 of 192.0.2.7: port 10253 taken"},
		{desc: "a bad --node-ip", args: []string{"--node-ip=sim"}, err: `--node-ip "sim"`},
		{desc: "ports beyond 65535", args: []string{"--port=65530", "--nodes=10"}, configMap: authCM(map[string]string{"client-ca-file": caPEM}),
			err: "--port 65530: the shard's 10 Nodes take ports 65530 to 65539"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			o, fs := simulateFlags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.agent.Flags = fs
			client := fake.NewClientset()
			if tc.configMap != nil {
				client = fake.NewClientset(tc.configMap)
			}
			host := kubeletAPIHost{
				chooseHostIP: func() (net.IP, error) { return hostIP, tc.chooseErr },
				listen: func(address string, port int) (net.Listener, error) {
					if port == tc.taken {
						return nil, errors.New("port 10253 taken")
					}
					return fakeListener{}, nil
				},
			}
			k, err := buildSimulateKubeletAPI(t.Context(), o, client, host)
			var unavailable *kubeletAPIUnavailable
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if got := errors.As(err, &unavailable); got != tc.unavailable {
					t.Errorf("error %v: unavailable (off, going on) %v, want %v", err, got, tc.unavailable)
				}
				return
			case err != nil:
				t.Fatalf("error %v", err)
			}
			if k.NodeIP.String() != tc.nodeIP || k.Address != tc.address || k.FirstPort != tc.port {
				t.Errorf("node IP %s, address %s, port %d; want %s, %s, %d", k.NodeIP, k.Address, k.FirstPort, tc.nodeIP, tc.address, tc.port)
			}
			if got := k.TLS.ClientAuth == tls.RequestClientCert; got != tc.clientCerts {
				t.Errorf("client certificates asked for: %v, want %v", got, tc.clientCerts)
			}
		})
	}
}

// TestSimulateKubeletAPIOff: --port=0 serves nothing and asks nothing of the host.
func TestSimulateKubeletAPIOff(t *testing.T) {
	o, fs := simulateFlags()
	if err := fs.Parse([]string{"--port=0"}); err != nil {
		t.Fatal(err)
	}
	o.agent.Flags = fs
	host := kubeletAPIHost{chooseHostIP: func() (net.IP, error) { t.Error("node IP chosen with --port=0"); return nil, nil }}
	k, err := simulateKubeletAPI(t.Context(), o, nil, host)
	if k != nil || err != nil {
		t.Errorf("--port=0: %v, %v; want nil, nil", k, err)
	}
}
