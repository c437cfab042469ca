#!/usr/bin/env bash
# Runs nodeagent against a local control plane (etcd, kube-apiserver, kube-controller-manager) and a private
# containerd with a bridge CNI config, until Ctrl-C. Arguments go to hack/localup, e.g.
#   hack/local-up.sh --exit-when-ready            # CI: exit 0 once the node is Ready
#   hack/local-up.sh --node-name n1 -- --max-pods=50   # flags after -- go to nodeagent
#   hack/local-up.sh --control-plane-only --nodes "a b c"   # no nodeagent: run it by hand (make cluster)
#   hack/local-up.sh --simulate 20                # kube-scheduler and nodeagent simulate --nodes 20 (make up SIMULATE=20)
# State, kubeconfigs and logs: _output/local-up, _output/cluster with --control-plane-only, _output/simulate
# with --simulate (printed at start). It builds only what it runs: hack/install-deps.sh --for up (with
# metrics-server), or --for simulate (kube-scheduler too, no containerd).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
set=up
for a in "$@"; do
  case $a in
    --) break ;;
    --simulate | --simulate=*) set=simulate ;;
  esac
done
# The pinned components (install-deps) and this repository's own binaries build at the same time: on a
# cold machine the components' module downloads and long single-threaded links leave CPU idle that
# nodeagent's compile fills (localup then only links it, with its version).
hack/install-deps.sh --for "$set" &
deps=$!
trap 'kill "$deps" 2>/dev/null || true' EXIT
# Built rather than `go run`, so that SIGTERM reaches localup itself and it can stop what it started.
go build -o _output/bin/localup ./hack/localup
go build -tags grpcnotrace -o /dev/null ./cmd/nodeagent
wait "$deps"
trap - EXIT
exec _output/bin/localup "$@"
