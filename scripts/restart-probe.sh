#!/usr/bin/env bash
# Watches a cluster through one node's fence and restart (issue 29): a 4-node namespace cluster
# (root), N open5gs-shaped sessions (default 2,000,000), node 0 stopped for 3 s (SIGSTOP: its
# peers elect other leaders for its ranges and stand in for it; running again, it is fenced and
# restarts its state machine), then every node's up/ready/GPT digest every 5 s, POLLS times
# (default 36). The node logs are copied to OUT (default ./restart-probe-logs). STOP=0 stops no
# node: the same watch after the load generator exits, as a control.
#   N=2000000 POLLS=36 STOP=1 scripts/restart-probe.sh [BIN_DIR (default target/release)]
set -u
sb=${1:-target/release}/scalebricks
n=${N:-2000000}
out=${OUT:-restart-probe-logs}
[ -x "$sb" ] || { echo "no $sb: cargo build --release -p scalebricks first" >&2; exit 1; }
work=$(mktemp -d /tmp/restart-probe.XXXXXX)
d=$work/state
trap '"$sb" cluster down --dir "$d" >/dev/null 2>&1; rm -rf "$work"' EXIT
"$sb" cluster up --nodes 4 --name rp$((RANDOM % 90 + 10)) --dir "$d" --flows 1000 --seed 1 \
    --capacity $((n * 5 / 4 + 1000)) >"$work/up.log" 2>&1 || { cat "$work/up.log"; exit 1; }
st() {
    "$sb" cluster status --dir "$d" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)["nodes"]
print(" | ".join("%s up=%s ready=%s digest=%s" % (x.get("node"), x["up"], x["ready"], str(x.get("gpt_digest"))[:10]) for x in r))'
}
for _ in $(seq 1 60); do st | grep -q "ready=False" || break; sleep 1; done
"$sb" smf-sim --dir "$d" --sessions "$n" --window 256 --timeout 900 --shape open5gs >"$work/sim.json" 2>"$work/sim.err" \
    || { echo "smf-sim failed"; tail -3 "$work/sim.err"; exit 1; }
sleep 5
pid=$("$sb" cluster status --dir "$d" --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["nodes"][0]["pid"])')
echo "$(date +%T) before: $(st)"
if [ "${STOP:-1}" = 1 ]; then kill -STOP "$pid"; sleep 3; kill -CONT "$pid"; fi
for _ in $(seq 1 "${POLLS:-36}"); do sleep 5; echo "$(date +%T) $(st)"; done
mkdir -p "$out" && cp "$d"/*.log "$out"/
