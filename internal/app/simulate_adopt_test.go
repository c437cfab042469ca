package app

import (
	"strings"
	"testing"
)

// TestSimulateAdoptFlags: the --manage-* flags parse into the selector, --nodes 0 means "adopt only"
// and needs one of them, and KWOK's exclusions are refused naming the flags.
func TestSimulateAdoptFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // "" for valid
	}{
		{"template only", []string{"--nodes=10"}, ""},
		{"adopt only", []string{"--nodes=0", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake"}, ""},
		{"both", []string{"--nodes=10", "--manage-all-nodes"}, ""},
		{"two selectors", []string{"--nodes=0", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--manage-nodes-with-label-selector=type=kwok"}, ""},
		{"single", []string{"--nodes=0", "--manage-single-node=node-1"}, ""},
		{"nothing to run", []string{"--nodes=0"}, "--nodes 0: must be between 1 and 10000, or 0 (adopt only) with --manage-all-nodes"},
		{"too many", []string{"--nodes=10001", "--manage-all-nodes"}, "--nodes 10001"},
		{"all and single", []string{"--nodes=0", "--manage-all-nodes", "--manage-single-node=n"}, "--manage-all-nodes"},
		{"single and label", []string{"--manage-single-node=n", "--manage-nodes-with-label-selector=a=b"}, `--manage-single-node "n"`},
		{"bad selector", []string{"--manage-nodes-with-label-selector=a=b=c"}, `--manage-nodes-with-label-selector "a=b=c"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, fs := simulateFlags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.agent.Flags = fs
			_, err := completeSimulate(o)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("completeSimulate(%v) = %v, want an error containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
