package framework

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestNotifySocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "notify-") // short: a unix socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := ListenTestNotify(t, filepath.Join(dir, "notify.sock"))
	if got, want := n.Env(), "NOTIFY_SOCKET="+n.Path; got != want {
		t.Errorf("Env() = %q, want %q", got, want)
	}
	send := func(datagram string) {
		t.Helper()
		c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.Path, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(datagram)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// Wait returns once the state comes, also when it is one of several in a datagram.
	waited := make(chan error, 1)
	go func() { _, err := n.Wait(ctx, "READY=1"); waited <- err }()
	send("STATUS=starting")
	send("READY=1\nSTATUS=running\n")
	if err := <-waited; err != nil {
		t.Fatalf("Wait(READY=1): %v", err)
	}
	send("WATCHDOG=1")
	at, err := n.Wait(ctx, "WATCHDOG=1")
	if err != nil {
		t.Fatalf("Wait(WATCHDOG=1): %v", err)
	}
	var states []string
	var last time.Time
	for _, m := range n.Messages() {
		states = append(states, m.State)
		if m.At.Before(last) {
			t.Errorf("message %q received at %v, before the one ahead of it (%v)", m.State, m.At, last)
		}
		last = m.At
	}
	if want := []string{"STATUS=starting", "READY=1", "STATUS=running", "WATCHDOG=1"}; !slices.Equal(states, want) {
		t.Errorf("Messages() states %q, want %q", states, want)
	}
	if got, ok := n.Received("WATCHDOG=1"); !ok || !got.Equal(at) {
		t.Errorf("Received(WATCHDOG=1) = %v, %v; want %v, true (what Wait returned)", got, ok, at)
	}
	if _, ok := n.Received("STOPPING=1"); ok {
		t.Error("Received(STOPPING=1) = true, never sent")
	}

	tests := []struct {
		name    string
		ctx     func() context.Context
		close   bool
		wantErr error
	}{
		{name: "ctx ends first", ctx: func() context.Context {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return c
		}, wantErr: context.Canceled},
		{name: "socket closed", ctx: func() context.Context { return ctx }, close: true, wantErr: net.ErrClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.close {
				if err := n.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			if _, err := n.Wait(tc.ctx(), "STOPPING=1"); !errors.Is(err, tc.wantErr) {
				t.Errorf("Wait(STOPPING=1) = %v, want it to wrap %v", err, tc.wantErr)
			}
			// What was received before still answers.
			if _, err := n.Wait(tc.ctx(), "READY=1"); err != nil {
				t.Errorf("Wait(READY=1) after: %v", err)
			}
		})
	}
}
