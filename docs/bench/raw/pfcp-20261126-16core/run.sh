#!/bin/bash
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
cd "$D"
for r in 1 2 3; do for n in 4 8; do
  timeout 100 ./scalebricks-bench pfcp --nodes $n --sessions 1000000 --window 256 --json > $OUT/r$r-n$n.json 2> $OUT/r$r-n$n.err
  echo "round $r nodes $n rc=$? $(python3 -c "import json;d=json.load(open('$OUT/r$r-n$n.json'));print(round(d['sessions_per_s']), d['cpu_us_per_session']['total'], round(d['rss_bytes_per_session']), d['retransmissions'], d['latency_ms'])")"
done; done
