package framework

import "time"

// Process is a child process started by StartProcess: in its own process group, its stdout and stderr
// appended to a log file.
type Process struct {
	p *process
}

// StartProcess starts bin with args in its own process group, appending its output to logPath (after a
// line with the command line), for a program the framework has no Start function for (a benchmark's
// subject, for instance). name names it in errors. Stop it with Stop.
func StartProcess(name, logPath, bin string, args ...string) (*Process, error) {
	p, err := startProcess(name, logPath, bin, args...)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// StartProcessEnv is StartProcess with env ("KEY=value" each) added to the test process's environment,
// for a program configured by its environment (Karpenter's options).
func StartProcessEnv(name, logPath string, env []string, bin string, args ...string) (*Process, error) {
	p, err := startProcessEnv(name, logPath, env, bin, args...)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// PID returns the process ID.
func (p *Process) PID() int { return p.p.pid() }

// LogPath returns the path of its log.
func (p *Process) LogPath() string { return p.p.logPath }

// ExitedErr returns nil while the process runs, and once it has exited an error naming it, its exit
// status and the end of its log (wrapping ErrStop, to end a WaitFor).
func (p *Process) ExitedErr() error { return p.p.exitedErr() }

// Stop sends SIGTERM and waits up to grace for the exit, then SIGQUIT and SIGKILL (see the process type).
// It returns the exit error: nil for status 0.
func (p *Process) Stop(grace time.Duration) error { return p.p.stop(grace) }
