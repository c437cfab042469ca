package node

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// livenessPeriod is how often the probe item goes through each of the Queue's pools.
const livenessPeriod = 5 * time.Second

// pool is one of the Queue's worker pools.
type pool uint8

const (
	poolLease pool = iota // the Lease steps (the Queue's queues[0])
	poolSteps             // the other Node steps (queues[1])
	poolPods              // the pods of the Nodes that run pods
	numPools
)

var poolNames = [numPools]string{"lease", "node step", "pod"}

// liveness records, per pool, when a worker last finished an item; a probe item goes through each
// pool every livenessPeriod, so that a pool whose workers are all stuck shows (check).
type liveness struct {
	clock clock.PassiveClock
	bound time.Duration

	mu        sync.Mutex
	lastServe [numPools]time.Time
}

// newLiveness starts every pool as served now; a worker may take up to stepTimeout on one item.
func newLiveness(clk clock.PassiveClock, stepTimeout time.Duration) *liveness {
	l := &liveness{clock: clk, bound: 3*livenessPeriod + stepTimeout}
	now := clk.Now()
	for i := range l.lastServe {
		l.lastServe[i] = now
	}
	return l
}

// served records that a worker of p finished an item now.
func (l *liveness) served(p pool) {
	now := l.clock.Now()
	l.mu.Lock()
	l.lastServe[p] = now
	l.mu.Unlock()
}

// check returns nil while a worker of every pool finished an item within the bound, else an error
// naming each pool whose workers are stuck.
func (l *liveness) check() error {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for i, last := range l.lastServe {
		if age := now.Sub(last); age > l.bound {
			errs = append(errs, fmt.Errorf("no %s worker has finished an item for %s (bound %s): every worker is stuck", poolNames[i], age.Round(time.Second), l.bound))
		}
	}
	return errors.Join(errs...)
}
