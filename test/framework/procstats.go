package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcStats is one reading of a process's memory and descriptors from /proc.
type ProcStats struct {
	// RSS is VmRSS in bytes.
	RSS int64
	// FDs counts /proc/PID/fd; Sockets those that are sockets.
	FDs, Sockets int
	// Threads is the Threads field of /proc/PID/status.
	Threads int64
}

// ReadProcStats reads pid's ProcStats. The error names the pid and the file.
func ReadProcStats(pid int) (ProcStats, error) {
	var st ProcStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			st.RSS = n * 1024
		case "Threads":
			st.Threads = n
		}
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return st, fmt.Errorf("list fds of pid %d: %w", pid, err)
	}
	st.FDs = len(ents)
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			st.Sockets++
		}
	}
	return st, nil
}

// String formats the stats for a log line: "RSS 38.2 MiB, 15 fds (6 sockets), 9 threads".
func (s ProcStats) String() string {
	return fmt.Sprintf("RSS %.1f MiB, %d fds (%d sockets), %d threads", float64(s.RSS)/(1<<20), s.FDs, s.Sockets, s.Threads)
}
