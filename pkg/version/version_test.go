package version

import (
	"os"
	"regexp"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

func TestKubeletVersion(t *testing.T) {
	cases := []struct{ git, want string }{
		{"v0.1.0-dev", KubernetesVersion + "+nodeagent.0.1.0-dev"},
		{"v0.2.0", KubernetesVersion + "+nodeagent.0.2.0"},
		{"v0.2.0+dirty_x", KubernetesVersion + "+nodeagent.0.2.0-dirty-x"},
		{"weird..ver", KubernetesVersion + "+nodeagent.weird.-.ver"},
	}
	for _, tc := range cases {
		got := Info{GitVersion: tc.git}.KubeletVersion()
		if got != tc.want {
			t.Errorf("KubeletVersion(%q) = %q, want %q", tc.git, got, tc.want)
		}
		v, err := utilversion.ParseSemantic(got)
		if err != nil {
			t.Errorf("KubeletVersion(%q) = %q is not semver: %v", tc.git, got, err)
			continue
		}
		k := utilversion.MustParseSemantic(KubernetesVersion)
		if v.Major() != k.Major() || v.Minor() != k.Minor() || v.Patch() != k.Patch() || !v.EqualTo(k) {
			t.Errorf("%q does not compare equal to %s", got, KubernetesVersion)
		}
	}
}

// TestKubernetesVersionMatchesModules: KubernetesVersion is go.mod's k8s.io/api v0.X.Y as v1.X.Y.
func TestKubernetesVersionMatchesModules(t *testing.T) {
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/api v0\.(\d+\.\d+)\s*$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("no k8s.io/api requirement in go.mod")
	}
	if want := "v1." + string(m[1]); want != KubernetesVersion {
		t.Errorf("KubernetesVersion = %s, but go.mod requires k8s.io/api v0.%s (want %s)", KubernetesVersion, m[1], want)
	}
}
