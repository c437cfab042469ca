package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

const (
	nodeName = "node-1"
	hostname = "node-1.example.com"
)

var nodesResource = schema.GroupResource{Resource: "nodes"}

func q(s string) resource.Quantity { return resource.MustParse(s) }

// defaultLabelsFor are the labels the kubelet's initialNode sets.
func defaultLabelsFor(host string) map[string]string {
	return map[string]string{
		v1.LabelHostname: host, v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH,
		LabelOSBeta: goruntime.GOOS, LabelArchBeta: goruntime.GOARCH,
	}
}

func newRegistrar(t *testing.T, cfg Config) *Registrar {
	t.Helper()
	if cfg.NodeName == "" {
		cfg.NodeName = nodeName
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestInitialNode mirrors the kubelet's initialNode: default labels, --node-labels (which win),
// taints, the attach-detach annotation, providerID and the first status from the setters.
func TestInitialNode(t *testing.T) {
	status := v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceCPU: q("2")}}
	cases := []struct {
		desc string
		cfg  Config
		want *v1.Node
	}{
		{
			desc: "defaults",
			cfg:  Config{Hostname: hostname},
			want: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: defaultLabelsFor(hostname),
					Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}},
				Status: status,
			},
		},
		{
			desc: "hostname defaults to the node name",
			cfg:  Config{},
			want: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: defaultLabelsFor(nodeName),
					Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}},
				Status: status,
			},
		},
		{
			desc: "--node-labels are added and override defaults",
			cfg: Config{Hostname: hostname, Labels: map[string]string{
				"node-role.example.com/edge": "", v1.LabelHostname: "override", v1.LabelTopologyZone: "zone-a",
			}},
			want: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: func() map[string]string {
					l := defaultLabelsFor("override")
					l["node-role.example.com/edge"] = ""
					l[v1.LabelTopologyZone] = "zone-a"
					return l
				}(), Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}},
				Status: status,
			},
		},
		{
			desc: "taints, unschedulable, external cloud provider and providerID",
			cfg: Config{Hostname: hostname, Unschedulable: true, ExternalCloudProvider: true, ProviderID: "aws:///us-east-1a/i-0123",
				Taints: []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoExecute}}},
			want: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: defaultLabelsFor(hostname),
					Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}},
				Spec: v1.NodeSpec{Unschedulable: true, ProviderID: "aws:///us-east-1a/i-0123", Taints: []v1.Taint{
					{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoExecute},
					{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule},
					{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: v1.TaintEffectNoSchedule},
				}},
				Status: status,
			},
		},
		{
			desc: "external cloud provider only",
			cfg:  Config{Hostname: hostname, ExternalCloudProvider: true},
			want: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: defaultLabelsFor(hostname),
					Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}},
				Spec:   v1.NodeSpec{Taints: []v1.Taint{{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: v1.TaintEffectNoSchedule}}},
				Status: status,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tc.cfg.Client = fake.NewClientset()
			var setStatusCalls int
			tc.cfg.Funcs = nodestatus.NewFuncs(nil, nodestatus.Func{Name: "test", Setter: func(_ context.Context, n *v1.Node) error {
				setStatusCalls++
				n.Status = *status.DeepCopy()
				return nil
			}})
			configTaints := append([]v1.Taint(nil), tc.cfg.Taints...)
			r := newRegistrar(t, tc.cfg)
			got := r.InitialNode(ctx)
			if !apiequality.Semantic.DeepEqual(tc.want, got) {
				t.Errorf("initial node: %s", diff.Diff(tc.want, got))
			}
			if setStatusCalls != 1 {
				t.Errorf("setters applied %d times, want 1", setStatusCalls)
			}
			if len(r.cfg.Taints) != len(configTaints) {
				t.Errorf("InitialNode changed the configured taints: %v", r.cfg.Taints)
			}
			// A second call builds a fresh node (the registration loop rebuilds it on each attempt).
			again := r.InitialNode(ctx)
			again.Labels["x"] = "y"
			if _, ok := r.InitialNode(ctx).Labels["x"]; ok {
				t.Errorf("InitialNode shares its label map between calls")
			}
		})
	}
}

// reactor returns err for verb on nodes (optionally only on a subresource) and counts the calls.
type reactorCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *reactorCounts) inc(verb string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[verb]++
}

func (r *reactorCounts) get(verb string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[verb]
}

// TestTryRegister mirrors the kubelet's TestTryRegisterWithApiServer and, on an existing node, the
// reconcile of the attach-detach annotation, default labels and extended resources.
func TestTryRegister(t *testing.T) {
	alreadyExists := apierrors.NewAlreadyExists(nodesResource, nodeName)
	forbidden := apierrors.NewForbidden(nodesResource, nodeName, errors.New("nodes is forbidden"))
	conflict := apierrors.NewConflict(nodesResource, nodeName, errors.New("conflict"))
	internal := apierrors.NewInternalError(errors.New("etcd down"))

	initial := func() *v1.Node {
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: defaultLabelsFor(hostname),
				Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}},
			Status: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("4Gi")},
				Allocatable: v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("3Gi")},
			},
		}
	}
	cases := []struct {
		desc        string
		existing    *v1.Node // in the API server before the attempt
		createErr   error    // injected on create, before the tracker
		getErr      error
		patchErr    error
		wantErr     string
		wantResult  string
		wantActions []string // verb[/subresource] in order
		wantNode    func(n *v1.Node) error
	}{
		{
			desc:        "success case - new node",
			wantResult:  "created",
			wantActions: []string{"create"},
			wantNode: func(n *v1.Node) error {
				if n.Labels[v1.LabelHostname] != hostname {
					return fmt.Errorf("created node labels %v", n.Labels)
				}
				return nil
			},
		},
		{
			desc:        "existing node - nothing to reconcile: no patch",
			existing:    initial(),
			createErr:   alreadyExists,
			wantResult:  "existing",
			wantActions: []string{"create", "get"},
		},
		{
			desc:        "existing node - create forbidden - get it",
			existing:    initial(),
			createErr:   forbidden,
			wantResult:  "existing",
			wantActions: []string{"create", "get"},
		},
		{
			desc: "existing node - annotation, labels and extended resources reconciled by one status patch",
			existing: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "old-uid", Labels: map[string]string{
					v1.LabelHostname: "old-hostname", v1.LabelOSStable: goruntime.GOOS, "custom": "kept",
				}},
				Status: v1.NodeStatus{
					Capacity:    v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("4Gi"), "example.com/gpu": q("4")},
					Allocatable: v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: q("3Gi"), "example.com/gpu": q("4")},
				},
			},
			createErr:   alreadyExists,
			wantResult:  "existing",
			wantActions: []string{"create", "get", "patch/status"},
			wantNode: func(n *v1.Node) error {
				want := defaultLabelsFor(hostname)
				want["custom"] = "kept"
				if !apiequality.Semantic.DeepEqual(want, n.Labels) {
					return fmt.Errorf("labels: %s", diff.Diff(want, n.Labels))
				}
				if n.Annotations[AnnotationControllerManagedAttach] != "true" {
					return fmt.Errorf("annotations %v", n.Annotations)
				}
				for _, rl := range []v1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
					if g := rl["example.com/gpu"]; !g.IsZero() {
						return fmt.Errorf("extended resource not zeroed: %v", rl)
					}
				}
				if c := n.Status.Capacity[v1.ResourceCPU]; c.Cmp(q("2")) != 0 {
					return fmt.Errorf("cpu capacity changed: %v", n.Status.Capacity)
				}
				return nil
			},
		},
		{
			desc: "existing node - create forbidden - attach-detach annotation set",
			existing: func() *v1.Node {
				n := initial()
				n.Annotations = nil
				return n
			}(),
			createErr:   forbidden,
			wantResult:  "existing",
			wantActions: []string{"create", "get", "patch/status"},
			wantNode: func(n *v1.Node) error {
				if n.Annotations[AnnotationControllerManagedAttach] != "true" {
					return fmt.Errorf("annotations %v", n.Annotations)
				}
				return nil
			},
		},
		{
			desc: "existing node without capacity gets the initial node's",
			existing: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: defaultLabelsFor(hostname),
				Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}}},
			createErr:   alreadyExists,
			wantResult:  "existing",
			wantActions: []string{"create", "get", "patch/status"},
			wantNode: func(n *v1.Node) error {
				if !apiequality.Semantic.DeepEqual(initial().Status, n.Status) {
					return fmt.Errorf("status: %s", diff.Diff(initial().Status, n.Status))
				}
				return nil
			},
		},
		{
			desc:        "create failed with another error: no get",
			createErr:   conflict,
			wantErr:     `creating node "node-1"`,
			wantResult:  "error",
			wantActions: []string{"create"},
		},
		{
			desc:        "create failed with an internal error",
			createErr:   internal,
			wantErr:     "etcd down",
			wantResult:  "error",
			wantActions: []string{"create"},
		},
		{
			desc:        "get existing node failed",
			createErr:   alreadyExists,
			getErr:      conflict,
			wantErr:     `getting existing node "node-1"`,
			wantResult:  "error",
			wantActions: []string{"create", "get"},
		},
		{
			desc:        "create forbidden and get failed: both errors",
			createErr:   forbidden,
			getErr:      apierrors.NewForbidden(nodesResource, nodeName, errors.New("get is forbidden too")),
			wantErr:     "get is forbidden too",
			wantResult:  "error",
			wantActions: []string{"create", "get"},
		},
		{
			desc: "update existing node failed",
			existing: func() *v1.Node {
				n := initial()
				n.Labels = nil
				return n
			}(),
			createErr:   alreadyExists,
			patchErr:    conflict,
			wantErr:     `reconciling existing node "node-1"`,
			wantResult:  "error",
			wantActions: []string{"create", "get", "patch/status"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []runtime.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			client := fake.NewClientset(objs...)
			inject := func(verb string, err error) {
				if err == nil {
					return
				}
				client.PrependReactor(verb, "nodes", func(core.Action) (bool, runtime.Object, error) { return true, nil, err })
			}
			inject("create", tc.createErr)
			inject("get", tc.getErr)
			inject("patch", tc.patchErr)
			r := newRegistrar(t, Config{Client: client, Hostname: hostname})
			res, err := r.TryRegister(ctx, initial())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("TryRegister error = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("TryRegister: %v", err)
			}
			if string(res) != tc.wantResult {
				t.Errorf("TryRegister = %q, want %q", res, tc.wantResult)
			}
			var actions []string
			for _, a := range client.Actions() {
				s := a.GetVerb()
				if a.GetSubresource() != "" {
					s += "/" + a.GetSubresource()
				}
				actions = append(actions, s)
			}
			if strings.Join(actions, ",") != strings.Join(tc.wantActions, ",") {
				t.Errorf("actions = %v, want %v", actions, tc.wantActions)
			}
			if tc.wantNode != nil {
				n, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", nodeName)
				if err != nil {
					t.Fatalf("node in the API server: %v", err)
				}
				if err := tc.wantNode(n.(*v1.Node)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestUpdateDefaultLabels mirrors the kubelet's TestUpdateDefaultLabels.
func TestUpdateDefaultLabels(t *testing.T) {
	cases := []struct {
		name        string
		initial     map[string]string
		existing    map[string]string
		needsUpdate bool
		finalLabels map[string]string
	}{
		{
			name:        "make sure default labels exist",
			initial:     defaultLabelsFor("new-hostname"),
			existing:    map[string]string{},
			needsUpdate: true,
			finalLabels: defaultLabelsFor("new-hostname"),
		},
		{
			name:        "make sure default labels are up to date",
			initial:     defaultLabelsFor("new-hostname"),
			existing:    defaultLabelsFor("old-hostname"),
			needsUpdate: true,
			finalLabels: defaultLabelsFor("new-hostname"),
		},
		{
			name:    "make sure existing labels do not get deleted",
			initial: defaultLabelsFor("new-hostname"),
			existing: func() map[string]string {
				l := defaultLabelsFor("new-hostname")
				l["please-persist"] = "foo"
				return l
			}(),
			needsUpdate: false,
			finalLabels: func() map[string]string {
				l := defaultLabelsFor("new-hostname")
				l["please-persist"] = "foo"
				return l
			}(),
		},
		{
			name:    "make sure existing labels do not get deleted when initial node has no opinion",
			initial: map[string]string{},
			existing: func() map[string]string {
				l := defaultLabelsFor("new-hostname")
				l["please-persist"] = "foo"
				return l
			}(),
			needsUpdate: false,
			finalLabels: func() map[string]string {
				l := defaultLabelsFor("new-hostname")
				l["please-persist"] = "foo"
				return l
			}(),
		},
		{
			name:        "no update needed",
			initial:     defaultLabelsFor("new-hostname"),
			existing:    defaultLabelsFor("new-hostname"),
			needsUpdate: false,
			finalLabels: defaultLabelsFor("new-hostname"),
		},
		{
			name:        "not panic when existing node has nil labels",
			initial:     defaultLabelsFor("new-hostname"),
			existing:    nil,
			needsUpdate: true,
			finalLabels: defaultLabelsFor("new-hostname"),
		},
		{
			name: "backfill required labels",
			initial: map[string]string{v1.LabelHostname: "new-hostname", v1.LabelTopologyZone: "new-zone-failure-domain",
				v1.LabelTopologyRegion: "new-zone-region", v1.LabelInstanceTypeStable: "new-instance-type"},
			existing: map[string]string{v1.LabelHostname: "new-hostname", v1.LabelFailureDomainBetaZone: "new-zone-failure-domain",
				v1.LabelFailureDomainBetaRegion: "new-zone-region", v1.LabelInstanceType: "new-instance-type"},
			needsUpdate: true,
			finalLabels: map[string]string{v1.LabelHostname: "new-hostname", v1.LabelFailureDomainBetaZone: "new-zone-failure-domain",
				v1.LabelFailureDomainBetaRegion: "new-zone-region", v1.LabelInstanceType: "new-instance-type",
				v1.LabelTopologyZone: "new-zone-failure-domain", v1.LabelTopologyRegion: "new-zone-region", v1.LabelInstanceTypeStable: "new-instance-type"},
		},
		{
			name:        "remove default labels with an empty value",
			initial:     map[string]string{v1.LabelTopologyZone: ""},
			existing:    map[string]string{v1.LabelTopologyZone: "old-zone"},
			needsUpdate: true,
			finalLabels: map[string]string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			initial := &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: tc.initial}}
			existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: tc.existing}}
			if got := updateDefaultLabels(initial, existing); got != tc.needsUpdate {
				t.Errorf("needsUpdate = %v, want %v", got, tc.needsUpdate)
			}
			if !apiequality.Semantic.DeepEqual(tc.finalLabels, existing.Labels) {
				t.Errorf("labels: %s", diff.Diff(tc.finalLabels, existing.Labels))
			}
		})
	}
}

// TestReconcileCMADAnnotation mirrors the kubelet's CMAD cases of TestTryRegisterWithApiServer.
func TestReconcileCMADAnnotation(t *testing.T) {
	with := map[string]string{AnnotationControllerManagedAttach: "true"}
	cases := []struct {
		desc              string
		initial, existing map[string]string
		want              bool
		wantAnnotations   map[string]string
	}{
		{desc: "no change", initial: with, existing: map[string]string{AnnotationControllerManagedAttach: "true"}, wantAnnotations: with},
		{desc: "enabled", initial: with, existing: nil, want: true, wantAnnotations: with},
		{desc: "disabled", initial: nil, existing: map[string]string{AnnotationControllerManagedAttach: "true", "x": "y"}, want: true,
			wantAnnotations: map[string]string{"x": "y"}},
		{desc: "neither", initial: nil, existing: nil, wantAnnotations: nil},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: tc.existing}}
			if got := reconcileCMADAnnotation(&v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: tc.initial}}, existing); got != tc.want {
				t.Errorf("changed = %v, want %v", got, tc.want)
			}
			if !apiequality.Semantic.DeepEqual(tc.wantAnnotations, existing.Annotations) {
				t.Errorf("annotations: %s", diff.Diff(tc.wantAnnotations, existing.Annotations))
			}
		})
	}
}

// TestReconcileHugePages mirrors the kubelet's TestReconcileHugePageResource.
func TestReconcileHugePages(t *testing.T) {
	base := func(extra v1.ResourceList) v1.ResourceList {
		rl := v1.ResourceList{v1.ResourceCPU: q("2"), v1.ResourceMemory: *resource.NewQuantity(10e9, resource.BinarySI)}
		for k, v := range extra {
			rl[k] = v
		}
		return rl
	}
	node := func(capacity, allocatable v1.ResourceList) *v1.Node {
		return &v1.Node{Status: v1.NodeStatus{Capacity: capacity, Allocatable: allocatable}}
	}
	cases := []struct {
		name                    string
		initial, existing, want *v1.Node
		needsUpdate             bool
	}{
		{
			name:        "no update needed when all huge page resources are similar",
			initial:     node(base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")}), base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")})),
			existing:    node(base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")}), base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")})),
			want:        node(base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")}), base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")})),
			needsUpdate: false,
		},
		{
			name:        "update needed when new huge page resources is supported",
			initial:     node(base(v1.ResourceList{"hugepages-2Mi": q("0"), "hugepages-1Gi": q("2Gi")}), base(v1.ResourceList{"hugepages-2Mi": q("0"), "hugepages-1Gi": q("2Gi")})),
			existing:    node(base(v1.ResourceList{"hugepages-2Mi": q("100Mi")}), base(v1.ResourceList{"hugepages-2Mi": q("100Mi")})),
			want:        node(base(v1.ResourceList{"hugepages-2Mi": q("0"), "hugepages-1Gi": q("2Gi")}), base(v1.ResourceList{"hugepages-2Mi": q("0"), "hugepages-1Gi": q("2Gi")})),
			needsUpdate: true,
		},
		{
			name:        "update needed when huge page resource quantity has changed",
			initial:     node(base(v1.ResourceList{"hugepages-1Gi": q("4Gi")}), base(v1.ResourceList{"hugepages-1Gi": q("4Gi")})),
			existing:    node(base(v1.ResourceList{"hugepages-1Gi": q("2Gi")}), base(v1.ResourceList{"hugepages-1Gi": q("2Gi")})),
			want:        node(base(v1.ResourceList{"hugepages-1Gi": q("4Gi")}), base(v1.ResourceList{"hugepages-1Gi": q("4Gi")})),
			needsUpdate: true,
		},
		{
			name:        "update needed when a huge page resource is no longer supported",
			initial:     node(base(v1.ResourceList{"hugepages-1Gi": q("2Gi")}), base(v1.ResourceList{"hugepages-1Gi": q("2Gi")})),
			existing:    node(base(v1.ResourceList{"hugepages-2Mi": q("0"), "hugepages-1Gi": q("2Gi")}), base(v1.ResourceList{"hugepages-2Mi": q("0"), "hugepages-1Gi": q("2Gi")})),
			want:        node(base(v1.ResourceList{"hugepages-1Gi": q("2Gi")}), base(v1.ResourceList{"hugepages-1Gi": q("2Gi")})),
			needsUpdate: true,
		},
		{
			name:        "not panic when capacity or allocatable of existing node is nil",
			initial:     node(base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")}), base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")})),
			existing:    node(nil, nil),
			want:        node(base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")}), base(v1.ResourceList{"hugepages-2Mi": q("100Mi"), "hugepages-64Ki": q("0")})),
			needsUpdate: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// As the kubelet: default resources first (reconcileExtendedResources), then hugepages.
			got := reconcileExtendedResources(tc.initial, tc.existing)
			got = reconcileHugePages(tc.initial, tc.existing) || got
			if got != tc.needsUpdate {
				t.Errorf("needsUpdate = %v, want %v", got, tc.needsUpdate)
			}
			if !apiequality.Semantic.DeepEqual(tc.want, tc.existing) {
				t.Errorf("node: %s", diff.Diff(tc.want, tc.existing))
			}
		})
	}
}

// TestReconcileExtendedResources mirrors the kubelet's TestReconcileExtendedResource with the device
// manager's reset on (nodeagent runs no device plugins).
func TestReconcileExtendedResources(t *testing.T) {
	cases := []struct {
		name            string
		existing        *v1.Node
		wantCapacity    v1.ResourceList
		wantAllocatable v1.ResourceList
		needsUpdate     bool
	}{
		{
			name: "extended resources zeroed",
			existing: &v1.Node{Status: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: q("2"), "example.com/gpu": q("4"), "foo.bar/dongle": q("1")},
				Allocatable: v1.ResourceList{v1.ResourceCPU: q("2"), "example.com/gpu": q("4"), "foo.bar/dongle": q("1")},
			}},
			wantCapacity:    v1.ResourceList{v1.ResourceCPU: q("2"), "example.com/gpu": q("0"), "foo.bar/dongle": q("0")},
			wantAllocatable: v1.ResourceList{v1.ResourceCPU: q("2"), "example.com/gpu": q("0"), "foo.bar/dongle": q("0")},
			needsUpdate:     true,
		},
		{
			name: "no extended resources: no update",
			existing: &v1.Node{Status: v1.NodeStatus{
				Capacity: v1.ResourceList{v1.ResourceCPU: q("2")}, Allocatable: v1.ResourceList{v1.ResourceCPU: q("2")},
			}},
			wantCapacity:    v1.ResourceList{v1.ResourceCPU: q("2")},
			wantAllocatable: v1.ResourceList{v1.ResourceCPU: q("2")},
		},
		{
			name: "already zero: no update",
			existing: &v1.Node{Status: v1.NodeStatus{
				Capacity: v1.ResourceList{"example.com/gpu": q("0")}, Allocatable: v1.ResourceList{"example.com/gpu": q("0")},
			}},
			wantCapacity:    v1.ResourceList{"example.com/gpu": q("0")},
			wantAllocatable: v1.ResourceList{"example.com/gpu": q("0")},
		},
		{
			name:            "nil capacity and allocatable take the initial node's",
			existing:        &v1.Node{},
			wantCapacity:    v1.ResourceList{v1.ResourceCPU: q("2")},
			wantAllocatable: v1.ResourceList{v1.ResourceCPU: q("1")},
			needsUpdate:     true,
		},
	}
	initial := &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceCPU: q("2")}, Allocatable: v1.ResourceList{v1.ResourceCPU: q("1")}}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := reconcileExtendedResources(initial, tc.existing); got != tc.needsUpdate {
				t.Errorf("needsUpdate = %v, want %v", got, tc.needsUpdate)
			}
			if !apiequality.Semantic.DeepEqual(tc.wantCapacity, tc.existing.Status.Capacity) {
				t.Errorf("capacity: %s", diff.Diff(tc.wantCapacity, tc.existing.Status.Capacity))
			}
			if !apiequality.Semantic.DeepEqual(tc.wantAllocatable, tc.existing.Status.Allocatable) {
				t.Errorf("allocatable: %s", diff.Diff(tc.wantAllocatable, tc.existing.Status.Allocatable))
			}
		})
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{NodeName: nodeName}); err == nil {
		t.Error("New without Client: no error")
	}
	if _, err := New(Config{Client: fake.NewClientset()}); err == nil {
		t.Error("New without NodeName: no error")
	}
	r, err := New(Config{Client: fake.NewClientset(), NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Hostname != nodeName || r.cfg.Clock == nil {
		t.Errorf("defaults: %+v", r.cfg)
	}
}

// TestRegisterExternalCloudProvider: with --cloud-provider=external the Node is created tainted
// uninitialized with only its own addresses, as the kubelet's initialNode; once a cloud controller has
// initialised it (taint removed, providerID, labels, addresses), a restart's registration finds it and
// changes none of that (the kubelet's tryRegisterWithAPIServer reconciles only the attach-detach
// annotation, default labels and resources); and after the Node is deleted, registering again creates
// it tainted again, for the cloud controller to initialise anew.
func TestRegisterExternalCloudProvider(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	nodeIP := net.ParseIP("10.1.1.1")
	funcs := nodestatus.NewFuncs(clock.RealClock{}, nodestatus.Func{Name: "NodeAddress", Setter: nodestatus.NodeAddress(
		[]net.IP{nodeIP}, func(net.IP) error { return nil }, hostname, true,
		func(net.IP) (net.IP, error) { return nil, errors.New("not called") },
		func(string) ([]net.IP, error) { return nil, errors.New("not called") })})
	r := newRegistrar(t, Config{Client: client, Hostname: hostname, ExternalCloudProvider: true, Funcs: funcs})
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	stored := func() *v1.Node {
		t.Helper()
		o, err := client.Tracker().Get(gvr, "", nodeName)
		if err != nil {
			t.Fatalf("node in the API server: %v", err)
		}
		return o.(*v1.Node).DeepCopy()
	}
	uninitialized := []v1.Taint{{Key: TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule}}
	ownAddresses := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeHostName, Address: hostname}}
	checkCreated := func(when string) {
		t.Helper()
		n := stored()
		if !apiequality.Semantic.DeepEqual(uninitialized, n.Spec.Taints) {
			t.Errorf("%s: taints %v, want %v", when, n.Spec.Taints, uninitialized)
		}
		if n.Spec.ProviderID != "" {
			t.Errorf("%s: providerID %q, want none", when, n.Spec.ProviderID)
		}
		if !apiequality.Semantic.DeepEqual(ownAddresses, n.Status.Addresses) {
			t.Errorf("%s: addresses %v, want %v", when, n.Status.Addresses, ownAddresses)
		}
		if got := n.Annotations["alpha.kubernetes.io/provided-node-ip"]; got != "10.1.1.1" {
			t.Errorf("%s: provided-node-ip annotation %q, want 10.1.1.1", when, got)
		}
	}

	if _, err := r.TryRegister(ctx, r.InitialNode(ctx)); err != nil {
		t.Fatal(err)
	}
	checkCreated("first registration")

	// The cloud controller initialises it.
	n := stored()
	n.Spec.Taints = nil
	n.Spec.ProviderID = "fake://" + nodeName
	for k, v := range map[string]string{
		v1.LabelInstanceTypeStable: "m1", v1.LabelInstanceType: "m1", v1.LabelTopologyZone: "z", v1.LabelFailureDomainBetaZone: "z",
		v1.LabelTopologyRegion: "r", v1.LabelFailureDomainBetaRegion: "r",
	} {
		n.Labels[k] = v
	}
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.10"}, {Type: v1.NodeHostName, Address: hostname}}
	if err := client.Tracker().Update(gvr, n, ""); err != nil {
		t.Fatal(err)
	}
	initialised := stored()

	// A restart registers again: the Node exists and is left as the cloud controller made it.
	client.ClearActions()
	if r := newRegistrar(t, Config{Client: client, Hostname: hostname, ExternalCloudProvider: true, Funcs: funcs}); func() error { _, err := r.TryRegister(ctx, r.InitialNode(ctx)); return err }() != nil {
		t.Fatal("registering again failed")
	}
	var verbs []string
	for _, a := range client.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if strings.Join(verbs, ",") != "create,get" {
		t.Errorf("restart: actions %v, want [create get] (nothing to reconcile)", verbs)
	}
	if got := stored(); !apiequality.Semantic.DeepEqual(initialised, got) {
		t.Errorf("restart changed the initialised Node: %s", diff.Diff(initialised, got))
	}

	// Deleted: registering again creates it uninitialised.
	if err := client.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryRegister(ctx, r.InitialNode(ctx)); err != nil {
		t.Fatal(err)
	}
	checkCreated("registration after the Node was deleted")
}
