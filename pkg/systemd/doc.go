// Package systemd speaks systemd's sd_notify protocol for a unit of Type=notify
// (see deploy/systemd/nodeagent.service): READY=1 once start-up is done,
// WATCHDOG=1 while the agent is healthy, STOPPING=1 when it shuts down.
//
// Every function is a no-op returning nil when the agent does not run under
// systemd, that is when the NOTIFY_SOCKET environment variable is unset, so the
// caller needs no "am I under systemd" branch:
//
//	if err := systemd.Ready(ctx); err != nil {
//		logger.Error(err, "Could not tell systemd the agent is ready")
//	}
//	go func() {
//		if err := systemd.RunWatchdog(ctx, clock.RealClock{}, runtimeState.Errors); err != nil {
//			logger.Error(err, "systemd watchdog")
//		}
//	}()
//	<-ctx.Done()
//	_ = systemd.Stopping()
//
// Send READY=1 once the agent has loaded its configuration and started its
// components, not after the API server first answers: systemd waits for READY=1
// at most TimeoutStartSec and restarts the unit after that, which would turn an
// unreachable API server into a restart loop.
package systemd
