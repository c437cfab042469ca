package simulation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// EventReasonFailedMount is the kubelet's Event reason of a volume it cannot set up (the volume
// manager's MountVolume.SetUp failed).
const EventReasonFailedMount = "FailedMount"

// mountError is a volume the kubelet's volume manager cannot set up: the pod's containers are not
// created (ContainerCreating) and the kubelet tells it in a FailedMount Event.
type mountError struct {
	volume string
	err    error
}

func (e *mountError) Error() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.volume, e.err)
}

func (e *mountError) Unwrap() error { return e.err }

// isMountError reports whether err is a mountError.
func isMountError(err error) bool {
	var me *mountError
	return errors.As(err, &me)
}

// objectVolume returns the read-only file system of a ConfigMap, Secret, downwardAPI or projected
// volume of p, as the kubelet's volume manager writes it (its atomic writer): each key (or each item's
// path) a file holding the value; without the ..data symlinks and the files' modes. It is made at the
// first run that mounts it and kept for the pod (the kubelet updates such volumes when the objects
// change; here they keep the content of their first read). Its size is at most sandbox.DefaultFSBytes
// (as an emptyDir's): a bigger volume, or a missing object or key that is not optional (of a
// ConfigMap or Secret volume; a projected volume leaves them out), is a mountError.
func (c *commands) objectVolume(ctx context.Context, p *v1.Pod, vol *v1.Volume, pc *podCommands) (*sandbox.FS, error) {
	if fs := pc.objects[vol.Name]; fs != nil {
		return fs, nil
	}
	files := map[string][]byte{}
	oc := &objectCache{src: c.src}
	if oc.src == nil {
		oc.src = &envSources{}
	}
	var err error
	switch {
	case vol.ConfigMap != nil:
		err = configMapFiles(ctx, oc, p, &vol.ConfigMap.LocalObjectReference, vol.ConfigMap.Items, vol.ConfigMap.Optional, files)
	case vol.Secret != nil:
		err = secretFiles(ctx, oc, p, vol.Secret.SecretName, vol.Secret.Items, vol.Secret.Optional, files)
	case vol.DownwardAPI != nil:
		err = downwardAPIFiles(p, vol.DownwardAPI.Items, pc.podIPs, oc.src.allocatable, files)
	case vol.Projected != nil:
		// As pkg/node's check of volumes, a projected volume is not held for a missing object or key:
		// its files are left out (the kube-api-access volume of every pod names kube-root-ca.crt, which
		// a control plane without the root CA publisher never has).
		lenient := true
		for _, s := range vol.Projected.Sources {
			switch {
			case s.ConfigMap != nil:
				err = configMapFiles(ctx, oc, p, &s.ConfigMap.LocalObjectReference, s.ConfigMap.Items, &lenient, files)
			case s.Secret != nil:
				err = secretFiles(ctx, oc, p, s.Secret.Name, s.Secret.Items, &lenient, files)
			case s.DownwardAPI != nil:
				err = downwardAPIFiles(p, s.DownwardAPI.Items, pc.podIPs, oc.src.allocatable, files)
			}
			if err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, &mountError{volume: vol.Name, err: err}
	}
	fs := sandbox.NewFS(0)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := writeFile(fs, name, files[name]); err != nil {
			return nil, &mountError{volume: vol.Name, err: fmt.Errorf("writing %s (the volume's content is bounded to %d bytes): %w", name, sandbox.DefaultFSBytes, err)}
		}
	}
	if pc.objects == nil {
		pc.objects = map[string]*sandbox.FS{}
	}
	pc.objects[vol.Name] = fs
	return fs, nil
}

// writeFile writes data to name of fs, making its parents.
func writeFile(fs *sandbox.FS, name string, data []byte) error {
	name = path.Join("/", name)
	if err := fs.MkdirAll(path.Dir(name)); err != nil {
		return err
	}
	f, err := fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return err
}

// keyFiles puts data's keys (or items' keys at their paths) in files, as the kubelet's
// MakePayload: a key of items the object lacks is an error unless optional (missing: its message).
func keyFiles(missing string, data map[string][]byte, items []v1.KeyToPath, optional bool, files map[string][]byte) error {
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s: %v", missing, it.Key)
		}
		p := it.Path
		if p == "" {
			p = it.Key
		}
		files[p] = v
	}
	return nil
}

func configMapFiles(ctx context.Context, oc *objectCache, p *v1.Pod, ref *v1.LocalObjectReference, items []v1.KeyToPath, opt *bool, files map[string][]byte) error {
	optional := opt != nil && *opt
	if oc.src.configMaps == nil {
		return nil
	}
	cm, err := oc.configMap(ctx, p.Namespace, ref.Name)
	if err != nil {
		if skippable(err, optional) {
			return nil
		}
		return err
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap references non-existent config key", data, items, optional, files)
}

func secretFiles(ctx context.Context, oc *objectCache, p *v1.Pod, name string, items []v1.KeyToPath, opt *bool, files map[string][]byte) error {
	optional := opt != nil && *opt
	if oc.src.secrets == nil {
		return nil
	}
	s, err := oc.secret(ctx, p.Namespace, name)
	if err != nil {
		if skippable(err, optional) {
			return nil
		}
		return err
	}
	return keyFiles("secret references non-existent secret key", s.Data, items, optional, files)
}

// downwardAPIFiles puts each item's value in files at its path: a fieldRef's (metadata.labels and
// metadata.annotations whole as the kubelet's fieldpath.FormatMap: sorted key="value" lines) or a
// resourceFieldRef's.
func downwardAPIFiles(p *v1.Pod, items []v1.DownwardAPIVolumeFile, podIPs []string, allocatable v1.ResourceList, files map[string][]byte) error {
	for _, it := range items {
		var v string
		switch {
		case it.FieldRef != nil:
			switch it.FieldRef.FieldPath {
			case "metadata.labels":
				v = formatMap(p.Labels)
			case "metadata.annotations":
				v = formatMap(p.Annotations)
			default:
				var ok bool
				if v, ok = fieldRefValue(p, it.FieldRef.FieldPath, podIPs); !ok {
					return fmt.Errorf("unsupported fieldPath: %s", it.FieldRef.FieldPath)
				}
			}
		case it.ResourceFieldRef != nil:
			ctr := &v1.Container{}
			var err error
			if v, err = resourceFieldValue(p, ctr, it.ResourceFieldRef, allocatable); err != nil {
				return err
			}
		}
		files[it.Path] = []byte(v)
	}
	return nil
}

// formatMap is the kubelet's fieldpath.FormatMap: key="value" lines in key order, the value quoted as
// Go's %q, without a newline after the last.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}
