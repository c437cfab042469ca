package framework

import (
	"fmt"
	"net"
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
