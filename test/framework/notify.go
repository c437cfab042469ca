package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// NotifyMessage is one state an sd_notify client sent, e.g. "READY=1", "WATCHDOG=1" or
// "STATUS=...", and when the NotifySocket received it.
type NotifyMessage struct {
	State string
	At    time.Time
}

// NotifySocket is a NOTIFY_SOCKET as systemd listens on it: a unixgram socket that records every
// state an sd_notify client (the agent, given Env in AgentOptions.Env) sends to it, in the order they
// arrive. A datagram holding several newline-separated states counts as one message each.
type NotifySocket struct {
	// Path is the socket's path, the value of NOTIFY_SOCKET.
	Path string

	conn *net.UnixConn
	done chan struct{} // closed when the receiver stops (Close, or a read error)

	mu      sync.Mutex
	msgs    []NotifyMessage
	changed chan struct{} // closed, and replaced, on each message
	err     error         // why the receiver stopped
}

// ListenNotify creates a unixgram socket at path (at most 108 bytes, the limit of a unix socket
// path: t.TempDir is often too long; os.MkdirTemp("", ...) is not) and receives on it until Close.
// It returns an error wrapping the listen error when the socket cannot be created.
func ListenNotify(path string) (*NotifySocket, error) {
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	n := &NotifySocket{Path: path, conn: conn, done: make(chan struct{}), changed: make(chan struct{})}
	go n.receive()
	return n, nil
}

// ListenTestNotify is ListenNotify failing the test when the socket cannot be created, and closing it
// when the test ends.
func ListenTestNotify(t testing.TB, path string) *NotifySocket {
	t.Helper()
	n, err := ListenNotify(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func (n *NotifySocket) receive() {
	defer close(n.done)
	buf := make([]byte, 4096)
	for {
		k, _, err := n.conn.ReadFromUnix(buf)
		if err != nil {
			n.mu.Lock()
			n.err = err
			n.mu.Unlock()
			return
		}
		now := time.Now()
		n.mu.Lock()
		for _, state := range strings.Split(string(buf[:k]), "\n") {
			if state != "" {
				n.msgs = append(n.msgs, NotifyMessage{State: state, At: now})
			}
		}
		close(n.changed)
		n.changed = make(chan struct{})
		n.mu.Unlock()
	}
}

// Env returns "NOTIFY_SOCKET=<Path>", for AgentOptions.Env.
func (n *NotifySocket) Env() string { return "NOTIFY_SOCKET=" + n.Path }

// Messages returns every state received so far, oldest first.
func (n *NotifySocket) Messages() []NotifyMessage {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]NotifyMessage(nil), n.msgs...)
}

// Received returns when state was first received and true, or the zero time and false if it has not
// been.
func (n *NotifySocket) Received(state string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.received(state)
}

func (n *NotifySocket) received(state string) (time.Time, bool) {
	for _, m := range n.msgs {
		if m.State == state {
			return m.At, true
		}
	}
	return time.Time{}, false
}

// Wait blocks until state has been received and returns when it first was (which may be before Wait
// was called). It returns an error wrapping ctx.Err() when ctx ends first, and one wrapping the read
// error (net.ErrClosed after Close) when the socket stops receiving first.
func (n *NotifySocket) Wait(ctx context.Context, state string) (time.Time, error) {
	for {
		n.mu.Lock()
		at, ok := n.received(state)
		changed := n.changed
		n.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-changed:
		case <-n.done:
			n.mu.Lock()
			at, ok := n.received(state)
			err := n.err
			n.mu.Unlock()
			if ok {
				return at, nil
			}
			return time.Time{}, fmt.Errorf("wait for %s on %s: socket stopped receiving: %w", state, n.Path, err)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for %s on %s: %w", state, n.Path, ctx.Err())
		}
	}
}

// Close stops receiving and closes the socket; Messages and Received still answer. It returns the
// error closing the socket, or nil if it was already closed.
func (n *NotifySocket) Close() error {
	err := n.conn.Close()
	<-n.done
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
