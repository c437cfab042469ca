#!/usr/bin/env bash
# Runs nodeagent against a local control plane (etcd, kube-apiserver, kube-controller-manager) and a private
# containerd with a bridge CNI config, until Ctrl-C. Arguments go to hack/localup, e.g.
#   hack/local-up.sh --exit-when-ready            # CI: exit 0 once the node is Ready
#   hack/local-up.sh --node-name n1 -- --max-pods=50   # flags after -- go to nodeagent
#   hack/local-up.sh --control-plane-only --nodes "a b c"   # no nodeagent: run it by hand (make cluster)
# State, kubeconfigs and logs: _output/local-up, or _output/cluster with --control-plane-only (printed at start).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
hack/install-deps.sh
# Built rather than `go run`, so that SIGTERM reaches localup itself and it can stop what it started.
go build -o _output/bin/localup ./hack/localup
exec _output/bin/localup "$@"
