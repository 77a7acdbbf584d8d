# Sourced by scripts/restart-memory.sh and scripts/restart-probe.sh: a 4-node namespace cluster
# (root) with N open5gs-shaped sessions established through `scalebricks smf-sim`.
# Needs `sb` (the scalebricks binary) and `n` (sessions). Sets `work` and `d` (its state
# directory, removed with the cluster on exit) and `pid0` (node 0's process); defines `rows`
# (each node's up/ready/GPT digest, one line) and `ready` (yes when every node is up and ready
# with one digest).
[ -x "$sb" ] || { echo "no $sb: cargo build --release -p scalebricks first" >&2; exit 1; }
work=$(mktemp -d /tmp/sessions-cluster.XXXXXX)
d=$work/state
trap '"$sb" cluster down --dir "$d" >/dev/null 2>&1; rm -rf "$work"' EXIT
rows() {
    "$sb" cluster status --dir "$d" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)["nodes"]
print(" | ".join("%s up=%s ready=%s digest=%s" % (x.get("node"), x["up"], x["ready"], str(x.get("gpt_digest"))[:10]) for x in r))'
}
ready() {
    "$sb" cluster status --dir "$d" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)["nodes"]
ok = r and all(x["up"] and x["ready"] for x in r) and len({str(x.get("gpt_digest")) for x in r}) == 1
print("yes" if ok else "no")'
}
"$sb" cluster up --nodes 4 --name sc$((RANDOM % 90 + 10)) --dir "$d" --flows 1000 --seed 1 \
    --capacity $((n * 5 / 4 + 1000)) >"$work/up.log" 2>&1 || { cat "$work/up.log"; exit 1; }
for _ in $(seq 1 120); do [ "$(ready)" = yes ] && break; sleep 0.5; done
"$sb" smf-sim --dir "$d" --sessions "$n" --window 256 --timeout 900 --shape open5gs >"$work/sim.json" 2>"$work/sim.err" \
    || { echo "smf-sim failed"; tail -3 "$work/sim.err"; exit 1; }
/usr/bin/python3 -c "import json; d = json.load(open('$work/sim.json')); print('established', d.get('established'), 'sessions/s', round(d.get('sessions_per_s', 0)))"
sleep 5
pid0=$("$sb" cluster status --dir "$d" --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["nodes"][0]["pid"])')
