# shellcheck shell=bash
# The build-once logic of hack/build-kwok.sh and hack/build-npd.sh, sourced by both: a tool pinned in a
# module of its own under hack/ is built into _output/bin only when an output is missing or the module
# (go.mod, go.sum, plus whatever else goes into the build, e.g. ldflags) changed since the last build, as
# recorded by a stamp file beside the outputs; a lock file serialises concurrent runs, e.g. parallel test
# packages. The caller defines ROOT (the repository's root, for shorter messages) and log (one line with
# the script's prefix), and runs under set -euo pipefail.

# stamp_lock LOCKFILE NAME: takes an exclusive flock on LOCKFILE (created if missing) on fd 9, held until
# the script exits, saying that it waits when another NAME run holds it.
stamp_lock() {
  local lockfile=$1 name=$2
  exec 9>"$lockfile"
  if ! flock -n 9; then
    log "waiting for another $name run to finish"
    flock 9
  fi
}

# stamp_hash MODDIR [EXTRA]: prints the stamp of a build from the module in MODDIR: the SHA-256 of its
# go.mod and go.sum, followed by the line EXTRA when given (e.g. the ldflags).
stamp_hash() {
  local dir=$1
  (
    cd "$dir" || exit
    {
      cat go.mod go.sum
      if (($# > 1)); then echo "$2"; fi
    } | sha256sum | cut -d' ' -f1
  )
}

# stamp_build STAMPFILE STAMP MODULE WHAT REASON BUILD...: builds when REASON is not empty (the caller's
# reason, e.g. an output is missing) or STAMPFILE does not hold STAMP (MODULE, e.g. hack/kwok, changed
# since the last build, or it was never built): it runs the command BUILD with the reason as its last
# argument, then writes STAMP to STAMPFILE and logs how long the build took. Otherwise it logs that WHAT
# is up to date and builds nothing. BUILD logs what it builds. A failed BUILD ends the script (set -e)
# and leaves the old stamp, so the next run builds again.
stamp_build() {
  local stampfile=$1 stamp=$2 module=$3 what=$4 reason=$5
  shift 5
  if [[ -z $reason && "$(cat "$stampfile" 2>/dev/null)" != "$stamp" ]]; then
    reason="$module changed since the last build (or no stamp)"
  fi
  if [[ -z $reason ]]; then
    local dir=${stampfile%/*}
    log "$what: up to date in ${dir#"$ROOT/"}"
    return 0
  fi
  local start=$SECONDS
  "$@" "$reason"
  echo "$stamp" >"$stampfile"
  log "built in $((SECONDS - start)) s"
}
