#!/usr/bin/env bash
# Builds node-problem-detector (k8s.io/node-problem-detector/cmd/nodeproblemdetector, pinned in
# hack/npd/go.mod) into _output/bin/node-problem-detector, for `make bench-companion` and the side-by-side
# NPD tests (test/integration/npd_sidebyside_test.go), only when it is missing or hack/npd (go.mod, go.sum,
# this script's flags) changed, as recorded by the stamp file _output/bin/.npd.stamp (idempotent). Built as
# NPD's Makefile builds it with ENABLE_JOURNALD=0 (no journald tag: no cgo, no libsystemd; nodeagent has no
# journald source either) and its version in pkg/version. A lock (_output/bin/.build-npd.lock) serialises
# concurrent runs, e.g. parallel test packages. Cold: about 2-4 min on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/_output/bin"
MOD="$ROOT/hack/npd"

log() { echo "build-npd: $*"; }

mkdir -p "$BIN"
exec 9>"$BIN/.build-npd.lock"
if ! flock -n 9; then
  log "waiting for another build-npd run to finish"
  flock 9
fi

version="$(cd "$MOD" && go list -m -f '{{.Version}}' k8s.io/node-problem-detector)"
ldflags="-X k8s.io/node-problem-detector/pkg/version.version=$version"
stamp="$(cd "$MOD" && { cat go.mod go.sum; echo "$ldflags"; } | sha256sum | cut -d' ' -f1)"
reason=""
if [[ ! -x "$BIN/node-problem-detector" ]]; then
  reason="node-problem-detector is missing"
elif [[ "$(cat "$BIN/.npd.stamp" 2>/dev/null)" != "$stamp" ]]; then
  reason="hack/npd changed since the last build (or no stamp)"
fi
if [[ -n $reason ]]; then
  log "building node-problem-detector $version into _output/bin: $reason"
  start=$SECONDS
  (cd "$MOD" && CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$BIN/node-problem-detector.tmp" k8s.io/node-problem-detector/cmd/nodeproblemdetector)
  mv "$BIN/node-problem-detector.tmp" "$BIN/node-problem-detector"
  echo "$stamp" >"$BIN/.npd.stamp"
  log "built in $((SECONDS - start)) s"
else
  log "node-problem-detector: up to date in _output/bin"
fi
