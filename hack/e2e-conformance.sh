#!/usr/bin/env bash
# `make e2e-conformance SIG=...` (and `make e2e-sig-apps`, `make e2e-sig-node`): builds Kubernetes' e2e suite
# (k8s.io/kubernetes/test/e2e, `go test -c`) and the ginkgo CLI, both pinned in hack/e2e/go.mod (v1.37.2 and
# the ginkgo it requires), into _output/e2e (not the shared _output/bin), only when missing or hack/e2e
# changed (stamp _output/e2e/.e2e.stamp; hack/lib/stamp.sh), then runs test/e2econformance: one SIG's
# conformance specs (--sig sig-apps or sig-node) against 3 simulated Nodes of each system (nodeagent simulate,
# then KWOK from _output/bin, which `make kwok` builds), printing passed/failed, each failure and a table of
# every spec on each system. Arguments go to test/e2econformance (e.g. --sig, --systems, --focus, --skip,
# --procs, --nodes, --timeout, --deadline). `--build-only` builds and runs nothing. Durations on 2 cores:
# docs/simulation.md "Kubernetes conformance"; the first build of e2e.test takes 10-20 minutes cold. Not part
# of make test.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/_output/e2e"
MOD="$ROOT/hack/e2e"
# shellcheck source=SCRIPTDIR/lib/stamp.sh
source "$ROOT/hack/lib/stamp.sh"

log() { echo "e2e-conformance: $*"; }

build_e2e() {
  log "building ginkgo and e2e.test (k8s.io/kubernetes $(cd "$MOD" && go list -m -f '{{.Version}}' k8s.io/kubernetes)) into _output/e2e: $1"
  (cd "$MOD" && go build -o "$OUT/ginkgo" github.com/onsi/ginkgo/v2/ginkgo)
  (cd "$MOD" && go test -c -o "$OUT/e2e.test" k8s.io/kubernetes/test/e2e)
}

mkdir -p "$OUT"
stamp_lock "$OUT/.build-e2e.lock" e2e-conformance
reason=""
if [[ ! -x "$OUT/ginkgo" || ! -x "$OUT/e2e.test" ]]; then
  reason="ginkgo or e2e.test is missing"
fi
stamp_build "$OUT/.e2e.stamp" "$(stamp_hash "$MOD")" hack/e2e e2e.test "$reason" build_e2e
if [[ ${1:-} == --build-only ]]; then
  exit 0
fi
cd "$ROOT"
exec go run ./test/e2econformance --bin-dir "$OUT" --kwok-bin-dir "$ROOT/_output/bin" "$@"
