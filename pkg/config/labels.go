package config

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// validateKubeletLabels refuses nodeLabels (--node-labels) that a node may not set on its own Node,
// as the kubelet's ValidateKubeletFlags (cmd/kubelet/app/options/options.go) and the NodeRestriction
// admission plugin's getForbiddenLabels do: keys in the node-restriction.kubernetes.io namespace, and
// keys in a kubernetes.io or k8s.io namespace that kubeletapis.IsKubeletLabel does not allow. The API
// server would refuse the registration with 403 instead. It returns no error or one per kind,
// "invalid nodeLabels "<keys>": <the kubelet's message>", keys sorted and comma-separated.
func validateKubeletLabels(labels map[string]string) []error {
	var restricted, unknown []string
	for _, k := range sortedKeys(labels) {
		switch ns := labelNamespace(k); {
		case ns == v1.LabelNamespaceNodeRestriction || strings.HasSuffix(ns, "."+v1.LabelNamespaceNodeRestriction):
			restricted = append(restricted, k)
		case isKubernetesLabel(ns) && !kubeletapis.IsKubeletLabel(k):
			unknown = append(unknown, k)
		}
	}
	var errs []error
	if len(restricted) > 0 {
		errs = append(errs, fmt.Errorf("invalid nodeLabels %q: labels in the %q namespace are for administrators only: "+
			"the NodeRestriction admission plugin forbids a node to set them (\"is not allowed to modify labels\")",
			strings.Join(restricted, ","), v1.LabelNamespaceNodeRestriction))
	}
	if len(unknown) > 0 {
		// The kubelet's words (ValidateKubeletFlags), on one line.
		errs = append(errs, fmt.Errorf("invalid nodeLabels %q: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels; "+
			"--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix (%s) or be in the specifically allowed set (%s)",
			strings.Join(unknown, ","), strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "), strings.Join(kubeletapis.KubeletLabels(), ", ")))
	}
	return errs
}

// isKubernetesLabel reports whether a label namespace is kubernetes.io or k8s.io or under them, as the
// kubelet's isKubernetesLabel (cmd/kubelet/app/options/options.go).
func isKubernetesLabel(namespace string) bool {
	return namespace == "kubernetes.io" || strings.HasSuffix(namespace, ".kubernetes.io") ||
		namespace == "k8s.io" || strings.HasSuffix(namespace, ".k8s.io")
}

// labelNamespace returns the prefix of a label key ("example.com" for "example.com/role"), or "".
func labelNamespace(key string) string {
	if ns, _, ok := strings.Cut(key, "/"); ok {
		return ns
	}
	return ""
}
