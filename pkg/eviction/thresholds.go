// Package eviction measures the kubelet's eviction signals on the host (memory.available,
// nodefs.*, imagefs.*, pid.available), compares them with the hard thresholds, and answers
// the pressure questions behind the MemoryPressure, DiskPressure and PIDPressure NodeConditions.
// It mirrors the observation and threshold logic of pkg/kubelet/eviction (helpers.go,
// eviction_manager.go) without evicting pods: nodeagent runs none.
package eviction

import (
	"fmt"
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
// falls below Quantity, or below Percentage (0..1) of capacity when Quantity is nil. ParseThresholds
// computes Percentage in float32, as the kubelet's parsePercentage, so that Value matches its numbers.
type Threshold struct {
	Signal     Signal
	Quantity   *resource.Quantity
	Percentage float64
}

// Value returns the threshold in the signal's unit (bytes, inodes or PIDs) for a given capacity, as
// the kubelet's evictionapi.GetThresholdQuantity: capacity × percentage, truncated.
func (t Threshold) Value(capacity int64) int64 {
	if t.Quantity != nil {
		return t.Quantity.Value()
	}
	return int64(float64(capacity) * t.Percentage)
}

// ParseThresholds parses an --eviction-hard map (signal → "100Mi" or "10%"), as the kubelet's
// eviction.ParseThresholdConfig does for hard thresholds: "0%" and "100%" disable a signal and are
// dropped, other percentages must be in [0%, 100%], quantities must be positive. Thresholds come back
// sorted by signal. The error names the signal and the value.
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
			if v == "0%" || v == "100%" {
				continue // the kubelet ignores both: the signal is disabled
			}
			p, err := strconv.ParseFloat(strings.TrimRight(v, "%"), 32)
			if err != nil {
				return nil, fmt.Errorf("%s<%s: %w", k, v, err)
			}
			pct := float32(p) / 100 // the kubelet's parsePercentage
			if pct < 0 || pct > 1 {
				return nil, fmt.Errorf("%s<%s: percentage must be between 0%% and 100%%", k, v)
			}
			out = append(out, Threshold{Signal: sig, Percentage: float64(pct)})
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s<%s: %w", k, v, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("%s<%s: must be positive", k, v)
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
