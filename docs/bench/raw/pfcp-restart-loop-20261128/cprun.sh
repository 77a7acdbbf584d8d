#!/bin/bash
# usage: cprun.sh BINDIR SESSIONS TAG [extra cluster-up args...]
B=$1; N=$2; TAG=$3; shift 3
D=/tmp/cpruns/$TAG; rm -rf $D; mkdir -p /tmp/cpruns
CAP=$(( (1000 + N) * 5 / 4 ))
$B/scalebricks cluster up --nodes 4 --name sbq$$ --dir $D --flows 1000 --seed 1 --capacity $CAP "$@" > /tmp/cpruns/$TAG.up 2>&1 || { echo up failed; cat /tmp/cpruns/$TAG.up; exit 1; }
for i in $(seq 60); do $B/scalebricks cluster status --dir $D --json > /tmp/cpruns/$TAG.st 2>/dev/null && python3 -c "
import json,sys;d=json.load(open('/tmp/cpruns/$TAG.st'));r=d['nodes']
sys.exit(0 if all(x.get('up') and x.get('ready') for x in r) else 1)" && break; sleep 2; done
( while true; do echo "== $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; $B/scalebricks cluster status --dir $D --json 2>/dev/null | python3 -c "
import json,sys;d=json.load(sys.stdin);r=d['node_status'] if 'node_status' in d else d
r=d['nodes']
for x in r: s=x; print(x['node'],'restarts',s.get('restarts'),'ckpt',s.get('checkpoints'),'log',x.get('log_bytes'),'build',s.get('checkpoint_build'),'wmax',s.get('checkpoint_write_max_ms'),'epoch',s.get('epoch'),'phase',s.get('phase'),'cmax',s.get('log_commit_max_ms'),'slowc',s.get('log_slow_commits'),'imax',s.get('control_iteration_max_ms'),'slowi',s.get('control_slow_iterations'),'drop',s.get('dropped'))"; sleep 5; done ) > /tmp/cpruns/$TAG.poll 2>&1 &
P=$!
$B/scalebricks smf-sim --dir $D --sessions $N --window 256 --timeout $((600 + N/1000)) --shape open5gs > /tmp/cpruns/$TAG.sim 2>/tmp/cpruns/$TAG.simerr
echo "smf-sim rc $?"
kill $P
$B/scalebricks cluster status --dir $D --json > /tmp/cpruns/$TAG.final 2>&1
cp $D/*.log /tmp/cpruns/ 2>/dev/null; mkdir -p /tmp/cpruns/$TAG.logs; cp $D/*.log /tmp/cpruns/$TAG.logs/ 2>/dev/null
$B/scalebricks cluster down --dir $D >/dev/null 2>&1
cat /tmp/cpruns/$TAG.sim | head -c 600; echo
