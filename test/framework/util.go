package framework

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free when asked and that no test process of this machine
// has reserved, and reserves it for the calling process's life. It is taken below the kernel's ephemeral
// range (/proc/sys/net/ipv4/ip_local_port_range, from 20000 up), so that no outgoing connection of any
// process gets it as its source port: a component stopped and started again on its port (kube-apiserver in
// the faults suite, 60 s down) would otherwise find it taken by a connection of a test running beside it
// ("bind: address already in use"). The reservation (reservePort) keeps the test processes `go test` runs
// side by side from picking the same port, or one that another's stopped component will bind again (CI's
// etcd found its peer port taken so). Without the range file the kernel picks (port 0), unreserved. It
// panics if no port can be had, which means the machine is broken.
func FreePort() int {
	lo, hi := 20000, ephemeralLow()
	for range 1000 {
		if hi <= lo {
			break
		}
		port := lo + rand.IntN(hi-lo)
		reserved, err := reservePort(port)
		if err != nil {
			panic(fmt.Sprintf("framework: %v", err))
		}
		if !reserved {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			l.Close()
			return port
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("framework: listen on 127.0.0.1:0: %v", err))
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// portReservations is the directory of FreePort's reservations, one file per port; heldPorts keeps the
// open, flock'ed files of this process's reservations (the kernel releases them when it exits, however
// it exits, so a crashed test leaves none behind).
var (
	portReservations = filepath.Join(os.TempDir(), "nodeagent-test-ports")
	heldPortsMu      sync.Mutex
	heldPorts        []*os.File
)

// reservePort takes port's reservation (an exclusive flock on portReservations/<port>, never waited for)
// and keeps it for the process's life. It returns false when another process, or this one, holds it; an
// error when the directory or file cannot be made.
func reservePort(port int) (bool, error) {
	if err := os.MkdirAll(portReservations, 0o777); err != nil {
		return false, fmt.Errorf("port reservations: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(portReservations, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false, fmt.Errorf("port reservation: %w", err)
	}
	// A lock belongs to its open file: a second open of the same file in this process does not get it either.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("port reservation %d: %w", port, err)
	}
	heldPortsMu.Lock()
	heldPorts = append(heldPorts, f)
	heldPortsMu.Unlock()
	return true, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range, or 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

// WaitFor calls cond every interval until it returns true, returns an error, or ctx is done. The error on
// timeout wraps ctx.Err() and the last error cond returned alongside false, if any (cond may return
// (false, err) to report why it is not there yet without stopping the poll; use ErrStop to stop early).
func WaitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if errors.Is(err, ErrStop) {
			return err
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ErrStop, wrapped in an error returned by a WaitFor condition, makes WaitFor return that error at once.
var ErrStop = errors.New("stop waiting")
