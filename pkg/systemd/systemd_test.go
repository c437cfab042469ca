package systemd

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// listen creates a unixgram socket standing in for systemd's notification
// socket, points NOTIFY_SOCKET at it for the test, and returns it.
func listen(t *testing.T) *net.UnixConn {
	t.Helper()
	// A short directory: a unix socket path is limited to 108 bytes and t.TempDir
	// can be longer than that.
	dir, err := os.MkdirTemp("", "sdnotify")
	if err != nil {
		t.Fatalf("create socket dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

// queued returns every datagram already queued on conn, without waiting for
// more: it reads with MSG_DONTWAIT until the socket is empty. A notification is
// queued by the time the send returns (a unix datagram goes straight into the
// receiver's buffer), so no test needs to wait for one in real time, and the
// read never blocks inside a synctest bubble, where network I/O would not count
// as durably blocked.
func queued(t *testing.T, conn *net.UnixConn) []string {
	t.Helper()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatalf("raw socket: %v", err)
	}
	var msgs []string
	buf := make([]byte, 4096)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			return true
		}); err != nil {
			t.Fatalf("read notification: %v", err)
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			return msgs
		}
		if rerr != nil {
			t.Fatalf("read notification: %v", rerr)
		}
		msgs = append(msgs, string(buf[:n]))
	}
}

func TestNotify(t *testing.T) {
	tests := []struct {
		name string
		send func() error
		want string
	}{
		{name: "ready", send: func() error { return Ready(context.Background()) }, want: "READY=1"},
		{name: "stopping", send: Stopping, want: "STOPPING=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := listen(t)
			if err := tc.send(); err != nil {
				t.Fatalf("send: %v", err)
			}
			if got := queued(t, conn); !slices.Equal(got, []string{tc.want}) {
				t.Errorf("systemd got %q, want [%q]", got, tc.want)
			}
		})
	}
}

func TestNotifyNoSocket(t *testing.T) {
	tests := []struct {
		name string
		send func() error
	}{
		{name: "ready", send: func() error { return Ready(context.Background()) }},
		{name: "stopping", send: Stopping},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NOTIFY_SOCKET", "")
			if err := tc.send(); err != nil {
				t.Errorf("without NOTIFY_SOCKET got %v, want nil", err)
			}
		})
	}
}

func TestNotifySocketGone(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "missing.sock"))
	tests := []struct {
		name  string
		send  func() error
		state string
	}{
		{name: "ready", send: func() error { return Ready(context.Background()) }, state: "READY=1"},
		{name: "stopping", send: Stopping, state: "STOPPING=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.send()
			if err == nil {
				t.Fatal("got nil, want an error for a missing socket")
			}
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("got %v, want it to wrap %v", err, os.ErrNotExist)
			}
		})
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	tests := []struct {
		name    string
		socket  bool
		usec    string
		pid     string
		want    time.Duration
		wantErr bool
	}{
		{name: "enabled", socket: true, usec: "60000000", want: 60 * time.Second},
		{name: "enabled for this pid", socket: true, usec: "60000000", pid: pid, want: 60 * time.Second},
		{name: "another pid", socket: true, usec: "60000000", pid: "1", want: 0},
		{name: "no WATCHDOG_USEC", socket: true, want: 0},
		{name: "no NOTIFY_SOCKET", usec: "60000000", want: 0},
		{name: "zero", socket: true, usec: "0", wantErr: true},
		{name: "not a number", socket: true, usec: "60s", wantErr: true},
		{name: "bad pid", socket: true, usec: "60000000", pid: "me", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.socket {
				listen(t)
			} else {
				t.Setenv("NOTIFY_SOCKET", "")
			}
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			got, err := WatchdogInterval()
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPingPeriod(t *testing.T) {
	tests := []struct {
		timeout, want time.Duration
	}{
		{timeout: 60 * time.Second, want: 30 * time.Second},
		{timeout: 3 * time.Second, want: 1500 * time.Millisecond},
		{timeout: time.Microsecond, want: time.Millisecond},
	}
	for _, tc := range tests {
		if got := pingPeriod(tc.timeout); got != tc.want {
			t.Errorf("pingPeriod(%v) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
}

// startWatchdog runs RunWatchdog in the background with clk and a health check
// that returns whatever the test sends on the returned channel, so each check
// happens exactly when the test hands it a result. Call it inside a synctest
// bubble. stop cancels the context and returns RunWatchdog's error, failing
// the test if RunWatchdog has not returned once the bubble has settled.
func startWatchdog(t *testing.T, clk clock.WithTicker) (results chan<- error, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error)
	done := make(chan error, 1)
	go func() { done <- RunWatchdog(ctx, clk, func() error { return <-res }) }()
	stop = func() error {
		t.Helper()
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			return err
		default:
			t.Fatal("RunWatchdog did not return after its context ended")
			return nil
		}
	}
	t.Cleanup(cancel)
	return res, stop
}

// checking reports whether the watchdog loop, once the bubble has settled, is
// waiting in its health check; if it is, it hands it result.
func checking(results chan<- error, result error) bool {
	synctest.Wait()
	select {
	case results <- result:
		return true
	default:
		return false
	}
}

func TestRunWatchdog(t *testing.T) {
	const timeout = 60 * time.Second
	conn := listen(t)
	t.Setenv("WATCHDOG_USEC", strconv.FormatInt(timeout.Microseconds(), 10))
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	synctest.Test(t, func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Unix(0, 0))
		results, stop := startWatchdog(t, clk)

		// Healthy at start: an immediate ping.
		if !checking(results, nil) {
			t.Fatal("no health check at start")
		}
		synctest.Wait()
		if got := queued(t, conn); !slices.Equal(got, []string{"WATCHDOG=1"}) {
			t.Fatalf("first ping: got %q, want [WATCHDOG=1]", got)
		}

		// Nothing happens before half the timeout has passed.
		synctest.Wait()
		if !clk.HasWaiters() {
			t.Fatal("no ticker waiting after the first ping")
		}
		clk.Step(timeout/2 - time.Nanosecond)
		if checking(results, nil) {
			t.Fatal("health checked before timeout/2 had passed")
		}

		// Unhealthy at timeout/2: no ping.
		clk.Step(time.Nanosecond)
		if !checking(results, errors.New("container runtime is down")) {
			t.Fatal("no health check at timeout/2")
		}
		synctest.Wait()
		if got := queued(t, conn); len(got) != 0 {
			t.Fatalf("systemd got %q; an unhealthy check must not ping", got)
		}

		// Healthy again at timeout: a ping.
		clk.Step(timeout / 2)
		if !checking(results, nil) {
			t.Fatal("no health check at timeout")
		}
		synctest.Wait()
		if got := queued(t, conn); !slices.Equal(got, []string{"WATCHDOG=1"}) {
			t.Fatalf("ping after recovery: got %q, want [WATCHDOG=1]", got)
		}

		if err := stop(); err != nil {
			t.Errorf("RunWatchdog returned %v, want nil", err)
		}
		if extra := queued(t, conn); len(extra) != 0 {
			t.Errorf("systemd got extra notifications %q", extra)
		}
	})
}

func TestRunWatchdogDisabled(t *testing.T) {
	tests := []struct {
		name   string
		socket bool
		usec   string
		pid    string
	}{
		{name: "no NOTIFY_SOCKET", usec: "60000000"},
		{name: "no WATCHDOG_USEC", socket: true},
		{name: "another pid's watchdog", socket: true, usec: "60000000", pid: "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var conn *net.UnixConn
			if tc.socket {
				conn = listen(t)
			} else {
				t.Setenv("NOTIFY_SOCKET", "")
			}
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			synctest.Test(t, func(t *testing.T) {
				clk := testingclock.NewFakeClock(time.Unix(0, 0))
				results, stop := startWatchdog(t, clk)

				// It blocks without checking health or starting a ticker.
				if checking(results, nil) {
					t.Fatal("health checked with no watchdog")
				}
				if clk.HasWaiters() {
					t.Error("ticker started with no watchdog")
				}
				if err := stop(); err != nil {
					t.Errorf("RunWatchdog returned %v, want nil", err)
				}
				if conn != nil {
					if msgs := queued(t, conn); len(msgs) != 0 {
						t.Errorf("systemd got %q with no watchdog", msgs)
					}
				}
			})
		})
	}
}

func TestRunWatchdogInvalidEnv(t *testing.T) {
	listen(t)
	t.Setenv("WATCHDOG_USEC", "sixty")
	err := RunWatchdog(context.Background(), testingclock.NewFakeClock(time.Unix(0, 0)), nil)
	if err == nil {
		t.Fatal("got nil, want an error for WATCHDOG_USEC=sixty")
	}
}

// TestRunWatchdogNilHealthy: with a nil health check and a nil clock (the real
// one, which inside the bubble is the bubble's), RunWatchdog pings at once and
// then every timeout/2.
func TestRunWatchdogNilHealthy(t *testing.T) {
	conn := listen(t)
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", "")
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- RunWatchdog(ctx, nil, nil) }()
		synctest.Wait()
		if got := queued(t, conn); !slices.Equal(got, []string{"WATCHDOG=1"}) {
			t.Errorf("at start got %q, want [WATCHDOG=1]", got)
		}
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if got := queued(t, conn); len(got) != 0 {
			t.Errorf("before timeout/2 got %q, want nothing", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := queued(t, conn); !slices.Equal(got, []string{"WATCHDOG=1"}) {
			t.Errorf("at timeout/2 got %q, want [WATCHDOG=1]", got)
		}
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunWatchdog returned %v, want nil", err)
			}
		default:
			t.Fatal("RunWatchdog did not return after its context ended")
		}
	})
}
