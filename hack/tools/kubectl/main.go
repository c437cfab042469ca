// Command kubectl is the Kubernetes command-line client, built from k8s.io/kubectl at the version of
// k8s.io/kubernetes the other tools come from (as k8s.io/kubernetes/cmd/kubectl builds it).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck // as kubectl's own main
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
