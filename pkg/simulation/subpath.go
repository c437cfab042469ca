package simulation

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// mountSubPath returns the subPath of volume mount m in a container whose environment is vars (NAME to
// value), as the kubelet's makeMounts makes it: subPathExpr's $(VAR) references expanded
// (kubecontainer.ExpandContainerVolumeMounts: a variable absent or empty is the error "missing value
// for A, B", names sorted), then an absolute result refused ("error SubPath `/x` must not be an
// absolute path") and one with a ".." element refused ("unable to provision SubPath `..`: must not
// contain '..'", volume/validation.ValidatePathNoBacksteps). Either error is the container's
// CreateContainerConfigError message.
func mountSubPath(m *v1.VolumeMount, vars map[string]string) (string, error) {
	subPath := m.SubPath
	if m.SubPathExpr != "" {
		var missing []string
		subPath = expandVars(m.SubPathExpr, func(name string) string {
			v := vars[name]
			if v == "" && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
			return v
		})
		if len(missing) > 0 {
			slices.Sort(missing)
			return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
		}
	}
	if subPath == "" {
		return "", nil
	}
	if path.IsAbs(subPath) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", subPath)
	}
	if slices.Contains(strings.Split(subPath, "/"), "..") {
		return "", fmt.Errorf("unable to provision SubPath `%s`: %w", subPath, errors.New("must not contain '..'"))
	}
	return subPath, nil
}

// mountSubPaths returns the subPath of each of ctr's volume mounts (mountSubPath), in their order.
func mountSubPaths(ctr *v1.Container, vars map[string]string) ([]string, error) {
	out := make([]string, len(ctr.VolumeMounts))
	for i := range ctr.VolumeMounts {
		sp, err := mountSubPath(&ctr.VolumeMounts[i], vars)
		if err != nil {
			return nil, err
		}
		out[i] = sp
	}
	return out, nil
}
