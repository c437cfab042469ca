#!/usr/bin/env bash
# Installs what nodeagent's tests and hack/local-up.sh need, only what is missing (idempotent). Which
# depends on the set asked for (--for SET, default test):
#   test      everything `make test`, `make tools` and the benchmarks use:
#             - Debian packages: containerd (with runc and ctr), containernetworking-plugins (/usr/lib/cni),
#               iproute2; prometheus (for prometheus and promtool: test/monitoring checks and unit-tests the
#               alerting rules and runs a real Prometheus against a real agent), without its recommended
#               exporters;
#             - helm, built from hack/helm by hack/build-helm.sh (its own stamp) for the Helm chart's tests;
#             - the e2e suite's DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver), built from
#               hack/dra-test-driver by hack/build-dra-test-driver.sh (its own stamp) for TestDRAFidelity;
#             - metrics-server, built from hack/metrics-server by hack/build-metrics-server.sh (its own
#               stamp) for the resource metrics tests (kubectl top, the HorizontalPodAutoscaler); a module of
#               its own so that it never makes hack/tools, and every pinned Kubernetes component, rebuild;
#             - etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl,
#               cloud-node-controller (k8s.io/cloud-provider's node controllers over its fake cloud) and
#               kubemark (kubemark's hollow node: the kubelet over a fake runtime, a second pod reference);
#   up        what `make up` runs: containerd, the CNI plugins, iproute2, and etcd, kube-apiserver,
#             kube-controller-manager and kubectl, and metrics-server (kubectl top; no kubelet, kubemark,
#             kube-scheduler, cloud-node-controller, helm or prometheus);
#   simulate  what `make up SIMULATE=N` runs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#             and kubectl, and metrics-server (no Debian package: simulated Nodes need no container runtime).
# The components are built from the hack/tools module into _output/bin; each is rebuilt when it is missing
# or hack/tools (go.mod, go.sum, *.go) changed since it was built, as recorded by its stamp file
# _output/bin/.tools.<binary>.stamp; so `make up` builds its four, and a later `make test` only the others.
# _output/bin/.tools.stamp, the stamp of an older install-deps.sh that built all eight at once, is still
# written once all eight are up to date, and still read: it stands for the eight.
# With --skew v1.34 it builds instead the older control plane of the version-skew smoke suite (make
# test-skew): etcd, kube-apiserver and kube-controller-manager from hack/tools-v1.34 into
# _output/bin/v1.34, with the same stamp logic; the Debian packages are checked as usual.
# A lock (.install-deps.lock in the output directory) serialises concurrent runs, e.g. parallel test packages.
set -euo pipefail

usage="usage: install-deps.sh [--for test|up|simulate] | --skew v1.NN"
skew=""
set_name=test
case "${1:-}" in
  "") ;;
  --skew)
    skew="${2:-}"
    [[ $skew =~ ^v1\.[0-9]+$ ]] || { echo "install-deps: --skew wants a minor version such as v1.34, not \"$skew\"" >&2; exit 1; }
    ;;
  --for)
    set_name="${2:-}"
    [[ $set_name =~ ^(test|up|simulate)$ ]] || { echo "install-deps: --for wants test, up or simulate, not \"$set_name\"" >&2; exit 1; }
    ;;
  *) echo "install-deps: unknown argument \"$1\" ($usage)" >&2; exit 1 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/_output/bin"
TOOLS="$ROOT/hack/tools"
# ALL is what the legacy stamp .tools.stamp stands for.
ALL=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl cloud-node-controller kubemark)
case $set_name in
  test) BINARIES=("${ALL[@]}") ;;
  up) BINARIES=(etcd kube-apiserver kube-controller-manager kubectl) ;;
  simulate) BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl) ;;
esac

log() { echo "install-deps: $*"; }

if [[ -n $skew ]]; then
  TOOLS="$ROOT/hack/tools-$skew"
  BIN="$BIN/$skew"
  ALL=(etcd kube-apiserver kube-controller-manager)
  BINARIES=("${ALL[@]}")
  [[ -d $TOOLS ]] || { echo "install-deps: no $TOOLS for --skew $skew" >&2; exit 1; }
fi
mkdir -p "$BIN"
exec 9>"$BIN/.install-deps.lock"
if ! flock -n 9; then
  log "waiting for another install-deps run to finish"
  flock 9
fi

# --- Debian packages -------------------------------------------------------------------------------------
# The simulation needs none of them; the prometheus package only `make test`.
declare -A PROVIDES=(
  [containerd]=/usr/bin/containerd
  [containernetworking-plugins]=/usr/lib/cni/bridge
  [iproute2]=/usr/sbin/ip
)
missing=()
[[ $set_name == simulate ]] && PROVIDES=()
for pkg in "${!PROVIDES[@]}"; do
  [[ -x "${PROVIDES[$pkg]}" ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=()
  [[ $(id -u) == 0 ]] || SUDO=(sudo)
  command -v apt-get >/dev/null || { log "missing ${missing[*]} and no apt-get: install them by hand"; exit 1; }
  log "installing ${missing[*]} with apt-get"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
elif [[ $set_name != simulate ]]; then
  log "containerd, containernetworking-plugins, iproute2: installed"
fi
# Debian's prometheus package ships promtool. Its recommends (node and other exporters) are not needed.
# Where systemd runs, installing it also starts a system Prometheus on :9090; the tests run their own.
if [[ -z $skew && $set_name == test ]]; then
  if [[ ! -x /usr/bin/promtool ]]; then
    SUDO=()
    [[ $(id -u) == 0 ]] || SUDO=(sudo)
    command -v apt-get >/dev/null || { log "missing prometheus (promtool) and no apt-get: install it by hand"; exit 1; }
    log "installing prometheus (promtool) with apt-get"
    if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; then
      "${SUDO[@]}" apt-get update -qq
      "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
    fi
  else
    log "prometheus (promtool): installed"
  fi
fi

# --- tools built from hack/tools ------------------------------------------------------------------------------
# The Kubernetes components report the k8s.io/kubernetes module's version (kubelet --version, the
# kubelet's nodeInfo.kubeletVersion, kube-apiserver's /version), as a release build's would, instead of
# component-base's "v0.0.0-master" default.
k8s_version="$(cd "$TOOLS" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
k8s_minor="${k8s_version#v1.}"; k8s_minor="${k8s_minor%%.*}"
cb=k8s.io/component-base/version
ldflags="-X $cb.gitVersion=$k8s_version -X $cb.gitMajor=1 -X $cb.gitMinor=$k8s_minor -X $cb.gitTreeState=clean"
stamp="$(cd "$TOOLS" && { cat go.mod go.sum $(find . -name '*.go' | LC_ALL=C sort); echo "$ldflags"; } | sha256sum | cut -d' ' -f1)"
# uptodate B: binary B exists and was built from this stamp (its own stamp, or the legacy one of all eight).
uptodate() {
  [[ -x "$BIN/$1" ]] || return 1
  [[ "$(cat "$BIN/.tools.$1.stamp" 2>/dev/null)" == "$stamp" ]] && return 0
  [[ " ${ALL[*]} " == *" $1 "* && "$(cat "$BIN/.tools.stamp" 2>/dev/null)" == "$stamp" ]]
}
# put_stamp FILE: writes the stamp to FILE as a new file renamed over the old (a stamp may be a hard link
# shared with another checkout's _output).
put_stamp() { echo "$stamp" >"$1.new" && mv -f "$1.new" "$1"; }
build=()
reason=""
for b in "${BINARIES[@]}"; do
  uptodate "$b" && continue
  build+=("$b")
  if [[ ! -x "$BIN/$b" ]]; then
    reason="${reason:-$b is missing}"
  else
    reason="${reason:-${TOOLS#"$ROOT/"} changed since $b was built (or no stamp)}"
  fi
done
if ((${#build[@]})); then
  log "building ${build[*]} into ${BIN#"$ROOT/"}: $reason (cold: several minutes on 2 cores, module downloads included)"
  start=$SECONDS
  (cd "$TOOLS" && go build -ldflags "$ldflags" -o "$BIN/" "${build[@]/#/./}")
  for b in "${build[@]}"; do put_stamp "$BIN/.tools.$b.stamp"; done
  log "built in $((SECONDS - start)) s"
  all=1
  for b in "${ALL[@]}"; do uptodate "$b" || all=""; done
  if [[ -n $all ]]; then put_stamp "$BIN/.tools.stamp"; fi
else
  log "${BINARIES[*]}: up to date in ${BIN#"$ROOT/"}"
fi

# --- helm, pinned in hack/helm (a module of its own; stamp _output/bin/.helm.stamp) ---------------------------
if [[ -z $skew && $set_name == test ]]; then
  "$ROOT/hack/build-helm.sh"
fi

# --- KWOK (hack/kwok) and Karpenter's kwok provider (hack/karpenter), each a module of its own with its stamp:
# TestKarpenter runs Karpenter against nodeagent simulate and against KWOK v0.8.0 (make test).
if [[ -z $skew && $set_name == test ]]; then
  "$ROOT/hack/build-kwok.sh"
  "$ROOT/hack/build-karpenter.sh"
fi

# --- the e2e suite's DRA test driver, pinned in hack/dra-test-driver (a module of its own; stamp
# _output/bin/.dra-test-driver.stamp): TestDRAFidelity runs it beside the reference kubelet (make test).
if [[ -z $skew && $set_name == test ]]; then
  "$ROOT/hack/build-dra-test-driver.sh"
fi

# --- metrics-server, pinned in hack/metrics-server (a module of its own; stamp _output/bin/.metrics-server.stamp)
# `make up` runs it too (kubectl top, an HPA), with or without SIMULATE.
if [[ -z $skew ]]; then
  "$ROOT/hack/build-metrics-server.sh"
fi
