// Package certificate obtains and rotates the agent's client certificate as the kubelet does: TLS
// bootstrap from a bootstrap kubeconfig (a CertificateSigningRequest with signer
// kubernetes.io/kube-apiserver-client-kubelet for system:node:<name>), a file store under --cert-dir
// with a nodeagent-client-current.pem link, and rotation at 70–90 % of the certificate's lifetime.
// It mirrors k8s.io/kubernetes's pkg/kubelet/certificate (bootstrap.LoadClientConfig,
// NewKubeletClientCertificateManager, UpdateTransport) over client-go's util/certificate Manager.
//
// Use:
//
//	m, err := certificate.New(certificate.Config{NodeName: name, Kubeconfig: kc,
//		BootstrapKubeconfig: bkc, CertDir: dir, Rotate: true, Registry: reg})
//	restConfig := m.RESTConfig()   // every client built from it uses m's current certificate
//	m.Start(ctx)                   // bootstraps (if needed) and rotates in the background
//	<-m.Ready()                    // a certificate is available
//	err = m.Healthy()              // nil, or why the client certificate is a problem
//	st := m.Status()               // path, expiry, problem, request/store errors, damaged file moved aside
//
// Beyond the kubelet: a damaged stored pair is moved aside and bootstrapped again (with a bootstrap
// kubeconfig), an issued certificate that cannot be stored is used from memory and stored later (no
// new CSR), and why there is no certificate (401, 403, unknown CA, store failure) is in Status and
// nodeagent_certificate_manager_client_errors_total{reason}.
package certificate
