#!/bin/bash
# `bench pfcp` on the 16-core host of a GPU machine lent to the session (the GPU unused):
# 3 rounds of 1M sessions on 4 and 8 nodes, then 10M sessions on 4 nodes. The stripped
# `scalebricks` and `scalebricks-bench` of the build under test, and the `ip` and `bridge` tools
# with their libraries (the machine has none), are carried in $BUNDLE; the JSON goes to $OUT.
# Usage: BUNDLE=.dev/d10 OUT=/some/dir docs/bench/raw/pfcp-20261127-16core/run.sh
set -u
B=$(cd "$BUNDLE" && pwd)
export PATH=$B/bin:$PATH LD_LIBRARY_PATH=$B/lib
{ uname -r; nproc; grep -m1 'model name' /proc/cpuinfo; cat /proc/loadavg; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
cd "$B"
sum() { python3 - "$1" <<'PY'
import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception as e: print('  no json', e); sys.exit()
print(' ', d['established'], round(d['sessions_per_s']), 'cpu', round(d['cpu_us_per_session']['total'],1),
      'rss', round(d['rss_bytes_per_session'],1), 'table', round(d['table_bytes_per_session'],1),
      'retx', d['retransmissions'], 'timeouts', d['timeouts'], d['latency_ms'])
PY
}
for r in 1 2 3; do for n in 4 8; do
  t0=$(date +%s)
  timeout 90 ./scalebricks-bench pfcp --nodes $n --sessions 1000000 --window 256 --json > $OUT/r$r-n$n.json 2> /tmp/r$r-n$n.err
  echo "round $r nodes $n rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
  sum $OUT/r$r-n$n.json | tee -a $OUT/log.txt; tail -c 300 /tmp/r$r-n$n.err
done; done
t0=$(date +%s)
timeout 200 ./scalebricks-bench pfcp --nodes 4 --sessions 10000000 --window 256 --json > $OUT/n4-10m.json 2> /tmp/n4-10m.err
echo "10M nodes 4 rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
sum $OUT/n4-10m.json | tee -a $OUT/log.txt; tail -c 400 /tmp/n4-10m.err
