#!/bin/bash
cd /work/u
for r in 1 2 3; do for b in before after; do
  ./$b/scalebricks-bench update --keys 100000 --updates 1000 --batch 256 --cluster --json > raw-$b-r$r.json 2> raw-$b-r$r.err
  python3 -c "
import json;d=json.load(open('raw-$b-r$r.json'));c=d['cluster'];u=c['cpu']
print('$b r$r', round(c['cluster_kops'],1), 'p50', round(c['propagation_p50_ms'],2), 'p99', round(c['propagation_p99_ms'],2), 'busy %.2f iowait %.2f nodes_us %.2f us %.2f'%(u['busy_share'],u['iowait_share'],u['nodes_cpu_us_per_update'],u['cpu_us_per_update']))"
done; done
