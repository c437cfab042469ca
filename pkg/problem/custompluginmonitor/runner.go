package custompluginmonitor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"
	"k8s.io/utils/clock"
)

const (
	// maxPluginOutputBytes is how much of a plugin's stdout and of its stderr is kept; the rest is
	// read and discarded (NPD's maxCustomPluginBufferBytes).
	maxPluginOutputBytes = 4 * 1024
	// outputWaitDelay is how long, after a plugin exits or is killed, its stdout and stderr are still
	// read before they are closed: a process it left behind (`setsid sleep 120 &`) that keeps them
	// open cannot hold the result back longer than that (exec.Cmd.WaitDelay).
	outputWaitDelay = 100 * time.Millisecond
	// resultBuffer is the result channel's capacity (NPD's 1000).
	resultBuffer = 1000
)

// pluginRunner runs a config's plugins as NPD's plugin.Plugin (k8s.io/node-problem-detector
// v1.36.0, pkg/custompluginmonitor/plugin) does, with the same results for the same plugins: all
// rules at start and then every invoke_interval, at most concurrency at a time, each in its own
// process group, killed (the group, SIGKILL) at its timeout (the rule's if shorter than the global
// one); exit 0 OK, 1 NonOK, anything else or a kill Unknown; stdout's first 4 KiB, trimmed and cut
// to max_output_length, as the message, and NPD's "Timeout when running plugin ..." message on a
// timeout.
//
// The difference is what NPD's users hit in its issues 1050 and 726: NPD waits for the plugin's
// stdout and stderr to close before it waits for the process, so a plugin whose child keeps them
// open (`setsid sleep 120 &; exit 1`) holds the monitor's round, and leaves the plugin a zombie,
// until that child exits. Here the process is waited for first and its output read for at most
// 100 ms more (exec.Cmd.WaitDelay): the result comes within the plugin's timeout plus 100 ms, the
// plugin process is reaped at once, and when output was left open the rest of its process group
// is killed. A child that left the group (setsid) keeps running until it exits on its own, its
// output pipes closed.
type pluginRunner struct {
	config  cpmtypes.CustomPluginConfig
	clock   clock.PassiveClock // times each plugin run, for its log line
	results chan cpmtypes.Result
	slots   chan struct{}

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

func newPluginRunner(config cpmtypes.CustomPluginConfig, clk clock.PassiveClock) *pluginRunner {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &pluginRunner{
		config:  config,
		clock:   clk,
		results: make(chan cpmtypes.Result, resultBuffer),
		slots:   make(chan struct{}, *config.PluginGlobalConfig.Concurrency),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// GetResultChan returns the results; it is closed when Run returns.
func (p *pluginRunner) GetResultChan() <-chan cpmtypes.Result { return p.results }

// Run runs the rules at once and then every invoke_interval until Stop; a round's plugins are all
// waited for before the next round can start (as NPD). Mirrors plugin.Plugin.Run.
func (p *pluginRunner) Run() {
	defer func() {
		close(p.results)
		close(p.done)
	}()
	ticker := time.NewTicker(*p.config.PluginGlobalConfig.InvokeInterval)
	defer ticker.Stop()
	select {
	case <-p.stop:
		return
	default:
		p.runRules()
	}
	for {
		select {
		case <-ticker.C:
			p.runRules()
		case <-p.stop:
			return
		}
	}
}

// Stop ends Run after the round in progress and waits for it to return.
func (p *pluginRunner) Stop() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

func (p *pluginRunner) runRules() {
	var wg sync.WaitGroup
	for _, rule := range p.config.Rules {
		p.slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-p.slots }()
			start := p.clock.Now()
			status, message := p.run(*rule)
			level := klog.Level(3)
			if status != cpmtypes.OK {
				level = 2
			}
			klog.V(level).InfoS("Plugin finished", "path", rule.Path, "reason", rule.Reason, "exitStatus", status, "duration", p.clock.Since(start))
			p.results <- cpmtypes.Result{Rule: rule, ExitStatus: status, Message: message}
		})
	}
	wg.Wait()
}

// run runs one plugin. Mirrors plugin.Plugin.run, but see pluginRunner.
func (p *pluginRunner) run(rule cpmtypes.CustomRule) (cpmtypes.Status, string) {
	timeout := *p.config.PluginGlobalConfig.Timeout
	if rule.Timeout != nil && *rule.Timeout < timeout {
		timeout = *rule.Timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, rule.Path, rule.Args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = outputWaitDelay
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		klog.ErrorS(err, "Error in starting plugin", "path", rule.Path)
		return cpmtypes.Unknown, "Error in starting plugin. Please check the error log"
	}
	err := cmd.Wait()
	timedOut := ctx.Err() == context.DeadlineExceeded && !exitedBefore(cmd, err)
	var exitErr *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrWaitDelay):
		// The plugin exited but left its output open: whatever else is in its group goes.
		_ = killGroup(cmd)
		klog.V(2).InfoS("Plugin exited leaving its output open; its process group was killed", "path", rule.Path)
	case err != nil && !errors.As(err, &exitErr):
		klog.ErrorS(err, "Error in waiting for plugin", "path", rule.Path, "output", stdout.String())
		return cpmtypes.Unknown, "Error in waiting for plugin. Please check the error log"
	}
	output := strings.TrimSpace(stdout.String())
	if timedOut {
		klog.ErrorS(nil, "Error in running plugin timeout", "path", rule.Path, "timeout", timeout)
		output = fmt.Sprintf("Timeout when running plugin %q: state - %s. output - %q", rule.Path, cmd.ProcessState.String(), output)
	}
	if max := *p.config.PluginGlobalConfig.MaxOutputLength; len(output) > max {
		output = output[:max]
	}
	level := klog.Level(0)
	status := cpmtypes.Unknown
	switch cmd.ProcessState.Sys().(syscall.WaitStatus).ExitStatus() {
	case 0:
		status, level = cpmtypes.OK, 3
	case 1:
		status = cpmtypes.NonOK
	}
	if stderr.Len() > 0 {
		klog.V(level).InfoS("Plugin stderr", "path", rule.Path, "stderr", stderr.String())
	}
	return status, output
}

// exitedBefore reports whether the plugin exited on its own (not by the timeout's kill), which NPD
// counts as no timeout when it happened before the deadline.
func exitedBefore(cmd *exec.Cmd, err error) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && !ws.Signaled() && !errors.Is(err, exec.ErrWaitDelay)
}

// killGroup sends SIGKILL to the plugin's process group (NPD's util.Kill).
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return errors.New("plugin has no process")
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// limitedBuffer keeps the first maxPluginOutputBytes written to it and discards the rest.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxPluginOutputBytes - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *limitedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}
