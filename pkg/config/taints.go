package config

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseTaints parses the --register-with-taints value, "key[=value]:Effect,...", as the kubelet does
// (pkg/util/taints.ParseTaints). It returns an error naming the first malformed taint, or the second of
// two taints with the same key and effect ("duplicated taints with the same key and effect", the
// kubelet's words).
func ParseTaints(s string) ([]v1.Taint, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var taints []v1.Taint
	for _, spec := range strings.Split(s, ",") {
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return nil, fmt.Errorf("taint %q: want key[=value]:Effect", spec)
		}
		key, value, _ := strings.Cut(kv, "=")
		t := v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)}
		if err := validateTaint(t); err != nil {
			return nil, fmt.Errorf("taint %q: %w", spec, err)
		}
		if i := duplicateTaint(taints, t); i >= 0 {
			return nil, fmt.Errorf("taint %q: duplicated taints with the same key and effect: %q and %q", spec, taintString(taints[i]), taintString(t))
		}
		taints = append(taints, t)
	}
	return taints, nil
}

func validateTaint(t v1.Taint) error {
	if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
		return fmt.Errorf("key %q: %s", t.Key, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
		return fmt.Errorf("value %q: %s", t.Value, strings.Join(msgs, "; "))
	}
	switch t.Effect {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("effect %q: must be NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
}

// duplicateTaint returns the index of the first taint in taints with t's key and effect, or -1.
// The kubelet allows one taint per key and effect (pkg/util/taints.ParseTaints), as does the API.
func duplicateTaint(taints []v1.Taint, t v1.Taint) int {
	for i, o := range taints {
		if o.Key == t.Key && o.Effect == t.Effect {
			return i
		}
	}
	return -1
}

func taintString(t v1.Taint) string {
	if t.Value == "" {
		return fmt.Sprintf("%s:%s", t.Key, t.Effect)
	}
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
}

// taintsValue is the pflag.Value behind --register-with-taints, writing into a *[]v1.Taint.
type taintsValue struct{ taints *[]v1.Taint }

func (v taintsValue) String() string {
	if v.taints == nil {
		return ""
	}
	parts := make([]string, 0, len(*v.taints))
	for _, t := range *v.taints {
		parts = append(parts, taintString(t))
	}
	return strings.Join(parts, ",")
}

func (v taintsValue) Set(s string) error {
	t, err := ParseTaints(s)
	if err != nil {
		return err
	}
	*v.taints = t
	return nil
}

func (v taintsValue) Type() string { return "key=value:Effect,..." }
