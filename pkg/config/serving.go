package config

import (
	"net"
	"time"

	"github.com/spf13/pflag"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver/authdefaults"
)

// DefaultKubeletPort is the kubelet's --port: its API (pkg/kubeletserver) listens there.
const DefaultKubeletPort = 10250

// setServingDefaults fills the kubelet's API fields with the kubelet's v1beta1 defaults: address
// 0.0.0.0, port 10250, and authdefaults.Set's (anonymous requests refused, TokenReview on cached
// 2 m, authorization Webhook with allowed answers cached 5 m and denied 30 s).
func setServingDefaults(c *NodeAgentConfiguration) {
	if c.Address == "" {
		c.Address = "0.0.0.0"
	}
	if c.Port == nil {
		c.Port = ptr.To[int32](DefaultKubeletPort)
	}
	authdefaults.Set(&c.Authentication, &c.Authorization)
}

// bindServingFlags adds the kubelet's flags of its API server, with the kubelet's names.
func bindServingFlags(c *NodeAgentConfiguration, fs *pflag.FlagSet) {
	fs.StringVar(&c.Address, "address", c.Address, "The IP address the kubelet's API (logs, exec, attach, port-forward, /pods) is served on (0.0.0.0 or :: for every interface).")
	fs.Int32Var(c.Port, "port", *c.Port, "The port of the kubelet's API, reported in status.daemonEndpoints.kubeletEndpoint.Port; 0 disables it (the kubelet has no such setting).")
	fs.StringVar(&c.TLSCertFile, "tls-cert-file", c.TLSCertFile, "File containing the x509 serving certificate of the kubelet's API (CA certificates after it). Without it and --tls-private-key-file, a self-signed certificate and key are made in --cert-dir, as the kubelet makes them.")
	fs.StringVar(&c.TLSPrivateKeyFile, "tls-private-key-file", c.TLSPrivateKeyFile, "File containing the x509 private key matching --tls-cert-file.")
	fs.BoolVar(&c.ServerTLSBootstrap, "rotate-server-certificates", c.ServerTLSBootstrap, "Request the serving certificate of the kubelet's API from the cluster (a kubernetes.io/kubelet-serving CertificateSigningRequest for the Node's addresses, which the cluster must approve) and renew it as it nears expiry.")
	fs.BoolVar(c.Authentication.Anonymous.Enabled, "anonymous-auth", *c.Authentication.Anonymous.Enabled, "Let requests that no other method authenticates through as system:anonymous (group system:unauthenticated).")
	fs.BoolVar(c.Authentication.Webhook.Enabled, "authentication-token-webhook", *c.Authentication.Webhook.Enabled, "Authenticate bearer tokens with the TokenReview API.")
	fs.DurationVar(&c.Authentication.Webhook.CacheTTL.Duration, "authentication-token-webhook-cache-ttl", c.Authentication.Webhook.CacheTTL.Duration, "How long TokenReview answers are cached.")
	fs.StringVar(&c.Authentication.X509.ClientCAFile, "client-ca-file", c.Authentication.X509.ClientCAFile, "Authenticate a request presenting a client certificate signed by one of these authorities as the certificate's CommonName (user) and Organizations (groups).")
	fs.StringVar((*string)(&c.Authorization.Mode), "authorization-mode", string(c.Authorization.Mode), "Authorization mode of the kubelet's API: AlwaysAllow or Webhook (SubjectAccessReview).")
	fs.DurationVar(&c.Authorization.Webhook.CacheAuthorizedTTL.Duration, "authorization-webhook-cache-authorized-ttl", c.Authorization.Webhook.CacheAuthorizedTTL.Duration, "How long allowed SubjectAccessReview answers are cached.")
	fs.DurationVar(&c.Authorization.Webhook.CacheUnauthorizedTTL.Duration, "authorization-webhook-cache-unauthorized-ttl", c.Authorization.Webhook.CacheUnauthorizedTTL.Duration, "How long denied SubjectAccessReview answers are cached.")
}

// validateServing checks the kubelet's API fields.
func validateServing(c *NodeAgentConfiguration, add func(field string, value any, format string, args ...any)) {
	if net.ParseIP(c.Address) == nil {
		add("address", c.Address, "must be an IP address")
	}
	if c.Port != nil && (*c.Port < 0 || *c.Port > 65535) {
		add("port", *c.Port, "must be between 0 and 65535")
	}
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		add("tlsCertFile/tlsPrivateKeyFile", c.TLSCertFile+"/"+c.TLSPrivateKeyFile, "give both or neither")
	}
	switch c.Authorization.Mode {
	case kubeletconfig.KubeletAuthorizationModeAlwaysAllow, kubeletconfig.KubeletAuthorizationModeWebhook:
	default:
		add("authorization.mode", c.Authorization.Mode, "must be %s or %s", kubeletconfig.KubeletAuthorizationModeAlwaysAllow, kubeletconfig.KubeletAuthorizationModeWebhook)
	}
	for field, d := range map[string]time.Duration{
		"authentication.webhook.cacheTTL": c.Authentication.Webhook.CacheTTL.Duration, "authorization.webhook.cacheAuthorizedTTL": c.Authorization.Webhook.CacheAuthorizedTTL.Duration,
		"authorization.webhook.cacheUnauthorizedTTL": c.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
	} {
		if d < 0 {
			add(field, d, "must not be negative")
		}
	}
}
