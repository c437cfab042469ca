package systemd

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// notifySocketEnv names the environment variable holding the path of systemd's
// notification socket (a unixgram socket; a leading "@" means an abstract one).
const notifySocketEnv = "NOTIFY_SOCKET"

// notify sends one state, e.g. daemon.SdNotifyReady, to systemd and reports
// whether it did. It returns false and nil without sending anything when
// NOTIFY_SOCKET is unset, and an error naming the state when the socket cannot
// be dialled or written.
func notify(state string) (bool, error) {
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		return false, fmt.Errorf("systemd: notify %s: %w", state, err)
	}
	return sent, nil
}

// Ready tells systemd that start-up has finished by sending READY=1; with
// Type=notify, systemd holds the unit in "activating" until it does. ctx only
// carries the logger. Ready returns nil without sending anything when
// NOTIFY_SOCKET is unset, and an error when the socket cannot be written.
func Ready(ctx context.Context) error {
	sent, err := notify(daemon.SdNotifyReady)
	if err != nil {
		return err
	}
	if sent {
		klog.FromContext(ctx).V(2).Info("Told systemd the agent is ready")
	}
	return nil
}

// Stopping tells systemd that the agent has begun to shut down by sending
// STOPPING=1, so that the unit shows as "deactivating" rather than failed while
// the agent drains. It returns nil without sending anything when NOTIFY_SOCKET
// is unset, and an error when the socket cannot be written.
func Stopping() error {
	_, err := notify(daemon.SdNotifyStopping)
	return err
}

// WatchdogInterval returns the watchdog timeout systemd enforces on this
// process (WatchdogSec= of the unit, passed as WATCHDOG_USEC in microseconds),
// or 0 when there is none: NOTIFY_SOCKET or WATCHDOG_USEC is unset, or
// WATCHDOG_PID names another process. It returns an error when WATCHDOG_USEC or
// WATCHDOG_PID is not a positive integer.
func WatchdogInterval() (time.Duration, error) {
	if os.Getenv(notifySocketEnv) == "" {
		return 0, nil
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("systemd: read the watchdog interval: %w", err)
	}
	return interval, nil
}

// RunWatchdog keeps systemd's watchdog fed while the agent is healthy. When
// WatchdogInterval reports an interval, it calls healthy at once and then every
// interval/2 ticks of clk, and sends WATCHDOG=1 only when healthy returns nil;
// an unhealthy agent therefore misses its pings and systemd restarts it once
// the interval has passed without one (Restart=always). A nil healthy counts as
// always healthy; a nil clk means clock.RealClock.
//
// RunWatchdog blocks until ctx ends and then returns nil, also when there is no
// watchdog (NOTIFY_SOCKET or WATCHDOG_USEC unset), so it can sit in a run
// group like any other component. A failed health check or send is logged and
// retried on the next tick; the only error returned is an invalid
// WATCHDOG_USEC or WATCHDOG_PID, at once.
func RunWatchdog(ctx context.Context, clk clock.WithTicker, healthy func() error) error {
	interval, err := WatchdogInterval()
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithName("systemd-watchdog")
	if interval <= 0 {
		logger.V(4).Info("No systemd watchdog, not sending WATCHDOG=1")
		<-ctx.Done()
		return nil
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	if healthy == nil {
		healthy = func() error { return nil }
	}

	period := pingPeriod(interval)
	logger.V(2).Info("Feeding the systemd watchdog", "timeout", interval, "period", period)
	ticker := clk.NewTicker(period)
	defer ticker.Stop()

	for {
		if err := healthy(); err != nil {
			logger.Error(err, "Agent unhealthy, withholding WATCHDOG=1", "timeout", interval)
		} else if _, err := notify(daemon.SdNotifyWatchdog); err != nil {
			logger.Error(err, "Could not feed the systemd watchdog")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// pingPeriod returns how often to send WATCHDOG=1 for a watchdog timeout:
// half of it, as sd_watchdog_enabled(3) recommends, and at least 1ms.
func pingPeriod(timeout time.Duration) time.Duration {
	return max(timeout/2, time.Millisecond)
}
