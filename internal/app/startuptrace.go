package app

import (
	"fmt"
	"os"
	"runtime/trace"
	"sync"
	"time"
)

// StartupTraceEnv names the environment variable that, when set to a file path, makes nodeagent write
// a runtime/trace (go tool trace) of its first StartupTraceDuration (or $NODEAGENT_STARTUP_TRACE_DURATION,
// a Go duration) to that file: a hidden aid for finding where the time to Ready goes. Package
// initialisation is not in it (it runs before main); GODEBUG=inittrace=1 shows that part.
const StartupTraceEnv = "NODEAGENT_STARTUP_TRACE"

// StartupTraceDuration is how much of the start the trace covers unless the environment says otherwise.
const StartupTraceDuration = time.Second

// StartStartupTrace starts the start-up trace when getenv(StartupTraceEnv) names a file, and returns
// a func that stops it early (safe to call more than once, and when no trace was started). Errors
// (unwritable file, bad duration) are printed to stderr and leave the agent untraced: tracing is never
// a reason not to start.
func StartStartupTrace(getenv func(string) string) (stop func()) {
	path := getenv(StartupTraceEnv)
	if path == "" {
		return func() {}
	}
	d := StartupTraceDuration
	if s := getenv(StartupTraceEnv + "_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			fmt.Fprintf(os.Stderr, "nodeagent: %s_DURATION %q: %v; tracing %v\n", StartupTraceEnv, s, err, StartupTraceDuration)
			d = StartupTraceDuration
		}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %s: %v\n", StartupTraceEnv, err)
		return func() {}
	}
	if err := trace.Start(f); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %s: %v\n", StartupTraceEnv, err)
		_ = f.Close()
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-done:
		}
		trace.Stop()
		_ = f.Close()
		close(stopped)
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-stopped
	}
}
