#!/bin/bash
# Interleaved before/after runs: v4 = 80e39da (16-bit family), v5 = main 5dc0232 (32-bit odd slopes),
# v6 = h-family (20-bit slopes). Same machine, same keys (seed 1).
cd /work/fam
for r in 1 2 3; do
  for V in 1 2; do
    for b in v4 v5 v6; do
      echo "== r$r crate V=$V $b" >> crate.log
      ./bin/crate-$b 4194304 $V 16+8 32 build1,lookup,update >> crate.log 2>&1
      ./bin/crate-$b 1048576 $V 16+8 32 kernel > raw/kernel-$b-v$V-r$r.txt 2>&1
    done
  done
  for cfg in "1000000 1" "1000000 2" "4000000 1" "4000000 2" "16000000 2"; do
    set -- $cfg
    for b in v4 v5 v6; do
      ./bin/bench-$b gpt --keys $1 --value-bits $2 --peers setsep --json > raw/gpt-$b-$1-v$2-r$r.json 2> raw/gpt-$b-$1-v$2-r$r.err
    done
  done
done
echo done > done.txt
