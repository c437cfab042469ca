#!/usr/bin/env bash
# Builds the KWOK controller (sigs.k8s.io/kwok/cmd/kwok, pinned in hack/kwok/go.mod) into _output/bin/kwok
# for `make bench-scale`, only when it is missing or hack/kwok (go.mod, go.sum) changed, as recorded by the
# stamp file _output/bin/.kwok.stamp (idempotent; hack/lib/stamp.sh). It also writes
# _output/bin/kwok-node-stages.yaml: the node Stages kwokctl gives a cluster by default (node-initialize from
# kustomize/stage/node/fast and node-heartbeat-with-lease, the lease being on), taken from the same pinned
# module, for `kwok --config`: the kwok binary has no built-in stages and refuses to start without any; and
# _output/bin/kwok-pod-stages.yaml, the pod Stages kwokctl gives a cluster by default (kustomize/stage/pod/fast:
# pod-ready, pod-complete, pod-delete), for `make bench-pods`. A
# lock (_output/bin/.build-kwok.lock) serialises concurrent runs. hack/kwok is a module of its own: KWOK's
# k8s.io/* versions are not those of hack/tools.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/_output/bin"
MOD="$ROOT/hack/kwok"
# shellcheck source=SCRIPTDIR/lib/stamp.sh
source "$ROOT/hack/lib/stamp.sh"

log() { echo "build-kwok: $*"; }

# build_kwok REASON builds kwok and writes its node Stages.
build_kwok() {
  local version src
  version="$(cd "$MOD" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
  log "building kwok $version into _output/bin: $1 (cold: several minutes on 2 cores)"
  (cd "$MOD" && go build -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok)
  src="$(cd "$MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage/node"
  {
    echo "# The node Stages of kwok $version (kwokctl's defaults), from $src: written by hack/build-kwok.sh."
    cat "$src/fast/node-initialize.yaml"
    echo "---"
    cat "$src/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
  } >"$BIN/kwok-node-stages.yaml"
  src="$(cd "$MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage/pod/fast"
  {
    echo "# The pod Stages of kwok $version (kwokctl's defaults), from $src: written by hack/build-kwok.sh."
    cat "$src/pod-ready.yaml"
    echo "---"
    cat "$src/pod-complete.yaml"
    echo "---"
    cat "$src/pod-delete.yaml"
  } >"$BIN/kwok-pod-stages.yaml"
}

mkdir -p "$BIN"
stamp_lock "$BIN/.build-kwok.lock" build-kwok
reason=""
if [[ ! -x "$BIN/kwok" || ! -s "$BIN/kwok-node-stages.yaml" || ! -s "$BIN/kwok-pod-stages.yaml" ]]; then
  reason="kwok, kwok-node-stages.yaml or kwok-pod-stages.yaml is missing"
fi
stamp="$(stamp_hash "$MOD")"
stamp_build "$BIN/.kwok.stamp" "$stamp" hack/kwok kwok "$reason" build_kwok
