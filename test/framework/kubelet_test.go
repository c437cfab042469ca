package framework

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLogHasAfter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubelet.log")
	const before = "I1 Eviction manager: starting control loop\n"
	if err := os.WriteFile(path, []byte(before+"I2 something else\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		offset int64
		want   bool
	}{
		{"marker in the whole log", 0, true},
		{"marker only before offset (an earlier start's)", int64(len(before)), false},
		{"offset past the end", 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := logHasAfter(path, tc.offset, kubeletStartedMarkers); got != tc.want {
				t.Errorf("logHasAfter(offset %d) = %v, want %v", tc.offset, got, tc.want)
			}
		})
	}
	if logHasAfter(filepath.Join(dir, "missing"), 0, kubeletStartedMarkers) {
		t.Error("logHasAfter of a missing file = true, want false")
	}
}

// TestKubeletStartsOneAtATime starts two fake kubelets (shell scripts) on one lock: the second must
// not exec before the first has logged that its container manager started.
func TestKubeletStartsOneAtATime(t *testing.T) {
	dir := t.TempDir()
	old := kubeletStartLock
	kubeletStartLock = filepath.Join(dir, "start.lock")
	t.Cleanup(func() { kubeletStartLock = old })

	shared := filepath.Join(dir, "order")
	fifo := filepath.Join(dir, "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := &Kubelet{NodeName: "first", Binary: script("first", `echo "first exec" >> `+shared+`
cat `+fifo+` > /dev/null
echo "first marker" >> `+shared+`
echo "I1 Eviction manager: starting control loop"
exec sleep 600
`), LogPath: filepath.Join(dir, "first.log")}
	second := &Kubelet{NodeName: "second", Binary: script("second", `echo "second exec" >> `+shared+"\n"),
		LogPath: filepath.Join(dir, "second.log")}
	t.Cleanup(func() { first.current().kill() })

	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- second.Start() }()
	// Without the lock the second script runs at once; give it the chance before releasing the first.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) && !strings.Contains(readFile(shared), "second exec") {
		time.Sleep(10 * time.Millisecond)
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	<-second.Exited()
	if got, want := readFile(shared), "first exec\nfirst marker\nsecond exec\n"; got != want {
		t.Errorf("order of events = %q, want %q", got, want)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
