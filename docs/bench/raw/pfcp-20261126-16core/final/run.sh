#!/bin/bash
# Build 6ac5998 on the device's 16 cores: 3 rounds of 1M sessions on 4 and 8 nodes, then 10M on 8 nodes.
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib
cd "$D"
for r in 1 2 3; do for n in 4 8; do
  timeout 100 ./scalebricks-bench pfcp --nodes $n --sessions 1000000 --window 256 --json > /tmp/r$r-n$n.json 2> /tmp/r$r-n$n.err
  echo "round $r nodes $n rc=$? $(python3 -c "import json;d=json.load(open('/tmp/r$r-n$n.json'));print(round(d['sessions_per_s']), d['cpu_us_per_session']['total'], round(d['rss_bytes_per_session']), d['retransmissions'], d['latency_ms'])")"
done; done
cp /tmp/r1-n4.json /tmp/r1-n8.json /tmp/r2-n8.json $OUT/
timeout 300 ./scalebricks-bench pfcp --nodes 8 --sessions 10000000 --window 256 --json > $OUT/n8-10m.json 2> $OUT/n8-10m.err
echo "10M nodes 8 rc=$? $(python3 -c "import json;d=json.load(open('$OUT/n8-10m.json'));print(d['established'], round(d['sessions_per_s']), d['cpu_us_per_session']['total'], round(d['rss_bytes_per_session']), round(d['table_bytes_per_session'],1), d['retransmissions'], d['timeouts'], d['latency_ms'])")"
tail -c 400 $OUT/n8-10m.err
