#!/usr/bin/env bash
# Builds Karpenter's kwok provider (sigs.k8s.io/karpenter/kwok, its main package, pinned in
# hack/karpenter/go.mod) into _output/bin/karpenter-kwok for TestKarpenter (test/integration), and copies
# the CRDs it needs from the same pinned module into _output/bin/karpenter-crds/: NodePool, NodeClaim,
# NodeOverlay and CapacityBuffer (kwok/charts/crds) and KWOKNodeClass (kwok/apis/crds), and its Helm chart
# (kwok/charts) into _output/bin/karpenter-chart/, whose RBAC the test renders to run Karpenter under the
# chart's own identity. Only when an output
# is missing or hack/karpenter (go.mod, go.sum) changed, as recorded by the stamp file
# _output/bin/.karpenter.stamp (idempotent; hack/lib/stamp.sh). A lock (_output/bin/.build-karpenter.lock)
# serialises concurrent runs. hack/karpenter is a module of its own: Karpenter's k8s.io/* and
# controller-runtime versions are not those of hack/tools or hack/kwok. Karpenter v1.15.0 needs go >=
# 1.26.9: GOTOOLCHAIN=auto lets go fetch that toolchain (a Go module) when the local go is older.
# Cold: about 5 min on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/_output/bin}"
MOD="$ROOT/hack/karpenter"
# shellcheck source=SCRIPTDIR/lib/stamp.sh
source "$ROOT/hack/lib/stamp.sh"
export GOTOOLCHAIN=auto

log() { echo "build-karpenter: $*"; }

# build_karpenter REASON builds karpenter-kwok and copies its CRDs, replacing each only once built.
build_karpenter() {
  local src
  log "building karpenter's kwok provider $version into ${BIN#"$ROOT/"}: $1"
  (cd "$MOD" && CGO_ENABLED=0 go build -trimpath -o "$BIN/karpenter-kwok.tmp" sigs.k8s.io/karpenter/kwok)
  src="$(cd "$MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
  rm -rf "$BIN/karpenter-crds.tmp"
  mkdir -p "$BIN/karpenter-crds.tmp"
  cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$BIN/karpenter-crds.tmp/"
  chmod u+w "$BIN"/karpenter-crds.tmp/*.yaml
  rm -rf "$BIN/karpenter-crds" "$BIN/karpenter-chart.tmp"
  mv "$BIN/karpenter-crds.tmp" "$BIN/karpenter-crds"
  cp -r "$src/kwok/charts" "$BIN/karpenter-chart.tmp"
  chmod -R u+w "$BIN/karpenter-chart.tmp"
  rm -rf "$BIN/karpenter-chart"
  mv "$BIN/karpenter-chart.tmp" "$BIN/karpenter-chart"
  mv "$BIN/karpenter-kwok.tmp" "$BIN/karpenter-kwok"
}

mkdir -p "$BIN"
stamp_lock "$BIN/.build-karpenter.lock" build-karpenter
version="$(cd "$MOD" && go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
reason=""
if [[ ! -x "$BIN/karpenter-kwok" || ! -d "$BIN/karpenter-crds" || ! -d "$BIN/karpenter-chart" ]]; then
  reason="karpenter-kwok, karpenter-crds or karpenter-chart is missing"
fi
# The outputs' list is part of the stamp: a build made before one was added is redone.
stamp="$(stamp_hash "$MOD" "outputs: karpenter-kwok karpenter-crds karpenter-chart")"
stamp_build "$BIN/.karpenter.stamp" "$stamp" hack/karpenter karpenter-kwok "$reason" build_karpenter
