// Package startgc pauses Go's garbage collector for the process's start-up: from this package's
// init, which runs before the heavy package inits (client-go's scheme and the other API groups,
// component-base's metrics, apiserver's z-pages), until Release. A cold start of the agent allocates
// a heap of 3-5 MiB before its Node is Ready and collects it three times on the way (GODEBUG=gctrace=1);
// on two cores each collection takes CPU from the start itself. Paused, the heap grows by a few MiB
// more, collected once Release turns the collector back on.
//
// The pause is bounded by a soft memory limit (MemoryLimit): a start-up that allocates more than that
// is collected as usual near the limit. An operator's GOGC or GOMEMLIMIT in the environment wins: with
// either set, nothing is paused.
package startgc

import (
	"math"
	"os"
	"runtime/debug"
	"sync/atomic"
)

// MemoryLimit bounds the heap while the collector is paused (bytes): the Go runtime collects when the
// heap nears it, as with GOMEMLIMIT.
const MemoryLimit = 64 << 20

// paused is true from init's pause until Release.
var paused atomic.Bool

func init() {
	paused.Store(pause(os.Getenv))
}

// pause turns the collector off under MemoryLimit unless getenv says GOGC or GOMEMLIMIT; it reports
// whether it did.
func pause(getenv func(string) string) bool {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return false
	}
	debug.SetMemoryLimit(MemoryLimit)
	debug.SetGCPercent(-1)
	return true
}

// Paused reports whether init paused the collector and Release has not run yet.
func Paused() bool { return paused.Load() }

// Release turns the collector back on with Go's defaults (GOGC=100, no memory limit) if init paused
// it; later calls do nothing. Safe from any goroutine.
func Release() {
	if paused.CompareAndSwap(true, false) {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	}
}
