// Package version reports the nodeagent build version, set at link time with
// -ldflags "-X github.com/nodeagent/nodeagent/pkg/version.gitVersion=v0.1.0".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

var (
	// gitVersion is the semantic version of the build; overridden at link time.
	gitVersion = "v0.1.0-dev"
	// gitCommit is the commit the build came from; overridden at link time or read from build info.
	gitCommit = ""
)

// Info describes the running binary, in the shape of k8s.io/apimachinery/pkg/version.Info.
type Info struct {
	GitVersion string `json:"gitVersion"`
	GitCommit  string `json:"gitCommit"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
}

// Get returns the version of this binary. GitCommit falls back to the VCS revision Go recorded, if any.
func Get() Info {
	commit := gitCommit
	if commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					commit = s.Value
				}
			}
		}
	}
	return Info{
		GitVersion: gitVersion,
		GitCommit:  commit,
		GoVersion:  runtime.Version(),
		Platform:   fmt.Sprintf("%s/%s", runtime.GOOS, runtime.GOARCH),
	}
}

// String returns the git version, e.g. "v0.1.0", as reported in NodeInfo.KubeletVersion.
func (i Info) String() string { return i.GitVersion }

// KubernetesVersion is the Kubernetes release whose kubelet nodeagent mirrors (node-status semantics,
// client libraries): the k8s.io staging modules' v0.X.Y is Kubernetes v1.X.Y. A unit test keeps it
// equal to the k8s.io/apimachinery version the binary is built with.
const KubernetesVersion = "v1.37.2"

// KubeletVersion returns what nodeagent reports as nodeInfo.kubeletVersion: KubernetesVersion with
// nodeagent's own version as semver build metadata, e.g. "v1.37.2+nodeagent.0.1.0-dev". Tools and
// controllers parse the field as a Kubernetes version (kubectl get nodes, version-skew checks): a bare
// "v0.1.0-dev" would read as a kubelet 36 minor versions old, while build metadata is ignored in
// comparisons and still names the agent.
func (i Info) KubeletVersion() string {
	meta := []byte("nodeagent." + strings.TrimPrefix(i.GitVersion, "v"))
	for k, c := range meta {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '.') {
			meta[k] = '-'
		}
	}
	return KubernetesVersion + "+" + strings.ReplaceAll(string(meta), "..", ".-.")
}
