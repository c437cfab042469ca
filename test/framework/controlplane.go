package framework

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControlPlaneOptions configures StartControlPlane.
type ControlPlaneOptions struct {
	// Dir holds etcd data, certificates, tokens, kubeconfigs and logs (etcd.log, kube-apiserver.log,
	// kube-controller-manager.log, audit.log). Required; created if missing. Usually t.TempDir().
	Dir string
	// NodeNames gets one node identity each: user system:node:<name> in group system:nodes, with a
	// kubeconfig at KubeconfigFor(name).
	NodeNames []string
	// ControllerManager also starts kube-controller-manager with the nodelifecycle, nodeipam and ttl
	// controllers (node-monitor-period 5s), so nodes that stop reporting turn Unknown and get tainted.
	ControllerManager bool
	// NodeMonitorGracePeriod is kube-controller-manager's --node-monitor-grace-period; 0 means 40s.
	NodeMonitorGracePeriod time.Duration
	// KubeconfigDir is where the kubeconfig files go: admin.kubeconfig, node-<name>.kubeconfig and those of
	// service accounts. Default: Dir/kubeconfig. Created if missing.
	KubeconfigDir string
	// ExtraAPIServerArgs are appended to kube-apiserver's arguments (a later flag overrides an earlier one).
	ExtraAPIServerArgs []string
	// PublishKubeletClientCA gives kube-apiserver the CA of its kubelet client certificate
	// (KubeletClientCAFile) as its --client-ca-file, as kubeadm's one cluster CA is both: kube-apiserver
	// then publishes it as client-ca-file in kube-system's extension-apiserver-authentication ConfigMap,
	// where `nodeagent simulate` and aggregated API servers find it. Bootstrap sets its own.
	PublishKubeletClientCA bool
	// ExtraControllerManagerArgs are appended to kube-controller-manager's arguments.
	ExtraControllerManagerArgs []string
	// Bootstrap, if set, sets the cluster up for TLS bootstrap as kubeadm does (see BootstrapOptions);
	// it implies ControllerManager.
	Bootstrap *BootstrapOptions
	// Version, if set (e.g. "v1.34"), runs etcd, kube-apiserver and kube-controller-manager of that older
	// minor, built by EnsureSkewBinaries, for version-skew tests; the scheduler and kubectl stay the
	// hack/tools ones. Empty: the hack/tools build (the Kubernetes nodeagent is built with).
	Version string
}

// ControlPlane is a running etcd + kube-apiserver (+ kube-controller-manager) on 127.0.0.1.
// Authentication is by static bearer tokens; authorization is Node,RBAC with NodeRestriction admission.
type ControlPlane struct {
	// Dir is ControlPlaneOptions.Dir.
	Dir string
	// APIServerURL is the API server's address, "https://127.0.0.1:<port>".
	APIServerURL string
	// EtcdURL is etcd's client address, "http://127.0.0.1:<port>".
	EtcdURL string
	// CAData is the PEM of the API server's self-signed serving certificate, to trust it.
	CAData []byte
	// AdminConfig authenticates as user "admin" in group system:masters.
	AdminConfig *rest.Config
	// AdminClient is a clientset for AdminConfig.
	AdminClient kubernetes.Interface
	// AdminKubeconfig is the path of a kubeconfig file for AdminConfig.
	AdminKubeconfig string
	// KubeletClientCAFile is the CA of the API server's client certificate to kubelets
	// (--kubelet-client-certificate, user KubeletAPIClientUser, bound to system:kubelet-api-admin, as
	// kubeadm sets it up): give it to a kubelet or a nodeagent as --client-ca-file.
	// KubeletClientCA and KubeletClientCAKey sign more client certificates (SignClientCert).
	KubeletClientCAFile string
	KubeletClientCA     *x509.Certificate
	KubeletClientCAKey  *ecdsa.PrivateKey
	// AuditLogPath is the API server's JSON-lines audit log: one Metadata-level event per request (stage
	// ResponseComplete, plus ResponseStarted for watches) from users in groups system:nodes and
	// system:serviceaccounts. See ReadAuditEvents.
	AuditLogPath string

	opts       ControlPlaneOptions
	binDir     string // hack/tools' binaries: kube-scheduler, kubectl
	cpBinDir   string // etcd, kube-apiserver, kube-controller-manager: binDir, or the skew build's
	etcdArgs   []string
	apiArgs    []string
	kcmArgs    []string
	nodeTokens map[string]string
	bootstrap  *bootstrapState

	mu        sync.Mutex
	etcd      *process
	apiserver *process
	kcm       *process
	scheduler *process
}

// StartControlPlane starts etcd and kube-apiserver (and kube-controller-manager if asked), building the
// binaries first if needed (EnsureBinaries), and returns once GET /readyz answers ok (about 3 s);
// kube-controller-manager is started last and not waited for. On error everything already started is stopped. ctx bounds the start-up only; call Stop to end the processes.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (*ControlPlane, error) {
	if opts.Dir == "" {
		return nil, errors.New("start control plane: ControlPlaneOptions.Dir is required")
	}
	if opts.NodeMonitorGracePeriod == 0 {
		opts.NodeMonitorGracePeriod = 40 * time.Second
	}
	if opts.KubeconfigDir == "" {
		opts.KubeconfigDir = filepath.Join(opts.Dir, "kubeconfig")
	}
	binDir, err := EnsureBinaries()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	cp := &ControlPlane{Dir: opts.Dir, opts: opts, binDir: binDir, cpBinDir: binDir, nodeTokens: map[string]string{}}
	if opts.Version != "" {
		if cp.cpBinDir, err = EnsureSkewBinaries(opts.Version); err != nil {
			return nil, fmt.Errorf("start control plane %s: %w", opts.Version, err)
		}
	}
	if err := cp.writeFiles(); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if err := cp.startEtcd(ctx); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if err := cp.bindKubeletAPIClient(ctx); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if opts.Bootstrap != nil {
		if err := cp.createBootstrapObjects(ctx); err != nil {
			cp.Stop()
			return nil, fmt.Errorf("start control plane: %w", err)
		}
	}
	if opts.ControllerManager || opts.Bootstrap != nil {
		if _, err := cp.startComponent(&cp.kcm, "kube-controller-manager", cp.kcmArgs...); err != nil {
			cp.Stop()
			return nil, fmt.Errorf("start control plane: %w", err)
		}
	}
	return cp, nil
}

// writeFiles creates the certificates, token file, audit policy and kubeconfigs, and fixes the arguments.
func (cp *ControlPlane) writeFiles() error {
	dir := cp.Dir
	for _, d := range []string{dir, filepath.Join(dir, "pki"), cp.opts.KubeconfigDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	certFile, keyFile := filepath.Join(dir, "pki", "serving.crt"), filepath.Join(dir, "pki", "serving.key")
	caData, err := writeServingCert(certFile, keyFile)
	if err != nil {
		return err
	}
	cp.CAData = caData
	saKey := filepath.Join(dir, "pki", "sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return err
	}

	adminToken := randomToken()
	tokens := []string{fmt.Sprintf("%s,admin,uid-admin,system:masters", adminToken)}
	for _, n := range cp.opts.NodeNames {
		cp.nodeTokens[n] = randomToken()
		tokens = append(tokens, fmt.Sprintf("%s,system:node:%s,uid-node-%s,system:nodes", cp.nodeTokens[n], n, n))
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	cp.KubeletClientCAFile = filepath.Join(dir, "pki", "kubelet-client-ca.crt")
	kubeletClientCert, kubeletClientKey := filepath.Join(dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(dir, "pki", "apiserver-kubelet-client.key")
	if cp.KubeletClientCA, cp.KubeletClientCAKey, err = writeKubeletClientCert(cp.KubeletClientCAFile, kubeletClientCert, kubeletClientKey); err != nil {
		return err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	cp.AuditLogPath = filepath.Join(dir, "audit.log")

	etcdPort, peerPort, apiPort := FreePort(), FreePort(), FreePort()
	cp.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	cp.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	cp.etcdArgs = []string{
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + cp.EtcdURL, "--advertise-client-urls=" + cp.EtcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
	}
	cp.apiArgs = append([]string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saKey, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		// As kubeadm, kind and local-up-cluster.sh set it: privileged containers admitted (the
		// conformance suite's Job specs with hostPath volumes run privileged pods).
		"--allow-privileged=true",
		"--audit-log-path=" + cp.AuditLogPath, "--audit-policy-file=" + policy,
		// Without this, SIGTERM can leave it waiting up to --request-timeout (60 s) for open watches.
		"--shutdown-watch-termination-grace-period=2s",
		// As kubeadm: the API server reaches kubelets (logs, exec, port-forward, the node proxy) at
		// their InternalIP first, with a client certificate bound to system:kubelet-api-admin.
		"--kubelet-client-certificate=" + kubeletClientCert, "--kubelet-client-key=" + kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
	}, cp.opts.ExtraAPIServerArgs...)
	if cp.opts.PublishKubeletClientCA {
		cp.apiArgs = append(cp.apiArgs, "--client-ca-file="+cp.KubeletClientCAFile)
	}

	cp.AdminConfig = cp.restConfig(adminToken)
	if cp.AdminClient, err = kubernetes.NewForConfig(cp.AdminConfig); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	cp.AdminKubeconfig = filepath.Join(cp.opts.KubeconfigDir, "admin.kubeconfig")
	if err := cp.writeKubeconfig(cp.AdminKubeconfig, "admin", adminToken); err != nil {
		return err
	}
	for n, tok := range cp.nodeTokens {
		if err := cp.writeKubeconfig(cp.KubeconfigFor(n), "system:node:"+n, tok); err != nil {
			return err
		}
	}
	cp.kcmArgs = append([]string{
		"--kubeconfig=" + cp.AdminKubeconfig, "--leader-elect=false", "--secure-port=0",
		"--controllers=nodelifecycle,nodeipam,ttl", "--allocate-node-cidrs=false",
		"--node-monitor-period=5s", "--node-monitor-grace-period=" + cp.opts.NodeMonitorGracePeriod.String(),
	}, cp.opts.ExtraControllerManagerArgs...)
	if cp.opts.Bootstrap != nil {
		return cp.writeBootstrapFiles()
	}
	return nil
}

// auditPolicy logs requests from node and service-account identities at Metadata level, nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:nodes", "system:serviceaccounts"]
- level: None
`

// restConfig returns a client config for the API server with the given bearer token (QPS 200, burst 400).
func (cp *ControlPlane) restConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            cp.APIServerURL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData},
		QPS:             200,
		Burst:           400,
	}
}

// writeKubeconfig writes a kubeconfig for the API server authenticating with token as user.
func (cp *ControlPlane) writeKubeconfig(path, user, token string) error {
	return WriteKubeconfig(path, cp.APIServerURL, cp.CAData, user, token)
}

// WriteKubeconfig writes a kubeconfig file at path for server, trusting the PEM certificates caData,
// authenticating with bearer token as user (a name for the kubeconfig's user entry).
func WriteKubeconfig(path, server string, caData []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// KubeconfigFor returns the path of the kubeconfig file for node nodeName (user system:node:<nodeName>),
// or "" if nodeName was not in ControlPlaneOptions.NodeNames.
func (cp *ControlPlane) KubeconfigFor(nodeName string) string {
	if _, ok := cp.nodeTokens[nodeName]; !ok {
		return ""
	}
	return filepath.Join(cp.opts.KubeconfigDir, "node-"+nodeName+".kubeconfig")
}

// NodeConfig returns a client config authenticating as node nodeName, or nil if nodeName was not in
// ControlPlaneOptions.NodeNames.
func (cp *ControlPlane) NodeConfig(nodeName string) *rest.Config {
	tok, ok := cp.nodeTokens[nodeName]
	if !ok {
		return nil
	}
	return cp.restConfig(tok)
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	p, err := startProcess("etcd", filepath.Join(cp.Dir, "etcd.log"), filepath.Join(cp.cpBinDir, "etcd"), cp.etcdArgs...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.etcd = p
	cp.mu.Unlock()
	err = WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		resp, err := http.Get(cp.EtcdURL + "/health")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("wait for etcd health: %w", err)
	}
	return nil
}

// startComponent starts the binary name from the binaries directory with args, logging to Dir/<name>.log,
// and records it in *slot, unless the process in *slot is still running (an error).
func (cp *ControlPlane) startComponent(slot **process, name string, args ...string) (*process, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if *slot != nil {
		if done, _ := (*slot).exited(); !done {
			return nil, fmt.Errorf("start %s: already running", name)
		}
	}
	dir := cp.binDir
	if name == "kube-apiserver" || name == "kube-controller-manager" {
		dir = cp.cpBinDir
	}
	p, err := startProcess(name, filepath.Join(cp.Dir, name+".log"), filepath.Join(dir, name), args...)
	if err != nil {
		return nil, err
	}
	*slot = p
	return p, nil
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) with the same etcd, port,
// certificates and tokens, and waits until GET /readyz answers ok or ctx is done. It errors if the API
// server is already running, exits during start-up, or does not get ready in time.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	p, err := cp.startComponent(&cp.apiserver, "kube-apiserver", cp.apiArgs...)
	if err != nil {
		return err
	}
	probe := cp.AdminClient.Discovery().RESTClient()
	err = WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		body, err := probe.Get().AbsPath("/readyz").DoRaw(rctx)
		return err == nil && string(body) == "ok", err
	})
	if err != nil {
		return fmt.Errorf("wait for kube-apiserver /readyz: %w", err)
	}
	return nil
}

// StopAPIServer stops kube-apiserver and waits for it to exit (1-2 s; longer under load); etcd and
// kube-controller-manager keep running. Restart it with StartAPIServer. kube-apiserver (1.36 and 1.37) sometimes
// hangs in graceful shutdown after it has stopped listening (seen under CPU load): it is then killed after
// 10 s, which clients cannot tell from an exit, so that is not an error either (the goroutine dump is in
// kube-apiserver.log). The error is a non-zero exit status.
func (cp *ControlPlane) StopAPIServer() error {
	cp.mu.Lock()
	p := cp.apiserver
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(10 * time.Second); err != nil && !errors.Is(err, errKilled) {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	return nil
}

// StartScheduler starts kube-scheduler (the default profile, no leader election) with the admin
// kubeconfig, serving on a free 127.0.0.1 port with a self-signed certificate, and waits until its /readyz
// answers 200 (its informers have synced) or ctx is done. It logs to Dir/kube-scheduler.log. It errors if
// the scheduler is already running or exits during start-up. Stop (or StopScheduler) ends it. extraArgs
// are appended to its command line (e.g. --kube-api-qps).
func (cp *ControlPlane) StartScheduler(ctx context.Context, extraArgs ...string) error {
	port := FreePort()
	p, err := cp.startComponent(&cp.scheduler, "kube-scheduler", append([]string{
		"--kubeconfig=" + cp.AdminKubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(cp.Dir, "kube-scheduler-pki")}, extraArgs...)...)
	if err != nil {
		return err
	}
	// Its serving certificate is self-signed and generated at start; this is loopback only.
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, self-signed
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", port)
	err = WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := probe.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("kube-scheduler /readyz answered %d", resp.StatusCode)
		}
		return true, nil
	})
	if err != nil {
		p.kill()
		return fmt.Errorf("wait for kube-scheduler /readyz: %w", err)
	}
	return nil
}

// StopScheduler stops kube-scheduler (SIGTERM, SIGKILL after 10 s) if it was started. Without leader
// election kube-scheduler exits with status 1 on SIGTERM ("finished without leader elect"): only a
// scheduler that had to be killed is an error.
func (cp *ControlPlane) StopScheduler() error {
	cp.mu.Lock()
	p := cp.scheduler
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(10 * time.Second); errors.Is(err, errKilled) {
		return fmt.Errorf("stop kube-scheduler: %w", err)
	}
	return nil
}

// PauseEtcd freezes etcd with SIGSTOP and returns once all its threads are stopped: the API server's
// storage calls hang until ResumeEtcd.
func (cp *ControlPlane) PauseEtcd() error {
	if err := cp.etcd.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := WaitFor(ctx, 5*time.Millisecond, func() (bool, error) { return allThreadsStopped(cp.etcd.pid()) }); err != nil {
		return fmt.Errorf("pause etcd: wait for its threads to stop: %w", err)
	}
	return nil
}

// allThreadsStopped reports whether every thread of pid is in state T (stopped) per /proc.
func allThreadsStopped(pid int) (bool, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, fmt.Errorf("list threads of pid %d: %w", pid, errors.Join(err, ErrStop))
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // thread exited
		}
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) == 0 || (fields[0] != "T" && fields[0] != "t") {
			return false, nil
		}
	}
	return true, nil
}

// ResumeEtcd continues etcd after PauseEtcd (SIGCONT).
func (cp *ControlPlane) ResumeEtcd() error { return cp.etcd.signal(syscall.SIGCONT) }

// Stop stops kube-scheduler (if started), kube-controller-manager, kube-apiserver and etcd, in that order (each SIGTERM, then SIGKILL
// after 10 s). It is safe to call more than once and on a partly started control plane. Files
// in Dir are left for the caller (t.TempDir removes them).
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range []*process{cp.scheduler, cp.kcm, cp.apiserver, cp.etcd} {
		if p != nil {
			_ = p.stop(10 * time.Second)
		}
	}
}

// ServiceAccountKubeconfig creates namespace and service account name in it if missing, mints a token for
// it with the TokenRequest API (valid 24 h), and writes a kubeconfig with that token under
// KubeconfigDir/sa-<namespace>-<name>.kubeconfig, whose path it returns. The account gets no RBAC
// permissions here: bind what the caller needs. The token is bound to nothing, so it names no node.
func (cp *ControlPlane) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (path string, err error) {
	if err := cp.ensureServiceAccount(ctx, namespace, name); err != nil {
		return "", err
	}
	path = filepath.Join(cp.opts.KubeconfigDir, fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name))
	return path, cp.writeTokenKubeconfig(ctx, path, namespace, name, nil)
}

// PodServiceAccountKubeconfig is ServiceAccountKubeconfig for a token bound to a pod on node nodeName, as
// the kubelet mounts one into each pod: it creates (if missing) pod "<name>-<nodeName>" in namespace, run
// by service account name, with spec.nodeName nodeName (no kubelet runs it; the node need not exist), and
// requests the token with that pod as its bound object. The API server then authenticates the token with
// the user info extras authentication.kubernetes.io/pod-name and node-name, as it would a DaemonSet pod's.
// The token is valid while the pod exists. The kubeconfig is
// KubeconfigDir/sa-<namespace>-<name>-<nodeName>.kubeconfig.
func (cp *ControlPlane) PodServiceAccountKubeconfig(ctx context.Context, namespace, name, nodeName string) (path string, err error) {
	if err := cp.ensureServiceAccount(ctx, namespace, name); err != nil {
		return "", err
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + nodeName},
		Spec: corev1.PodSpec{
			NodeName:                     nodeName,
			ServiceAccountName:           name,
			AutomountServiceAccountToken: &no,
			Containers:                   []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	pods := cp.AdminClient.CoreV1().Pods(namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("create pod %s/%s: %w", namespace, pod.Name, err)
	}
	if created.Spec.NodeName != nodeName || created.Spec.ServiceAccountName != name {
		return "", fmt.Errorf("pod %s/%s exists on node %q with service account %q", namespace, pod.Name,
			created.Spec.NodeName, created.Spec.ServiceAccountName)
	}
	path = filepath.Join(cp.opts.KubeconfigDir, fmt.Sprintf("sa-%s-%s-%s.kubeconfig", namespace, name, nodeName))
	return path, cp.writeTokenKubeconfig(ctx, path, namespace, name, created)
}

// CreateNamespace creates namespace name, if missing, with its ServiceAccount "default" (this control
// plane runs no serviceaccount controller, which would make it): what a namespace needs before pods can be
// created in it. It returns the first API error, naming the object.
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	return cp.ensureServiceAccount(ctx, name, "default")
}

// ensureServiceAccount creates namespace and service account name in it, each unless it exists.
func (cp *ControlPlane) ensureServiceAccount(ctx context.Context, namespace, name string) error {
	c := cp.AdminClient.CoreV1()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	return nil
}

// writeTokenKubeconfig requests a 24 h token for service account namespace/name, bound to pod if not nil,
// and writes a kubeconfig with it at path.
func (cp *ControlPlane) writeTokenKubeconfig(ctx context.Context, path, namespace, name string, pod *corev1.Pod) error {
	exp := int64(24 * 3600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cp.AdminClient.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request token for service account %s/%s: %w", namespace, name, err)
	}
	return cp.writeKubeconfig(path, "system:serviceaccount:"+namespace+":"+name, tr.Status.Token)
}

// Kubectl runs kubectl (built into the binaries directory by EnsureBinaries) with the admin kubeconfig and
// args, for instance "apply", "-k", dir. It returns kubectl's combined output; the error, if kubectl fails,
// includes that output.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(cp.binDir, "kubectl"), append([]string{"--kubeconfig=" + cp.AdminKubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// bindKubeletAPIClient binds KubeletAPIClientUser to the ClusterRole system:kubelet-api-admin, as
// kubeadm binds its apiserver-kubelet-client identity.
func (cp *ControlPlane) bindKubeletAPIClient(ctx context.Context) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-kubelet-api-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: KubeletAPIClientUser}},
	}
	err := WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		_, err := cp.AdminClient.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, nil
		}
		return false, err // the RBAC bootstrap may still be running: try again
	})
	if err != nil {
		return fmt.Errorf("bind %s to system:kubelet-api-admin: %w", KubeletAPIClientUser, err)
	}
	return nil
}
