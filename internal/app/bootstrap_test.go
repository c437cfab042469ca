package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeagent/nodeagent/pkg/certificate"
)

// TestMainBadBootstrapInput: bad TLS bootstrap and rotation settings exit 1 with one "nodeagent: ..."
// line naming the flag and the value, before anything is written to the cluster (the kubeconfigs
// point nowhere reachable).
func TestMainBadBootstrapInput(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	dir := t.TempDir()
	rootDir := filepath.Join(dir, "root")
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenKubeconfig := write("token.kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: abcdef.0123456789abcdef}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	noCreds := write("nocreds.kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	unparsable := write("unparsable.kubeconfig", "apiVersion: v1\nkind: Config\nclusters: [{{{\n")
	notADir := write("file", "")
	cases := []struct {
		desc string
		args []string
		want []string
	}{
		{desc: "missing bootstrap kubeconfig", args: []string{"--bootstrap-kubeconfig", filepath.Join(dir, "none"),
			"--kubeconfig", filepath.Join(dir, "kc"), "--root-dir", rootDir},
			want: []string{"--bootstrap-kubeconfig", "none", "no such file"}},
		{desc: "unparsable bootstrap kubeconfig", args: []string{"--bootstrap-kubeconfig", unparsable,
			"--kubeconfig", filepath.Join(dir, "kc"), "--root-dir", rootDir},
			want: []string{"--bootstrap-kubeconfig", "unparsable.kubeconfig"}},
		{desc: "bootstrap kubeconfig without credentials", args: []string{"--bootstrap-kubeconfig", noCreds,
			"--kubeconfig", filepath.Join(dir, "kc"), "--root-dir", rootDir},
			want: []string{"--bootstrap-kubeconfig", "nocreds.kubeconfig", "no credentials"}},
		{desc: "cert dir not writable", args: []string{"--bootstrap-kubeconfig", tokenKubeconfig,
			"--kubeconfig", filepath.Join(dir, "kc"), "--root-dir", rootDir, "--cert-dir", filepath.Join(notADir, "pki")},
			want: []string{"--cert-dir", "file/pki"}},
		{desc: "rotation without a certificate or bootstrap credentials", args: []string{"--rotate-certificates=true",
			"--kubeconfig", tokenKubeconfig, "--root-dir", rootDir},
			want: []string{"--rotate-certificates=true", "--kubeconfig", "token.kubeconfig", "no valid client certificate"}},
		{desc: "rotation without any kubeconfig", args: []string{"--rotate-certificates=true", "--root-dir", rootDir},
			want: []string{"--rotate-certificates=true", "no --kubeconfig or --bootstrap-kubeconfig"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			code, out := runMain(t, tc.args)
			if code != 1 {
				t.Errorf("Main(%q) = %d, want 1; stderr:\n%s", tc.args, code, out)
			}
			line := nodeagentLine(out)
			if line == "" {
				t.Fatalf("no \"nodeagent: \" line on stderr:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("error line lacks %q: %s", w, line)
				}
			}
			if strings.Count(strings.TrimSpace(line), "\n") > 0 {
				t.Errorf("more than one line: %q", line)
			}
		})
	}
	// Nothing was written where --kubeconfig points.
	if _, err := os.Stat(filepath.Join(dir, "kc")); err == nil {
		t.Error("a kubeconfig was written for bad input")
	}
}

// TestWithCertificate (issue 22, item 2): the syncloop check fails on an expired client certificate
// with the reason, while a first certificate not obtained yet (nothing wrong) passes as long as the
// loops are alive; /readyz waits for a certificate either way.
func TestWithCertificate(t *testing.T) {
	expired := fmt.Errorf("%w at 2026-01-01T00:00:00Z (1m0s ago), requests are sent without a client certificate and refused: x", certificate.ErrCertificateExpired)
	loopsLate := errors.New("status sync late")
	for _, tc := range []struct {
		name              string
		loops, cert       error
		wantHealthy       string // "" for nil
		wantReadyContains string
	}{
		{name: "joining", cert: certificate.ErrNoCertificateYet, wantReadyContains: "no valid client certificate yet"},
		{name: "joining, loops late", loops: loopsLate, cert: certificate.ErrNoCertificateYet, wantHealthy: "status sync late", wantReadyContains: "not registered"},
		{name: "expired", cert: expired, wantHealthy: "client certificate expired at", wantReadyContains: "expired"},
		{name: "fine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			healthy, ready := withCertificate(func() error { return tc.loops }, func() error { return nil }, func() error { return tc.cert })
			err := healthy()
			if (err == nil) != (tc.wantHealthy == "") || (err != nil && !strings.Contains(err.Error(), tc.wantHealthy)) {
				t.Errorf("healthy() = %v, want %q", err, tc.wantHealthy)
			}
			if err := ready(); (err == nil) != (tc.wantReadyContains == "") || (err != nil && !strings.Contains(err.Error(), tc.wantReadyContains)) {
				t.Errorf("ready() = %v, want %q", err, tc.wantReadyContains)
			}
		})
	}
}

// TestMainConfigTooLarge (issue 22, item 5): --config=/dev/zero or a config file over 4 MiB ends the
// command at once with exit 1 and one line naming --config, the file and the limit, instead of being
// read until the process is killed for its memory; so does `nodeagent status --config`.
func TestMainConfigTooLarge(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("#"+strings.Repeat("x", 5<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--config=/dev/zero"},
		{"--config=" + big},
		{"status", "--config=/dev/zero"},
	} {
		code, out := runMain(t, args)
		line := nodeagentLine(out)
		if code != 1 || !strings.Contains(line, `--config "`) || !strings.Contains(line, "file too large") || !strings.Contains(line, "4194304 bytes (4 MiB)") {
			t.Errorf("Main(%q) = %d, %q; want 1 and a line naming --config, the file and the limit", args, code, line)
		}
	}
}
