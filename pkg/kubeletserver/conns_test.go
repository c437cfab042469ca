package kubeletserver

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// pipeListener is a net.Listener of net.Pipe connections (a synctest bubble's network): dial
// returns the client's end.
type pipeListener struct {
	conns     chan net.Conn
	closeOnce sync.Once
	done      chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial queues a connection for Accept (without waiting for it) and returns the client's end.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	go func() {
		select {
		case l.conns <- server:
		case <-l.done:
			_ = server.Close()
		}
	}()
	return client
}

// acceptor accepts every connection of ln until it is closed, counting them.
type acceptor struct {
	mu    sync.Mutex
	conns []net.Conn
	err   error
}

func accept(ln net.Listener) *acceptor {
	a := &acceptor{}
	go func() {
		for {
			c, err := ln.Accept()
			a.mu.Lock()
			if err != nil {
				a.err = err
				a.mu.Unlock()
				return
			}
			a.conns = append(a.conns, c)
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *acceptor) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

func (a *acceptor) closeOne() {
	a.mu.Lock()
	c := a.conns[0]
	a.conns = a.conns[1:]
	a.mu.Unlock()
	_ = c.Close()
}

// TestConnectionPool: a Node's listener holds at most PerNode connections and every Node's at most
// Total together; a connection closed frees its slots; closing a listener ends a waiting Accept.
func TestConnectionPool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limits  ConnectionLimits
		dials   []int // connections dialled to each listener
		want    []int // accepted by each listener, then
		close   int   // connections of listener 0 closed
		after   []int // accepted by each listener after that (-1: any)
		wantSum int   // accepted by all, after (0: not checked)
	}{
		{"per node", ConnectionLimits{PerNode: 2, Total: 10}, []int{5, 3}, []int{2, 2}, 1, []int{2, 2}, 0},
		{"per node, one closed", ConnectionLimits{PerNode: 2, Total: 10}, []int{5, 1}, []int{2, 1}, 2, []int{2, 1}, 0},
		{"total", ConnectionLimits{PerNode: 2, Total: 3}, []int{2, 2, 1}, []int{2, 1, 0}, 1, []int{-1, -1, -1}, 3},
		{"one flood, others served", ConnectionLimits{PerNode: 3, Total: 6}, []int{50, 3}, []int{3, 3}, 3, []int{3, 3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pool, err := NewConnectionPool(tc.limits)
				if err != nil {
					t.Fatal(err)
				}
				var lns []net.Listener
				var acc []*acceptor
				for i, n := range tc.dials {
					pl := newPipeListener()
					ln := pool.Listener(pl)
					lns = append(lns, ln)
					acc = append(acc, accept(ln))
					for range n {
						c := pl.dial()
						defer func() { _ = c.Close() }()
					}
					synctest.Wait()
					if got := acc[i].count(); got != tc.want[i] {
						t.Errorf("listener %d accepted %d connections of %d, want %d", i, got, n, tc.want[i])
					}
				}
				for range tc.close {
					acc[0].closeOne()
				}
				synctest.Wait()
				sum := 0
				for i, a := range acc {
					got := a.count()
					sum += got
					if tc.after[i] >= 0 && got != tc.after[i] {
						t.Errorf("after %d closed, listener %d holds %d connections, want %d", tc.close, i, got, tc.after[i])
					}
				}
				if tc.wantSum > 0 && sum != tc.wantSum {
					t.Errorf("after %d closed, the listeners hold %d connections, want %d", tc.close, sum, tc.wantSum)
				}
				for i, ln := range lns {
					_ = ln.Close()
					synctest.Wait()
					if acc[i].err == nil {
						t.Errorf("listener %d: Accept still waits after Close", i)
					}
					for acc[i].count() > 0 {
						acc[i].closeOne()
					}
				}
			})
		})
	}
}

func TestDefaultConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		nofile                 uint64
		nodes, perNode, reserv int
		want                   ConnectionLimits
		wantErr                string
	}{
		{"agent, 1M descriptors", 1 << 20, 1, 0, 0, ConnectionLimits{PerNode: (1<<20 - 104857 - 1) / 8, Total: 1<<20 - 104857 - 1}, ""},
		{"simulator, 20000 descriptors, 1000 Nodes", 20000, 1000, 0, 0, ConnectionLimits{PerNode: 17000 / 8, Total: 17000}, ""},
		{"per node given", 20000, 2, 32, 0, ConnectionLimits{PerNode: 32, Total: 17998}, ""},
		{"reserve given", 20000, 2, 0, 10000, ConnectionLimits{PerNode: 9998 / 8, Total: 9998}, ""},
		{"small limit", 256, 10, 0, 0, ConnectionLimits{PerNode: MinConnectionsPerNode, Total: 256 - 128 - 10}, ""},
		{"per node above total", 4096, 10, 1 << 20, 0, ConnectionLimits{PerNode: 4096 - 1024 - 10, Total: 4096 - 1024 - 10}, ""},
		{"no descriptor left", 20000, 18000, 0, 2000, ConnectionLimits{}, "RLIMIT_NOFILE 20000 less a reserve of 2000 descriptors and 18000 listeners leaves none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DefaultConnectionLimits(tc.nofile, tc.nodes, tc.perNode, tc.reserv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestServeDeadlines: a connection that does not finish its TLS handshake or its request's headers
// is closed by Serve after ReadHeaderTimeout (the kubelet's http.Server holds it for its 4 h
// ReadTimeout); a request whose headers were read streams for longer.
func TestServeDeadlines(t *testing.T) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("n1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// stream writes a line a minute for an hour.
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for i := range 60 {
			_, _ = io.WriteString(w, "line\n")
			w.(http.Flusher).Flush()
			if i == 59 {
				return
			}
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
	})
	handshake := func(c net.Conn) net.Conn {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // a test's self-signed certificate
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc
	}
	for _, tc := range []struct {
		name string
		// client sends its part and returns the connection to read from
		client    func(c net.Conn) net.Conn
		wantLines int           // the lines the client reads before the server closes
		maxLife   time.Duration // the longest the connection may live
		minLife   time.Duration
	}{
		{"half ClientHello", func(c net.Conn) net.Conn {
			_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}) // a handshake record of 512 bytes, never sent
			return c
		}, 0, ReadHeaderTimeout, 0},
		{"nothing sent", func(c net.Conn) net.Conn { return c }, 0, ReadHeaderTimeout, 0},
		{"handshake, no request", handshake, 0, 2 * ReadHeaderTimeout, 0},
		{"half headers", func(c net.Conn) net.Conn {
			tc := handshake(c)
			_, _ = io.WriteString(tc, "GET /logs HTTP/1.1\r\nHost: n1\r\n")
			return tc
		}, 0, 2 * ReadHeaderTimeout, 0},
		{"a stream of an hour", func(c net.Conn) net.Conn {
			tc := handshake(c)
			_, _ = io.WriteString(tc, "GET /logs HTTP/1.1\r\nHost: n1\r\nConnection: close\r\n\r\n")
			return tc
		}, 60, 2 * time.Hour, 59 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				ln := newPipeListener()
				served := make(chan error, 1)
				go func() {
					served <- Serve(ctx, ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, stream)
				}()
				start := time.Now()
				c := tc.client(ln.dial())
				b, _ := io.ReadAll(c) // until the server closes the connection
				life := time.Since(start)
				_ = c.Close()
				if got := strings.Count(string(b), "line\n"); got != tc.wantLines {
					t.Errorf("read %d lines (%.100q), want %d", got, b, tc.wantLines)
				}
				if life > tc.maxLife || life < tc.minLife {
					t.Errorf("the server closed the connection after %s, want %s to %s", life, tc.minLife, tc.maxLife)
				}
				cancel()
				if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
					t.Errorf("Serve: %v", err)
				}
			})
		})
	}
}
