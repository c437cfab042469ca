// Package authdefaults is the one copy of the defaults of the kubelet's API authentication and
// authorization: the part of the kubelet's SetDefaults_KubeletConfiguration
// (k8s.io/kubernetes pkg/kubelet/apis/config/v1beta1/defaults.go, v1.37.2) for
// KubeletConfiguration.Authentication and .Authorization. pkg/kubeletserver (DefaultAuthentication,
// DefaultAuthorization, BuildAuth) and pkg/config (the agent's configuration file and flags) both
// take them from here; it is a leaf, so that pkg/config does not link pkg/kubeletserver.
package authdefaults

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// The kubelet's defaults: bearer tokens through TokenReview cached WebhookCacheTTL, authorization
// by SubjectAccessReview with allowed answers cached CacheAuthorizedTTL and denied ones
// CacheUnauthorizedTTL; anonymous requests refused.
const (
	WebhookCacheTTL      = 2 * time.Minute
	CacheAuthorizedTTL   = 5 * time.Minute
	CacheUnauthorizedTTL = 30 * time.Second
)

// Set fills the unset fields of authn and authz (nil pointers, zero durations, an empty mode) as the
// kubelet's SetDefaults_KubeletConfiguration does: anonymous.enabled false, webhook.enabled true,
// webhook.cacheTTL 2 m; mode Webhook, webhook.cacheAuthorizedTTL 5 m, cacheUnauthorizedTTL 30 s.
// Either may be nil.
func Set(authn *kubeletconfig.KubeletAuthentication, authz *kubeletconfig.KubeletAuthorization) {
	if authn != nil {
		if authn.Anonymous.Enabled == nil {
			authn.Anonymous.Enabled = ptr.To(false)
		}
		if authn.Webhook.Enabled == nil {
			authn.Webhook.Enabled = ptr.To(true)
		}
		if authn.Webhook.CacheTTL.Duration == 0 {
			authn.Webhook.CacheTTL = metav1.Duration{Duration: WebhookCacheTTL}
		}
	}
	if authz != nil {
		if authz.Mode == "" {
			authz.Mode = kubeletconfig.KubeletAuthorizationModeWebhook
		}
		if authz.Webhook.CacheAuthorizedTTL.Duration == 0 {
			authz.Webhook.CacheAuthorizedTTL = metav1.Duration{Duration: CacheAuthorizedTTL}
		}
		if authz.Webhook.CacheUnauthorizedTTL.Duration == 0 {
			authz.Webhook.CacheUnauthorizedTTL = metav1.Duration{Duration: CacheUnauthorizedTTL}
		}
	}
}
