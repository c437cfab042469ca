// Command kubemark is kubemark's hollow node, built from k8s.io/kubernetes (cmd/kubemark): with
// --morph=kubelet it runs the kubelet's own code (pkg/kubelet, the same as the reference kubelet) over a
// fake CRI runtime, fake cAdvisor and a stub container manager, registering one Node. Tests run it with
// --use-host-image-service=false (the fake image service too), so it needs no container runtime; every pod
// it runs gets the fake runtime's podIP 192.168.192.168 and containers that never exit. It is the second
// pod reference beside the real kubelet (test/framework.StartHollowNode).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubemark/app"
)

func main() {
	os.Exit(cli.Run(app.NewHollowNodeCommand()))
}
