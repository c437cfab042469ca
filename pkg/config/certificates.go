package config

import (
	"path/filepath"

	"github.com/spf13/pflag"
)

// bindCertificateFlags adds the kubelet's TLS bootstrap and client-certificate rotation flags.
func bindCertificateFlags(o *Options, fs *pflag.FlagSet) {
	fs.StringVar(&o.BootstrapKubeconfig, "bootstrap-kubeconfig", o.BootstrapKubeconfig,
		"Path to a kubeconfig with bootstrap credentials (a bootstrap token). When --kubeconfig does not exist or its client "+
			"certificate is missing or expired, a client certificate is requested with these credentials, stored in --cert-dir, "+
			"and --kubeconfig is written to point at it.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir,
		"Directory of the client certificate and key obtained by TLS bootstrap or rotation; default <root-dir>/pki.")
	fs.BoolVar(&o.Config.RotateCertificates, "rotate-certificates", o.Config.RotateCertificates,
		"Renew the client certificate through CertificateSigningRequests as it nears expiry, without a restart.")
}

// EffectiveCertDir is --cert-dir, or <root-dir>/pki when it is not set (the kubelet's default).
func (o *Options) EffectiveCertDir() string {
	if o.CertDir != "" {
		return o.CertDir
	}
	return filepath.Join(o.Config.RootDir, "pki")
}
