package integration_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/test/framework"
)

// nodeagentStatus runs `nodeagent status` against agent a (the binary the tests run) and returns its
// exit code and output (stdout then stderr).
func nodeagentStatus(t *testing.T, a *framework.Agent, args ...string) (int, string) {
	t.Helper()
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	port := a.HealthzURL[strings.LastIndex(a.HealthzURL, ":")+1:]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"status", "--healthz-port=" + port}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("nodeagent status: %v", err)
	}
	return code, stdout.String() + stderr.String()
}

// checkStatus runs `nodeagent status` and checks its exit code and that its output holds every want.
func checkStatus(t *testing.T, a *framework.Agent, wantCode int, want ...string) string {
	t.Helper()
	code, out := nodeagentStatus(t, a)
	if code != wantCode {
		t.Errorf("nodeagent status exited %d, want %d:\n%s", code, wantCode, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("nodeagent status output lacks %q:\n%s", w, out)
		}
	}
	t.Logf("nodeagent status (exit %d):\n%s", code, out)
	return out
}
