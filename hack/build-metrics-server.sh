#!/usr/bin/env bash
# Builds metrics-server (sigs.k8s.io/metrics-server/cmd/metrics-server, pinned in hack/metrics-server/go.mod)
# into _output/bin/metrics-server for the resource metrics tests (test/integration: kubectl top nodes/pods
# through the aggregation layer, a HorizontalPodAutoscaler on simulated load), only when it is missing or
# hack/metrics-server (go.mod, go.sum, this script's flags) changed, as recorded by the stamp file
# _output/bin/.metrics-server.stamp (idempotent; hack/lib/stamp.sh). Its version is stamped as
# metrics-server's Makefile does (`metrics-server --version`). A lock (_output/bin/.build-metrics-server.lock)
# serialises concurrent runs. hack/metrics-server is a module of its own, not part of hack/tools: its
# k8s.io/* versions are not those of hack/tools, and changing hack/tools rebuilds every pinned Kubernetes
# component (about 15 min on 2 cores). Cold: about 2-3 min on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/_output/bin}"
MOD="$ROOT/hack/metrics-server"
# shellcheck source=SCRIPTDIR/lib/stamp.sh
source "$ROOT/hack/lib/stamp.sh"

log() { echo "build-metrics-server: $*"; }

# build_metrics_server REASON builds metrics-server, replacing the binary only once the build succeeded.
build_metrics_server() {
  log "building metrics-server $version into ${BIN#"$ROOT/"}: $1"
  (cd "$MOD" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/metrics-server.tmp" sigs.k8s.io/metrics-server/cmd/metrics-server)
  mv "$BIN/metrics-server.tmp" "$BIN/metrics-server"
}

mkdir -p "$BIN"
stamp_lock "$BIN/.build-metrics-server.lock" build-metrics-server
version="$(cd "$MOD" && go list -m -f '{{.Version}}' sigs.k8s.io/metrics-server)"
# As metrics-server's Makefile: its version into k8s.io/client-go/pkg/version (what --version prints).
ldflags="-s -w -X k8s.io/client-go/pkg/version.gitVersion=$version"
reason=""
if [[ ! -x "$BIN/metrics-server" ]]; then
  reason="metrics-server is missing"
fi
stamp="$(stamp_hash "$MOD" "$ldflags")"
stamp_build "$BIN/.metrics-server.stamp" "$stamp" hack/metrics-server metrics-server "$reason" build_metrics_server
