package kubeletserver

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"sort"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
)

// ServingCertificateConfig configures NewServingCertificateManager.
type ServingCertificateConfig struct {
	// NodeName is the Node whose serving certificate is requested (CommonName system:node:<name>,
	// Organization system:nodes). Required.
	NodeName string
	// Client makes the CSRs (the Node's identity may create kubelet-serving CSRs for itself).
	// Required.
	Client kubernetes.Interface
	// CertDir holds kubelet-server-current.pem and the dated pairs (--cert-dir); CertFile and KeyFile,
	// when set, are where a pair is first looked for (--tls-cert-file, --tls-private-key-file).
	CertDir, CertFile, KeyFile string
	// Addresses returns the Node's last observed status.addresses; the certificate is requested for
	// its IPs and DNS names, and not before it has an IP.
	Addresses func() []v1.NodeAddress
}

// NewServingCertificateManager is the kubelet's NewKubeletServerCertificateManager
// (pkg/kubelet/certificate/kubelet.go; serverTLSBootstrap, --rotate-server-certificates): client-go's
// certificate manager requesting kubernetes.io/kubelet-serving certificates through CSRs for the
// Node's addresses, kept in CertDir as kubelet-server-*.pem, renewed at 70-90 % of their lifetime.
// The CSRs are approved by the cluster (no built-in approver approves kubelet-serving CSRs). Start
// it, serve with ManagerCertificate(m), Stop it at the end.
func NewServingCertificateManager(cfg ServingCertificateConfig) (certificate.Manager, error) {
	if cfg.NodeName == "" || cfg.Client == nil || cfg.Addresses == nil {
		return nil, errors.New("kubeletserver: ServingCertificateConfig needs NodeName, Client and Addresses")
	}
	store, err := certificate.NewFileStore("kubelet-server", cfg.CertDir, cfg.CertDir, cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate store: %w", err)
	}
	client := cfg.Client
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate:      servingTemplate(cfg.NodeName, cfg.Addresses),
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate manager: %w", err)
	}
	return m, nil
}

// ManagerCertificate is a getCertificate for TLSConfig from a certificate manager, the kubelet's:
// an error while it has none yet ("no serving certificate available for the kubelet").
func ManagerCertificate(m certificate.Manager) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := m.Current(); c != nil {
			return c, nil
		}
		return nil, errors.New("no serving certificate available for the kubelet")
	}
}

// servingTemplate is the kubelet's newGetTemplateFn without the AllowDNSOnlyNodeCSR gate (off by
// default): no template, so no CSR, until the Node has an IP address.
func servingTemplate(nodeName string, addresses func() []v1.NodeAddress) func() *x509.CertificateRequest {
	return func() *x509.CertificateRequest {
		dnsNames, ips := addressesToHostnamesAndIPs(addresses())
		if len(ips) == 0 {
			return nil
		}
		return &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
			DNSNames:    dnsNames,
			IPAddresses: ips,
		}
	}
}

// addressesToHostnamesAndIPs is the kubelet's: the Hostname, InternalDNS and ExternalDNS names and
// the InternalIP, ExternalIP (and IP-shaped Hostname) addresses, each once, sorted.
func addressesToHostnamesAndIPs(addresses []v1.NodeAddress) (dnsNames []string, ips []net.IP) {
	seenDNS, seenIPs := map[string]bool{}, map[string]bool{}
	for _, a := range addresses {
		if a.Address == "" {
			continue
		}
		switch a.Type {
		case v1.NodeHostName:
			if net.ParseIP(a.Address) != nil {
				seenIPs[a.Address] = true
			} else {
				seenDNS[a.Address] = true
			}
		case v1.NodeExternalIP, v1.NodeInternalIP:
			if net.ParseIP(a.Address) != nil {
				seenIPs[a.Address] = true
			}
		case v1.NodeExternalDNS, v1.NodeInternalDNS:
			seenDNS[a.Address] = true
		}
	}
	for n := range seenDNS {
		dnsNames = append(dnsNames, n)
	}
	for ip := range seenIPs {
		ips = append(ips, net.ParseIP(ip))
	}
	sort.Strings(dnsNames)
	sort.Slice(ips, func(i, j int) bool { return ips[i].String() < ips[j].String() })
	return dnsNames, ips
}
