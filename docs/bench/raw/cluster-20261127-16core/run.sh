#!/bin/bash
# The node benchmark (Figures 8 and 9, one core doing all of a node's work) on another machine:
# the 16-core host of a GPU machine lent to the session (the GPU unused). The stripped
# `scalebricks-bench` (built with `--features dpdk`) and the DPDK libraries it links are carried
# in $BUNDLE (bin/, lib/); the JSON goes to $OUT.
# Usage: BUNDLE=.dev/dev9 OUT=/some/dir docs/bench/raw/cluster-20261127-16core/run.sh
set -u
B=$BUNDLE/bin/scalebricks-bench
export LD_LIBRARY_PATH=$BUNDLE/lib
{ uname -r; nproc; lscpu; grep -m1 'model name' /proc/cpuinfo; cat /proc/loadavg;
  for c in /sys/devices/system/cpu/cpu0/cache/index*; do echo "$(cat $c/level) $(cat $c/type) $(cat $c/size) shared $(cat $c/shared_cpu_list)"; done; } > $OUT/machine.txt 2>&1
step() { local name=$1 lim=$2; shift 2; local t0=$(date +%s)
  timeout $lim "$B" node "$@" --json > $OUT/$name.json 2> $OUT/$name.err; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
  python3 - $OUT/$name.json <<'PY' | tee -a $OUT/log.txt
import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception as e: print('  no json', e); sys.exit()
for r in d['results']: print('  ', r['arch'], r['fib'], r['fib_entries'], round(r['mpps_per_core'],3))
PY
}
S=1000000,4000000,16000000,32000000
for r in 1 2 3; do step node-cuckoo-run$r 150 --arch scalebricks,full-dup --fib cuckoo --fib-entries $S --secs 2; done
step node-bubble-cuckoo 150 --arch scalebricks,full-dup --fib cuckoo --fib-entries 16000000,32000000 --secs 2 --bubble
step node-rte 200 --arch scalebricks,full-dup --fib rte_hash --fib-entries 16000000,32000000 --secs 2
rm -f $OUT/*.err.keep; for f in $OUT/*.err; do [ -s $f ] && tail -3 $f >> $OUT/log.txt; rm -f $f; done
