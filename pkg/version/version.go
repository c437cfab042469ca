// Package version reports the nodeagent build version, set at link time with
// -ldflags "-X github.com/nodeagent/nodeagent/pkg/version.gitVersion=v0.1.0".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
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
