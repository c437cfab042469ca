#!/usr/bin/env bash
# Builds the KWOK controller (sigs.k8s.io/kwok/cmd/kwok, pinned in hack/kwok/go.mod) into _output/bin/kwok
# for `make bench-scale`, only when it is missing or hack/kwok (go.mod, go.sum) changed, as recorded by the
# stamp file _output/bin/.kwok.stamp (idempotent). It also writes _output/bin/kwok-node-stages.yaml: the node
# Stages kwokctl gives a cluster by default (node-initialize from kustomize/stage/node/fast and
# node-heartbeat-with-lease, the lease being on), taken from the same pinned module, for `kwok --config`: the
# kwok binary has no built-in stages and refuses to start without any. A lock (_output/bin/.build-kwok.lock) serialises
# concurrent runs. hack/kwok is a module of its own: KWOK's k8s.io/* versions are not those of hack/tools.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/_output/bin"
MOD="$ROOT/hack/kwok"

log() { echo "build-kwok: $*"; }

mkdir -p "$BIN"
exec 9>"$BIN/.build-kwok.lock"
if ! flock -n 9; then
  log "waiting for another build-kwok run to finish"
  flock 9
fi

stamp="$(cd "$MOD" && cat go.mod go.sum | sha256sum | cut -d' ' -f1)"
reason=""
if [[ ! -x "$BIN/kwok" || ! -s "$BIN/kwok-node-stages.yaml" ]]; then
  reason="kwok or kwok-node-stages.yaml is missing"
elif [[ "$(cat "$BIN/.kwok.stamp" 2>/dev/null)" != "$stamp" ]]; then
  reason="hack/kwok changed since the last build (or no stamp)"
fi
if [[ -n $reason ]]; then
  version="$(cd "$MOD" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
  log "building kwok $version into _output/bin: $reason (cold: several minutes on 2 cores)"
  start=$SECONDS
  (cd "$MOD" && go build -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok)
  src="$(cd "$MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage/node"
  {
    echo "# The node Stages of kwok $version (kwokctl's defaults), from $src: written by hack/build-kwok.sh."
    cat "$src/fast/node-initialize.yaml"
    echo "---"
    cat "$src/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
  } >"$BIN/kwok-node-stages.yaml"
  echo "$stamp" >"$BIN/.kwok.stamp"
  log "built in $((SECONDS - start)) s"
else
  log "kwok: up to date in _output/bin"
fi
