// Package apiequal compares API values as apiequality.Semantic.DeepEqual compares them (quantities by
// value, times by instant, nil and empty slices and maps alike), without its reflection and without
// allocating, for the comparisons made on every pass over every Node or pod (pkg/nodestatus,
// pkg/pod). Its callers' tests check them against Semantic.DeepEqual on random values.
package apiequal

import (
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// ResourceList reports whether a and b hold the same resources with the same quantities by value
// (Quantity.Cmp: "1" and "1000m" are equal), as Semantic.DeepEqual says.
func ResourceList(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || x.Cmp(y) != 0 {
			return false
		}
	}
	return true
}

// Ptr reports whether a and b are both nil, or point to values Semantic.DeepEqual says are equal. It
// is for fields that are rarely set: Semantic.DeepEqual runs (and allocates) only when both are.
func Ptr[T any](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// Slice reports whether a and b are both empty (nil or not), or hold elements Semantic.DeepEqual says
// are equal, in the same order. It is for fields that are rarely set: Semantic.DeepEqual runs (and
// allocates) only when both are.
func Slice[T any](a, b []T) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
