package simulation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// LabelShard is on every simulated Node, with its shard's index as the value ("0", "1", ...): each
// shard's Node informer selects on its own value, so a shard's memory and watch traffic do not grow
// with the other shards'.
const LabelShard = "nodeagent.io/simulation-shard"

// MaxShards is the most shards a simulation may be split into (--shards).
const MaxShards = 1000

// minNameDigits is the width of the index in the names while the highest index has at most 4 digits.
const minNameDigits = 4

// Shard says which part of a simulation one process runs. The Nodes are split in contiguous index
// ranges: with Nodes per shard N, shard Index runs the global indexes [Index*N, (Index+1)*N) of the
// Count*N Nodes, and the names are global (NamePrefix + zero-padded global index). The zero Shard is
// the unsharded simulation (Index 0 of Count 1).
type Shard struct {
	// Index is this process's shard: 0 to Count-1.
	Index int
	// Count is the number of shards (processes) of the simulation; 0 means 1.
	Count int
}

// count returns Count, 1 when unset.
func (s Shard) count() int { return max(s.Count, 1) }

// First returns the global index of the shard's first Node, with nodes Nodes per shard.
func (s Shard) First(nodes int) int { return s.Index * nodes }

// Owner returns the shard that runs the Node with global index i, with nodes Nodes per shard.
func Owner(i, nodes int) int { return i / nodes }

// Label returns the value of LabelShard on the shard's Nodes.
func (s Shard) Label() string { return strconv.Itoa(s.Index) }

// ValidateShards checks a shard count (1 to MaxShards) and an index in [0, count). The error says
// which is wrong; the caller names the flag.
func ValidateShards(count, index int) error {
	if count < 1 || count > MaxShards {
		return fmt.Errorf("--shards %d: must be between 1 and %d", count, MaxShards)
	}
	if index < 0 || index >= count {
		return fmt.Errorf("--shard-index %d: must be in [0, %d) (--shards %d)", index, count, count)
	}
	return nil
}

// ShardFromPodName returns the ordinal at the end of a StatefulSet pod's name, after its last "-":
// "nodeagent-simulate-2" is 2. The error says why the name has none.
func ShardFromPodName(name string) (int, error) {
	i := strings.LastIndexByte(name, '-')
	if name == "" || i < 0 || i == len(name)-1 {
		return 0, errors.New("has no ordinal after a final '-' (a StatefulSet pod is named <statefulset>-<ordinal>)")
	}
	digits := name[i+1:]
	for _, r := range digits {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("ordinal %q is not a number", digits)
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0, fmt.Errorf("ordinal %q: %w", digits, err)
	}
	return n, nil
}

// NameDigits returns how many digits the index has in the names of a simulation of total Nodes (all
// shards): 4 while the highest index is below 10000, more when it needs them.
func NameDigits(total int) int {
	return max(minNameDigits, len(strconv.Itoa(max(total-1, 0))))
}

// NodeNameDigits returns the name of the simulated Node with global index i, its index on digits
// digits (NameDigits of the simulation's total).
func NodeNameDigits(prefix string, i, digits int) string {
	return fmt.Sprintf("%s%0*d", prefix, digits, i)
}

// ParseNodeName returns the global index of a simulated Node's name made with prefix and digits, or
// false when name is not one (another prefix, another width, not a number).
func ParseNodeName(name, prefix string, digits int) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) != digits {
		return 0, false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil
}
