// Package quickstart runs README's quick starts as a newcomer would, and checks what `make up` builds:
//
//   - TestSimulationQuickStart runs the commands of README's "Quick start: a simulated cluster running pods"
//     as written, from the repository's root: `make up SIMULATE=20` until it prints the kubectl commands
//     (which must be README's), then those commands, and checks that the Deployment's pods are Running on
//     simulated Nodes; then Ctrl-C (SIGINT to its process group) stops everything;
//   - TestInstallDepsSets runs hack/install-deps.sh in a copy of hack/ with a fake `go` that records what
//     it is asked to build: `--for up` builds etcd, kube-apiserver, kube-controller-manager and kubectl
//     only, `--for simulate` adds kube-scheduler, the default (`make test`, `make tools`) builds the rest
//     and helm, each binary only when missing or built from another hack/tools.
//
// Run with: go test ./test/quickstart/ (after make tools: the simulation's binaries are built already).
package quickstart
