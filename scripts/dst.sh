#!/usr/bin/env bash
# The deterministic simulation at nightly sizes: many more schedules than CI runs
# (`scripts/test.sh` runs the defaults: 1,000 random schedules, 100 with kills, 60 with full
# FIBs, 100 replicated ones with kills, partitions and crashes during restart, 13 with a dead
# node, 8 of each of the others: about 1,330). Every invariant is checked
# after every step of every schedule (`sb_control::sim`). A failure prints its seed; rerun one
# schedule with the variable the test names (SB_DST_SEED=S, SB_DST_REPL_SEED=S).
#
#   scripts/dst.sh            # about 20x CI's schedules (tens of minutes on 2 cores)
#   SCALE=5 scripts/dst.sh    # 5x
set -euo pipefail
cd "$(dirname "$0")/.."
scale=${SCALE:-20}
export SB_DST_SCHEDULES=$((1000 * scale))
export SB_DST_KILL_SCHEDULES=$((100 * scale))
export SB_DST_FULL_SCHEDULES=$((60 * scale))
export SB_DST_REPL_SCHEDULES=$((100 * scale))
export SB_DST_DEAD_SCHEDULES=$((12 * scale))
export SB_DST_RESTART_DEAD_SCHEDULES=$((8 * scale))
export SB_DST_BACKLOG_SCHEDULES=$((8 * scale))
export SB_DST_FAILOVER_SCHEDULES=$((8 * scale))
export SB_DST_WIPE_SCHEDULES=$((8 * scale))
echo "dst: ${SB_DST_SCHEDULES} random, ${SB_DST_REPL_SCHEDULES} replicated, $((8 * scale)) of each other schedule" >&2
start=$(date +%s)
cargo test --release -p sb-control --test sim -- --test-threads 2 --nocapture
echo "dst: passed in $(( $(date +%s) - start )) s" >&2
