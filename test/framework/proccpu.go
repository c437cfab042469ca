package framework

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the times in /proc/PID/stat: 100 on every Linux architecture Go runs
// on (sysconf(_SC_CLK_TCK) without cgo).
const clockTicks = 100

// ReadProcCPU returns the CPU time pid has used: utime+stime+cutime+cstime of /proc/PID/stat (its own time
// plus that of the children it has reaped), in USER_HZ resolution (10 ms). The CPU a process used over a
// window, in cores, is the difference of two readings divided by the wall time between them.
func ReadProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); utime is field 14
	if len(f) < 15 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, idx := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		v, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat field %d: %w", pid, idx+3, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
