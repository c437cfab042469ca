package framework

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeralRange: the ports FreePort gives are outside the kernel's ephemeral range (so
// that no outgoing connection takes one while its component is stopped) and can be listened on.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow() // 0 without /proc: FreePort lets the kernel pick, and only listening is checked
	for range 50 {
		port := FreePort()
		if low != 0 && (port < 20000 || port >= low) {
			t.Fatalf("FreePort() = %d, want in [20000, %d)", port, low)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("listen on FreePort() %d: %v", port, err)
		}
		l.Close()
	}
}

// TestReservePort: a port reserved by another process (a shell holding its file with flock(1)) or already by this one
// is refused; once the other process has exited, it can be had.
func TestReservePort(t *testing.T) {
	old := portReservations
	portReservations = t.TempDir()
	t.Cleanup(func() { portReservations = old })

	const port = 20001
	// One process, the shell become sleep, holds the lock on fd 9 (flock -c would leave a child holding it).
	other := exec.Command("sh", "-c", `exec 9>"$1"; flock --exclusive 9; echo held; exec sleep 600`, "sh",
		filepath.Join(portReservations, strconv.Itoa(port)))
	out, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(portReservations, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatalf("flock(1): %v", err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("flock(1) said %q, %v", line, err)
	}

	for _, tc := range []struct {
		name   string
		before func()
		port   int
		want   bool
	}{
		{name: "held by another process", port: port, want: false},
		{name: "free", port: port + 1, want: true},
		{name: "held by this process", port: port + 1, want: false},
		{name: "its holder exited", before: func() { _ = other.Process.Kill(); _ = other.Wait() }, port: port, want: true},
	} {
		if tc.before != nil {
			tc.before()
		}
		got, err := reservePort(tc.port)
		if err != nil || got != tc.want {
			t.Errorf("%s: reservePort(%d) = %v, %v; want %v", tc.name, tc.port, got, err, tc.want)
		}
	}
}
