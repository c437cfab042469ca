package simulation

import (
	"crypto/sha256"
	"encoding/hex"
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

// minNameDigits is the least width of the index in the names (NodeName).
const minNameDigits = 4

// Shard says which part of a simulation one process runs. The Nodes are split in contiguous index
// ranges: with Nodes per shard N, shard Index runs the global indexes [Index*N, (Index+1)*N) of the
// Count*N Nodes, and the names are global (NodeName: NamePrefix + the global index on at least 4
// digits). The zero Shard is the unsharded simulation (Index 0 of Count 1).
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

// NodeName returns the name of the simulated Node with global index i: prefix followed by i on at least
// 4 digits (sim-0000 ... sim-9999, sim-10000, ...). A Node's name depends on its index only, never on the
// number of Nodes or shards, so that changing --shards renames no Node.
func NodeName(prefix string, i int) string { return fmt.Sprintf("%s%0*d", prefix, minNameDigits, i) }

// ParseNodeName returns the global index of a simulated Node's name made with prefix (NodeName), or
// false when name is not one: another prefix, not a number, fewer than 4 digits, or more than 4 with a
// leading zero (not what NodeName makes; see IsZeroPaddedName).
func ParseNodeName(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) < minNameDigits || !allDigits(rest) || (len(rest) > minNameDigits && rest[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil
}

// IsZeroPaddedName reports whether name is prefix followed by more than 4 digits with a leading zero:
// the name of a Node of a simulation of more than 10000 Nodes made by a nodeagent before issue 27, which
// padded every index to the width of the largest (sim-00042 where NodeName makes sim-0042).
func IsZeroPaddedName(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	return ok && len(rest) > minNameDigits && rest[0] == '0' && allDigits(rest)
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// LabelSimulation is on every simulated Node, with the simulation's identity (SimulationID of its
// prefix) as the value: each shard's Node informer selects on it with LabelShard, so that a shard caches
// its own simulation's Nodes only, not those of another simulation's shard of the same index.
const LabelSimulation = "nodeagent.io/simulation"

// SimulationID returns the identity of the simulation of Nodes named with prefix, a valid label value
// and object name: the prefix without its trailing '-' and '.' (cut to 54 characters), '-', and the
// first 8 hexadecimal digits of the prefix's SHA-256 ("sim-node-" is "sim-node-" + 8 digits), so that
// "sim-", "sim." and "sim" are three simulations.
func SimulationID(prefix string) string {
	sum := sha256.Sum256([]byte(prefix))
	readable := strings.TrimRight(prefix, "-.")
	if len(readable) > 54 {
		readable = strings.TrimRight(readable[:54], "-.")
	}
	return readable + "-" + hex.EncodeToString(sum[:4])
}

// Selector returns the label selector of the Nodes of this shard of the simulation of prefix: the
// shard's Node informer's.
func (s Shard) Selector(prefix string) string {
	return LabelSimulated + "=true," + LabelSimulation + "=" + SimulationID(prefix) + "," + LabelShard + "=" + s.Label()
}
