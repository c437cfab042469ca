package certificate

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"
)

// PairNamePrefix names the files of the store: <cert-dir>/nodeagent-client-<timestamp>.pem and the
// nodeagent-client-current.pem link (the kubelet's kubelet-client-*).
const PairNamePrefix = "nodeagent-client"

// loadClientConfig mirrors the kubelet's bootstrap.LoadClientConfig. Without bootstrapPath it loads
// kubeconfigPath. With it, and a kubeconfig whose client certificate is still valid, it loads
// kubeconfigPath for both. Otherwise it writes kubeconfigPath pointing at the store's current pair
// (server and CA from the bootstrap kubeconfig) and returns the bootstrap config as certConfig.
func loadClientConfig(kubeconfigPath, bootstrapPath, currentPath string, now time.Time) (certConfig, userConfig *restclient.Config, err error) {
	if bootstrapPath == "" {
		c, err := loadRESTClientConfig(kubeconfigPath)
		if err != nil {
			return nil, nil, fmt.Errorf("--kubeconfig %q: %w", kubeconfigPath, err)
		}
		return c, restclient.CopyConfig(c), nil
	}
	if ok, _ := clientConfigStillValid(kubeconfigPath, now); ok {
		c, err := loadRESTClientConfig(kubeconfigPath)
		if err != nil {
			return nil, nil, fmt.Errorf("--kubeconfig %q: %w", kubeconfigPath, err)
		}
		return c, restclient.CopyConfig(c), nil
	}
	bootstrapConfig, err := LoadBootstrapKubeconfig(bootstrapPath)
	if err != nil {
		return nil, nil, err
	}
	clientConfig := restclient.AnonymousClientConfig(bootstrapConfig)
	clientConfig.CertFile, clientConfig.KeyFile = currentPath, currentPath
	if err := writeKubeconfig(bootstrapConfig, kubeconfigPath, currentPath); err != nil {
		return nil, nil, fmt.Errorf("--kubeconfig %q: %w", kubeconfigPath, err)
	}
	return bootstrapConfig, clientConfig, nil
}

// LoadBootstrapKubeconfig loads the --bootstrap-kubeconfig file and checks that it has credentials
// (a token, a client certificate, basic auth, an exec or auth provider). The error names the flag.
func LoadBootstrapKubeconfig(path string) (*restclient.Config, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("--bootstrap-kubeconfig %q: %w", path, err)
	}
	c, err := loadRESTClientConfig(path)
	if err != nil {
		return nil, fmt.Errorf("--bootstrap-kubeconfig %q: %w", path, err)
	}
	if !hasCredentials(c) {
		return nil, fmt.Errorf("--bootstrap-kubeconfig %q: no credentials (token, client certificate, exec or auth provider) in its current context", path)
	}
	return c, nil
}

func hasCredentials(c *restclient.Config) bool {
	return c.BearerToken != "" || c.BearerTokenFile != "" || c.Username != "" || c.ExecProvider != nil ||
		c.AuthProvider != nil || len(c.CertData) > 0 || c.CertFile != ""
}

// writeKubeconfig mirrors the kubelet's writeKubeconfigFromBootstrapping: the bootstrap kubeconfig's
// server and CA, and a client certificate and key that are both pemPath.
func writeKubeconfig(bootstrap *restclient.Config, kubeconfigPath, pemPath string) error {
	caFile, caData := bootstrap.CAFile, []byte(nil)
	if caFile == "" {
		caData = bootstrap.CAData
	}
	return clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default-cluster": {
			Server: bootstrap.Host, InsecureSkipTLSVerify: bootstrap.Insecure,
			CertificateAuthority: caFile, CertificateAuthorityData: caData,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default",
		}},
		CurrentContext: "default-context",
	}, kubeconfigPath)
}

func loadRESTClientConfig(path string) (*restclient.Config, error) {
	loader := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	loaded, err := loader.Load()
	if err != nil {
		return nil, err
	}
	return clientcmd.NewNonInteractiveClientConfig(*loaded, loaded.CurrentContext, &clientcmd.ConfigOverrides{}, loader).ClientConfig()
}

// clientConfigStillValid mirrors the kubelet's isClientConfigStillValid: the kubeconfig exists and
// its client certificate can be read and has not expired. The error says why not.
func clientConfigStillValid(path string, now time.Time) (bool, error) {
	if path == "" {
		return false, errors.New("no kubeconfig")
	}
	c, err := loadRESTClientConfig(path)
	if err != nil {
		return false, err
	}
	certs, err := clientCertificates(c)
	if err != nil {
		return false, err
	}
	for _, cert := range certs {
		if now.After(cert.NotAfter) {
			return false, fmt.Errorf("client certificate expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return true, nil
}

// clientCertificates reads the client certificate of a REST config (files or data).
func clientCertificates(c *restclient.Config) ([]*x509.Certificate, error) {
	tc, err := c.TransportConfig()
	if err != nil {
		return nil, err
	}
	// Has the side effect of loading the certificate and key files into the config's data.
	if _, err := transport.TLSConfigFor(tc); err != nil {
		return nil, err
	}
	if len(tc.TLS.CertData) == 0 {
		return nil, errors.New("no client certificate")
	}
	certs, err := certutil.ParseCertsPEM(tc.TLS.CertData)
	if err != nil {
		return nil, err
	}
	if _, err := tls.X509KeyPair(tc.TLS.CertData, tc.TLS.KeyData); err != nil {
		return nil, err
	}
	return certs, nil
}
