package certificate

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	certificatesv1client "k8s.io/client-go/kubernetes/typed/certificates/v1"
)

// observedClientset decorates the clientset client-go's certificate manager requests CSRs with, so
// that the Manager sees every CSR it creates and what becomes of it (approved, denied, failed,
// issued) through the calls csr.RequestCertificate and csr.WaitForCertificate make.
// A CSR that cannot be created (401, 403, an unknown CA, the API server unreachable) is told to
// failed.
type observedClientset struct {
	kubernetes.Interface
	observe func(csr *certificatesv1.CertificateSigningRequest, created bool)
	failed  func(error)
}

func (c observedClientset) CertificatesV1() certificatesv1client.CertificatesV1Interface {
	return observedCertificatesV1{c.Interface.CertificatesV1(), c.observe, c.failed}
}

type observedCertificatesV1 struct {
	certificatesv1client.CertificatesV1Interface
	observe func(csr *certificatesv1.CertificateSigningRequest, created bool)
	failed  func(error)
}

func (c observedCertificatesV1) CertificateSigningRequests() certificatesv1client.CertificateSigningRequestInterface {
	return observedCSRs{c.CertificatesV1Interface.CertificateSigningRequests(), c.observe, c.failed}
}

type observedCSRs struct {
	certificatesv1client.CertificateSigningRequestInterface
	observe func(csr *certificatesv1.CertificateSigningRequest, created bool)
	failed  func(error)
}

func (c observedCSRs) Create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, opts metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error) {
	res, err := c.CertificateSigningRequestInterface.Create(ctx, csr, opts)
	switch {
	case err == nil:
		c.observe(res, true)
	case c.failed != nil:
		c.failed(err)
	}
	return res, err
}

func (c observedCSRs) Get(ctx context.Context, name string, opts metav1.GetOptions) (*certificatesv1.CertificateSigningRequest, error) {
	res, err := c.CertificateSigningRequestInterface.Get(ctx, name, opts)
	if err == nil {
		c.observe(res, false)
	}
	return res, err
}

func (c observedCSRs) List(ctx context.Context, opts metav1.ListOptions) (*certificatesv1.CertificateSigningRequestList, error) {
	res, err := c.CertificateSigningRequestInterface.List(ctx, opts)
	if err == nil {
		for i := range res.Items {
			c.observe(&res.Items[i], false)
		}
	}
	return res, err
}

func (c observedCSRs) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.CertificateSigningRequestInterface.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if csr, ok := e.Object.(*certificatesv1.CertificateSigningRequest); ok && (e.Type == watch.Added || e.Type == watch.Modified) {
			c.observe(csr, false)
		}
		return e, true
	}), nil
}
