#!/bin/bash
# Interleaved runs of three SetSep builds, same machine, same keys (seed 1), outputs here.
# BIN (default ./bin) holds, for each build B in v4 v5 v6:
#   bench-B  = target/release/scalebricks-bench (`cargo build --release -p sb-bench`)
#   crate-B  = the sb-setsep bench binary (`cargo bench -p sb-setsep --bench setsep --no-run`
#              prints its path)
# built at v4 = 80e39da (16-bit family), v5 = 5dc0232 (any odd 32-bit slope), v6 = 4169133
# (20-bit slopes). build-rerun.txt: the `build1` lines of the same crate binaries, 5 rounds.
set -euo pipefail
bin=${BIN:-./bin}
out=$(cd "$(dirname "$0")" && pwd)
for r in 1 2 3; do
  for V in 1 2; do
    for b in v4 v5 v6; do
      echo "== r$r crate V=$V $b" >> "$out/crate.log"
      "$bin/crate-$b" 4194304 $V 16+8 32 build1,lookup,update >> "$out/crate.log" 2>&1
      "$bin/crate-$b" 1048576 $V 16+8 32 kernel > "$out/kernel-$b-v$V-r$r.txt" 2>&1
    done
  done
  for cfg in "1000000 1" "1000000 2" "4000000 1" "4000000 2" "16000000 2"; do
    set -- $cfg
    for b in v4 v5 v6; do
      "$bin/bench-$b" gpt --keys $1 --value-bits $2 --peers setsep --json > "$out/gpt-$b-$1-v$2-r$r.json"
    done
  done
done
