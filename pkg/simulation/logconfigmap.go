package simulation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"weak"

	v1 "k8s.io/api/core/v1"
)

// AnnotationLogConfigMap makes each container's log the lines of a ConfigMap in the pod's namespace:
// "<name>/<key>" (the key of its data), or "<name>" for a ConfigMap with one key. Line k is the
// ConfigMap's line k modulo its number of lines, as it is (no " container=... line=k" suffix); the
// container writes them all at its start unless AnnotationLogLines says how many, and one more every
// AnnotationLogPeriod, cycling through them.
const AnnotationLogConfigMap = "nodeagent.io/log-configmap"

// maxLogConfigMapBytes bounds what is read of a ConfigMap's key: the API server's limit of a whole
// ConfigMap (1 MiB).
const maxLogConfigMapBytes = 1 << 20

// ConfigMapGetter reads a ConfigMap: the simulator's client (one GET per log request whose pod names
// one). A pod's log needs `get` on configmaps in its namespace.
type ConfigMapGetter func(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)

// logLines are the lines of a ConfigMap's key, shared by every stream that reads the same version.
type logLines struct{ lines []string }

// logLinesCache shares the lines of one version of a ConfigMap's key among the streams that read it,
// so that 1000 streams of one 1 MiB ConfigMap hold it once; an entry goes with its last stream (a
// weak pointer).
type logLinesCache struct {
	mu      sync.Mutex
	entries map[string]logLinesEntry // namespace/name/key
}

type logLinesEntry struct {
	resourceVersion string
	lines           weak.Pointer[logLines]
}

// configMapLines returns the lines of the key AnnotationLogConfigMap names (value), read through get;
// an error names the annotation and says what is wrong.
func (c *logLinesCache) configMapLines(ctx context.Context, get ConfigMapGetter, namespace, value string) (*logLines, error) {
	name, key, _ := strings.Cut(value, "/")
	if name == "" {
		return nil, fmt.Errorf("annotation %s %q: want <configmap>/<key> or <configmap>", AnnotationLogConfigMap, value)
	}
	if get == nil {
		return nil, fmt.Errorf("annotation %s %q: this simulator reads no ConfigMaps", AnnotationLogConfigMap, value)
	}
	cm, err := get(ctx, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("annotation %s %q: %w", AnnotationLogConfigMap, value, err)
	}
	if key == "" {
		if len(cm.Data) != 1 {
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range cm.Data {
					if !yield(k) {
						return
					}
				}
			})
			return nil, fmt.Errorf("annotation %s %q: configmap %q has %d keys (%s); name one as %s/<key>",
				AnnotationLogConfigMap, value, name, len(cm.Data), strings.Join(keys, ", "), name)
		}
		for k := range cm.Data {
			key = k
		}
	}
	text, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("annotation %s %q: configmap %q has no key %q in data", AnnotationLogConfigMap, value, name, key)
	}
	if len(text) > maxLogConfigMapBytes {
		return nil, fmt.Errorf("annotation %s %q: key %q holds %d bytes, more than %d", AnnotationLogConfigMap, value, key, len(text), maxLogConfigMapBytes)
	}
	id := namespace + "/" + name + "/" + key
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[id]; ok && e.resourceVersion == cm.ResourceVersion && cm.ResourceVersion != "" {
		if l := e.lines.Value(); l != nil {
			return l, nil
		}
	}
	text = strings.TrimSuffix(text, "\n")
	if text == "" {
		return nil, fmt.Errorf("annotation %s %q: key %q is empty", AnnotationLogConfigMap, value, key)
	}
	// A copy of the text, so that the lines do not hold the whole ConfigMap object.
	l := &logLines{lines: strings.Split(strings.Clone(text), "\n")}
	if c.entries == nil {
		c.entries = map[string]logLinesEntry{}
	}
	for k, e := range c.entries {
		if e.lines.Value() == nil {
			delete(c.entries, k)
		}
	}
	c.entries[id] = logLinesEntry{resourceVersion: cm.ResourceVersion, lines: weak.Make(l)}
	return l, nil
}
