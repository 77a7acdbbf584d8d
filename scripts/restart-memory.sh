#!/usr/bin/env bash
# What a control state machine's restart costs in memory (issue 29): a 4-node namespace cluster
# (root), SESSIONS open5gs-shaped sessions through `scalebricks smf-sim`, then node 0 stopped
# for 3 s (SIGSTOP: its peers elect other leaders for its ranges; when it runs again it is
# fenced and restarts its state machine from its log, in-process, as after a partition).
# Prints node 0's RSS before, and its peak (VmHWM, reset just before the stop) and RSS once
# the restart is done; then whether the cluster was ready again within 60 s, and takes it down.
#   scripts/restart-memory.sh [BIN_DIR (default target/release)] [SESSIONS (default 2000000)]
set -u
bin=${1:-target/release}
n=${2:-2000000}
sb="$bin/scalebricks"
[ -x "$sb" ] || { echo "no $sb: cargo build --release -p scalebricks first" >&2; exit 1; }
work=$(mktemp -d /tmp/restart-memory.XXXXXX)
d=$work/state
trap '"$sb" cluster down --dir "$d" >/dev/null 2>&1; rm -rf "$work"' EXIT
"$sb" cluster up --nodes 4 --name rm$((RANDOM % 90 + 10)) --dir "$d" --flows 1000 --seed 1 \
    --capacity $((n * 5 / 4 + 1000)) >"$work/up.log" 2>&1 || { cat "$work/up.log"; exit 1; }
ready() {
    "$sb" cluster status --dir "$d" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)["nodes"]
ok = r and all(x["up"] and x["ready"] for x in r) and len({str(x.get("gpt_digest")) for x in r}) == 1
print("yes" if ok else "no")'
}
for _ in $(seq 1 240); do [ "$(ready)" = yes ] && break; sleep 0.5; done
"$sb" smf-sim --dir "$d" --sessions "$n" --window 256 --timeout 900 --shape open5gs >"$work/sim.json" 2>"$work/sim.err" \
    || { echo "smf-sim failed"; tail -3 "$work/sim.err"; exit 1; }
/usr/bin/python3 -c "import json; d = json.load(open('$work/sim.json')); print('established', d.get('established'), 'sessions/s', round(d.get('sessions_per_s', 0)))"
sleep 5
pid=$("$sb" cluster status --dir "$d" --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["nodes"][0]["pid"])')
mib() { awk -v k="$1:" '$1 == k { print int($2 / 1024) }' "/proc/$pid/status"; }
echo "node 0 before: rss_mib=$(mib VmRSS)"
echo 5 >"/proc/$pid/clear_refs"
kill -STOP "$pid"; sleep 3; kill -CONT "$pid"
for _ in $(seq 1 240); do grep -q "restart: log read" "$d"/*.log 2>/dev/null && break; sleep 0.5; done
grep -h "is fenced\|restart: log read" "$d"/*.log | head -4
sleep 5
echo "node 0 after the restart: peak_mib=$(mib VmHWM) rss_mib=$(mib VmRSS)"
for _ in $(seq 1 120); do [ "$(ready)" = yes ] && break; sleep 0.5; done
echo "ready again within 60 s: $(ready)"
