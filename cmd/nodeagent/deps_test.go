package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoTestOnlyPackage: the agent binary links no package meant for tests: testify,
// net/http/httptest, cri-api's CRI fakes (the simulated runtime is pkg/simulation's own in-memory
// node.Runtime), client-go's fake clientset. (k8s.io/client-go/testing is linked: client-go's own
// gentype, the base of every typed client, imports it.)
func TestLinksNoTestOnlyPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{"github.com/stretchr/testify", "net/http/httptest", "k8s.io/cri-api/pkg/apis/testing",
		"k8s.io/client-go/kubernetes/fake", "testing/synctest"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("cmd/nodeagent links %s", pkg)
			}
		}
	}
}
