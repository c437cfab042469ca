package config

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseTaints parses the --register-with-taints value, "key[=value]:Effect,...", as the kubelet does.
// It returns an error naming the first malformed taint.
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
