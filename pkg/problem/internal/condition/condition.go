// Package condition holds what both problem monitors (custom plugin and system log) do with their
// NPD conditions.
package condition

import (
	"time"

	"k8s.io/node-problem-detector/pkg/types"
)

// Initial returns a copy of a monitor's default conditions at status False, transitioned at now:
// the conditions a monitor reports before any problem. Mirrors NPD's initialConditions (in both
// pkg/custompluginmonitor and pkg/systemlogmonitor).
func Initial(defaults []types.Condition, now time.Time) []types.Condition {
	conditions := make([]types.Condition, len(defaults))
	copy(conditions, defaults)
	for i := range conditions {
		conditions[i].Status = types.False
		conditions[i].Transition = now
	}
	return conditions
}

// Clone returns a copy of c (nil for nil), for a Status handed to another goroutine.
func Clone(c []types.Condition) []types.Condition {
	return append([]types.Condition(nil), c...)
}
