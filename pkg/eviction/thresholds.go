// Package eviction measures the kubelet's eviction signals on the host (memory.available,
// nodefs.*, imagefs.*, pid.available), compares them with the hard thresholds, and answers
// the pressure questions behind the MemoryPressure, DiskPressure and PIDPressure NodeConditions.
// It mirrors the observation and threshold logic of pkg/kubelet/eviction (helpers.go,
// eviction_manager.go) without evicting pods: nodeagent runs none.
package eviction

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal is an eviction signal name, as in the kubelet's --eviction-hard.
type Signal string

// The eviction signals nodeagent observes.
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFsAvailable   Signal = "nodefs.available"
	SignalNodeFsInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

var knownSignals = map[Signal]bool{
	SignalMemoryAvailable: true, SignalNodeFsAvailable: true, SignalNodeFsInodesFree: true,
	SignalImageFsAvailable: true, SignalImageFsInodesFree: true, SignalPIDAvailable: true,
}

// Threshold is one hard eviction threshold: the signal is breached when its available amount
// falls below Quantity, or below Percentage (0..1) of capacity when Quantity is nil.
type Threshold struct {
	Signal     Signal
	Quantity   *resource.Quantity
	Percentage float64
}

// Value returns the threshold in the signal's unit (bytes, inodes or PIDs) for a given capacity.
func (t Threshold) Value(capacity int64) int64 {
	if t.Quantity != nil {
		return t.Quantity.Value()
	}
	return int64(math.Ceil(t.Percentage * float64(capacity)))
}

// ParseThresholds parses an --eviction-hard map (signal → "100Mi" or "10%"), as the kubelet's
// eviction.ParseThresholdConfig does for hard thresholds. "0%" and "100%" are rejected like the
// kubelet; a zero quantity disables a signal and is dropped. Thresholds come back sorted by signal.
// The error names the signal and the value.
func ParseThresholds(m map[string]string) ([]Threshold, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Threshold
	for _, k := range keys {
		sig, v := Signal(k), strings.TrimSpace(m[k])
		if !knownSignals[sig] {
			return nil, fmt.Errorf("unknown eviction signal %q", k)
		}
		if strings.HasSuffix(v, "%") {
			p, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
			if err != nil || p <= 0 || p > 100 {
				return nil, fmt.Errorf("%s<%s: percentage must be in (0%%, 100%%]", k, v)
			}
			out = append(out, Threshold{Signal: sig, Percentage: p / 100})
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s<%s: %w", k, v, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s<%s: must not be negative", k, v)
		}
		if q.IsZero() {
			continue
		}
		out = append(out, Threshold{Signal: sig, Quantity: &q})
	}
	return out, nil
}

// ReservedMemory returns the memory.available hard threshold in bytes against the given memory capacity,
// or 0 when there is none: the amount the kubelet subtracts from allocatable memory.
func ReservedMemory(thresholds []Threshold, memoryCapacity int64) int64 {
	return reserved(thresholds, SignalMemoryAvailable, memoryCapacity)
}

// ReservedEphemeralStorage returns the nodefs.available hard threshold in bytes against the given
// ephemeral-storage capacity, or 0: the amount subtracted from allocatable ephemeral-storage.
func ReservedEphemeralStorage(thresholds []Threshold, capacity int64) int64 {
	return reserved(thresholds, SignalNodeFsAvailable, capacity)
}

func reserved(thresholds []Threshold, sig Signal, capacity int64) int64 {
	for _, t := range thresholds {
		if t.Signal == sig {
			return t.Value(capacity)
		}
	}
	return 0
}
