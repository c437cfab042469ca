package framework

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootstrapOptions sets a control plane up for TLS bootstrap as kubeadm does: a cluster CA that the API
// server trusts for client certificates (--client-ca-file) and kube-controller-manager signs with,
// --enable-bootstrap-token-auth, a bootstrap token Secret in kube-system, kube-controller-manager's
// csrsigning, csrapproving, csrcleaner, bootstrapsigner and tokencleaner controllers, and kubeadm's three
// ClusterRoleBindings.
type BootstrapOptions struct {
	// SigningDuration is kube-controller-manager's --cluster-signing-duration; 0 keeps its default (1 year).
	// The signer backdates certificates by 5 min, so a 3 m certificate is due for renewal within ~2.5 min.
	SigningDuration time.Duration
}

type bootstrapState struct {
	tokenID, tokenSecret string
	kubeconfig           string
	caFile, caKeyFile    string
}

// Names of kubeadm's ClusterRoleBindings for TLS bootstrap.
const (
	BootstrapperBinding        = "kubeadm:kubelet-bootstrap"
	NodeAutoapproveBinding     = "kubeadm:node-autoapprove-bootstrap"
	SelfNodeAutoapproveBinding = "kubeadm:node-autoapprove-certificate-rotation"
)

// writeBootstrapFiles writes the cluster CA and the bootstrap kubeconfig and adds the arguments.
func (cp *ControlPlane) writeBootstrapFiles() error {
	b := &bootstrapState{tokenID: randomString(6), tokenSecret: randomString(16),
		caFile: filepath.Join(cp.Dir, "pki", "ca.crt"), caKeyFile: filepath.Join(cp.Dir, "pki", "ca.key"),
		kubeconfig: filepath.Join(cp.opts.KubeconfigDir, "bootstrap.kubeconfig")}
	if err := writeCA(b.caFile, b.caKeyFile); err != nil {
		return err
	}
	if err := WriteKubeconfig(b.kubeconfig, cp.APIServerURL, cp.CAData, "tls-bootstrap-token-user", b.tokenID+"."+b.tokenSecret); err != nil {
		return err
	}
	cp.bootstrap = b
	cp.apiArgs = append(cp.apiArgs, "--client-ca-file="+b.caFile, "--enable-bootstrap-token-auth")
	cp.kcmArgs = append(cp.kcmArgs,
		"--controllers=csrsigning,csrapproving,csrcleaner,bootstrapsigner,tokencleaner",
		"--cluster-signing-cert-file="+b.caFile, "--cluster-signing-key-file="+b.caKeyFile)
	if d := cp.opts.Bootstrap.SigningDuration; d > 0 {
		cp.kcmArgs = append(cp.kcmArgs, "--cluster-signing-duration="+d.String())
	}
	return nil
}

// createBootstrapObjects creates the bootstrap token Secret and kubeadm's ClusterRoleBindings.
func (cp *ControlPlane) createBootstrapObjects(ctx context.Context) error {
	b := cp.bootstrap
	_, err := cp.AdminClient.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + b.tokenID, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": b.tokenID, "token-secret": b.tokenSecret,
			"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"auth-extra-groups": "system:bootstrappers:nodeagent:default-node-token",
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create bootstrap token secret: %w", err)
	}
	for _, name := range []string{BootstrapperBinding, NodeAutoapproveBinding, SelfNodeAutoapproveBinding} {
		if err := cp.CreateBootstrapBinding(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// bootstrapBindings are kubeadm's: bootstrappers may create CSRs and have node-client CSRs approved;
// nodes may have their own renewals approved.
var bootstrapBindings = map[string]struct{ group, role string }{
	BootstrapperBinding:        {"system:bootstrappers", "system:node-bootstrapper"},
	NodeAutoapproveBinding:     {"system:bootstrappers", "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
	SelfNodeAutoapproveBinding: {"system:nodes", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
}

// CreateBootstrapBinding creates one of kubeadm's bootstrap ClusterRoleBindings by name (e.g.
// SelfNodeAutoapproveBinding, after DeleteBootstrapBinding).
func (cp *ControlPlane) CreateBootstrapBinding(ctx context.Context, name string) error {
	b, ok := bootstrapBindings[name]
	if !ok {
		return fmt.Errorf("no bootstrap binding %q", name)
	}
	_, err := cp.AdminClient.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: b.group}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}

// DeleteBootstrapBinding deletes one of kubeadm's bootstrap ClusterRoleBindings, e.g.
// SelfNodeAutoapproveBinding to withhold the approval of renewals.
func (cp *ControlPlane) DeleteBootstrapBinding(ctx context.Context, name string) error {
	err := cp.AdminClient.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}

// BootstrapKubeconfig is the path of a kubeconfig holding the bootstrap token (user
// system:bootstrap:<id>), or "" without ControlPlaneOptions.Bootstrap.
func (cp *ControlPlane) BootstrapKubeconfig() string {
	if cp.bootstrap == nil {
		return ""
	}
	return cp.bootstrap.kubeconfig
}

// BootstrapToken is "<id>.<secret>", or "" without ControlPlaneOptions.Bootstrap.
func (cp *ControlPlane) BootstrapToken() string {
	if cp.bootstrap == nil {
		return ""
	}
	return cp.bootstrap.tokenID + "." + cp.bootstrap.tokenSecret
}

// ClusterCAFile is the cluster CA's certificate (client certificates are signed by it), or "".
func (cp *ControlPlane) ClusterCAFile() string {
	if cp.bootstrap == nil {
		return ""
	}
	return cp.bootstrap.caFile
}

// NodeCSRs lists the CertificateSigningRequests for node nodeName's client certificate (signer
// kubernetes.io/kube-apiserver-client-kubelet, CN system:node:<nodeName>), oldest first.
func (cp *ControlPlane) NodeCSRs(ctx context.Context, nodeName string) ([]certificatesv1.CertificateSigningRequest, error) {
	list, err := cp.AdminClient.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
			continue
		}
		block, _ := pem.Decode(c.Spec.Request)
		if block == nil {
			continue
		}
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil || req.Subject.CommonName != "system:node:"+nodeName {
			continue
		}
		out = append(out, c)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].CreationTimestamp.Before(&out[j-1].CreationTimestamp); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// ApproveCSR approves the CertificateSigningRequest name as an administrator would with kubectl
// certificate approve: an Approved condition (reason reason) through the approval subresource; the
// signer then issues it. It returns an error wrapping the API server's when the CSR cannot be read or
// updated.
func (cp *ControlPlane) ApproveCSR(ctx context.Context, name, reason string) error {
	csrs := cp.AdminClient.CertificatesV1().CertificateSigningRequests()
	c, err := csrs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("approve CSR %s: %w", name, err)
	}
	c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: reason,
		Message: "approved by the test", LastUpdateTime: metav1.Now(),
	})
	if _, err := csrs.UpdateApproval(ctx, name, c, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("approve CSR %s: %w", name, err)
	}
	return nil
}

// DescribeCSR is "<name> <username> <Approved|Denied|...> issued=<bool>".
func DescribeCSR(c certificatesv1.CertificateSigningRequest) string {
	var conds []string
	for _, cond := range c.Status.Conditions {
		conds = append(conds, string(cond.Type))
	}
	return fmt.Sprintf("%s by %s [%s] issued=%t", c.Name, c.Spec.Username, strings.Join(conds, ","), len(c.Status.Certificate) > 0)
}

// writeCA writes a self-signed ECDSA P-256 CA (valid for a day) and its key (PKCS#8) as PEM files.
func writeCA(certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return fmt.Errorf("generate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "cluster-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("create CA cert: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal CA key: %w", err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("write CA cert: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("write CA key: %w", err)
	}
	return nil
}

// randomString returns n random characters of [a-z0-9], as bootstrap token ids and secrets are made.
func randomString(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		v, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		b[i] = alphabet[v.Int64()]
	}
	return string(b)
}
