package eviction

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/cadvisor/lib/fs"
	"k8s.io/klog/v2"
)

// HostObserver measures eviction signals on the Linux host, from the same sources as the kubelet:
// memory.available = MemTotal − working set of the root memory cgroup (usage − total_inactive_file
// on cgroup v1; MemTotal − MemFree − inactive_file of the root memory.stat on cgroup v2, as runc and
// cadvisor compute it; MemTotal − MemAvailable when neither can be read), nodefs.* from the filesystem
// of RootDir via cadvisor's FsInfo, imagefs.* from the filesystem of ImageFsDir, and pid.available =
// min(pid_max, threads-max) − tasks running (/proc/loadavg, else sysinfo).
type HostObserver struct {
	// FsInfo is cadvisor's filesystem info (fs.NewFsInfo).
	FsInfo fs.FsInfo
	// RootDir is the agent's root directory; its filesystem is the nodefs.
	RootDir string
	// ImageFsDir returns a directory on the runtime's image filesystem (from CRI ImageFsInfo), or "" if unknown.
	ImageFsDir func(ctx context.Context) string
	// ProcRoot and CgroupRoot default to /proc and /sys/fs/cgroup; tests point them at fixtures.
	ProcRoot, CgroupRoot string
}

// Observe measures every signal it can. It returns the observations made and an errors.Join of the
// measurements that failed, each naming the signal.
func (h *HostObserver) Observe(ctx context.Context) (Observations, error) {
	obs := Observations{}
	var errs []error
	if o, err := h.memory(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", SignalMemoryAvailable, err))
	} else {
		obs[SignalMemoryAvailable] = o
	}
	if h.FsInfo != nil && h.RootDir != "" {
		if info, err := DirFs(h.FsInfo, h.RootDir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", SignalNodeFsAvailable, err))
		} else {
			addFs(obs, info, SignalNodeFsAvailable, SignalNodeFsInodesFree)
		}
	}
	// The image filesystem is observed even when it is the nodefs's own: the kubelet's
	// makeSignalObservations takes imagefs.* from the summary's runtime ImageFs whatever its device, so
	// on one shared filesystem imagefs.available<15% is met before nodefs.available<10%.
	if h.FsInfo != nil && h.ImageFsDir != nil {
		if dir := h.ImageFsDir(ctx); dir != "" {
			if info, err := DirFs(h.FsInfo, dir); err != nil {
				// The runtime's image store may not be visible here (nodeagent in a pod without it
				// mounted): imagefs signals are then not measured.
				klog.FromContext(ctx).V(2).Info("Image filesystem not measurable; imagefs signals skipped", "dir", dir, "err", err)
			} else {
				addFs(obs, info, SignalImageFsAvailable, SignalImageFsInodesFree)
			}
		}
	}
	if o, err := h.pids(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", SignalPIDAvailable, err))
	} else {
		obs[SignalPIDAvailable] = o
	}
	return obs, errors.Join(errs...)
}

// DirFs returns cadvisor's filesystem stats (capacity, available, inodes; bytes and counts) for the
// filesystem holding dir, composed as cadvisor's manager.GetDirFsInfo does: device of dir, its mount
// point, then that mount's stats. Errors wrap the cadvisor error and name dir.
func DirFs(fsInfo fs.FsInfo, dir string) (fs.Fs, error) {
	dev, err := fsInfo.GetDirFsDevice(dir)
	if err != nil {
		return fs.Fs{}, fmt.Errorf("device for dir %q: %w", dir, err)
	}
	mount, err := fsInfo.GetMountpointForDevice(dev.Device)
	if err != nil {
		return fs.Fs{}, fmt.Errorf("mount point of device %q (dir %q): %w", dev.Device, dir, err)
	}
	infos, err := fsInfo.GetFsInfoForPath(map[string]struct{}{mount: {}})
	if err != nil {
		return fs.Fs{}, fmt.Errorf("filesystem info of %q (dir %q): %w", mount, dir, err)
	}
	for _, i := range infos {
		if i.Device == dev.Device {
			return i, nil
		}
	}
	if len(infos) > 0 {
		return infos[0], nil
	}
	return fs.Fs{}, fmt.Errorf("no filesystem info for dir %q (device %q, mount %q)", dir, dev.Device, mount)
}

func addFs(obs Observations, info fs.Fs, avail, inodes Signal) {
	obs[avail] = Observation{Available: int64(info.Available), Capacity: int64(info.Capacity)}
	if info.Inodes != nil && info.InodesFree != nil {
		obs[inodes] = Observation{Available: int64(*info.InodesFree), Capacity: int64(*info.Inodes)}
	}
}

func (h *HostObserver) proc() string {
	if h.ProcRoot == "" {
		return "/proc"
	}
	return h.ProcRoot
}

func (h *HostObserver) cgroup() string {
	if h.CgroupRoot == "" {
		return "/sys/fs/cgroup"
	}
	return h.CgroupRoot
}

func (h *HostObserver) memory() (Observation, error) {
	meminfo, err := readKeyValues(filepath.Join(h.proc(), "meminfo"), ":")
	if err != nil {
		return Observation{}, err
	}
	total, ok := meminfo["MemTotal"]
	if !ok {
		return Observation{}, fmt.Errorf("no MemTotal in %s/meminfo", h.proc())
	}
	total *= 1024 // meminfo is in kB
	var workingSet int64
	v1 := filepath.Join(h.cgroup(), "memory")
	if usage, err := readInt(filepath.Join(v1, "memory.usage_in_bytes")); err == nil {
		stat, err := readKeyValues(filepath.Join(v1, "memory.stat"), " ")
		if err != nil {
			return Observation{}, err
		}
		workingSet = usage - stat["total_inactive_file"]
	} else if stat, err := readKeyValues(filepath.Join(h.cgroup(), "memory.stat"), " "); err == nil && hasKey(meminfo, "MemFree") {
		// cgroup v2: the root cgroup has no memory.current, so runc (statsFromMeminfo) takes the
		// usage from meminfo and cadvisor subtracts the root memory.stat's inactive_file.
		workingSet = total - meminfo["MemFree"]*1024 - stat["inactive_file"]
	} else {
		avail, ok := meminfo["MemAvailable"]
		if !ok {
			return Observation{}, fmt.Errorf("no MemAvailable in %s/meminfo", h.proc())
		}
		workingSet = total - avail*1024
	}
	if workingSet < 0 {
		workingSet = 0
	}
	return Observation{Available: total - workingSet, Capacity: total}, nil
}

// pids mirrors the kubelet's pidlimit.Stats: the limit is the smaller of kernel.pid_max and
// kernel.threads-max (whichever can be read), the running tasks come from /proc/loadavg, or from
// sysinfo(2) (which truncates above 65535) when loadavg cannot be read.
func (h *HostObserver) pids() (Observation, error) {
	max := int64(-1)
	var errs []error
	for _, f := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		v, err := readInt(filepath.Join(h.proc(), f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if max == -1 || v < max {
			max = v
		}
	}
	if max == -1 {
		return Observation{}, errors.Join(errs...)
	}
	procs, err := runningTasks(filepath.Join(h.proc(), "loadavg"))
	if err != nil {
		var si syscall.Sysinfo_t
		if err := syscall.Sysinfo(&si); err != nil {
			return Observation{}, fmt.Errorf("sysinfo: %w", err)
		}
		procs = int64(si.Procs)
	}
	return Observation{Available: max - procs, Capacity: max}, nil
}

// runningTasks returns the task count of /proc/loadavg ("1.36 3.49 4.53 2/3518 3715089" → 3518).
func runningTasks(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) < 5 {
		return 0, fmt.Errorf("%s: not enough fields", path)
	}
	_, total, ok := strings.Cut(fields[3], "/")
	if !ok {
		return 0, fmt.Errorf("%s: no running/total field", path)
	}
	return strconv.ParseInt(total, 10, 64)
}

func hasKey(m map[string]int64, k string) bool {
	_, ok := m[k]
	return ok
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readKeyValues reads "key<sep> value [unit]" lines into a map of integers, skipping lines that do not parse.
func readKeyValues(path, sep string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), sep)
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[strings.TrimSpace(k)] = v
		}
	}
	return out, sc.Err()
}
