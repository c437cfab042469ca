package pod

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/apiequal"
)

// StatusPatch returns the strategic-merge patch that takes oldStatus to newStatus for the pod with uid,
// as the kubelet's status manager writes it (pkg/util/pod preparePatchBytesForPodStatus, called by
// PatchPodStatus): {"metadata":{"uid":...},"status":{...}}, the UID a precondition the API server checks
// (a pod deleted and re-created under the same name is not patched). It returns nil and no error when
// nothing changed (the kubelet's "unchanged": no write): first by StatusEqual, which builds nothing and
// allocates nothing (a pass over a pod that changed nothing costs one comparison), then, for statuses
// equal only once serialized, by the patch being empty. Send it with
// Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status").
//
// The patch is built from the fields that changed (statusFields), not from two whole statuses: what
// the kubelet's CreateTwoWayMergePatch of the two would say, field by field (TestStatusPatchAgrees holds
// the two to the same content on table cases and random statuses). Only what differs is marshalled (a
// condition or a condition's field that did not change is not), and the patch is assembled from the
// marshalled fields once (appendObject), not marshalled again, and a field whose change its JSON
// shows whatever the times (statusField.exact, differs) is sent without the old value marshalled to
// compare: a simulated pod's deletion patch takes 92 allocations, 6.4 KB (236, 12.8 KB before;
// TestStatusPatchAllocs, BenchmarkStatusPatch).
// Errors name the pod's UID and wrap the marshalling or patch error.
func StatusPatch(uid types.UID, oldStatus, newStatus *v1.PodStatus) ([]byte, error) {
	if StatusEqual(oldStatus, newStatus) {
		return nil, nil
	}
	status := map[string]json.RawMessage{}
	for i := range statusFields {
		f := &statusFields[i]
		if f.equal(oldStatus, newStatus) {
			continue
		}
		var err error
		switch {
		case f.merge:
			var done bool
			if done, err = addedOrRemovedPatch(status, f.name, f.value(oldStatus), f.value(newStatus)); done || err != nil {
				break
			}
			if f.name == "conditions" && uniqueConditionTypes(oldStatus.Conditions, newStatus.Conditions) {
				err = conditionsPatch(status, oldStatus.Conditions, newStatus.Conditions)
			} else {
				err = mergeFieldPatch(status, oldStatus, newStatus, f.copy)
			}
		case f.exact || f.differs != nil && f.differs(oldStatus, newStatus):
			err = setFieldPatch(status, f.name, f.value(newStatus)) // differs once serialized: no need to compare
		default:
			err = replaceFieldPatch(status, f.name, f.value(oldStatus), f.value(newStatus))
		}
		if err != nil {
			return nil, fmt.Errorf("status patch of pod %s, field %s: %w", uid, f.name, err)
		}
	}
	if len(status) == 0 {
		return nil, nil // equal once serialized (e.g. times within the same second)
	}
	quotedUID, err := json.Marshal(uid)
	if err != nil {
		return nil, fmt.Errorf("status patch of pod %s: %w", uid, err)
	}
	patch := make([]byte, 0, patchSize(status)+len(quotedUID)+len(`{"metadata":{"uid":},"status":}`))
	patch = append(append(append(patch, `{"metadata":{"uid":`...), quotedUID...), `},"status":`...)
	return append(appendObject(patch, status), '}'), nil
}

// appendObject appends to dst the JSON object of m's members, in the order of their names, as
// json.Marshal writes a map[string]json.RawMessage, without checking and compacting each value again:
// the values are json.Marshal's output (or the library's patch), and the names are PodStatus's JSON
// names and the patch's directives ("$setElementOrder/conditions", "$patch"), which need no escaping.
// TestAppendObjectAsMarshal holds it to json.Marshal.
func appendObject(dst []byte, m map[string]json.RawMessage) []byte {
	keys := make([]string, 0, 16) // on the stack: a status patch has at most PodStatus's fields and directives
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(append(append(append(dst, '"'), k...), '"', ':'), m[k]...)
	}
	return append(dst, '}')
}

// appendArray appends to dst the JSON array of values, as json.Marshal writes a []json.RawMessage
// of json.Marshal's output.
func appendArray(dst []byte, values []json.RawMessage) []byte {
	n := len(values) + 1
	for _, v := range values {
		n += len(v)
	}
	dst = append(slices.Grow(dst, n), '[')
	for i, v := range values {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, v...)
	}
	return append(dst, ']')
}

// patchSize is the length of appendObject(nil, m), for one allocation of the patch.
func patchSize(m map[string]json.RawMessage) int {
	n := 2
	for k, v := range m {
		n += len(k) + len(v) + 4
	}
	return n
}

// statusField is one field of PodStatus as the strategic merge patch treats it: a value the patch
// replaces when it changed (scalars, times, lists without a patch strategy: the container statuses),
// or one it merges (lists with a merge key, maps and structs: diffed as CreateTwoWayMergePatch diffs
// them, on that field alone).
type statusField struct {
	name  string // the JSON name
	merge bool
	// equal reports whether the field is the same in both (semantically; false may still serialize alike).
	equal func(a, b *v1.PodStatus) bool
	// value is the field's value to marshal, nil when omitempty leaves it out.
	value func(s *v1.PodStatus) any
	// copy sets the field of dst from src (merged fields: CreateTwoWayMergePatch diffs them when both
	// sides have them).
	copy func(dst, src *v1.PodStatus)
	// exact: equal is the serialization's equality (a scalar: no time, which JSON keeps to the second),
	// so values not equal serialize differently and the old one is not marshalled to be compared.
	exact bool
	// differs, for a replaced field that is not exact, reports a difference its serialization shows
	// whatever its times (then the old value is not marshalled to be compared); false: compare them.
	differs func(a, b *v1.PodStatus) bool
}

// statusFields are PodStatus's fields in its order. TestStatusFieldsCoverPodStatus fails when
// PodStatus gains one.
var statusFields = []statusField{
	{name: "observedGeneration", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.ObservedGeneration == b.ObservedGeneration },
		value: func(s *v1.PodStatus) any { return omitZero(s.ObservedGeneration) }},
	{name: "phase", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.Phase == b.Phase },
		value: func(s *v1.PodStatus) any { return omitZero(s.Phase) }},
	{name: "conditions", merge: true, equal: func(a, b *v1.PodStatus) bool { return slices.EqualFunc(a.Conditions, b.Conditions, conditionEqual) },
		value: func(s *v1.PodStatus) any { return omitEmpty(s.Conditions) },
		copy:  func(d, s *v1.PodStatus) { d.Conditions = s.Conditions }},
	{name: "message", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.Message == b.Message },
		value: func(s *v1.PodStatus) any { return omitZero(s.Message) }},
	{name: "reason", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.Reason == b.Reason },
		value: func(s *v1.PodStatus) any { return omitZero(s.Reason) }},
	{name: "nominatedNodeName", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.NominatedNodeName == b.NominatedNodeName },
		value: func(s *v1.PodStatus) any { return omitZero(s.NominatedNodeName) }},
	{name: "hostIP", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.HostIP == b.HostIP },
		value: func(s *v1.PodStatus) any { return omitZero(s.HostIP) }},
	{name: "hostIPs", merge: true, equal: func(a, b *v1.PodStatus) bool { return slices.Equal(a.HostIPs, b.HostIPs) },
		value: func(s *v1.PodStatus) any { return omitEmpty(s.HostIPs) },
		copy:  func(d, s *v1.PodStatus) { d.HostIPs = s.HostIPs }},
	{name: "podIP", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.PodIP == b.PodIP },
		value: func(s *v1.PodStatus) any { return omitZero(s.PodIP) }},
	{name: "podIPs", merge: true, equal: func(a, b *v1.PodStatus) bool { return slices.Equal(a.PodIPs, b.PodIPs) },
		value: func(s *v1.PodStatus) any { return omitEmpty(s.PodIPs) },
		copy:  func(d, s *v1.PodStatus) { d.PodIPs = s.PodIPs }},
	{name: "startTime", equal: func(a, b *v1.PodStatus) bool { return a.StartTime.Equal(b.StartTime) },
		value: func(s *v1.PodStatus) any { return omitNil(s.StartTime) }},
	{name: "initContainerStatuses", differs: func(a, b *v1.PodStatus) bool {
		return containerStatusesDiffer(a.InitContainerStatuses, b.InitContainerStatuses)
	},
		equal: func(a, b *v1.PodStatus) bool {
			return containerStatusesEqual(a.InitContainerStatuses, b.InitContainerStatuses)
		}, value: func(s *v1.PodStatus) any { return omitEmpty(s.InitContainerStatuses) }},
	{name: "containerStatuses", differs: func(a, b *v1.PodStatus) bool {
		return containerStatusesDiffer(a.ContainerStatuses, b.ContainerStatuses)
	},
		equal: func(a, b *v1.PodStatus) bool {
			return containerStatusesEqual(a.ContainerStatuses, b.ContainerStatuses)
		}, value: func(s *v1.PodStatus) any { return omitEmpty(s.ContainerStatuses) }},
	{name: "qosClass", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.QOSClass == b.QOSClass },
		value: func(s *v1.PodStatus) any { return omitZero(s.QOSClass) }},
	{name: "ephemeralContainerStatuses", differs: func(a, b *v1.PodStatus) bool {
		return containerStatusesDiffer(a.EphemeralContainerStatuses, b.EphemeralContainerStatuses)
	},
		equal: func(a, b *v1.PodStatus) bool {
			return containerStatusesEqual(a.EphemeralContainerStatuses, b.EphemeralContainerStatuses)
		}, value: func(s *v1.PodStatus) any { return omitEmpty(s.EphemeralContainerStatuses) }},
	{name: "resize", exact: true, equal: func(a, b *v1.PodStatus) bool { return a.Resize == b.Resize },
		value: func(s *v1.PodStatus) any { return omitZero(s.Resize) }},
	{name: "resourceClaimStatuses", merge: true, equal: func(a, b *v1.PodStatus) bool {
		return slices.EqualFunc(a.ResourceClaimStatuses, b.ResourceClaimStatuses, func(x, y v1.PodResourceClaimStatus) bool {
			return x.Name == y.Name && ptr.Equal(x.ResourceClaimName, y.ResourceClaimName)
		})
	}, value: func(s *v1.PodStatus) any { return omitEmpty(s.ResourceClaimStatuses) },
		copy: func(d, s *v1.PodStatus) { d.ResourceClaimStatuses = s.ResourceClaimStatuses }},
	{name: "extendedResourceClaimStatus", merge: true, equal: func(a, b *v1.PodStatus) bool {
		return apiequal.Ptr(a.ExtendedResourceClaimStatus, b.ExtendedResourceClaimStatus)
	}, value: func(s *v1.PodStatus) any { return omitNil(s.ExtendedResourceClaimStatus) },
		copy: func(d, s *v1.PodStatus) { d.ExtendedResourceClaimStatus = s.ExtendedResourceClaimStatus }},
	{name: "allocatedResources", merge: true, equal: func(a, b *v1.PodStatus) bool {
		return apiequal.ResourceList(a.AllocatedResources, b.AllocatedResources)
	}, value: func(s *v1.PodStatus) any { return omitEmptyMap(s.AllocatedResources) },
		copy: func(d, s *v1.PodStatus) { d.AllocatedResources = s.AllocatedResources }},
	{name: "resources", merge: true, equal: func(a, b *v1.PodStatus) bool { return resourcesEqual(a.Resources, b.Resources) },
		value: func(s *v1.PodStatus) any { return omitNil(s.Resources) },
		copy:  func(d, s *v1.PodStatus) { d.Resources = s.Resources }},
	{name: "nodeAllocatableResourceClaimStatuses", merge: true, equal: func(a, b *v1.PodStatus) bool {
		return apiequal.Slice(a.NodeAllocatableResourceClaimStatuses, b.NodeAllocatableResourceClaimStatuses)
	}, value: func(s *v1.PodStatus) any { return omitEmpty(s.NodeAllocatableResourceClaimStatuses) },
		copy: func(d, s *v1.PodStatus) {
			d.NodeAllocatableResourceClaimStatuses = s.NodeAllocatableResourceClaimStatuses
		}},
	{name: "volumeHealth", equal: func(a, b *v1.PodStatus) bool { return apiequal.Slice(a.VolumeHealth, b.VolumeHealth) },
		value: func(s *v1.PodStatus) any { return omitEmpty(s.VolumeHealth) }},
}

// omitZero, omitNil and omitEmpty return nil where the field's omitempty leaves it out of the JSON.
func omitZero[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

func omitNil[T any](p *T) any {
	if p == nil {
		return nil
	}
	return p
}

func omitEmptyMap[K comparable, V any](m map[K]V) any {
	if len(m) == 0 {
		return nil
	}
	return m
}

func omitEmpty[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

// replaceFieldPatch sets status[name] to the new value, or to null when omitempty leaves it out, unless
// both serialize alike (CreateTwoWayMergePatch's replace: a value added, changed or removed).
func replaceFieldPatch(status map[string]json.RawMessage, name string, oldValue, newValue any) error {
	var oldJSON, newJSON []byte
	var err error
	if oldValue != nil {
		if oldJSON, err = json.Marshal(oldValue); err != nil {
			return err
		}
	}
	if newValue != nil {
		if newJSON, err = json.Marshal(newValue); err != nil {
			return err
		}
	}
	switch {
	case oldValue == nil && newValue == nil, oldValue != nil && newValue != nil && bytes.Equal(oldJSON, newJSON):
		return nil
	case newValue == nil:
		status[name] = json.RawMessage("null")
	default:
		status[name] = newJSON
	}
	return nil
}

// setFieldPatch sets status[name] to value, or to null when omitempty leaves it out (nil): the
// replacement of a field known to serialize differently from the old one.
func setFieldPatch(status map[string]json.RawMessage, name string, value any) error {
	if value == nil {
		status[name] = json.RawMessage("null")
		return nil
	}
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	status[name] = b
	return nil
}

// containerStatusesDiffer reports whether a and b differ in something their JSON always shows: their
// number, or a container's name, image, IDs, readiness, started, restart count, or which state (and
// last state) it is in with which exit code and reason. False: they may still differ (in times).
func containerStatusesDiffer(a, b []v1.ContainerStatus) bool {
	if len(a) != len(b) {
		return true
	}
	stateDiffers := func(x, y *v1.ContainerState) bool {
		if (x.Waiting == nil) != (y.Waiting == nil) || (x.Running == nil) != (y.Running == nil) || (x.Terminated == nil) != (y.Terminated == nil) {
			return true
		}
		if x.Waiting != nil && (x.Waiting.Reason != y.Waiting.Reason || x.Waiting.Message != y.Waiting.Message) {
			return true
		}
		return x.Terminated != nil && (x.Terminated.ExitCode != y.Terminated.ExitCode || x.Terminated.Reason != y.Terminated.Reason)
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.Image != y.Image || x.ImageID != y.ImageID || x.ContainerID != y.ContainerID ||
			x.Ready != y.Ready || x.RestartCount != y.RestartCount || !ptr.Equal(x.Started, y.Started) ||
			stateDiffers(&x.State, &y.State) || stateDiffers(&x.LastTerminationState, &y.LastTerminationState) {
			return true
		}
	}
	return false
}

// uniqueConditionTypes reports whether each condition type appears once in a and once in b, as the
// API server keeps them: then conditionsPatch builds the conditions' patch.
func uniqueConditionTypes(a, b []v1.PodCondition) bool {
	for _, l := range [][]v1.PodCondition{a, b} {
		for i := range l {
			for j := range i {
				if l[j].Type == l[i].Type {
					return false
				}
			}
		}
	}
	return true
}

// conditionsPatch adds to status the patch of a list merged by condition type, as
// CreateTwoWayMergePatch makes it (diffLists): in the new list's order, each added condition whole and
// each changed one as its type and the fields that changed (null for one omitempty now leaves out);
// then a delete directive per removed type, in the order of the types' names; and
// "$setElementOrder/conditions" (every new type, in order) when anything changed or the order did.
func conditionsPatch(status map[string]json.RawMessage, oldConds, newConds []v1.PodCondition) error {
	var patch []json.RawMessage
	for i := range newConds {
		n := &newConds[i]
		j := slices.IndexFunc(oldConds, func(c v1.PodCondition) bool { return c.Type == n.Type })
		if j < 0 {
			b, err := json.Marshal(n)
			if err != nil {
				return err
			}
			patch = append(patch, b)
			continue
		}
		o := &oldConds[j]
		if conditionEqual(*o, *n) {
			continue // semantically equal: serialized alike, nothing to patch
		}
		// Only the fields that differ are marshalled and compared: equal values serialize alike.
		fields := make(map[string]json.RawMessage, 7)
		var err error
		if o.ObservedGeneration != n.ObservedGeneration {
			err = setFieldPatch(fields, "observedGeneration", omitZero(n.ObservedGeneration))
		}
		if err == nil && o.Status != n.Status {
			err = setFieldPatch(fields, "status", n.Status)
		}
		if err == nil && !o.LastProbeTime.Equal(&n.LastProbeTime) {
			err = replaceFieldPatch(fields, "lastProbeTime", &o.LastProbeTime, &n.LastProbeTime)
		}
		if err == nil && !o.LastTransitionTime.Equal(&n.LastTransitionTime) {
			err = replaceFieldPatch(fields, "lastTransitionTime", &o.LastTransitionTime, &n.LastTransitionTime)
		}
		if err == nil && o.Reason != n.Reason {
			err = setFieldPatch(fields, "reason", omitZero(n.Reason))
		}
		if err == nil && o.Message != n.Message {
			err = setFieldPatch(fields, "message", omitZero(n.Message))
		}
		if err != nil {
			return err
		}
		if len(fields) == 0 {
			continue
		}
		typ, err := json.Marshal(n.Type)
		if err != nil {
			return err
		}
		fields["type"] = typ
		patch = append(patch, appendObject(make([]byte, 0, patchSize(fields)), fields))
	}
	var removed []string
	for i := range oldConds {
		if !slices.ContainsFunc(newConds, func(c v1.PodCondition) bool { return c.Type == oldConds[i].Type }) {
			removed = append(removed, string(oldConds[i].Type))
		}
	}
	slices.Sort(removed)
	for _, t := range removed {
		b, err := json.Marshal(map[string]string{"$patch": "delete", "type": t})
		if err != nil {
			return err
		}
		patch = append(patch, b)
	}
	sameOrder := slices.EqualFunc(oldConds, newConds, func(a, b v1.PodCondition) bool { return a.Type == b.Type })
	if len(patch) == 0 && sameOrder {
		return nil
	}
	order := make([]struct {
		Type v1.PodConditionType `json:"type"`
	}, len(newConds))
	for i := range newConds {
		order[i].Type = newConds[i].Type
	}
	var err error
	if status["$setElementOrder/conditions"], err = json.Marshal(order); err != nil {
		return err
	}
	if len(patch) > 0 {
		status["conditions"] = appendArray(nil, patch)
	}
	return nil
}

// addedOrRemovedPatch handles a merged field that one side leaves out, as CreateTwoWayMergePatch
// does: a field added is sent whole, one removed as null. It reports false when both sides have it.
func addedOrRemovedPatch(status map[string]json.RawMessage, name string, oldValue, newValue any) (bool, error) {
	if oldValue != nil && newValue != nil {
		return false, nil
	}
	return true, replaceFieldPatch(status, name, oldValue, newValue)
}

// mergeFieldPatch adds to status what CreateTwoWayMergePatch says for one merged field (set by copy
// into otherwise empty statuses): the field's patch and its directives ($setElementOrder/<name>).
func mergeFieldPatch(status map[string]json.RawMessage, oldStatus, newStatus *v1.PodStatus, setField func(dst, src *v1.PodStatus)) error {
	var o, n v1.Pod
	setField(&o.Status, oldStatus)
	setField(&n.Status, newStatus)
	oldData, err := json.Marshal(&o)
	if err != nil {
		return err
	}
	newData, err := json.Marshal(&n)
	if err != nil {
		return err
	}
	p, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, v1.Pod{})
	if err != nil {
		return err
	}
	var fields struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(p, &fields); err != nil {
		return err
	}
	for k, v := range fields.Status {
		status[k] = v
	}
	return nil
}

// statusPatch is the patch as it was built before StatusPatch built it field by field, and as the
// kubelet builds it: both statuses marshalled whole and diffed by CreateTwoWayMergePatch. Tests hold
// StatusPatch to it.
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
