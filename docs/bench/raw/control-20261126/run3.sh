#!/bin/bash
# after = main d9e249c; mi = + mimalloc; fold = + mimalloc + foldhash in sb-control
cd /work/u
for r in 1 2 3; do for b in after fo; do
  ./$b/scalebricks-bench update --keys 100000 --updates 1000 --batch 256 --cluster --json > v-$b-r$r.json 2> v-$b-r$r.err
  python3 -c "
import json;d=json.load(open('v-$b-r$r.json'));c=d['cluster'];u=c['cpu']
print('update $b r$r', round(c['cluster_kops'],1), 'p50', round(c['propagation_p50_ms'],2), 'p99', round(c['propagation_p99_ms'],2), 'busy %.2f iowait %.2f nodes_us %.2f us %.2f'%(u['busy_share'],u['iowait_share'],u['nodes_cpu_us_per_update'],u['cpu_us_per_update']))"
done; done
for r in 1 2 3; do for b in after fo; do
  ./$b/scalebricks-bench pfcp --sessions 100000 --window 256 --json > q-$b-r$r.json 2> q-$b-r$r.err
  python3 -c "
import json;d=json.load(open('q-$b-r$r.json'))
print('pfcp $b r$r', {k:d.get(k) for k in d if not isinstance(d.get(k),(dict,list))})"
done; done
