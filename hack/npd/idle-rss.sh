#!/bin/bash
# hack/npd/idle-rss.sh LABEL NODEAGENT_BINARY [npd]: the idle-RSS measurement of BENCHMARKS.md's "Memory per
# mode" section (issue 21), by hand until `make bench-companion` exists. Needs a control plane from
#   go build -o /tmp/localup ./hack/localup && /tmp/localup --control-plane-only --dir $CP --nodes "na-comp npd-comp na-sa"
# with Node objects na-comp and npd-comp created by the admin (kubectl apply), and in $M the two NPD configs of
# test/testdata/npd with their paths changed (custom-plugin-monitor.json with check_ntp.sh exiting 0,
# kernel-monitor-filelog.json on $M/kern.log). It runs standalone nodeagent as na-sa, nodeagent --companion
# as na-comp (and node-problem-detector as npd-comp), waits IDLE (default 60) seconds and prints VmRSS,
# RssAnon and RssFile (KiB) and the CPU seconds (utime+stime) of the last 30 s, then stops them.
# Every binary is read once first, so that its pages are in the page cache for each (RssFile counts
# the mapped pages of the binary, and the kernel maps the cached pages around each one touched).
: "${CP:?set CP to the localup --dir}" "${M:?set M to the directory of the configs}"; LABEL=$1; NA=$2; IDLE=${IDLE:-60}
NPD=${NPD:-$(cd "$(dirname "$0")/../.." && pwd)/_output/bin/node-problem-detector}
cat $NA > /dev/null; cat $NPD > /dev/null
SOCK=unix://$CP/containerd/containerd.sock
rm -rf $M/root-sa $M/root-comp
$NA --kubeconfig=$CP/node-na-sa.kubeconfig --hostname-override=na-sa --container-runtime-endpoint=$SOCK --root-dir=$M/root-sa --healthz-port=0 >$M/$LABEL-sa.log 2>&1 & sa=$!
$NA --companion --kubeconfig=$CP/node-na-comp.kubeconfig --hostname-override=na-comp --container-runtime-endpoint=$SOCK --root-dir=$M/root-comp --healthz-port=0 \
   --config.custom-plugin-monitor=$M/custom-plugin-monitor.json --config.system-log-monitor=$M/kernel-monitor-filelog.json >$M/$LABEL-comp.log 2>&1 & comp=$!
pids="sa:$sa comp:$comp"
if [[ $3 == npd ]]; then
  srv=$(awk '/server:/{print $2; exit}' $CP/node-npd-comp.kubeconfig)
  $NPD --apiserver-override="$srv?inClusterConfig=false&auth=$CP/node-npd-comp.kubeconfig" --hostname-override=npd-comp \
    --config.custom-plugin-monitor=$M/custom-plugin-monitor.json --config.system-log-monitor=$M/kernel-monitor-filelog.json \
    --port=0 --prometheus-port=0 >$M/$LABEL-npd.log 2>&1 & npd=$!
  pids="$pids npd:$npd"
fi
sleep $((IDLE-30))
declare -A c0
for p in $pids; do pid=${p#*:}; c0[$pid]=$(awk '{print $14+$15}' /proc/$pid/stat 2>/dev/null); done
sleep 30
tck=$(getconf CLK_TCK)
for p in $pids; do name=${p%%:*}; pid=${p#*:}
  if [[ -r /proc/$pid/status ]]; then
    c1=$(awk '{print $14+$15}' /proc/$pid/stat)
    echo "$LABEL $name rss=$(awk '/^VmRSS/{print $2}' /proc/$pid/status) anon=$(awk '/^RssAnon/{print $2}' /proc/$pid/status) file=$(awk '/^RssFile/{print $2}' /proc/$pid/status) cpu30s=$(echo "scale=3; ($c1-${c0[$pid]})/$tck" | bc)"
  else echo "$LABEL $name died"; fi
done
for p in $pids; do kill ${p#*:}; done; wait
