package kubeletserver

import (
	"fmt"
	"net"
	"sync"

	"golang.org/x/net/netutil"
)

// ConnectionLimits bound the connections the kubelet API listeners of one process hold open, so
// that one Node's load stays that Node's (issue 45): a flood of connections to one Node's port
// neither takes the process's file descriptors (its other Nodes' API, its healthz port, its
// Leases and informers) nor more than its share of the connections every Node serves from.
//
// A listener at its cap accepts no more connection until one of its own closes: a new client
// waits in the kernel's listen backlog and, once that is full, gets no answer to its SYN, as it
// would from a kubelet whose process is out of descriptors (the kubelet has no cap of its own; its
// http.Server then retries Accept, and every other listener and client of its process fails too).
type ConnectionLimits struct {
	// PerNode is the most connections one Node's listener holds open (netutil.LimitListener).
	PerNode int
	// Total is the most connections every Node's listener holds open together: the process's
	// descriptors less a reserve for everything else it opens. Total >= PerNode >= 1.
	Total int
}

// DefaultConnectionLimits derives the limits of a process with nofile descriptors
// (RLIMIT_NOFILE), of which reserve are kept for everything but the kubelet API's connections
// (0: DefaultReserve(nofile)), serving nodes listeners (each takes one descriptor): Total is nofile
// less the reserve and the listeners, PerNode (unless perNode > 0) an eighth of Total, at least
// MinConnectionsPerNode, so that 8 flooded Nodes at once are needed to use them all. It errors,
// naming the numbers, when nothing is left for the connections.
func DefaultConnectionLimits(nofile uint64, nodes, perNode, reserve int) (ConnectionLimits, error) {
	if reserve <= 0 {
		reserve = DefaultReserve(nofile)
	}
	total := int(min(nofile, uint64(1)<<40)) - reserve - nodes
	if perNode <= 0 {
		perNode = max(total/8, MinConnectionsPerNode)
	}
	l := ConnectionLimits{PerNode: perNode, Total: total}
	if total < 1 {
		return l, fmt.Errorf("kubelet API connections: RLIMIT_NOFILE %d less a reserve of %d descriptors and %d listeners leaves none for the Nodes' connections", nofile, reserve, nodes)
	}
	l.PerNode = min(l.PerNode, total)
	return l, nil
}

// MinConnectionsPerNode is the least default per-Node cap.
const MinConnectionsPerNode = 16

// DefaultReserve is the default number of descriptors no kubelet API connection may take: a tenth
// of nofile, at least 1024 (the clients of the API server, the healthz and metrics ports and their
// clients, the process's files), and at most nofile/2.
func DefaultReserve(nofile uint64) int {
	r := max(nofile/10, 1024)
	return int(min(r, nofile/2, uint64(1)<<40))
}

// Validate checks 1 <= PerNode <= Total, naming the field and value.
func (l ConnectionLimits) Validate() error {
	switch {
	case l.PerNode < 1:
		return fmt.Errorf("ConnectionLimits.PerNode %d: must be at least 1", l.PerNode)
	case l.Total < l.PerNode:
		return fmt.Errorf("ConnectionLimits.Total %d: must be at least PerNode (%d)", l.Total, l.PerNode)
	}
	return nil
}

// ConnectionPool is the process's connections of ConnectionLimits, shared by the listeners it
// limits.
type ConnectionPool struct {
	perNode int
	total   chan struct{}
}

// NewConnectionPool returns the pool of l; it errors as l.Validate.
func NewConnectionPool(l ConnectionLimits) (*ConnectionPool, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &ConnectionPool{perNode: l.PerNode, total: make(chan struct{}, l.Total)}, nil
}

// Listener returns ln limited to the pool's PerNode connections of its own and, with every other
// listener of the pool, Total: Accept waits for a slot of ln's (netutil.LimitListener), then for
// one of the pool's, before it accepts; each slot is freed when its connection is closed (by the
// http.Server, or by the handler of a hijacked one). Closing the listener ends a waiting Accept.
func (p *ConnectionPool) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(&sharedLimitListener{Listener: ln, sem: p.total, done: make(chan struct{})}, p.perNode)
}

// sharedLimitListener is netutil.LimitListener over a semaphore that several listeners share.
type sharedLimitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *sharedLimitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &sharedLimitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *sharedLimitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type sharedLimitConn struct {
	net.Conn
	releaseOnce sync.Once
	release     func()
}

func (c *sharedLimitConn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce.Do(c.release)
	return err
}
