package integration_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestKubeletAPISimulated (issue 36): the kubelet's API of simulated Nodes in two shards, through
// the real API server (kubeadm's --kubelet-client-certificate and
// --kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname) and kubectl:
//   - kubectl get --raw /api/v1/nodes/N/proxy/pods lists exactly N's pods, for a Node of each shard;
//   - kubectl logs with --tail, --timestamps, --since, --limit-bytes, -f, and --previous after a
//     simulated crash; a ConfigMap's lines as a log (nodeagent.io/log-configmap);
//   - kubectl exec: stdout, stderr and the exit code of an annotated command; 126 for another;
//   - kubectl attach shows the annotated text; kubectl port-forward reaches the annotated target;
//   - kubectl's WebSockets reach the Nodes themselves (they declare ExtendWebSocketsToKubelet: the API
//     server proxies exec, attach and port-forward to them instead of translating);
//   - on each Node's own address and port: no credentials 401, a service account token or a
//     client certificate without nodes/proxy 403, the API server's client certificate and an
//     admin token 200, per path group.
func TestKubeletAPISimulated(t *testing.T) {
	t.Parallel()
	const ns = "kubelet-api"
	ctx := t.Context()
	dir := t.TempDir()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp := framework.StartTestControlPlane(sctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(dir, "cp")})
	admin := cp.AdminClient
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	// The operator's port-forward target (shard 0's --port-forward-target echo=...): a TCP echo server on
	// loopback.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()

	// Two shards of one Node each, each Node on a port of its own on an address of this machine
	// that the API server's node proxy accepts (not loopback).
	ip := hostAddress(t)
	ports := []int{framework.FreePort(), framework.FreePort()}
	for i, port := range ports {
		args := []string{"simulate", "--kubeconfig=" + cp.AdminKubeconfig, "--nodes=1", "--shards=2",
			"--shard-index=" + strconv.Itoa(i), "--node-name-prefix=api-", "--healthz-bind-address=127.0.0.1",
			"--healthz-port=" + strconv.Itoa(framework.FreePort())}
		args = append(args, kubeletAPIArgs(cp, ip, port)...)
		if i == 0 {
			args = append(args, "--port-forward-target=echo="+echo.Addr().String())
		}
		startShard(t, i, args, nil, framework.FreePort())
	}
	nodes := []string{"api-0000", "api-0001"}
	err = framework.WaitFor(sctx, 300*time.Millisecond, func() (bool, error) {
		for i, n := range nodes {
			node, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || !framework.IsReady(node) {
				return false, err
			}
			if got := node.Status.DaemonEndpoints.KubeletEndpoint.Port; got != int32(ports[i]) {
				return false, fmt.Errorf("node %s: daemonEndpoints.kubeletEndpoint.Port %d, want %d: %w", n, got, ports[i], framework.ErrStop)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	pod := func(name, node string, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		}
	}
	pods := []*corev1.Pod{
		pod("a", nodes[0], map[string]string{
			"nodeagent.io/log-lines": "3", "nodeagent.io/log-period": "1s", "nodeagent.io/log-text": "hello",
			"nodeagent.io/exec":         `{"date": {"stdout": "today\n"}, "false": {"stderr": "no\n", "exitCode": 3}}`,
			"nodeagent.io/attach":       "attached\n",
			"nodeagent.io/port-forward": `{"80": {"target": "echo"}}`,
		}),
		pod("b", nodes[1], nil),
		pod("cm", nodes[0], map[string]string{"nodeagent.io/log-configmap": "access/lines"}),
		pod("crash", nodes[1], map[string]string{"nodeagent.io/run-duration": "2s", "nodeagent.io/exit-code": "1", "nodeagent.io/log-text": "crash"}),
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "access", Namespace: ns},
		Data: map[string]string{"lines": "GET / 200\nGET /a 404\n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = framework.WaitFor(sctx, 300*time.Millisecond, func() (bool, error) {
		for _, name := range []string{"a", "b", "cm"} {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, err
			}
		}
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "crash", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1 &&
			p.Status.ContainerStatuses[0].State.Running != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := cp.Kubectl(cctx, append([]string{"-n", ns}, args...)...)
		code := 0
		if ee, ok := asExitError(err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return out, code
	}

	t.Run("node proxy pods", func(t *testing.T) {
		for i, n := range nodes {
			out, code := kubectl("get", "--raw", "/api/v1/nodes/"+n+"/proxy/pods")
			if code != 0 {
				t.Fatalf("node %s: %s", n, out)
			}
			var list corev1.PodList
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				t.Fatalf("node %s: %v: %s", n, err, out)
			}
			var names []string
			for _, p := range list.Items {
				names = append(names, p.Name)
			}
			slices.Sort(names)
			want := map[int]string{0: "a,cm", 1: "b,crash"}[i]
			if strings.Join(names, ",") != want {
				t.Errorf("node %s lists pods %v, want %s", n, names, want)
			}
		}
	})

	t.Run("logs", func(t *testing.T) {
		out, _ := kubectl("logs", "a")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 3 || lines[0] != "hello container=c restart=0 line=0" {
			t.Errorf("kubectl logs a: %q", out)
		}
		if out, _ := kubectl("logs", "a", "--tail=1"); strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "hello container=c restart=0 line=") {
			t.Errorf("kubectl logs --tail=1: %q", out)
		}
		if out, _ := kubectl("logs", "a", "--tail=1", "--timestamps"); !strings.Contains(out, "Z hello container=c") {
			t.Errorf("kubectl logs --timestamps: %q", out)
		} else if _, err := time.Parse(time.RFC3339Nano, strings.Fields(out)[0]); err != nil {
			t.Errorf("kubectl logs --timestamps: %q: %v", out, err)
		}
		if out, _ := kubectl("logs", "a", "--since=1h"); !strings.HasPrefix(out, "hello container=c restart=0 line=0\n") {
			t.Errorf("kubectl logs --since=1h: %q", out)
		}
		if out, _ := kubectl("logs", "a", "--limit-bytes=5"); out != "hello" {
			t.Errorf("kubectl logs --limit-bytes=5: %q", out)
		}
		if out, _ := kubectl("logs", "cm"); out != "GET / 200\nGET /a 404\n" {
			t.Errorf("kubectl logs cm (nodeagent.io/log-configmap: access/lines): %q", out)
		}
		if out, _ := kubectl("logs", "crash", "--previous", "--tail=1"); !strings.HasPrefix(out, "crash container=c restart=") {
			t.Errorf("kubectl logs --previous: %q", out)
		}
		if out, code := kubectl("logs", "a", "-c", "nope"); code == 0 || !strings.Contains(out, `container nope is not valid for pod a`) && !strings.Contains(out, "not found") {
			t.Errorf("kubectl logs -c nope: %d %q", code, out)
		}
		// -f: two new lines arrive, a second apart.
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, kubectlPath(t), "--kubeconfig="+cp.AdminKubeconfig, "-n", ns, "logs", "-f", "a", "--tail=0")
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		got := 0
		for got < 2 && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "hello container=c restart=0 line=") {
				got++
			}
		}
		cancel()
		_ = cmd.Wait()
		if got < 2 {
			t.Errorf("kubectl logs -f: %d new lines, want 2", got)
		}
	})

	t.Run("exec", func(t *testing.T) {
		if out, code := kubectl("exec", "a", "--", "date"); code != 0 || out != "today\n" {
			t.Errorf("kubectl exec a -- date: %d %q", code, out)
		}
		if out, code := kubectl("exec", "a", "--", "false"); code != 3 || !strings.Contains(out, "no\n") {
			t.Errorf("kubectl exec a -- false: %d %q, want exit 3 and stderr no", code, out)
		}
		if out, code := kubectl("exec", "a", "--", "ls", "-l"); code != 126 || !strings.Contains(out, `command "ls -l" is not simulated`) {
			t.Errorf("kubectl exec a -- ls -l: %d %q, want exit 126", code, out)
		}
	})

	t.Run("attach", func(t *testing.T) {
		if out, code := kubectl("attach", "a"); code != 0 || !strings.Contains(out, "attached\n") {
			t.Errorf("kubectl attach a: %d %q", code, out)
		}
	})

	// forward runs kubectl port-forward (as the kubeconfig's identity) to pod's port and returns the local
	// port and kubectl's output so far.
	forward := func(t *testing.T, kubeconfig, pod string, port int) (int, *strings.Builder) {
		t.Helper()
		local := framework.FreePort()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		cmd := exec.CommandContext(cctx, kubectlPath(t), "--kubeconfig="+kubeconfig, "-n", ns, "port-forward", "pod/"+pod, strconv.Itoa(local)+":"+strconv.Itoa(port))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); _ = cmd.Wait() })
		return local, out
	}

	t.Run("port-forward to the operator's target", func(t *testing.T) {
		local, out := forward(t, cp.AdminKubeconfig, "a", 80)
		var reply string
		err := framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(local), time.Second)
			if err != nil {
				return false, err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("ping\n")); err != nil {
				return false, err
			}
			reply, err = bufio.NewReader(c).ReadString('\n')
			return err == nil, err
		})
		if err != nil || reply != "ping\n" {
			t.Errorf("through kubectl port-forward: %q, %v; kubectl: %s", reply, err, out.String())
		}
	})

	t.Run("port-forward answered in memory", func(t *testing.T) {
		local, out := forward(t, cp.AdminKubeconfig, "b", 8080)
		var body string
		err := framework.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://127.0.0.1:" + strconv.Itoa(local) + "/")
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			body = string(b)
			return err == nil && resp.StatusCode == http.StatusOK, err
		})
		if want := "nodeagent simulate: pod " + ns + "/b port 8080 (simulated)\n"; err != nil || body != want {
			t.Errorf("curl through kubectl port-forward to pod b: %q, %v; want %q; kubectl: %s", body, err, want, out.String())
		}
	})

	// Issue 45, item 1: a tenant whose only rights are pods and pods/portforward in its namespace names
	// etcd's client address in its pod's annotation (the form earlier releases dialed, and as a target):
	// no byte of etcd comes through the forward.
	t.Run("port-forward: a tenant cannot reach etcd", func(t *testing.T) {
		etcd := strings.TrimPrefix(cp.EtcdURL, "http://")
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "create"}},
				{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"get", "create"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tenant, err := cp.ServiceAccountKubeconfig(ctx, ns, "tenant")
		if err != nil {
			t.Fatal(err)
		}
		tenantConfig, err := clientcmd.BuildConfigFromFlags("", tenant)
		if err != nil {
			t.Fatal(err)
		}
		tenantClient, err := kubernetes.NewForConfig(tenantConfig)
		if err != nil {
			t.Fatal(err)
		}
		for i, ann := range []string{etcd, "2379=" + etcd, `{"*": {"target": "` + etcd + `"}}`, `{"*": {"target": "etcd"}}`} {
			name := fmt.Sprintf("evil-%d", i)
			p := pod(name, nodes[0], map[string]string{"nodeagent.io/port-forward": ann})
			if _, err := tenantClient.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatalf("the tenant creates pod %s: %v", name, err)
			}
			if err := framework.WaitFor(ctx, 300*time.Millisecond, func() (bool, error) {
				p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodRunning, err
			}); err != nil {
				t.Fatal(err)
			}
			local, _ := forward(t, tenant, name, 2379)
			var got []byte
			_ = framework.WaitFor(ctx, 300*time.Millisecond, func() (bool, error) {
				c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(local), time.Second)
				if err != nil {
					return false, nil // kubectl not listening yet
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(3 * time.Second))
				// etcd's /version answers {"etcdserver":"3.7.0","etcdcluster":...}.
				_, _ = io.WriteString(c, "GET /version HTTP/1.0\r\nHost: "+etcd+"\r\n\r\n")
				got, _ = io.ReadAll(c)
				return true, nil
			})
			if strings.Contains(string(got), "etcdserver") || strings.Contains(string(got), "etcdcluster") {
				t.Errorf("annotation %q: etcd answered through the tenant's port-forward: %q", ann, got)
			}
		}
	})

	// kubectl 1.37 speaks WebSockets; the simulated Nodes declare ExtendWebSocketsToKubelet, so the
	// API server proxies them to the Node (which translates them as the kubelet does) instead of
	// translating them itself.
	t.Run("websockets to the node", func(t *testing.T) {
		raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := framework.ParseMetrics(strings.NewReader(string(raw)))
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range []string{"exec", "attach", "portforward"} {
			proxied := m.Value("apiserver_websocket_streaming_requests_total", map[string]string{"subresource": sub, "proxy_type": "proxied_to_kubelet"})
			translated := m.Value("apiserver_websocket_streaming_requests_total", map[string]string{"subresource": sub, "proxy_type": "translated_at_apiserver"})
			if proxied == 0 || translated != 0 {
				t.Errorf("%s WebSockets: %v proxied to the Node, %v translated at the API server; want all proxied (%s)",
					sub, proxied, translated, m.Dump("apiserver_websocket_streaming"))
			}
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(node.Status.DeclaredFeatures, "ExtendWebSocketsToKubelet") {
			t.Errorf("node %s: status.declaredFeatures %v, want ExtendWebSocketsToKubelet", nodes[0], node.Status.DeclaredFeatures)
		}
	})

	t.Run("authentication and authorization", func(t *testing.T) {
		saKubeconfig, err := cp.ServiceAccountKubeconfig(ctx, ns, "nobody")
		if err != nil {
			t.Fatal(err)
		}
		saConfig, err := clientcmd.BuildConfigFromFlags("", saKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		nobodyCert, nobodyKey, err := framework.SignClientCert(cp.KubeletClientCA, cp.KubeletClientCAKey, "nobody", nil)
		if err != nil {
			t.Fatal(err)
		}
		apiCert, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.key"))
		if err != nil {
			t.Fatal(err)
		}
		nobody, err := tls.X509KeyPair(nobodyCert, nobodyKey)
		if err != nil {
			t.Fatal(err)
		}
		type cred struct {
			name  string
			token string
			cert  *tls.Certificate
			want  int
		}
		creds := []cred{
			{"none", "", nil, 401},
			{"service account token", saConfig.BearerToken, nil, 403},
			{"client certificate of nobody", "", &nobody, 403},
			{"admin token", cp.AdminConfig.BearerToken, nil, 200},
			{"API server's client certificate", "", &apiCert, 200},
		}
		paths := []string{"/pods", "/healthz", "/containerLogs/" + ns + "/a/c?tailLines=1"}
		for i, n := range nodes {
			for _, c := range creds {
				for _, path := range paths {
					if i == 1 && strings.HasPrefix(path, "/containerLogs") {
						path = "/containerLogs/" + ns + "/b/c?tailLines=1"
					}
					code := kubeletGet(t, ip, ports[i], path, c.token, c.cert)
					if code != c.want {
						t.Errorf("node %s %s with %s: %d, want %d", n, path, c.name, code, c.want)
					}
				}
			}
		}
	})
}

// kubeletGet GETs https://ip:port+path (the serving certificate not verified, as the API
// server without --kubelet-certificate-authority) and returns the status code.
func kubeletGet(t *testing.T, ip string, port int, path, token string, cert *tls.Certificate) int {
	t.Helper()
	return kubeletDo(t, http.MethodGet, ip, port, path, token, cert)
}

// kubeletDo is kubeletGet with another method.
func kubeletDo(t *testing.T, method, ip string, port int, path, token string, cert *tls.Certificate) int {
	t.Helper()
	tlsConfig := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the kubelet's self-signed certificate, as the API server does
	if cert != nil {
		tlsConfig.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	req, _ := http.NewRequest(method, "https://"+net.JoinHostPort(ip, strconv.Itoa(port))+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func asExitError(err error) (*exec.ExitError, bool) {
	for err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee, true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return nil, false
		}
		err = u.Unwrap()
	}
	return nil, false
}

func kubectlPath(t *testing.T) string {
	t.Helper()
	bin, err := framework.EnsureBinaries()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(bin, "kubectl")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubeletAPIAgent (issue 36): the agent's own Node serves the kubelet's API on --address and
// --port and says so in daemonEndpoints; the API server's node proxy lists exactly its pods; and
// the reference kubelet (webhook authentication and authorization, the same client CA) answers the
// same requests with the same status codes, per credential and path group.
func TestKubeletAPIAgent(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	ip := hostAddress(t)
	port := framework.FreePort()
	startAgent(t, e.cp, nodeKubeletAPIAgent, e.ctrd, kubeletAPIArgs(e.cp, ip, port)...)
	// A short directory: the kubelet's unix sockets under its root dir must fit 108 bytes.
	kdir, err := os.MkdirTemp("", "kapi-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(kdir) })
	ref := framework.StartTestKubelet(ctx, t, framework.KubeletOptions{Dir: kdir, NodeName: nodeKubeletAPIRef,
		Kubeconfig: e.cp.KubeconfigFor(nodeKubeletAPIRef), RuntimeEndpoint: e.ctrd.Endpoint,
		WebhookAuth: true, ClientCAFile: e.cp.KubeletClientCAFile})
	admin := e.cp.AdminClient
	framework.WaitReady(ctx, t, admin, nodeKubeletAPIAgent, 2*time.Minute)
	framework.WaitReady(ctx, t, admin, nodeKubeletAPIRef, 2*time.Minute)
	n, err := admin.CoreV1().Nodes().Get(ctx, nodeKubeletAPIAgent, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.DaemonEndpoints.KubeletEndpoint.Port; got != int32(port) {
		t.Errorf("agent's Node: daemonEndpoints.kubeletEndpoint.Port %d, want %d", got, port)
	}

	// A pod bound to the agent's Node (it runs none: the pod stays Pending) and one to another.
	const ns = "kubelet-api-agent"
	if err := e.cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ name, node string }{{"mine", nodeKubeletAPIAgent}, {"other", nodeKubeletAPIRef}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}}}}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = framework.WaitFor(ctx, 300*time.Millisecond, func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := e.cp.Kubectl(cctx, "get", "--raw", "/api/v1/nodes/"+nodeKubeletAPIAgent+"/proxy/pods")
		if err != nil {
			return false, err
		}
		var list corev1.PodList
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return false, fmt.Errorf("%v: %s: %w", err, out, framework.ErrStop)
		}
		var names []string
		for _, p := range list.Items {
			if p.Namespace == ns {
				names = append(names, p.Name)
			}
		}
		if len(names) == 1 && names[0] == "mine" {
			return true, nil
		}
		return false, fmt.Errorf("the agent's Node lists pods %v of %s, want [mine]", names, ns)
	})
	if err != nil {
		t.Fatal(err)
	}

	// The reference kubelet has taken its pod (its status written: the container waiting).
	err = framework.WaitFor(ctx, 300*time.Millisecond, func() (bool, error) {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "other", metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1, err
	})
	if err != nil {
		t.Fatal(err)
	}

	// The same requests to the agent and to the reference kubelet: the same status codes.
	saKubeconfig, err := e.cp.ServiceAccountKubeconfig(ctx, ns, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	saConfig, err := clientcmd.BuildConfigFromFlags("", saKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	nobodyCert, nobodyKey, err := framework.SignClientCert(e.cp.KubeletClientCA, e.cp.KubeletClientCAKey, "nobody", nil)
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := tls.X509KeyPair(nobodyCert, nobodyKey)
	if err != nil {
		t.Fatal(err)
	}
	apiCert, err := tls.LoadX509KeyPair(filepath.Join(e.cp.Dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(e.cp.Dir, "pki", "apiserver-kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	creds := []struct {
		name  string
		token string
		cert  *tls.Certificate
		want  int // on /pods
	}{
		{"none", "", nil, 401},
		{"service account token", saConfig.BearerToken, nil, 403},
		{"client certificate of nobody", "", &nobody, 403},
		{"admin token", e.cp.AdminConfig.BearerToken, nil, 200},
		{"API server's client certificate", "", &apiCert, 200},
	}
	paths := []struct{ method, path string }{
		{"GET", "/pods"}, {"GET", "/healthz"},
		{"GET", "/containerLogs/" + ns + "/nope/c"},
		{"GET", "/containerLogs/" + ns + "/mine/c?tailLines=-1"},
		{"POST", "/exec/" + ns + "/nope/c?command=ls"},
		{"POST", "/portForward/" + ns + "/nope"},
		{"POST", "/pods"},
		// Exec into a container that does not run (each Node's own pod: its image is never pulled):
		// the kubelet's 500 container not found.
		{"POST", "/exec/" + ns + "/{own}/c?command=ls&output=1"},
	}
	own := func(path, pod string) string { return strings.ReplaceAll(path, "{own}", pod) }
	for _, c := range creds {
		for _, p := range paths {
			got := kubeletDo(t, p.method, ip, port, own(p.path, "mine"), c.token, c.cert)
			want := kubeletDo(t, p.method, "127.0.0.1", ref.Port, own(p.path, "other"), c.token, c.cert)
			if got != want {
				t.Errorf("%s %s with %s: agent %d, reference kubelet %d", p.method, p.path, c.name, got, want)
			}
			if p.path == "/pods" && p.method == "GET" && got != c.want {
				t.Errorf("GET /pods with %s: %d, want %d", c.name, got, c.want)
			}
		}
	}
}
