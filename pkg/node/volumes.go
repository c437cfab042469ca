package node

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// ReasonFailedMount is the kubelet's Event reason for a volume that could not be mounted.
const ReasonFailedMount = "FailedMount"

// missingVolume returns the first ConfigMap or Secret volume of p (not optional) whose object the API
// server does not have, and the kubelet's FailedMount message for it ("MountVolume.SetUp failed for volume
// "<volume>" : configmap "<name>" not found"); "" when every one exists. A pod with such a volume waits,
// as the kubelet's volume manager holds it ContainerCreating until the object exists. Projected volumes
// are not checked. A GET the identity may not make (Forbidden) is taken as found, and no such GET is made
// again by this Node: the check needs get on configmaps and secrets, which the simulation's RBAC does
// not grant.
func (w *podWorkers) missingVolume(ctx context.Context, p *v1.Pod) (volume, message string) {
	if w.volumesForbidden.Load() {
		return "", ""
	}
	for _, v := range p.Spec.Volumes {
		var kind, name string
		var err error
		switch {
		case v.ConfigMap != nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional):
			kind, name = "configmap", v.ConfigMap.Name
			_, err = w.node.deps.Client.CoreV1().ConfigMaps(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		case v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional):
			kind, name = "secret", v.Secret.SecretName
			_, err = w.node.deps.Client.CoreV1().Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		default:
			continue
		}
		switch {
		case apierrors.IsNotFound(err):
			return v.Name, fmt.Sprintf("MountVolume.SetUp failed for volume %q : %s %q not found", v.Name, kind, name)
		case apierrors.IsForbidden(err):
			if !w.volumesForbidden.Swap(true) {
				klog.FromContext(ctx).Info("Not allowed to read the pods' ConfigMaps and Secrets: their volumes are taken as present", "err", err)
			}
			return "", ""
		}
	}
	return "", ""
}
