package pod

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// StatusPatch returns the strategic-merge patch that takes oldStatus to newStatus for the pod with uid,
// as the kubelet's status manager writes it (pkg/util/pod preparePatchBytesForPodStatus, called by
// PatchPodStatus): {"metadata":{"uid":...},"status":{...}}, the UID a precondition the API server checks
// (a pod deleted and re-created under the same name is not patched). It returns nil and no error when
// nothing changed (the kubelet's "unchanged": no write): first by StatusEqual, which builds nothing and
// allocates nothing (a pass over a pod that changed nothing costs one comparison), then, for statuses
// equal only once serialized, by the patch being empty. Send it with
// Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status").
// Errors name the pod's UID and wrap the marshalling or patch error.
func StatusPatch(uid types.UID, oldStatus, newStatus *v1.PodStatus) ([]byte, error) {
	if StatusEqual(oldStatus, newStatus) {
		return nil, nil
	}
	return statusPatch(uid, oldStatus, newStatus)
}

// statusPatch is StatusPatch without the StatusEqual shortcut: the patch built and compared with the
// empty one.
func statusPatch(uid types.UID, oldStatus, newStatus *v1.PodStatus) ([]byte, error) {
	oldData, err := json.Marshal(v1.Pod{Status: *oldStatus})
	if err != nil {
		return nil, fmt.Errorf("marshal old status of pod %s: %w", uid, err)
	}
	newData, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: *newStatus})
	if err != nil {
		return nil, fmt.Errorf("marshal new status of pod %s: %w", uid, err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, v1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("create status patch of pod %s: %w", uid, err)
	}
	if bytes.Equal(patch, fmt.Appendf(nil, `{"metadata":{"uid":%q}}`, uid)) {
		return nil, nil
	}
	return patch, nil
}
