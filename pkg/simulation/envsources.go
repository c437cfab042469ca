package simulation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ReasonCreateContainerConfigError is the waiting reason of a container whose config the kubelet
// cannot make (kuberuntime's ErrCreateContainerConfig): an env source that is missing and not
// optional (makeEnvironmentVariables).
const ReasonCreateContainerConfigError = "CreateContainerConfigError"

// objectGetTimeout bounds one GET of a ConfigMap or Secret a pod references.
const objectGetTimeout = 5 * time.Second

// SecretGetter reads a Secret: the simulator's client.
type SecretGetter func(ctx context.Context, namespace, name string) (*v1.Secret, error)

// envSources are where a container's env and volumes are read from, as the kubelet's configMapManager
// and secretManager (nil getters: references to them are left out), and the Node's allocatable (the
// kubelet's defaultPodLimitsForDownwardAPI).
type envSources struct {
	configMaps  ConfigMapGetter
	secrets     SecretGetter
	services    ServiceLister // the service links (serviceEnv); nil: none
	allocatable v1.ResourceList
	// forbidden: a read of that kind was Forbidden (the simulator's identity may not): no more GETs of
	// it, each reference taken as absent (skippable).
	configMapsForbidden, secretsForbidden, servicesForbidden atomic.Bool
}

// errForbidden is a read not made: an earlier one of its kind was Forbidden.
func errForbidden(kind, name string) error {
	return apierrors.NewForbidden(v1.Resource(kind), name, errors.New("the simulator's identity may not read them"))
}

// objectCache holds the ConfigMaps and Secrets read for one container's config (as the kubelet's
// makeEnvironmentVariables reads each at most once).
type objectCache struct {
	src        *envSources
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

// configMap returns namespace/name, with the kubelet's configMapManager's error when it is not found
// (`configmap "name" not found`, a NotFound error).
func (oc *objectCache) configMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	if cm, ok := oc.configMaps[name]; ok {
		return cm, nil
	}
	if oc.src.configMapsForbidden.Load() {
		return nil, errForbidden("configmaps", name)
	}
	ctx, cancel := context.WithTimeout(ctx, objectGetTimeout)
	defer cancel()
	cm, err := oc.src.configMaps(ctx, namespace, name)
	if apierrors.IsForbidden(err) {
		oc.src.configMapsForbidden.Store(true)
	}
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
	}
	if err != nil {
		return nil, fmt.Errorf("configmap %s/%s: %w", namespace, name, err)
	}
	if oc.configMaps == nil {
		oc.configMaps = map[string]*v1.ConfigMap{}
	}
	oc.configMaps[name] = cm
	return cm, nil
}

// secret is configMap for a Secret (`secret "name" not found`).
func (oc *objectCache) secret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	if s, ok := oc.secrets[name]; ok {
		return s, nil
	}
	if oc.src.secretsForbidden.Load() {
		return nil, errForbidden("secrets", name)
	}
	ctx, cancel := context.WithTimeout(ctx, objectGetTimeout)
	defer cancel()
	s, err := oc.src.secrets(ctx, namespace, name)
	if apierrors.IsForbidden(err) {
		oc.src.secretsForbidden.Store(true)
	}
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", namespace, name, err)
	}
	if oc.secrets == nil {
		oc.secrets = map[string]*v1.Secret{}
	}
	oc.secrets[name] = s
	return s, nil
}

// skippable reports whether a failed read of an object leaves its reference out rather than failing
// the container: a missing optional object (as the kubelet), or one the simulator's identity may not
// read (Forbidden: the simulation's RBAC grants no get on Secrets; as pkg/node's check of volumes, the
// reference is then taken as absent, as before the simulator read them).
func skippable(err error, optional bool) bool {
	return (apierrors.IsNotFound(err) && optional) || apierrors.IsForbidden(err)
}

// containerEnv returns container ctr's environment (NAME=value) and the same as a map, as the
// kubelet's makeEnvironmentVariables makes it without services: first envFrom's ConfigMaps and Secrets
// (each key with the prefix; keys in sorted order here, where the kubelet's order is a map's), then
// each env in the spec's order, replacing the same name: a value with its $(VAR) references to the
// variables before it expanded; a fieldRef's value (podFieldSelectorRuntimeValue: metadata.name,
// namespace, uid, labels['k'], annotations['k'], spec.nodeName, spec.serviceAccountName,
// status.podIP(s), status.hostIP(s)); a resourceFieldRef's (limits and requests of cpu, memory and
// ephemeral-storage with the divisor, the limits not set taken from the Node's allocatable); a
// configMapKeyRef's and a secretKeyRef's. An optional source that is missing (object or key) sets
// nothing; a missing one that is not optional is the error the kubelet makes the container's
// CreateContainerConfigError message with (`configmap "x" not found`, `couldn't find key k in
// ConfigMap ns/x`). With src nil (or its getters nil) the ConfigMap and Secret references are left out.
// services are the pod's service links (serviceEnv, nil: none): an env value's $(VAR) may reference
// them, and those whose names the container's env does not set follow its variables (sorted by name,
// where the kubelet's order is a map's).
func containerEnv(ctx context.Context, p *v1.Pod, ctr *v1.Container, podIPs []string, src *envSources, services map[string]string) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, seen := vars[k]; !seen {
			order = append(order, k)
		}
		vars[k] = v
	}
	mapping := func(name string) string {
		if v, ok := vars[name]; ok {
			return v
		}
		if v, ok := services[name]; ok {
			return v
		}
		return "$(" + name + ")"
	}
	oc := &objectCache{src: src}
	hasConfigMaps := src != nil && src.configMaps != nil
	hasSecrets := src != nil && src.secrets != nil
	for _, ef := range ctr.EnvFrom {
		var data map[string]string
		switch {
		case ef.ConfigMapRef != nil && hasConfigMaps:
			cm, err := oc.configMap(ctx, p.Namespace, ef.ConfigMapRef.Name)
			if err != nil {
				if skippable(err, ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional) {
					continue
				}
				return nil, nil, err
			}
			data = cm.Data
		case ef.SecretRef != nil && hasSecrets:
			s, err := oc.secret(ctx, p.Namespace, ef.SecretRef.Name)
			if err != nil {
				if skippable(err, ef.SecretRef.Optional != nil && *ef.SecretRef.Optional) {
					continue
				}
				return nil, nil, err
			}
			data = make(map[string]string, len(s.Data))
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			set(ef.Prefix+k, data[k])
		}
	}
	for _, e := range ctr.Env {
		val := e.Value
		switch {
		case val != "":
			val = expandVars(val, mapping)
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil:
			v, ok := fieldRefValue(p, e.ValueFrom.FieldRef.FieldPath, podIPs)
			if !ok {
				continue
			}
			val = v
		case e.ValueFrom.ResourceFieldRef != nil:
			var alloc v1.ResourceList
			if src != nil {
				alloc = src.allocatable
			}
			v, err := resourceFieldValue(p, ctr, e.ValueFrom.ResourceFieldRef, alloc)
			if err != nil {
				return nil, nil, err
			}
			val = v
		case e.ValueFrom.ConfigMapKeyRef != nil && hasConfigMaps:
			ref := e.ValueFrom.ConfigMapKeyRef
			optional := ref.Optional != nil && *ref.Optional
			cm, err := oc.configMap(ctx, p.Namespace, ref.Name)
			if err != nil {
				if skippable(err, optional) {
					continue
				}
				return nil, nil, err
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, nil, fmt.Errorf("couldn't find key %v in ConfigMap %v/%v", ref.Key, p.Namespace, ref.Name)
			}
			val = v
		case e.ValueFrom.SecretKeyRef != nil && hasSecrets:
			ref := e.ValueFrom.SecretKeyRef
			optional := ref.Optional != nil && *ref.Optional
			s, err := oc.secret(ctx, p.Namespace, ref.Name)
			if err != nil {
				if skippable(err, optional) {
					continue
				}
				return nil, nil, err
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, nil, fmt.Errorf("couldn't find key %v in Secret %v/%v", ref.Key, p.Namespace, ref.Name)
			}
			val = string(v)
		default:
			continue // a source not read here (no client; fileKeyRef)
		}
		set(e.Name, val)
	}
	links := make([]string, 0, len(services))
	for k := range services {
		if _, ok := vars[k]; !ok {
			links = append(links, k)
		}
	}
	slices.Sort(links)
	for _, k := range links {
		set(k, services[k])
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
}

// resourceFieldValue is a resourceFieldRef's value for container ctr of p (the kubelet's
// containerResourceRuntimeValue over defaultPodLimitsForDownwardAPI: a limit of cpu, memory or
// ephemeral-storage the container does not set is the Node's allocatable; then
// ExtractContainerResourceValue: the quantity divided by the divisor (default 1), rounded up). A
// containerName names another container of the pod.
func resourceFieldValue(p *v1.Pod, ctr *v1.Container, fs *v1.ResourceFieldSelector, allocatable v1.ResourceList) (string, error) {
	c := ctr
	if fs.ContainerName != "" {
		c = nil
		for _, l := range [][]v1.Container{p.Spec.Containers, p.Spec.InitContainers} {
			for i := range l {
				if l[i].Name == fs.ContainerName && c == nil {
					c = &l[i]
				}
			}
		}
		if c == nil {
			return "", fmt.Errorf("container %s not found", fs.ContainerName)
		}
	}
	limits := v1.ResourceList{}
	for k, q := range c.Resources.Limits {
		limits[k] = q
	}
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := limits[r]; !ok || q.IsZero() {
			if a, ok := allocatable[r]; ok {
				limits[r] = a
			}
		}
	}
	divisor := resource.MustParse("1")
	if !fs.Divisor.IsZero() {
		divisor = fs.Divisor
	}
	list, name, ok := limits, "", false
	if name, ok = strings.CutPrefix(fs.Resource, "limits."); !ok {
		if name, ok = strings.CutPrefix(fs.Resource, "requests."); ok {
			list = c.Resources.Requests
		}
	}
	rn := v1.ResourceName(name)
	if !ok || (rn != v1.ResourceCPU && rn != v1.ResourceMemory && rn != v1.ResourceEphemeralStorage &&
		!strings.HasPrefix(name, v1.ResourceHugePagesPrefix)) {
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	q := list[rn]
	if rn == v1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

// getConfigMap returns a GET of one ConfigMap through c: what the runs' env and volume sources read
// (envSources.configMaps) and what the kubelet API's log queries read (Streaming.ConfigMaps). Its
// error is the API server's (a NotFound when there is none).
func getConfigMap(c kubernetes.Interface) func(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return func(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
		return c.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}
