package integration_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// TestHarnessControlPlane checks the control plane the framework starts: node identities, NodeRestriction,
// the audit log, service-account kubeconfigs, an API server restart and an etcd pause.
func TestHarnessControlPlane(t *testing.T) {
	if _, err := framework.EnsureBinaries(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	start := time.Now()
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		Dir: t.TempDir(), NodeNames: []string{"smoke-node"}, ControllerManager: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	t.Logf("control plane ready in %v at %s", time.Since(start).Round(time.Millisecond), cp.APIServerURL)

	cfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigFor("smoke-node"))
	if err != nil {
		t.Fatalf("load node kubeconfig: %v", err)
	}
	node := kubernetes.NewForConfigOrDie(cfg)
	if _, err := node.CoreV1().Nodes().Create(ctx, harnessNode("smoke-node"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node identity creating its own Node: %v", err)
	}
	_, err = kubernetes.NewForConfigOrDie(cp.NodeConfig("smoke-node")).CoreV1().Nodes().
		Create(ctx, harnessNode("other-node"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("node identity creating another Node: got %v, want Forbidden (NodeRestriction)", err)
	}
	if cp.KubeconfigFor("unknown") != "" || cp.NodeConfig("unknown") != nil {
		t.Error("KubeconfigFor/NodeConfig of a name not in NodeNames should be empty")
	}

	err = framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		events, err := framework.ReadAuditEvents(cp.AuditLogPath)
		return slices.ContainsFunc(events, func(e framework.AuditEvent) bool {
			return e.User.Username == "system:node:smoke-node" && e.Verb == "create" && e.Stage == "ResponseComplete" &&
				e.ObjectRef != nil && e.ObjectRef.Resource == "nodes"
		}), err
	})
	if err != nil {
		t.Fatalf("audit log has no create of nodes by system:node:smoke-node: %v", err)
	}

	saKubeconfig, err := cp.ServiceAccountKubeconfig(ctx, "smoke", "bench")
	if err != nil {
		t.Fatal(err)
	}
	saCfg, err := clientcmd.BuildConfigFromFlags("", saKubeconfig)
	if err != nil {
		t.Fatalf("load service-account kubeconfig: %v", err)
	}
	review, err := kubernetes.NewForConfigOrDie(saCfg).AuthenticationV1().SelfSubjectReviews().
		Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review as service account: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != "system:serviceaccount:smoke:bench" {
		t.Errorf("service account kubeconfig authenticates as %q", got)
	}

	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server restarted in %v", time.Since(start).Round(time.Millisecond))
	if _, err := cp.AdminClient.CoreV1().Nodes().Get(ctx, "smoke-node", metav1.GetOptions{}); err != nil {
		t.Fatalf("Node after API server restart: %v", err)
	}

	if err := cp.PauseEtcd(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	req, _ := http.NewRequestWithContext(pctx, http.MethodGet, cp.EtcdURL+"/health", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("etcd answered /health (%s) while paused", resp.Status)
	}
	pcancel()
	if err := cp.ResumeEtcd(); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.AdminClient.CoreV1().Nodes().Get(ctx, "smoke-node", metav1.GetOptions{}); err != nil {
		t.Fatalf("Node after etcd resumed: %v", err)
	}
}

// TestHarnessContainerd checks the private containerd: CRI status without and with a CNI config, and a restart.
func TestHarnessContainerd(t *testing.T) {
	if _, err := framework.EnsureBinaries(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	start := time.Now()
	c, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	t.Logf("containerd CRI ready in %v at %s", time.Since(start).Round(time.Millisecond), c.Endpoint)

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, reason, _ := framework.Condition(st, "RuntimeReady"); !ok {
		t.Errorf("RuntimeReady = false (%s), want true", reason)
	}
	if ok, _, found := framework.Condition(st, "NetworkReady"); ok || !found {
		t.Errorf("NetworkReady = %v (found %v) without CNI config, want false", ok, found)
	}

	harnessWaitNetwork(ctx, t, c, true)
	harnessWaitNetwork(ctx, t, c, false)

	if err := c.Stop(); err != nil {
		t.Fatalf("stop containerd: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	c.Kill()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start containerd after kill: %v", err)
	}

	tarPath := filepath.Join(t.TempDir(), "image.tar")
	const ref = "example.com/nodeagent/smoke:v1"
	if err := framework.WriteImageTar(tarPath, ref, map[string][]byte{"/hello": []byte("#!/bin/sh\necho hi\n")}); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, tarPath); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		resp, err := c.ImageClient().ListImages(ctx, &runtimeapi.ListImagesRequest{})
		return slices.ContainsFunc(resp.GetImages(), func(im *runtimeapi.Image) bool {
			return slices.Contains(im.GetRepoTags(), ref)
		}), err
	})
	if err != nil {
		t.Fatalf("imported image %s not in CRI ListImages: %v", ref, err)
	}
}

// harnessWaitNetwork sets the CNI config on or off and waits ≤ 10 s for NetworkReady to follow.
func harnessWaitNetwork(ctx context.Context, t *testing.T, c *framework.Containerd, on bool) {
	t.Helper()
	if err := c.SetCNI(on); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.WaitNetwork(wctx, on); err != nil {
		t.Fatalf("within 10 s of SetCNI(%v): %v", on, err)
	}
	t.Logf("NetworkReady=%v %v after SetCNI(%v)", on, time.Since(start).Round(time.Millisecond), on)
}

func harnessNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
