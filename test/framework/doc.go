// Package framework starts the real components nodeagent is tested against, for integration tests,
// benchmarks and hack/localup: etcd + kube-apiserver (+ kube-controller-manager), a private containerd
// with its CRI plugin, and the nodeagent binary itself.
//
// Every component is a child process started with os/exec in its own process group, listening on
// 127.0.0.1 (ports picked free at run time) or on a unix socket under the caller's directory, logging to
// a file in that directory. Each Start function returns a handle whose Stop method sends SIGTERM to the
// PID, waits, falls back to SIGKILL, and unmounts whatever the process left mounted under its directory.
// Callers own cleanup, typically:
//
//	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: t.TempDir(), NodeNames: []string{"n1"}})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(cp.Stop)
//
// Binaries (etcd, kube-apiserver, kube-controller-manager, kubelet) come from hack/install-deps.sh, which
// builds them from the hack/tools module into _output/bin once; call EnsureBinaries first (Start functions
// call it themselves).
package framework
