package simulation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	goruntime "runtime"
	"slices"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// The request limits a registered Node must fit (CheckNodeObject).
const (
	// EtcdMaxRequestBytes is etcd's default --max-request-bytes (1.5 MiB): the API server stores a Node
	// in one etcd request, and a larger one fails with "etcdserver: request is too large" on every try.
	EtcdMaxRequestBytes = 1572864
	// APIServerMaxRequestBodyBytes is kube-apiserver's default --max-request-bytes (3 MiB), the
	// largest request body it decodes (a create or a patch of the whole status).
	APIServerMaxRequestBodyBytes = 3 << 20
)

// managedFieldsBytesPerEntry approximates what the API server's managedFields add to the stored Node
// for each label, annotation, taint, condition and resource name (an entry "f:<key>":{} per field
// manager that set it, plus its key), on top of managedFieldsBaseBytes for the rest of the Node.
const (
	managedFieldsBytesPerEntry = 16
	managedFieldsBaseBytes     = 4 << 10
)

// InitialNode returns the Node the simulation registers for its last Node (the longest name of the
// shard), as registration.Registrar.InitialNode (the kubelet's initialNode) builds it: the default
// labels (hostname, os, arch and their beta twins), the template's and --node-labels' labels and the
// simulation's, the attach-detach annotation, the taints (and node.kubernetes.io/unschedulable when
// cordoned), and a first status from every setter of the Node's controller (node.New's
// DefaultNodeStatusFuncs and the simulation's extra ones), applied in order. It makes no API call and
// records no Event (the controller is a scratch one, never started).
func (s *Simulator) InitialNode(ctx context.Context) (*v1.Node, error) {
	sn := s.nodes[len(s.nodes)-1]
	cfg := s.nodeConfig(sn)
	deps := s.cfg.Dependencies
	deps.Recorder, deps.Observer = &record.FakeRecorder{}, nil // no Event, no metric from this Node
	ctrl, err := node.New(cfg, deps)
	if err != nil {
		return nil, fmt.Errorf("simulation: %w", err)
	}
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: cfg.NodeName,
			Labels: map[string]string{
				v1.LabelHostname: cfg.Hostname, v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH,
				"beta.kubernetes.io/os": goruntime.GOOS, "beta.kubernetes.io/arch": goruntime.GOARCH,
			},
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: v1.NodeSpec{Unschedulable: cfg.Unschedulable, Taints: slices.Clone(cfg.Taints)},
	}
	if cfg.Unschedulable {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule})
	}
	maps.Copy(n.Labels, cfg.Labels)
	for _, f := range append(ctrl.DefaultNodeStatusFuncs(), cfg.ExtraFuncs...) {
		_ = f.Setter(ctx, n) // a failing setter leaves its part out, as in registration
	}
	return n, nil
}

// CheckNodeObject checks the Node the simulation would register (InitialNode) as the API server and
// etcd will, so that a Node they refuse is refused at start instead of on every registration attempt:
//   - its labels with metav1validation.ValidateLabels and its annotations with
//     apimachinery/pkg/api/validation.ValidateAnnotations (each key and value; annotations at most
//     apivalidation.TotalAnnotationSizeLimitB, 256 KiB, in all), the API server's ValidateObjectMeta;
//   - its protobuf encoding (what the API server stores), with an estimate of the managedFields the
//     API server adds, against EtcdMaxRequestBytes;
//   - its JSON encoding against APIServerMaxRequestBodyBytes.
//
// The error names the Node, the sizes, the limit and where the limit comes from; what names the
// flag is the caller's.
func CheckNodeObject(n *v1.Node) error {
	var errs []error
	for _, e := range metav1validation.ValidateLabels(n.Labels, field.NewPath("metadata", "labels")) {
		errs = append(errs, errors.New(e.Error()))
	}
	for _, e := range apivalidation.ValidateAnnotations(n.Annotations, field.NewPath("metadata", "annotations")) {
		errs = append(errs, errors.New(e.Error()))
	}
	if len(errs) > 0 {
		return fmt.Errorf("node %s: %w", n.Name, errors.Join(errs...))
	}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(n, &buf); err != nil {
		return fmt.Errorf("node %s: encoding it: %w", n.Name, err)
	}
	stored := buf.Len() + managedFieldsEstimate(n)
	if stored > EtcdMaxRequestBytes {
		return fmt.Errorf("node %s would take %s in etcd (%s of protobuf, %d labels, %d taints, %d images, with an estimate of the API server's managedFields), over etcd's default request limit of %s (--max-request-bytes=%d): every registration would fail with \"etcdserver: request is too large\"",
			n.Name, sizeText(stored), sizeText(buf.Len()), len(n.Labels), len(n.Spec.Taints), len(n.Status.Images), sizeText(EtcdMaxRequestBytes), EtcdMaxRequestBytes)
	}
	js, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("node %s: encoding it: %w", n.Name, err)
	}
	if len(js) > APIServerMaxRequestBodyBytes {
		return fmt.Errorf("node %s is %s as JSON, over kube-apiserver's default request body limit of %s (--max-request-bytes=%d)",
			n.Name, sizeText(len(js)), sizeText(APIServerMaxRequestBodyBytes), APIServerMaxRequestBodyBytes)
	}
	return nil
}

// managedFieldsEstimate approximates the managedFields the API server adds to n: one entry per key of
// what a field manager sets (labels, annotations, taints, conditions, resources, images are one atomic
// list), each with its key, plus a base for the rest.
func managedFieldsEstimate(n *v1.Node) int {
	size := managedFieldsBaseBytes
	for k := range n.Labels {
		size += len(k) + managedFieldsBytesPerEntry
	}
	for k := range n.Annotations {
		size += len(k) + managedFieldsBytesPerEntry
	}
	for _, t := range n.Spec.Taints {
		size += len(t.Key) + len(t.Effect) + 2*managedFieldsBytesPerEntry
	}
	// Set at registration and again by the status patches (two managers).
	for _, c := range n.Status.Conditions {
		size += 2 * (len(c.Type) + 5*managedFieldsBytesPerEntry)
	}
	for name := range n.Status.Capacity {
		size += 2 * (len(name) + managedFieldsBytesPerEntry)
	}
	for name := range n.Status.Allocatable {
		size += 2 * (len(name) + managedFieldsBytesPerEntry)
	}
	return size
}

func sizeText(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", b)
}
