#!/usr/bin/env bash
# The whole test suite, as README.md gives it and .ci/run calls it:
#   formatting, clippy with warnings denied (default and all features), the API docs with
#   warnings denied, every test in debug mode (unit, property tests against HashMap oracles,
#   CLI tests from outside, network-namespace end-to-end tests checked by tshark and scapy;
#   built once, then run in three lanes at once: E2E_LANES below), loom models of the cuckoo
#   table's and the live GPT's reader/writer protocol, a short run of every cargo-fuzz target
#   (all in the one crate `fuzz/`, built once), and the release-mode `large_` tests (16M keys;
#   `#[ignore]`d, so the debug step does not run them; the last step runs them with `--ignored`).
# Run as root it installs what the tests need from Debian (in the background while fmt and the
# default clippy run); the namespace tests need root.
# At the end (also when a step fails) it prints each step's wall seconds.
#
# Environment:
#   ONLY=fuzz         run only the named steps (comma- or space-separated) of:
#                     fmt clippy doc test loom fuzz large demo (the Debian step runs as root anyway;
#                     `test` builds the test binaries, then runs them in lanes: E2E_LANES)
#   FUZZ_SECONDS=15   how long each fuzz target runs (10 under CI=true)
#   FUZZ_JOBS=<cpus>  how many fuzz targets run at once (each still gets FUZZ_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/.."

# CI (CI=true; 45 minutes on a fresh clone is the budget): the debug test build keeps line
# tables only (a panic's backtrace still names file and line; full debuginfo for every test
# binary and its optimized dependencies was most of the test step's 17-minute build), the
# release builds of the large tests and the demo skip LTO and debuginfo (they check results,
# not speed), and each fuzz target runs 10 s. Only under CI: a local run keeps the profiles of
# a developer's own `cargo test` and `cargo build --release`, so neither rebuilds the other's.
if [ "${CI:-}" = "true" ]; then
    export CARGO_PROFILE_TEST_DEBUG=${CARGO_PROFILE_TEST_DEBUG:-line-tables-only}
    FUZZ_SECONDS=${FUZZ_SECONDS:-10}
    fast_release=(env CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=0
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16)
else
    fast_release=()
fi
FUZZ_SECONDS=${FUZZ_SECONDS:-15}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
ONLY=${ONLY:-}

# Step bookkeeping (`step NAME "what"`, the table of seconds per step at exit).
. scripts/steps.sh
# want NAME: whether ONLY (empty: everything) names this step.
want() { [ -z "$ONLY" ] || [[ " ${ONLY//,/ } " == *" $1 "* ]]; }
for s in ${ONLY//,/ }; do
    case $s in
        fmt | clippy | doc | test | loom | fuzz | large | demo) ;;
        *) echo "ONLY: unknown step \`$s\` (fmt clippy doc test loom fuzz large demo)" >&2; exit 2 ;;
    esac
done

# The Debian packages (as root) install in the background while fmt and the default clippy
# run: those need none of them (the default build needs no system package, and a C compiler
# and pkg-config come with the toolchain's image). What follows waits for them (`apt-wait`).
apt_pid=""
if [ "$(id -u)" -eq 0 ]; then
    echo "==> installing test tools and peer libraries from Debian (beside fmt and clippy)"
    apt_log=$(mktemp)
    apt_t0=$(date +%s)
    scripts/apt-install.sh tshark prometheus python3-prometheus-client python3-scapy tcpreplay \
        tcpdump iproute2 procps pkg-config build-essential libdpdk-dev libcuckoo-dev \
        clang libbpf-dev >"$apt_log" 2>&1 &
    apt_pid=$!
fi
# wait_apt: waits for the install, prints its log and seconds; stops the run if it failed.
wait_apt() {
    [ -n "$apt_pid" ] || return 0
    step apt-wait "waiting for the Debian packages"
    local rc=0
    wait "$apt_pid" || rc=$?
    apt_pid=""
    cat "$apt_log"
    rm -f "$apt_log"
    echo "apt: $(($(date +%s) - apt_t0)) s in the background, exit $rc"
    [ "$rc" -eq 0 ] || { echo "installing the Debian packages failed (log above)"; exit 1; }
}

if want fmt; then
    step fmt "cargo fmt --check"
    cargo fmt --all -- --check
fi

if want clippy; then
    # Both runs stay: the default build has code of its own (`cfg(not(feature = ...))` in
    # sb-node and sb-bench) that only this run lints, and the two share the dependencies' check
    # builds. A plain `cargo check` instead would save only the lint pass over our crates
    # (measured on 2 busy cores: cold clippy 9m51s, nearly all dependencies; then a first check
    # of our crates 40 s; after touching their sources clippy 27 s, check 12 s).
    step clippy "cargo clippy (default features, warnings denied)"
    cargo clippy --workspace --all-targets -- -D warnings
fi

wait_apt
features=()
if pkg-config --exists libdpdk 2>/dev/null && [ -d /usr/include/libcuckoo ]; then
    features=(--all-features)
else
    echo "note: libdpdk-dev/libcuckoo-dev missing (not root?): peers behind features are not tested"
    # The XDP fast path needs only clang and libbpf-dev (scripts/install-bpf-tools.sh).
    if command -v clang >/dev/null && [ -f /usr/include/bpf/bpf_helpers.h ]; then
        features=(--features sb-xdp/bpf,sb-bench/fastpath,scalebricks/fastpath)
    fi
fi

if want clippy; then
    if [ ${#features[@]} -gt 0 ]; then
        step clippy-all "cargo clippy (${features[*]}: dpdk, libcuckoo, xdp, sb-xdp/bpf as present; warnings denied)"
        cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
    fi
fi

if want doc; then
    step doc "cargo doc (warnings denied: broken and private intra-doc links)"
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace
fi

# The test binaries that wait more than they compute: the namespace end-to-end tests, which
# bring clusters up, send bounded traffic and wait for it. One after another they took ~650 s
# of the ~1,000 s the debug test binaries ran (stop 38's suite). Each binary makes its clusters
# and namespaces under a prefix of its own (its pid), and no link in the root namespace, so
# binaries can run at once: these go in two lanes beside a third with every other binary.
# The binaries are those one `cargo test --no-run` built, run as cargo runs them (in their
# package's directory); a second `cargo test` selecting fewer targets would resolve other
# features (dev-dependencies count only for the packages whose targets are selected) and
# rebuild. The doc tests run last in the third lane. Each lane's output is printed whole.
E2E_LANES=("pfcp_e2e tea_e2e demo_netns" "engine_e2e control_e2e demo_netns_xdp cluster_e2e")

# run_bins LOG LIST: runs each test binary of LIST (lines: target name, package directory,
# executable), output in LOG; every binary runs (a failure does not stop the others); the
# status is 1 when one failed.
run_bins() {
    local log=$1 list=$2 name dir exe rc=0 t0
    t0=$(date +%s)
    while read -r name dir exe; do
        echo "     Running $name ($exe)" >>"$log"
        (cd "$dir" && CARGO_MANIFEST_DIR=$dir "$exe") >>"$log" 2>&1 </dev/null || {
            rc=1
            echo "FAILED: $name" >>"$log"
        }
    done <"$list"
    echo "lane $(basename "$list"): $(wc -l <"$list") binaries, $(($(date +%s) - t0)) s, exit $rc" >>"$log"
    return $rc
}

if want test; then
    step test-build "cargo test --no-run (debug: every test binary, built once)"
    lanes=$(mktemp -d)
    cargo test --workspace "${features[@]}" --no-run --message-format=json-render-diagnostics \
        >"$lanes/build.json"

    step test "cargo test (debug): the end-to-end binaries in ${#E2E_LANES[@]} lanes beside the rest"
    # Every test binary built: target name, package directory, executable.
    python3 - "$lanes/build.json" >"$lanes/all" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"])
PY
    e2e=" ${E2E_LANES[*]} "
    : >"$lanes/rest"
    for i in "${!E2E_LANES[@]}"; do : >"$lanes/e2e-$i"; done
    while read -r name dir exe; do
        lane=rest
        for i in "${!E2E_LANES[@]}"; do
            [[ " ${E2E_LANES[$i]} " == *" $name "* ]] && lane=e2e-$i
        done
        echo "$name $dir $exe" >>"$lanes/$lane"
    done <"$lanes/all"
    for t in $e2e; do
        grep -q "^$t " "$lanes/all" || { echo "E2E_LANES names $t, which no test target is"; exit 1; }
    done
    pids=()
    for i in "${!E2E_LANES[@]}"; do
        run_bins "$lanes/e2e-$i.log" "$lanes/e2e-$i" &
        pids+=($!)
    done
    lanes_rc=0
    run_bins "$lanes/rest.log" "$lanes/rest" || lanes_rc=1
    cat "$lanes/rest.log"
    echo "     Doc-tests (cargo test --doc)"
    cargo test --workspace "${features[@]}" --doc || lanes_rc=1
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || lanes_rc=1
        cat "$lanes/e2e-$i.log"
    done
    grep -h '^lane \|^FAILED: ' "$lanes"/*.log
    [ "$lanes_rc" -eq 0 ] || { echo "a test binary failed (its output above)"; exit 1; }
    # The simulated update rate with one and three replicas per range (a measurement, ignored
    # by the run above): printed, a few seconds.
    read -r _ dir exe < <(grep '^sim .*/control ' "$lanes/all")
    (cd "$dir" && "$exe" --ignored --nocapture update_rate)
    rm -rf "$lanes"
fi

if want loom; then
    step loom "loom models of the cuckoo table's reader/writer protocol"
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        cargo test -p sb-cuckoo --test loom --release

    step loom-gpt "loom models of the live GPT's reader/writer protocol (a seqlock per block)"
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        cargo test -p sb-setsep --test loom --release
fi

# One target's run: its log in $2; prints its last line of statistics, or its log's tail.
fuzz_one() {
    local target=$1 log=$2
    if (cd fuzz && cargo +nightly fuzz run "$target" -- \
        -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048) >"$log" 2>&1; then
        echo "--- $target: $(grep -E '^Done|^#[0-9]+ +DONE' "$log" | tail -n 1 || true)"
    else
        tail -n 40 "$log"
        echo "--- $target: FAILED (log above)"
        return 1
    fi
}

if want fuzz; then
    if rustup toolchain list 2>/dev/null | grep -q nightly; then
        step fuzz-build "cargo +nightly fuzz build (every target of fuzz/, one sanitizer build)"
        command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
        (cd fuzz && cargo +nightly fuzz build)

        mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
        [ ${#targets[@]} -gt 0 ] || { echo "cargo fuzz list found no targets in fuzz/"; exit 1; }
        step fuzz "fuzz targets, ${#targets[@]} of them, ${FUZZ_SECONDS}s each, ${FUZZ_JOBS} at a time"
        logs=$(mktemp -d)
        running=0
        fuzz_failed=0
        for target in "${targets[@]}"; do
            if [ "$running" -ge "$FUZZ_JOBS" ]; then
                wait -n || fuzz_failed=1
                running=$((running - 1))
            fi
            fuzz_one "$target" "$logs/$target.log" &
            running=$((running + 1))
        done
        while [ "$running" -gt 0 ]; do
            wait -n || fuzz_failed=1
            running=$((running - 1))
        done
        rm -rf "$logs"
        if [ "$fuzz_failed" -ne 0 ]; then
            echo "a fuzz target failed"
            exit 1
        fi
    else
        echo "note: no nightly toolchain, fuzz targets not run (their logic still runs in proptests)"
    fi
fi

if want large; then
    step large "release-mode large tests"
    # Only the packages that hold a `large_` test are built for it: `--workspace --release`
    # built (and thin-LTO linked) every test binary of every crate in release mode, most of
    # them to run nothing. The packages are found from the sources, so a new `large_` test is
    # never skipped.
    large_pkgs=()
    for d in $(grep -rl --include='*.rs' 'fn large_' crates | cut -d/ -f1-2 | sort -u); do
        large_pkgs+=(-p "$(sed -n 's/^name = "\(.*\)"/\1/p' "$d/Cargo.toml" | head -1)")
    done
    [ ${#large_pkgs[@]} -gt 0 ] || { echo "no large_ tests found under crates/"; exit 1; }
    echo "large_ tests in: ${large_pkgs[*]}"
    # `--all-features` applies to the packages selected; the XDP features name other packages
    # (cargo refuses those) and no large_ test needs them.
    large_features=()
    [ "${features[*]}" = "--all-features" ] && large_features=(--all-features)
    "${fast_release[@]}" cargo test --release "${large_pkgs[@]}" "${large_features[@]}" -- --ignored large_
fi

if want demo; then
    step demo "the README's main job (cargo run --release --bin scalebricks -- demo)"
    # The release build of the scalebricks binary alone (the large step builds only the
    # packages holding large_ tests; their dependencies' release builds are shared).
    "${fast_release[@]}" cargo run --release "${features[@]}" --bin scalebricks -- demo --json > target/demo.json
    grep -q '"ok": true' target/demo.json
fi
