#!/usr/bin/env bash
# Builds the e2e suite's DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver, at the k8s.io/kubernetes
# version pinned in hack/dra-test-driver/go.mod, the same as hack/tools') into _output/bin/dra-test-driver, for
# the DRA fidelity test (test/integration/dra_fidelity_test.go), which runs its `kubelet-plugin` command beside
# the reference kubelet (test/framework/dratestdriver.go). Only when it is missing or hack/dra-test-driver
# (go.mod, go.sum, this script's flags) changed, as recorded by the stamp file _output/bin/.dra-test-driver.stamp
# (idempotent; hack/lib/stamp.sh). A module of its own so that it never makes hack/tools, and every pinned
# Kubernetes component, rebuild. A lock (_output/bin/.build-dra-test-driver.lock) serialises concurrent runs,
# e.g. parallel test packages. Cold: about 2-3 min on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/_output/bin}"
MOD="$ROOT/hack/dra-test-driver"
# shellcheck source=SCRIPTDIR/lib/stamp.sh
source "$ROOT/hack/lib/stamp.sh"

log() { echo "build-dra-test-driver: $*"; }

# build_dra_test_driver REASON builds the driver, replacing the binary only once the build succeeded.
build_dra_test_driver() {
  log "building the DRA test driver of k8s.io/kubernetes $version into ${BIN#"$ROOT/"}: $1"
  (cd "$MOD" && CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$BIN/dra-test-driver.tmp" k8s.io/kubernetes/test/e2e/dra/test-driver)
  mv "$BIN/dra-test-driver.tmp" "$BIN/dra-test-driver"
}

mkdir -p "$BIN"
stamp_lock "$BIN/.build-dra-test-driver.lock" build-dra-test-driver
version="$(cd "$MOD" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
ldflags="-s -w"
reason=""
if [[ ! -x "$BIN/dra-test-driver" ]]; then
  reason="dra-test-driver is missing"
fi
stamp="$(stamp_hash "$MOD" "$ldflags")"
stamp_build "$BIN/.dra-test-driver.stamp" "$stamp" hack/dra-test-driver dra-test-driver "$reason" build_dra_test_driver
