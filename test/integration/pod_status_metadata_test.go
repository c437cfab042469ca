package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/apiclient"
	"github.com/nodeagent/nodeagent/test/framework"
)

// TestPodStatusPatchMetadataAnswer (issue 38): the pod status patch as the simulator sends it
// (apiclient.Set.PodMetadata, client-go's metadata client: pods/status, a strategic-merge patch with the
// UID precondition) is applied by the real API server, which answers with the pod's metadata only
// (PartialObjectMetadata): its resourceVersion is the written pod's, the one the pod workers compare
// the informer's copy with; with the pod client's own rate limit and without.
func TestPodStatusPatchMetadataAnswer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	// No kube-controller-manager: the default ServiceAccount the pods' admission looks up is made here.
	if _, err := cp.AdminClient.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		podQPS float32
	}{
		{"pod client of its own", 100},
		{"main client", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := apiclient.New(ctx, apiclient.Config{REST: cp.AdminConfig, UserAgent: "nodeagent-test", QPS: 50, Burst: 100,
				HeartbeatTimeout: 10 * time.Second, PodQPS: tc.podQPS, PodBurst: int(2 * tc.podQPS), NodeName: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			p, err := cp.AdminClient.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "meta-"},
				Spec:       corev1.PodSpec{NodeName: "n1", AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			patch := []byte(`{"metadata":{"uid":"` + string(p.UID) + `"},"status":{"phase":"Running","podIP":"10.244.0.7","podIPs":[{"ip":"10.244.0.7"}]}}`)
			written, err := set.PodMetadata.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace("default").
				Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
			if err != nil {
				t.Fatalf("patch: %v", err)
			}
			got, err := cp.AdminClient.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != "10.244.0.7" {
				t.Errorf("status after the patch: phase %q, podIP %q; want Running, 10.244.0.7", got.Status.Phase, got.Status.PodIP)
			}
			if written.ResourceVersion == "" || written.ResourceVersion != got.ResourceVersion || written.UID != p.UID {
				t.Errorf("answer: resourceVersion %q, UID %q; the pod's: %q, %q", written.ResourceVersion, written.UID, got.ResourceVersion, p.UID)
			}
			// The UID precondition: a patch for another UID is refused.
			stale := []byte(`{"metadata":{"uid":"00000000-0000-0000-0000-000000000000"},"status":{"phase":"Failed"}}`)
			if _, err := set.PodMetadata.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace("default").
				Patch(ctx, p.Name, types.StrategicMergePatchType, stale, metav1.PatchOptions{}, "status"); err == nil {
				t.Errorf("a patch with another UID was applied")
			}
		})
	}
}
