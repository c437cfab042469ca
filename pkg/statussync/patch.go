package statussync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/nodestatus"
)

// patchNodeStatus sends a two-way strategic merge patch of original→node to nodes/status
// (component-helpers PatchNodeStatus, with $patch: replace for addresses) and records the report time.
// A failed patch's Err wraps the API error, so that its reason (Conflict, NotFound, ...) reaches the
// result and the node-gone check.
func (s *Syncer) patchNodeStatus(ctx context.Context, original, node *v1.Node) SyncResult {
	start := s.cfg.Clock.Now()
	nodes := &errorKeepingNodes{NodeInterface: s.cfg.Client.CoreV1().Nodes()}
	updated, patch, err := nodeutil.PatchNodeStatus(nodesClient{s.cfg.Client.CoreV1(), nodes}, types.NodeName(s.cfg.NodeName), original, node)
	r := SyncResult{Patched: true, PatchDuration: s.cfg.Clock.Since(start), Patch: string(patch)}
	if err != nil {
		if nodes.err != nil {
			// PatchNodeStatus formats the API error with %v, which drops its type: wrap it again.
			err = fmt.Errorf("failed to patch status %q for node %q: %w", nodes.data, s.cfg.NodeName, nodes.err)
			r.Patch = string(nodes.data)
		}
		r.PatchReason = string(apierrors.ReasonForError(err))
		if r.PatchReason == "" {
			r.PatchReason = "Unknown"
		}
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("patching node %q status: %w: %w", s.cfg.NodeName, ErrNodeGone, err)
		} else {
			err = fmt.Errorf("patching node %q status: %w", s.cfg.NodeName, err)
		}
		r.Err = err
		return r
	}
	klog.FromContext(ctx).V(4).Info("Patched node status", "node", s.cfg.NodeName, "patchBytes", len(patch))
	s.lastStatusReportTime = s.cfg.Clock.Now()
	if updated != nil {
		// Kept until the next sync (and by the controller as the posted Node): without its
		// managedFields, as the informer keeps its copy (nodecache.StripManagedFields).
		updated.ManagedFields = nil
		s.known.Store(updated)
	}
	s.recordUnkept(ctx, node, updated)
	r.Result, r.Node = ResultPatched, updated
	return r
}

// unkept reports whether the change from original to node is only what the API server did not keep
// after the last patch: the setters computed the same status as was then sent, and the Node still holds
// what was kept. An older API server drops fields it does not know (nodeInfo.runningInUserNamespace
// before 1.37, or with the KubeletInUserNamespace gate off): without this, every sync would patch them
// again, and the write rate per node would be one per status period instead of one per report period.
func (s *Syncer) unkept(original, node *v1.Node) bool {
	return s.unkeptSent != nil && !nodestatus.NodeStatusHasChanged(s.unkeptSent, &node.Status) && !nodestatus.NodeStatusHasChanged(s.unkeptKept, &original.Status)
}

// recordUnkept compares the status sent, as the API server decodes it (a JSON round trip: times to the
// second), with the status the patch returned; it remembers a difference for unkept and logs it (as a
// two-way merge patch from kept to sent) when it is new.
func (s *Syncer) recordUnkept(ctx context.Context, sent, updated *v1.Node) {
	s.unkeptSent, s.unkeptKept = nil, nil
	if updated == nil {
		return
	}
	want, err1 := json.Marshal(sent.Status)
	kept, err2 := json.Marshal(updated.Status)
	var wire v1.NodeStatus
	if err := errors.Join(err1, err2, json.Unmarshal(want, &wire)); err != nil || !nodestatus.NodeStatusHasChanged(&updated.Status, &wire) {
		return
	}
	p, err := strategicpatch.CreateTwoWayMergePatch(kept, want, v1.NodeStatus{})
	if err != nil || string(p) == "{}" {
		return
	}
	if key := string(p); key != s.unkeptLogged {
		s.unkeptLogged = key
		klog.FromContext(ctx).Info("The API server did not keep part of the node status it was sent (a field it does not know?); it is sent again only when the status changes or at the report frequency",
			"node", s.cfg.NodeName, "notKept", key)
	}
	s.unkeptSent, s.unkeptKept = &wire, updated.Status.DeepCopy()
}

// nodesClient is a CoreV1Interface whose Nodes() is nodes.
type nodesClient struct {
	typedcorev1.CoreV1Interface
	nodes typedcorev1.NodeInterface
}

func (c nodesClient) Nodes() typedcorev1.NodeInterface { return c.nodes }

// errorKeepingNodes remembers the data and the error of its last Patch.
type errorKeepingNodes struct {
	typedcorev1.NodeInterface
	data []byte
	err  error
}

func (n *errorKeepingNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1.Node, error) {
	updated, err := n.NodeInterface.Patch(ctx, name, pt, data, opts, subresources...)
	n.data, n.err = data, err
	return updated, err
}
