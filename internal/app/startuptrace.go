package app

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"time"
)

// StartupTraceEnv names the environment variable that, when set to a file path, makes nodeagent write
// a runtime/trace (go tool trace) of its first StartupTraceDuration (or $NODEAGENT_STARTUP_TRACE_DURATION,
// a Go duration) to that file: a hidden aid for finding where the time to Ready goes. Package
// initialisation is not in it (it runs before main); GODEBUG=inittrace=1 shows that part.
const StartupTraceEnv = "NODEAGENT_STARTUP_TRACE"

// StartupCPUProfileEnv names the environment variable that, when set to a file path, makes nodeagent
// write a CPU profile (pprof, `go tool pprof`) of the same first StartupTraceDuration to that file, with
// or without the trace; profiles of several starts merge with `go tool pprof -top FILE...`.
const StartupCPUProfileEnv = "NODEAGENT_STARTUP_CPUPROFILE"

// StartupTraceDuration is how much of the start the trace covers unless the environment says otherwise.
const StartupTraceDuration = time.Second

// StartStartupTrace starts the start-up trace when getenv(StartupTraceEnv) names a file, and the CPU
// profile when getenv(StartupCPUProfileEnv) does, and returns a func that stops them early (safe to call
// more than once, and when nothing was started). Errors (unwritable file, bad duration) are printed to
// stderr and leave the agent untraced: tracing is never a reason not to start.
func StartStartupTrace(getenv func(string) string) (stop func()) {
	tracePath, profilePath := getenv(StartupTraceEnv), getenv(StartupCPUProfileEnv)
	if tracePath == "" && profilePath == "" {
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
	var stops []func()
	if tracePath != "" {
		if f, err := startFile(tracePath, StartupTraceEnv, trace.Start); err == nil {
			stops = append(stops, func() { trace.Stop(); _ = f.Close() })
		}
	}
	if profilePath != "" {
		if f, err := startFile(profilePath, StartupCPUProfileEnv, pprof.StartCPUProfile); err == nil {
			stops = append(stops, func() { pprof.StopCPUProfile(); _ = f.Close() })
		}
	}
	if len(stops) == 0 {
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
		for _, s := range stops {
			s()
		}
		close(stopped)
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-stopped
	}
}

// startFile creates path and starts start (trace.Start, pprof.StartCPUProfile) writing to it; an error is
// printed to stderr naming env, and the file closed.
func startFile(path, env string, start func(w io.Writer) error) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %s: %v\n", env, err)
		return nil, err
	}
	if err := start(f); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %s: %v\n", env, err)
		_ = f.Close()
		return nil, err
	}
	return f, nil
}
