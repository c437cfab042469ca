package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/nodeagent/nodeagent/test/framework"
)

// cpuSeconds returns framework.ReadProcCPU of pid (utime+stime+cutime+cstime: its own CPU time plus that
// of children it has reaped, e.g. iptables runs), in seconds.
func cpuSeconds(pid int) (float64, error) {
	d, err := framework.ReadProcCPU(pid)
	return d.Seconds(), err
}

// statusField returns a "kB" field of /proc/PID/status (VmRSS, ...) in bytes, or a plain count (Threads).
func statusField(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			fs := strings.Fields(v)
			if len(fs) == 0 {
				break
			}
			n, err := strconv.ParseInt(fs[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s of pid %d: %w", field, pid, err)
			}
			if len(fs) > 1 && fs[1] == "kB" {
				n *= 1024
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// Syscall numbers shared by every Linux architecture Go supports (new syscalls are numbered alike).
const (
	sysPidfdOpen      = 434
	sysProcessMadvise = 440
	madvPageout       = 21 // MADV_PAGEOUT
)

// iovec is struct iovec with the base as a plain address (it points into another process).
type iovec struct {
	base uintptr
	len  uint64
}

// pageOutFileMappings asks the kernel to reclaim the file-backed pages mapped by pid (its binary and
// shared libraries; pages other processes also map are left alone) with process_madvise(MADV_PAGEOUT),
// as memory pressure would. It returns how many bytes of mappings it covered. The process then faults
// back in only what it uses, so its RSS afterwards approaches its working set.
func pageOutFileMappings(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	var iovs []iovec
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		var start, end uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &start, &end); err != nil || end <= start {
			continue
		}
		iovs = append(iovs, iovec{base: uintptr(start), len: end - start})
		total += int64(end - start)
	}
	if len(iovs) == 0 {
		return 0, nil
	}
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("pidfd_open %d: %w", pid, errno)
	}
	defer syscall.Close(int(fd))
	for len(iovs) > 0 {
		n := min(len(iovs), 512) // ≤ UIO_MAXIOV
		_, _, errno := syscall.Syscall6(sysProcessMadvise, fd, uintptr(unsafe.Pointer(&iovs[0])), uintptr(n), madvPageout, 0, 0)
		if errno != 0 {
			return total, fmt.Errorf("process_madvise(MADV_PAGEOUT) pid %d: %w", pid, errno)
		}
		iovs = iovs[n:]
	}
	return total, nil
}

// openFDs counts the entries of /proc/PID/fd.
func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, fmt.Errorf("list fds of pid %d: %w", pid, err)
	}
	return len(ents), nil
}

// hostSample is one reading of a process's memory, descriptors and threads.
type hostSample struct {
	rss, rssAnon, rssFile int64 // VmRSS and its anonymous and file-backed parts, bytes
	fds                   int
	threads               int64
}

// sampler reads hostSamples of several PIDs every interval until stopped.
type sampler struct {
	mu      sync.Mutex
	samples map[int][]hostSample
	errs    []error
	cancel  context.CancelFunc
	done    chan struct{}
}

func startSampler(ctx context.Context, interval time.Duration, pids ...int) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{samples: map[int][]hostSample{}, cancel: cancel, done: make(chan struct{})}
	take := func() {
		for _, pid := range pids {
			var hs hostSample
			var err error
			hs.rss, err = statusField(pid, "VmRSS")
			if err == nil {
				hs.rssAnon, err = statusField(pid, "RssAnon")
			}
			if err == nil {
				hs.rssFile, err = statusField(pid, "RssFile")
			}
			if err == nil {
				hs.threads, err = statusField(pid, "Threads")
			}
			if err == nil {
				hs.fds, err = openFDs(pid)
			}
			s.mu.Lock()
			if err != nil {
				s.errs = append(s.errs, err)
			} else {
				s.samples[pid] = append(s.samples[pid], hs)
			}
			s.mu.Unlock()
		}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		take()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				take()
			}
		}
	}()
	return s
}

// stop ends sampling and returns the samples by PID and the read errors, if any.
func (s *sampler) stop() (map[int][]hostSample, []error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.errs
}

// median returns the median of xs (mean of the two middle values for an even count), NaN if empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of xs, NaN if empty.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = max(m, x)
	}
	return m
}

// fileSize returns the size of the file at path (0 if it does not exist yet).
func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// auditWindow copies the complete lines of the audit log between byte offsets from and to (as taken at
// the start and end of the steady-state window) into a file of their own and reads it with
// framework.ReadAuditEvents. The audit log backend writes one event per write(2), so offsets taken
// between events fall on line boundaries; a partial line at either end is dropped all the same.
func auditWindow(path string, from, to int64, out string) ([]framework.AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	defer f.Close()
	buf := make([]byte, to-from)
	if _, err := f.ReadAt(buf, from); err != nil && err != io.EOF {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	if from > 0 {
		prev := make([]byte, 1)
		if _, err := f.ReadAt(prev, from-1); err == nil && prev[0] != '\n' {
			if i := bytes.IndexByte(buf, '\n'); i >= 0 {
				buf = buf[i+1:]
			}
		}
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i+1]
	} else {
		buf = nil
	}
	if err := os.WriteFile(out, buf, 0o644); err != nil {
		return nil, fmt.Errorf("write audit window: %w", err)
	}
	return framework.ReadAuditEvents(out)
}

// compactLen is the length of a JSON document without insignificant whitespace (how clients send it).
func compactLen(raw json.RawMessage) int {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return len(raw)
	}
	return b.Len()
}

// nodeSizes are the sizes of one Node object as served by the API server.
type nodeSizes struct {
	json, kubectlJSON, protobuf int
}

// getNodeSizes GETs node as JSON and as protobuf with c (an admin client) and also renders the JSON as
// `kubectl get node -o json` prints it (4-space indent, metadata.managedFields hidden).
func getNodeSizes(ctx context.Context, c *http.Client, apiURL, node string) (nodeSizes, error) {
	get := func(accept string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/api/v1/nodes/"+node, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", accept)
		resp, err := c.Do(req)
		if err != nil {
			return nil, fmt.Errorf("get node %s as %s: %w", node, accept, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("get node %s as %s: %w", node, accept, err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("get node %s as %s: HTTP %d: %s", node, accept, resp.StatusCode, b)
		}
		return b, nil
	}
	var sz nodeSizes
	j, err := get("application/json")
	if err != nil {
		return sz, err
	}
	sz.json = len(bytes.TrimSpace(j))
	p, err := get("application/vnd.kubernetes.protobuf")
	if err != nil {
		return sz, err
	}
	sz.protobuf = len(p)
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return sz, fmt.Errorf("decode node %s: %w", node, err)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	k, err := json.MarshalIndent(obj, "", "    ")
	if err != nil {
		return sz, fmt.Errorf("encode node %s: %w", node, err)
	}
	sz.kubectlJSON = len(k) + 1 // kubectl ends with a newline
	return sz, nil
}
