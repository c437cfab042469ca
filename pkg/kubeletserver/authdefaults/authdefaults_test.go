package authdefaults

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func d(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }

// TestSet: unset fields take the kubelet's v1beta1 defaults; set ones are kept.
func TestSet(t *testing.T) {
	kubeletAuthn := kubeletconfig.KubeletAuthentication{
		Anonymous: kubeletconfig.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		Webhook:   kubeletconfig.KubeletWebhookAuthentication{Enabled: ptr.To(true), CacheTTL: d(2 * time.Minute)},
	}
	kubeletAuthz := kubeletconfig.KubeletAuthorization{
		Mode:    kubeletconfig.KubeletAuthorizationModeWebhook,
		Webhook: kubeletconfig.KubeletWebhookAuthorization{CacheAuthorizedTTL: d(5 * time.Minute), CacheUnauthorizedTTL: d(30 * time.Second)},
	}
	set := func() (kubeletconfig.KubeletAuthentication, kubeletconfig.KubeletAuthorization) {
		return kubeletconfig.KubeletAuthentication{
				Anonymous: kubeletconfig.KubeletAnonymousAuthentication{Enabled: ptr.To(true)},
				Webhook:   kubeletconfig.KubeletWebhookAuthentication{Enabled: ptr.To(false), CacheTTL: d(time.Second)},
				X509:      kubeletconfig.KubeletX509Authentication{ClientCAFile: "/ca.crt"},
			}, kubeletconfig.KubeletAuthorization{
				Mode:    kubeletconfig.KubeletAuthorizationModeAlwaysAllow,
				Webhook: kubeletconfig.KubeletWebhookAuthorization{CacheAuthorizedTTL: d(time.Second), CacheUnauthorizedTTL: d(2 * time.Second)},
			}
	}
	setAuthn, setAuthz := set()
	for _, tc := range []struct {
		name             string
		authn, wantAuthn kubeletconfig.KubeletAuthentication
		authz, wantAuthz kubeletconfig.KubeletAuthorization
	}{
		{name: "unset: the kubelet's defaults", wantAuthn: kubeletAuthn, wantAuthz: kubeletAuthz},
		{name: "set: kept", authn: setAuthn, authz: setAuthz, wantAuthn: setAuthn, wantAuthz: setAuthz},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Set(&tc.authn, &tc.authz)
			if !equality.Semantic.DeepEqual(tc.authn, tc.wantAuthn) {
				t.Errorf("authentication: got %+v, want %+v", tc.authn, tc.wantAuthn)
			}
			if !equality.Semantic.DeepEqual(tc.authz, tc.wantAuthz) {
				t.Errorf("authorization: got %+v, want %+v", tc.authz, tc.wantAuthz)
			}
		})
	}
	Set(nil, nil) // either may be nil
}
