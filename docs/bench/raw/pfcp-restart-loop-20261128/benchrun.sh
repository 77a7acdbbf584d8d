#!/bin/bash
# usage: benchrun.sh BINDIR SESSIONS TAG  -> official bench, with load + status samples
B=$1; N=$2; TAG=$3; O=/tmp/cpruns/$TAG; mkdir -p /tmp/cpruns
( while true; do echo "== $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; C=$(ps -eo cmd | grep "$B/scalebricks node --config" | head -1 | sed 's/.*--config //; s#/node0.json##; s#/node[0-9].json##'); if [ -n "$C" ]; then $B/scalebricks cluster status --dir $C --json 2>/dev/null | python3 -c "
import json,sys;d=json.load(sys.stdin)
print(' '.join('n%s:r%s,c%s,log%s,imax%s,cmax%s'%(x['node'],x.get('restarts'),x.get('checkpoints'),x.get('log_bytes'),x.get('control_iteration_max_ms'),x.get('log_commit_max_ms')) for x in d['nodes']))" 2>/dev/null; fi; sleep 10; done ) > $O.samples 2>&1 &
P=$!
/usr/bin/time -v $B/scalebricks-bench pfcp --sessions $N --window 256 --shapes open5gs --json > $O.json 2> $O.err
echo "bench rc $?" >> $O.err
kill $P
