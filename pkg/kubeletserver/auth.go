package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver/authdefaults"
)

// Auth authenticates and authorizes the requests to the kubelet's API of every Node of a process:
// the kubelet's KubeletAuth without its attributes getter, which is per Node (Server). One Auth is
// shared by all the Nodes of a process, so that the TokenReview and SubjectAccessReview caches are
// too (a SubjectAccessReview names the Node, so its cache entries never mix Nodes).
type Auth struct {
	// Authenticator identifies the user of a request; Authorizer decides on the attributes.
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	// clientCA reloads the client CA as it changes (Run); nil without one.
	clientCA ClientCA
}

// ClientCA is a client CA bundle that can change while the process runs, and the loop that follows
// it (Run, until ctx ends): k8s.io/apiserver's DynamicFileCAContent for a file (--client-ca-file), or
// its ConfigMapCAController for the client-ca-file of kube-system's extension-apiserver-authentication
// ConfigMap, as aggregated API servers find the cluster's client CA.
type ClientCA interface {
	dynamiccertificates.CAContentProvider
	Run(ctx context.Context, workers int)
}

// Run reloads the client CA as it changes (the kubelet's runAuthenticatorCAReload) until ctx
// ends, then returns nil; without a client CA it only waits for ctx.
func (a *Auth) Run(ctx context.Context) error {
	if a.clientCA != nil {
		a.clientCA.Run(ctx, 1)
	}
	<-ctx.Done()
	return nil
}

// DefaultAuthentication and DefaultAuthorization are the defaults of the kubelet's v1beta1
// configuration file (pkg/kubelet/apis/config/v1beta1/defaults.go): anonymous requests refused,
// bearer tokens through TokenReview cached 2 m, authorization by SubjectAccessReview, allowed
// answers cached 5 m and denied ones 30 s.
func DefaultAuthentication() kubeletconfig.KubeletAuthentication {
	var authn kubeletconfig.KubeletAuthentication
	authdefaults.Set(&authn, nil)
	return authn
}

// DefaultAuthorization is documented with DefaultAuthentication.
func DefaultAuthorization() kubeletconfig.KubeletAuthorization {
	var authz kubeletconfig.KubeletAuthorization
	authdefaults.Set(nil, &authz)
	return authz
}

// BuildAuth builds the authenticator and authorizer as the kubelet's BuildAuthn and BuildAuthz
// (cmd/kubelet/app/auth.go) do: k8s.io/apiserver's DelegatingAuthenticatorConfig (anonymous as
// authn.anonymous.enabled says, x509 client certificates against authn.x509.clientCAFile,
// TokenReview through client when authn.webhook.enabled, cached authn.webhook.cacheTTL) and, for
// authorization mode Webhook, DelegatingAuthorizerConfig (SubjectAccessReview through client,
// cached as authz.webhook says); AlwaysAllow allows every authenticated request. Unset pointers take
// DefaultAuthentication's values. It errors, naming the field, on an unreadable client CA file, a
// webhook without a client, and an unknown mode.
func BuildAuth(client kubernetes.Interface, authn kubeletconfig.KubeletAuthentication, authz kubeletconfig.KubeletAuthorization) (*Auth, error) {
	return buildAuth(client, authn, authz, nil)
}

// BuildAuthWithClientCA is BuildAuth with client certificates verified against ca instead of
// authn.x509.clientCAFile (which it ignores); Auth.Run runs ca. A nil ca errors.
func BuildAuthWithClientCA(client kubernetes.Interface, authn kubeletconfig.KubeletAuthentication, authz kubeletconfig.KubeletAuthorization, ca ClientCA) (*Auth, error) {
	if ca == nil {
		return nil, errors.New("authentication.x509: no client CA provided")
	}
	return buildAuth(client, authn, authz, ca)
}

func buildAuth(client kubernetes.Interface, authn kubeletconfig.KubeletAuthentication, authz kubeletconfig.KubeletAuthorization, ca ClientCA) (*Auth, error) {
	def := DefaultAuthentication()
	if authn.Anonymous.Enabled == nil {
		authn.Anonymous.Enabled = def.Anonymous.Enabled
	}
	if authn.Webhook.Enabled == nil {
		authn.Webhook.Enabled = def.Webhook.Enabled
	}
	a := &Auth{}
	cfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous: &apiserver.AnonymousAuthConfig{Enabled: *authn.Anonymous.Enabled},
		CacheTTL:  authn.Webhook.CacheTTL.Duration,
	}
	if ca == nil && authn.X509.ClientCAFile != "" {
		f, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", authn.X509.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("authentication.x509.clientCAFile %q: %w", authn.X509.ClientCAFile, err)
		}
		ca = f
	}
	if ca != nil {
		a.clientCA = ca
		cfg.ClientCertificateCAContentProvider = ca
	}
	if *authn.Webhook.Enabled {
		if client == nil {
			return nil, errors.New("authentication.webhook.enabled: no client provided, cannot use webhook authentication")
		}
		cfg.WebhookRetryBackoff = webhookRetryBackoff()
		cfg.TokenAccessReviewClient = client.AuthenticationV1()
	}
	var err error
	if a.Authenticator, _, err = cfg.New(); err != nil {
		return nil, fmt.Errorf("authentication: %w", err)
	}
	switch authz.Mode {
	case kubeletconfig.KubeletAuthorizationModeAlwaysAllow:
		a.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	case kubeletconfig.KubeletAuthorizationModeWebhook:
		if client == nil {
			return nil, errors.New("authorization.mode Webhook: no client provided, cannot use webhook authorization")
		}
		if a.Authorizer, err = (authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: client.AuthorizationV1(),
			AllowCacheTTL:             authz.Webhook.CacheAuthorizedTTL.Duration,
			DenyCacheTTL:              authz.Webhook.CacheUnauthorizedTTL.Duration,
			WebhookRetryBackoff:       webhookRetryBackoff(),
		}).New(); err != nil {
			return nil, fmt.Errorf("authorization: %w", err)
		}
	case "":
		return nil, errors.New("authorization.mode: no authorization mode specified")
	default:
		return nil, fmt.Errorf("authorization.mode %q: unknown authorization mode (want AlwaysAllow or Webhook)", authz.Mode)
	}
	return a, nil
}

// RequestAttributes returns the authorization attributes of a request to Node nodeName's API, the
// kubelet's nodeAuthorizerAttributesGetter.GetRequestAttributes with KubeletFineGrainedAuthz on
// (locked on since 1.36): resource nodes, name nodeName, verb from the method (POST create, GET get,
// PUT update, PATCH patch, DELETE delete), and one attribute per subresource of the path's root in
// the route table (webServices; tried in order): pods then proxy for /pods, /allocatedPods and
// /runningpods/; healthz then proxy for /healthz; configz then proxy for /configz; stats for /stats/,
// metrics for /metrics, log for /logs/, checkpoint for /checkpoint/, statusz for /statusz, configz
// for /flagz; proxy for every other path (exec, attach, portForward, run, containerLogs).
func RequestAttributes(nodeName string, u user.Info, r *http.Request) []authorizer.Attributes {
	var verb string
	switch r.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodGet:
		verb = "get"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	p := r.URL.Path
	subresources := defaultSubresources
	if ws, _, ok := webServiceOf(p); ok {
		subresources = ws.subresources
	}
	attrs := make([]authorizer.Attributes, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, authorizer.AttributesRecord{
			User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: sub, Name: nodeName,
			ResourceRequest: true, Path: p,
		})
	}
	return attrs
}

// filter is the kubelet's InstallAuthFilter: 401 "Unauthorized" when the request is not
// authenticated, 500 on an authorization error, 403 with the kubelet's message when no subresource
// is allowed, else next.
func (a *Auth) filter(nodeName string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		info, ok, err := a.Authenticator.AuthenticateRequest(r)
		if err != nil {
			logger.V(2).Info("Unable to authenticate the request due to an error", "node", nodeName, "err", err)
			writeErrorString(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		if !ok {
			writeErrorString(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		attrs := RequestAttributes(nodeName, info.User, r)
		subresources := make([]string, 0, len(attrs))
		allowed := false
		for _, attr := range attrs {
			subresources = append(subresources, attr.GetSubresource())
			decision, _, err := a.Authorizer.Authorize(r.Context(), attr)
			if err != nil {
				logger.Error(err, "Authorization error", "user", attr.GetUser().GetName(), "verb", attr.GetVerb(), "resource", attr.GetResource(), "subresource", attr.GetSubresource())
				writeErrorString(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
					attr.GetUser().GetName(), attr.GetVerb(), attr.GetResource(), attr.GetSubresource()))
				return
			}
			if decision == authorizer.DecisionAllow {
				allowed = true
				break
			}
		}
		if !allowed {
			logger.V(2).Info("Forbidden", "node", nodeName, "user", attrs[0].GetUser().GetName(), "verb", attrs[0].GetVerb(), "subresource(s)", subresources)
			writeErrorString(w, http.StatusForbidden, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n",
				attrs[0].GetUser().GetName(), attrs[0].GetVerb(), attrs[0].GetResource(), subresources))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// webhookRetryBackoff is k8s.io/apiserver/pkg/server/options.DefaultAuthWebhookRetryBackoff, which
// the kubelet passes to both webhooks (copied: that package would link etcd's client in): 5 tries,
// 500 ms growing 1.5 times, 20 % jitter.
func webhookRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}
