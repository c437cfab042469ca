package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestApplySIG(t *testing.T) {
	tests := []struct {
		name      string
		sig       string
		given     options
		set       []string // the flags given on the command line
		want      options
		wantErr   string
		wantArgs  []string // in ginkgoArgs
		wantNoArg string   // a prefix no argument of ginkgoArgs has
	}{{
		name:      "sig-apps: [Serial] included",
		sig:       "sig-apps",
		want:      options{focus: `\[sig-apps\].*\[Conformance\]`, dir: "_output/e2e-sig-apps"},
		wantArgs:  []string{`--focus=\[sig-apps\].*\[Conformance\]`},
		wantNoArg: "--skip=",
	}, {
		name:     "sig-node: [Serial] skipped",
		sig:      "sig-node",
		want:     options{focus: `\[sig-node\].*\[Conformance\]`, skip: `\[Serial\]`, dir: "_output/e2e-sig-node"},
		wantArgs: []string{`--focus=\[sig-node\].*\[Conformance\]`, `--skip=\[Serial\]`},
	}, {
		name:     "flags given win",
		sig:      "sig-node",
		given:    options{focus: "Ephemeral", skip: "", dir: "/tmp/x"},
		set:      []string{"focus", "skip", "dir"},
		want:     options{focus: "Ephemeral", dir: "/tmp/x"},
		wantArgs: []string{"--focus=Ephemeral"}, wantNoArg: "--skip=",
	}, {
		name:    "unknown",
		sig:     "sig-storage",
		wantErr: `--sig "sig-storage": not one of sig-apps, sig-node`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := map[string]bool{}
			for _, f := range tt.set {
				set[f] = true
			}
			got, err := applySIG(tt.given, tt.sig, set)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("applySIG: error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.focus != tt.want.focus || got.skip != tt.want.skip || got.dir != tt.want.dir {
				t.Errorf("applySIG: focus %q skip %q dir %q, want %q %q %q", got.focus, got.skip, got.dir, tt.want.focus, tt.want.skip, tt.want.dir)
			}
			args := ginkgoArgs(got, time.Minute, "kc", "d")
			for _, a := range tt.wantArgs {
				if !slices.Contains(args, a) {
					t.Errorf("ginkgoArgs %q: no %q", args, a)
				}
			}
			if tt.wantNoArg != "" && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, tt.wantNoArg) }) {
				t.Errorf("ginkgoArgs %q: has %s", args, tt.wantNoArg)
			}
			// e2e.test's flags come after the suite's binary and "--".
			if i := slices.Index(args, "--"); i < 1 || !strings.HasSuffix(args[i-1], "e2e.test") {
				t.Errorf("ginkgoArgs %q: e2e.test and -- not in place", args)
			}
		})
	}
}
