// Command nodeagent is a kubelet-style node agent: it registers this machine's Node, keeps its
// status true and renews its Lease. See internal/app for the wiring.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodeagent/nodeagent/internal/app"
	"github.com/nodeagent/nodeagent/internal/startgc"
)

// startGCWindow is how long the garbage collector stays paused from the process's start
// (internal/startgc): the agent's Node is Ready within ~40 ms of exec, the simulator's first Nodes
// within a second.
const startGCWindow = time.Second

func main() {
	time.AfterFunc(startGCWindow, startgc.Release)
	// Hidden: NODEAGENT_STARTUP_TRACE=FILE writes a runtime/trace of the first second (docs/operating.md).
	stopTrace := app.StartStartupTrace(os.Getenv)
	// SIGHUP is logged and ignored (app.IgnoreHangup); SIGTERM/SIGINT cancel the context and the
	// agent shuts down; a second signal exits at once.
	stopHangup := app.IgnoreHangup()
	defer stopHangup()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop() // restore default handling: the next signal kills the process
	}()
	code := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopTrace()
	os.Exit(code)
}
