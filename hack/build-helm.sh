#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3/cmd/helm, pinned in hack/helm/go.mod) into _output/bin/helm for the chart
# tests (test/deploy: helm lint, helm template; test/integration: the rendered chart applied with
# kubectl apply --dry-run=server), only when it is missing or hack/helm (go.mod, go.sum, this script's
# flags) changed, as recorded by the stamp file _output/bin/.helm.stamp (idempotent; hack/lib/stamp.sh).
# Its version is stamped as helm's Makefile does (`helm version` prints it). A lock
# (_output/bin/.build-helm.lock) serialises concurrent runs, e.g. parallel test packages. hack/helm is a
# module of its own: helm's k8s.io/* versions are not those of hack/tools. Cold: about 2-4 min on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/_output/bin"
MOD="$ROOT/hack/helm"
# shellcheck source=SCRIPTDIR/lib/stamp.sh
source "$ROOT/hack/lib/stamp.sh"

log() { echo "build-helm: $*"; }

# build_helm REASON builds helm, replacing the binary only once the build succeeded.
build_helm() {
  log "building helm $version into _output/bin: $1"
  (cd "$MOD" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$BIN/helm.tmp" "$BIN/helm"
}

mkdir -p "$BIN"
stamp_lock "$BIN/.build-helm.lock" build-helm
version="$(cd "$MOD" && go list -m -f '{{.Version}}' helm.sh/helm/v3)"
# As helm's Makefile: the version, and the Kubernetes version that `helm lint` and `helm template` assume
# (.Capabilities.KubeVersion) from the client-go helm is built with (v0.37 is Kubernetes 1.37).
k8s="$(cd "$MOD" && go list -m -f '{{.Version}}' k8s.io/client-go)"
k8s_minor="${k8s#v0.}"; k8s_minor="${k8s_minor%%.*}"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
done
reason=""
if [[ ! -x "$BIN/helm" ]]; then
  reason="helm is missing"
fi
stamp="$(stamp_hash "$MOD" "$ldflags")"
stamp_build "$BIN/.helm.stamp" "$stamp" hack/helm helm "$reason" build_helm
