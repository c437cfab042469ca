package framework

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// FrontProxyArgs writes kubeadm's front-proxy PKI into dir (front-proxy-ca.crt, and the client
// certificate front-proxy-client.crt/.key signed by it, CN front-proxy-client) and returns the
// kube-apiserver flags kubeadm gives it for the aggregation layer (--requestheader-*,
// --proxy-client-cert-file, --proxy-client-key-file), plus --enable-aggregator-routing=true: the
// test clusters have no kube-proxy, so the API server dials an aggregated API server's endpoint
// address instead of its Service's cluster IP. Pass them in ControlPlaneOptions.ExtraAPIServerArgs.
func FrontProxyArgs(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("front-proxy pki: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("front-proxy CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("front-proxy CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("front-proxy CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("front-proxy client key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "front-proxy-client"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("front-proxy client certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("front-proxy client key: %w", err)
	}
	caFile, certFile, keyFile := filepath.Join(dir, "front-proxy-ca.crt"), filepath.Join(dir, "front-proxy-client.crt"), filepath.Join(dir, "front-proxy-client.key")
	for _, f := range []struct {
		path string
		typ  string
		der  []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", der}, {keyFile, "PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return nil, fmt.Errorf("front-proxy pki: %w", err)
		}
	}
	return []string{
		"--requestheader-client-ca-file=" + caFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + certFile,
		"--proxy-client-key-file=" + keyFile,
		"--enable-aggregator-routing=true",
	}, nil
}

// HostIP returns the first IPv4 address of this machine's interfaces that is not loopback: an
// EndpointSlice may not hold a loopback address, so an aggregated API server listens there.
func HostIP() (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.To4(), nil
		}
	}
	return nil, errors.New("no non-loopback IPv4 address on this machine")
}

// MetricsServer is a running metrics-server (_output/bin/metrics-server, hack/build-metrics-server.sh)
// registered as v1beta1.metrics.k8s.io through the aggregation layer.
type MetricsServer struct {
	p *process
	// LogPath is its log file; URL its HTTPS address (https://<HostIP>:<port>: /metrics, /readyz).
	LogPath, URL string
}

// PID is its process ID.
func (m *MetricsServer) PID() int { return m.p.pid() }

// StartMetricsServer starts metrics-server v0.8.0 with the flags of its release manifest
// (components.yaml: --cert-dir, --secure-port, --kubelet-preferred-address-types=InternalIP,
// ExternalIP,Hostname, --kubelet-use-node-status-port, --metric-resolution=15s) and
// --kubelet-insecure-tls (how it trusts the Nodes' serving certificates), as the admin user, listening
// on HostIP; registers it as kubeadm's clusters do (a Service kube-system/metrics-server, its
// EndpointSlice, the APIService v1beta1.metrics.k8s.io) and waits until the APIService is Available.
// cp must have been started with FrontProxyArgs. dir holds its certificates and log.
func StartMetricsServer(ctx context.Context, cp *ControlPlane, dir string, extraArgs ...string) (*MetricsServer, error) {
	ip, err := HostIP()
	if err != nil {
		return nil, fmt.Errorf("start metrics-server: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start metrics-server: %w", err)
	}
	port := FreePort()
	args := append([]string{
		"--cert-dir=" + dir, "--secure-port=" + strconv.Itoa(port), "--bind-address=" + ip.String(),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname", "--kubelet-use-node-status-port",
		"--metric-resolution=15s", "--kubelet-insecure-tls",
		"--kubeconfig=" + cp.AdminKubeconfig, "--authentication-kubeconfig=" + cp.AdminKubeconfig,
		"--authorization-kubeconfig=" + cp.AdminKubeconfig,
	}, extraArgs...)
	logPath := filepath.Join(dir, "metrics-server.log")
	p, err := startProcess("metrics-server", logPath, filepath.Join(cp.binDir, "metrics-server"), args...)
	if err != nil {
		return nil, err
	}
	ms := &MetricsServer{p: p, LogPath: logPath, URL: "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(port))}
	if err := registerMetricsAPI(ctx, cp, ip, port); err != nil {
		ms.Stop()
		return nil, fmt.Errorf("start metrics-server: %w (log: %s)", err, tail(logPath, 20))
	}
	return ms, nil
}

// Stop stops metrics-server (SIGTERM, then SIGKILL after 5 s).
func (m *MetricsServer) Stop() { _ = m.p.stop(5 * time.Second) }

func registerMetricsAPI(ctx context.Context, cp *ControlPlane, ip net.IP, port int) error {
	c := cp.AdminClient
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "metrics-server"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(port))}}},
	}
	if _, err := c.CoreV1().Services("kube-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("service: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "metrics-server", Namespace: "kube-system", Labels: map[string]string{discoveryv1.LabelServiceName: "metrics-server"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := c.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("endpointslice: %w", err)
	}
	apiService := `{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1beta1.metrics.k8s.io","labels":{"k8s-app":"metrics-server"}},
"spec":{"group":"metrics.k8s.io","version":"v1beta1","groupPriorityMinimum":100,"versionPriority":100,"insecureSkipTLSVerify":true,
"service":{"name":"metrics-server","namespace":"kube-system","port":443}}}`
	f := filepath.Join(cp.Dir, "metrics-apiservice.json")
	if err := os.WriteFile(f, []byte(apiService), 0o644); err != nil {
		return err
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", f); err != nil {
		return fmt.Errorf("kubectl apply the APIService: %w: %s", err, out)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last string
	err := WaitFor(waitCtx, time.Second, func() (bool, error) {
		out, err := cp.Kubectl(waitCtx, "get", "apiservice", "v1beta1.metrics.k8s.io", "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].message}`)
		last = out
		return err == nil && len(out) >= 4 && out[:4] == "True", nil
	})
	if err != nil {
		return fmt.Errorf("APIService v1beta1.metrics.k8s.io not Available: %w (last: %s)", err, last)
	}
	return nil
}
