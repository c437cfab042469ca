package framework

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"
)

// process is one child process in its own process group, with stdout and stderr appended to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // exit error, valid after done
}

// startProcess starts bin with args, logging to logPath (appended to, so restarts keep earlier output).
func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	return startProcessEnv(name, logPath, nil, bin, args...)
}

// startProcessEnv is startProcess with env added to the test process's environment.
func startProcessEnv(name, logPath string, env []string, bin string, args ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	fmt.Fprintf(logf, "=== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process ID.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited, and its exit error if so.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// exitedErr returns a non-nil error naming the process and pointing at its log if the process has exited.
func (p *process) exitedErr() error {
	if done, err := p.exited(); done {
		return fmt.Errorf("%s exited (%v); log %s:\n%s: %w", p.name, err, p.logPath, tail(p.logPath, 20), ErrStop)
	}
	return nil
}

// signal sends sig to the process (not its group).
func (p *process) signal(sig syscall.Signal) error {
	if done, _ := p.exited(); done {
		return nil
	}
	if err := syscall.Kill(p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s pid %d with %v: %w", p.name, p.pid(), sig, err)
	}
	return nil
}

// errKilled is wrapped by the error of a stop that had to SIGKILL.
var errKilled = errors.New("killed")

// stop sends SIGTERM (and SIGCONT, should it be stopped) and waits up to grace. If the process is still
// there, it sends SIGQUIT (a Go program then writes its goroutines to its log and exits), waits 2 s more,
// and SIGKILLs the whole process group. It returns the process's exit error (nil for a clean exit 0), or
// an error wrapping errKilled and quoting the end of the log if SIGTERM did not end it in time.
func (p *process) stop(grace time.Duration) error {
	_ = p.signal(syscall.SIGTERM)
	_ = p.signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
	}
	_ = p.signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		p.kill()
	}
	return fmt.Errorf("%s did not exit within %v of SIGTERM, %w (SIGQUIT: goroutine dump in %s); log before that:\n%s",
		p.name, grace, errKilled, p.logPath, tailBefore(p.logPath, "SIGQUIT: quit", 20))
}

// kill SIGKILLs the process group and waits for the process to be reaped.
func (p *process) kill() {
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	<-p.done
}

// tail returns the last n lines of the file at path (or a note that it cannot be read).
func tail(path string, n int) string { return tailBefore(path, "", n) }

// tailBefore is tail of the part of the file before the last line equal to marker ("" for none).
func tailBefore(path, marker string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if marker != "" {
		for i := len(lines) - 1; i >= 0; i-- {
			if lines[i] == marker {
				lines = lines[:i]
				break
			}
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// UnmountAll lazily unmounts (MNT_DETACH) every mount point at or below dir, deepest first, as a stopped
// process may leave them (bind mounts of a root dir, network namespaces). The error joins every failure.
func UnmountAll(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, strings.TrimSuffix(dir, "/")+"/") {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space and so on).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
