package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free when asked (the kernel picks it; another process
// may take it before the caller binds it). It panics if no port can be had, which means the machine is broken.
func FreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("framework: listen on 127.0.0.1:0: %v", err))
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
