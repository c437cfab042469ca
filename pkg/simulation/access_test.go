package simulation

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

func TestCheckAccess(t *testing.T) {
	ctx := context.Background()
	if err := CheckAccess(ctx, accessClient("admin", []string{"system:masters"}), "kc"); err != nil {
		t.Errorf("admin: %v", err)
	}
	// Events are not required: without them only events are lost.
	if err := CheckAccess(ctx, accessClient("sa", nil, "create events", "patch events"), "kc"); err != nil {
		t.Errorf("without events: %v", err)
	}
	err := CheckAccess(ctx, accessClient("system:serviceaccount:sim:sim", nil, "create nodes", "update leases", "patch nodes/status"), "kc")
	want := `--kubeconfig "kc": user "system:serviceaccount:sim:sim" may not create nodes, patch nodes/status, update leases.coordination.k8s.io in kube-node-lease; the simulation needs the RBAC in docs/simulation.md`
	if err == nil || err.Error() != want {
		t.Errorf("missing RBAC: %v\nwant %s", err, want)
	}
	err = CheckAccess(ctx, accessClient("system:node:n1", []string{"system:nodes", "system:authenticated"}), "kc")
	if err == nil || !strings.Contains(err.Error(), `system:node:n1 is a node identity (group system:nodes)`) {
		t.Errorf("node identity: %v", err)
	}
}

func TestCheckNamesFree(t *testing.T) {
	ctx := context.Background()
	node := func(name string, simulated bool) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if simulated {
			n.Labels[LabelSimulated] = "true"
		}
		return n
	}
	c := fake.NewClientset(node("sim-0001", true), node("sim-0500", false), node("sim-01", false), node("sim-extra", false), node("worker-1", false))
	if err := CheckNamesFree(ctx, c, "sim-", 500); err != nil {
		t.Errorf("names sim-0000..sim-0499 with a simulated sim-0001 and a real sim-0500: %v", err)
	}
	err := CheckNamesFree(ctx, c, "sim-", 501)
	if err == nil || !strings.Contains(err.Error(), `--node-name-prefix "sim-": node sim-0500 exists and is not simulated`) {
		t.Errorf("a real node among the names: %v", err)
	}
}

// accessClient is a fake clientset whose SelfSubjectReview says user (in groups) and whose
// SelfSubjectAccessReviews allow everything but the denied "verb resource" pairs.
func accessClient(user string, groups []string, denied ...string) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectreviews", func(core.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: user, Groups: groups}}}, nil
	})
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a core.Action) (bool, runtime.Object, error) {
		r := a.(core.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attrs := r.Spec.ResourceAttributes
		key := attrs.Verb + " " + attrs.Resource
		if attrs.Subresource != "" {
			key += "/" + attrs.Subresource
		}
		allowed := true
		for _, d := range denied {
			allowed = allowed && d != key
		}
		r.Status.Allowed = allowed
		return true, r, nil
	})
	return c
}
