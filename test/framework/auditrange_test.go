package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadAuditEventsRange(t *testing.T) {
	lines := []string{
		`{"stage":"ResponseComplete","verb":"get","user":{"username":"a"}}`,
		`{"stage":"ResponseComplete","verb":"update","user":{"username":"b"}}`,
		`{"stage":"ResponseStarted","verb":"watch","user":{"username":"c"}}`,
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	// The last line is still being written.
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"+`{"stage":"Resp`), 0o644); err != nil {
		t.Fatal(err)
	}
	size, err := AuditLogSize(path)
	if err != nil {
		t.Fatal(err)
	}
	first := int64(len(lines[0]) + 1)
	for _, tc := range []struct {
		name     string
		from, to int64
		want     []string // verbs
	}{
		{"whole file", 0, size, []string{"get", "update", "watch"}},
		{"from a line boundary", first, size, []string{"update", "watch"}},
		{"from inside a line", first - 3, size, []string{"update", "watch"}},
		{"to inside a line", 0, first + 5, []string{"get"}},
		{"empty", first, first, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, err := ReadAuditEventsRange(path, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			var verbs []string
			for _, e := range events {
				verbs = append(verbs, e.Verb)
			}
			if strings.Join(verbs, ",") != strings.Join(tc.want, ",") {
				t.Errorf("verbs %v, want %v", verbs, tc.want)
			}
		})
	}
}

func TestReadProcCPU(t *testing.T) {
	d0, err := ReadProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d1, err := ReadProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d1 < d0 {
		t.Errorf("CPU time went back: %v then %v", d0, d1)
	}
	if _, err := ReadProcCPU(-1); err == nil || !strings.Contains(err.Error(), "pid -1") {
		t.Errorf("ReadProcCPU(-1): %v, want an error naming the pid", err)
	}
}
