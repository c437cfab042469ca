// Package registration registers this machine's Node with the API server and reconciles an existing
// one, as the kubelet's registerWithAPIServer / tryRegisterWithAPIServer / initialNode
// (pkg/kubelet/kubelet_node_status.go).
package registration

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// Well-known labels, annotations and taints used at registration.
const (
	LabelOSBeta                       = "beta.kubernetes.io/os"
	LabelArchBeta                     = "beta.kubernetes.io/arch"
	AnnotationControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"
	TaintExternalCloudProvider        = "node.cloudprovider.kubernetes.io/uninitialized"
)

// defaultLabels are the labels reconciled onto an existing Node (the kubelet's updateDefaultLabels).
var defaultLabels = []string{
	v1.LabelHostname, v1.LabelTopologyZone, v1.LabelTopologyRegion, v1.LabelFailureDomainBetaZone,
	v1.LabelFailureDomainBetaRegion, v1.LabelInstanceTypeStable, v1.LabelInstanceType, v1.LabelOSStable,
	v1.LabelArchStable, v1.LabelWindowsBuild, LabelOSBeta, LabelArchBeta,
}

// Config configures a Registrar.
type Config struct {
	// Client is the API client; required.
	Client kubernetes.Interface
	// NodeName and Hostname: the Node's name and the kubernetes.io/hostname label.
	NodeName, Hostname string
	// Labels from --node-labels; Taints from --register-with-taints.
	Labels map[string]string
	Taints []v1.Taint
	// Unschedulable registers with spec.unschedulable and the node.kubernetes.io/unschedulable taint.
	Unschedulable bool
	// ExternalCloudProvider adds the uninitialized taint.
	ExternalCloudProvider bool
	// ProviderID is spec.providerID.
	ProviderID string
	// Funcs fills the initial Node's status: the same setter list the status syncer applies (the
	// kubelet's initialNode calls setNodeStatus too). Nil leaves the status empty.
	Funcs *nodestatus.Funcs
	// Clock is injected for tests; default the real clock.
	Clock clock.Clock
}

// Result is what one registration attempt did: the label of the registration metric.
type Result string

// The results of TryRegister.
const (
	// ResultCreated: the Node was created.
	ResultCreated Result = "created"
	// ResultExisting: the Node existed and was reconciled.
	ResultExisting Result = "existing"
	// ResultError: the attempt failed.
	ResultError Result = "error"
)

// Registrar registers the Node. Build with New; each TryRegister is one attempt of the kubelet's
// registerWithAPIServer (the queue spaces failed attempts 100 ms doubling to 7 s).
type Registrar struct {
	cfg Config

	mu     sync.Mutex
	status Status
}

// Status is what registration has done so far, for /debug/nodestatus.
type Status struct {
	// RegisteredAt is when the Node was last registered (created or found); zero before.
	RegisteredAt time.Time `json:"registeredAt,omitzero"`
	// Attempts counts registration attempts since start; LastError is the last failed one's error.
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError,omitempty"`
}

// New validates cfg and fills defaults. It errors when Client or NodeName is missing.
func New(cfg Config) (*Registrar, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, fmt.Errorf("registration: Config needs Client and NodeName")
	}
	if cfg.Hostname == "" {
		cfg.Hostname = cfg.NodeName
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Registrar{cfg: cfg}, nil
}

// InitialNode returns the Node this agent registers: default and --node-labels labels, taints,
// the attach-detach annotation, providerID, and a full first status from SetStatus. Mirrors initialNode.
func (r *Registrar) InitialNode(ctx context.Context) *v1.Node {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.cfg.NodeName,
			Labels: map[string]string{
				v1.LabelHostname:   r.cfg.Hostname,
				v1.LabelOSStable:   goruntime.GOOS,
				v1.LabelArchStable: goruntime.GOARCH,
				LabelOSBeta:        goruntime.GOOS,
				LabelArchBeta:      goruntime.GOARCH,
			},
			Annotations: map[string]string{AnnotationControllerManagedAttach: "true"},
		},
		Spec: v1.NodeSpec{Unschedulable: r.cfg.Unschedulable, ProviderID: r.cfg.ProviderID},
	}
	taints := append([]v1.Taint(nil), r.cfg.Taints...)
	if r.cfg.Unschedulable {
		taints = append(taints, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule})
	}
	if r.cfg.ExternalCloudProvider {
		taints = append(taints, v1.Taint{Key: TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule})
	}
	if len(taints) > 0 {
		node.Spec.Taints = taints
	}
	for k, v := range r.cfg.Labels {
		node.Labels[k] = v
	}
	if r.cfg.Funcs != nil {
		r.cfg.Funcs.Apply(ctx, node)
	}
	return node
}

// TryRegister makes one attempt: Create; on AlreadyExists or Forbidden, Get the existing Node and
// reconcile the attach-detach annotation, default labels, default and extended resources and
// hugepages, patching if needed.
// It returns what the attempt did (ResultCreated, ResultExisting, or ResultError with an error that
// wraps the API error). Mirrors tryRegisterWithAPIServer.
func (r *Registrar) TryRegister(ctx context.Context, node *v1.Node) (Result, error) {
	_, err := r.cfg.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		return r.attempt(ResultCreated, nil)
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		err = fmt.Errorf("creating node %q: %w", node.Name, err)
		return r.attempt(ResultError, err)
	}
	existing, getErr := r.cfg.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if getErr != nil {
		if apierrors.IsForbidden(err) {
			err = fmt.Errorf("creating node %q: %w; getting it: %w", node.Name, err, getErr)
		} else {
			err = fmt.Errorf("getting existing node %q: %w", node.Name, getErr)
		}
		return r.attempt(ResultError, err)
	}
	klog.FromContext(ctx).Info("Node was previously registered", "node", klog.KObj(node))
	original := existing.DeepCopy()
	update := reconcileCMADAnnotation(node, existing)
	update = updateDefaultLabels(node, existing) || update
	update = reconcileExtendedResources(node, existing) || update
	update = reconcileHugePages(node, existing) || update
	if update {
		if _, _, err := nodeutil.PatchNodeStatus(r.cfg.Client.CoreV1(), types.NodeName(node.Name), original, existing); err != nil {
			err = fmt.Errorf("reconciling existing node %q: %w", node.Name, err)
			return r.attempt(ResultError, err)
		}
	}
	return r.attempt(ResultExisting, nil)
}

// Status returns a copy of the registration status.
func (r *Registrar) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// attempt records one attempt's result in Status and returns it.
func (r *Registrar) attempt(result Result, err error) (Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Attempts++
	if err != nil {
		r.status.LastError = err.Error()
	} else {
		r.status.RegisteredAt = r.cfg.Clock.Now()
		r.status.LastError = ""
	}
	return result, err
}

// reconcileCMADAnnotation mirrors reconcileCMADAnnotationWithExistingNode: it copies the initial node's
// controller-managed-attach-detach annotation onto existing and reports whether it changed.
func reconcileCMADAnnotation(initial, existing *v1.Node) bool {
	want, set := initial.Annotations[AnnotationControllerManagedAttach]
	if existing.Annotations[AnnotationControllerManagedAttach] == want {
		return false
	}
	if !set {
		delete(existing.Annotations, AnnotationControllerManagedAttach)
		return true
	}
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	existing.Annotations[AnnotationControllerManagedAttach] = want
	return true
}

// updateDefaultLabels mirrors the kubelet's: default labels take the initial node's value; empty ones are removed.
func updateDefaultLabels(initial, existing *v1.Node) bool {
	changed := false
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for _, l := range defaultLabels {
		v, ok := initial.Labels[l]
		if !ok {
			continue
		}
		if existing.Labels[l] != v {
			existing.Labels[l] = v
			changed = true
		}
		if existing.Labels[l] == "" {
			delete(existing.Labels, l)
		}
	}
	return changed
}

// reconcileExtendedResources mirrors updateDefaultResources plus the extended-resource reset: a missing
// capacity/allocatable is copied from the initial node, and extended resources are zeroed because this
// agent runs no device plugins that could still be advertising them.
func reconcileExtendedResources(initial, existing *v1.Node) bool {
	changed := false
	if existing.Status.Capacity == nil {
		existing.Status.Capacity = initial.Status.Capacity.DeepCopy()
		changed = initial.Status.Capacity != nil
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = initial.Status.Allocatable.DeepCopy()
		changed = changed || initial.Status.Allocatable != nil
	}
	for k, v := range existing.Status.Capacity {
		if nodestatus.IsExtendedResourceName(k) && !v.IsZero() {
			existing.Status.Capacity[k] = *resource.NewQuantity(0, resource.DecimalSI)
			if existing.Status.Allocatable == nil {
				existing.Status.Allocatable = v1.ResourceList{}
			}
			existing.Status.Allocatable[k] = *resource.NewQuantity(0, resource.DecimalSI)
			changed = true
		}
	}
	return changed
}

// reconcileHugePages mirrors the kubelet's reconcileHugePageResource: each hugepage size of the initial
// node takes its capacity and allocatable, and sizes the machine no longer has are removed (the
// MachineInfo setter only adds sizes, so without this a removed size would stay on the Node).
func reconcileHugePages(initial, existing *v1.Node) bool {
	changed := false
	supported := map[v1.ResourceName]bool{}
	for name, initialCapacity := range initial.Status.Capacity {
		if !strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			continue
		}
		supported[name] = true
		if existing.Status.Capacity == nil {
			existing.Status.Capacity = v1.ResourceList{}
		}
		if existing.Status.Allocatable == nil {
			existing.Status.Allocatable = v1.ResourceList{}
		}
		initialAllocatable := initial.Status.Allocatable[name]
		capacity, ok := existing.Status.Capacity[name]
		allocatable := existing.Status.Allocatable[name]
		if !ok || capacity.Cmp(initialCapacity) != 0 {
			existing.Status.Capacity[name] = initialCapacity.DeepCopy()
			changed = true
		}
		if !ok || allocatable.Cmp(initialAllocatable) != 0 {
			existing.Status.Allocatable[name] = initialAllocatable.DeepCopy()
			changed = true
		}
	}
	for name := range existing.Status.Capacity {
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) && !supported[name] {
			delete(existing.Status.Capacity, name)
			delete(existing.Status.Allocatable, name)
			changed = true
		}
	}
	return changed
}
