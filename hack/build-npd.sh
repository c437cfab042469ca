#!/usr/bin/env bash
# Builds node-problem-detector (k8s.io/node-problem-detector/cmd/nodeproblemdetector, pinned in
# hack/npd/go.mod) into _output/bin/node-problem-detector, for `make bench-companion` and the side-by-side
# NPD tests (test/integration/npd_sidebyside_test.go), only when it is missing or hack/npd (go.mod, go.sum,
# this script's flags) changed, as recorded by the stamp file _output/bin/.npd.stamp (idempotent;
# hack/lib/stamp.sh). Built as NPD's Makefile builds it with ENABLE_JOURNALD=0 (no journald tag: no cgo, no
# libsystemd; nodeagent has no journald source either) and its version in pkg/version. A lock
# (_output/bin/.build-npd.lock) serialises concurrent runs, e.g. parallel test packages. Cold: about 2-4 min
# on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/_output/bin"
MOD="$ROOT/hack/npd"
# shellcheck source=SCRIPTDIR/lib/stamp.sh
source "$ROOT/hack/lib/stamp.sh"

log() { echo "build-npd: $*"; }

# build_npd REASON builds node-problem-detector, replacing the binary only once the build succeeded.
build_npd() {
  log "building node-problem-detector $version into _output/bin: $1"
  (cd "$MOD" && CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$BIN/node-problem-detector.tmp" k8s.io/node-problem-detector/cmd/nodeproblemdetector)
  mv "$BIN/node-problem-detector.tmp" "$BIN/node-problem-detector"
}

mkdir -p "$BIN"
stamp_lock "$BIN/.build-npd.lock" build-npd
version="$(cd "$MOD" && go list -m -f '{{.Version}}' k8s.io/node-problem-detector)"
ldflags="-X k8s.io/node-problem-detector/pkg/version.version=$version"
reason=""
if [[ ! -x "$BIN/node-problem-detector" ]]; then
  reason="node-problem-detector is missing"
fi
stamp="$(stamp_hash "$MOD" "$ldflags")"
stamp_build "$BIN/.npd.stamp" "$stamp" hack/npd node-problem-detector "$reason" build_npd
