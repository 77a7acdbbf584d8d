#!/usr/bin/env bash
# The whole test suite, as README.md gives it and .ci/run calls it:
#   formatting, clippy with warnings denied (the libraries and binaries with default features;
#   every target with the features present, linted while the test binaries build), the API
#   docs with warnings denied, every test in debug mode (unit, property tests against HashMap
#   oracles, CLI tests from outside, network-namespace end-to-end tests checked by tshark and
#   scapy; built once, then run in three lanes at once: E2E_LANES below), loom models of the
#   cuckoo table's, the live GPT's and the TEA table's reader/writer protocols, a short run of
#   every cargo-fuzz target (all in the one crate `fuzz/`, built once), the release-mode
#   `large_` tests (16M keys; `#[ignore]`d, so the debug step does not run them; the `large`
#   step runs them with `--ignored`), and the README's main job (`scalebricks demo`, the test
#   build's binary).
# Run as root it installs what the tests need from Debian (in the background while fmt and the
# default clippy run); the namespace tests need root.
# At the end (also when a step fails) it prints each step's wall seconds.
#
# Environment:
#   ONLY=fuzz         run only the named steps (comma- or space-separated) of:
#                     fmt clippy doc test loom fuzz large demo (the Debian step runs as root anyway;
#                     `clippy` and `test` build the test binaries, `test` then runs them in
#                     lanes: E2E_LANES; `demo` alone builds the release binary)
#   FUZZ_SECONDS=15   how long each fuzz target runs (6 under CI=true)
#   FUZZ_JOBS=<cpus>  how many fuzz targets run at once (each still gets FUZZ_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/.."

# CI (CI=true; 45 minutes on a fresh clone is the budget): the debug test build keeps line
# tables only (a panic's backtrace still names file and line; full debuginfo for every test
# binary and its optimized dependencies was most of the test step's 17-minute build), the
# release builds of the loom models and the large tests skip LTO and debuginfo (they check
# results, not speed), and each fuzz target runs 6 s (`FUZZ_SECONDS=600 ONLY=fuzz
# scripts/test.sh` for a longer search). Only under CI: a local run keeps the profiles of a
# developer's own `cargo test` and `cargo build --release`, so neither rebuilds the other's.
if [ "${CI:-}" = "true" ]; then
    export CARGO_PROFILE_TEST_DEBUG=${CARGO_PROFILE_TEST_DEBUG:-line-tables-only}
    FUZZ_SECONDS=${FUZZ_SECONDS:-6}
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
    # The default build's own code (`cfg(not(feature = ...))` in sb-node and sb-bench) is
    # linted here: libraries and binaries in check mode, whose dependency checks are the ones
    # `cargo doc` needs too. Every target (tests, benches, examples) is linted with the
    # features present while the test binaries are built (`test-build`, clippy-driver as the
    # workspace's compiler wrapper): one build of the dependencies for both, where a separate
    # `clippy --all-targets` checked every dependency again (629 s of a cold run on this VM).
    step clippy "cargo clippy --lib --bins (default features, warnings denied)"
    cargo clippy --workspace --lib --bins -- -D warnings
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

# The linted build: clippy-driver as the compiler of the workspace's own crates
# (RUSTC_WORKSPACE_WRAPPER, as `cargo clippy` runs it; dependencies are compiled as usual)
# while `cargo test --all-targets --no-run` builds every test binary: a lint is an error
# that fails this step. The doc tests later build with the same wrapper, so nothing rebuilds.
clippy_build=(env "RUSTC_WORKSPACE_WRAPPER=$(rustc --print sysroot)/bin/clippy-driver"
    "CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
demo_bin=""
if want clippy || want test; then
    step test-build "cargo test --all-targets --no-run (debug: every test binary, built once; clippy lints every target, warnings denied${features:+, ${features[*]}})"
    lanes=$(mktemp -d)
    "${clippy_build[@]}" cargo test --workspace --all-targets "${features[@]}" --no-run \
        --message-format=json-render-diagnostics >"$lanes/build.json"
    # Every test binary built (target name, package directory, executable; benches are built
    # to be linted, not run), and the scalebricks binary (the demo step runs it).
    python3 - "$lanes/build.json" "$lanes/demo_bin" >"$lanes/all" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kind = m["target"]["kind"]
    if m["profile"]["test"] and "bench" not in kind:
        print(m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"])
    elif kind == ["bin"] and m["target"]["name"] == "scalebricks":
        open(sys.argv[2], "w").write(m["executable"])
PY
    demo_bin=$(cat "$lanes/demo_bin" 2>/dev/null || true)
fi

if want test; then
    step test "cargo test (debug): the end-to-end binaries in ${#E2E_LANES[@]} lanes beside the rest"
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
    "${clippy_build[@]}" cargo test --workspace "${features[@]}" --doc || lanes_rc=1
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
fi
[ -z "${lanes:-}" ] || rm -rf "$lanes"

# loom_models STEP PACKAGE "what": the package's `tests/loom.rs`, in release mode under
# `--cfg loom` (one target directory for all, so loom's own build is shared).
loom_models() {
    step "$1" "loom models of $3"
    env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom "${fast_release[@]}" \
        cargo test -p "$2" --test loom --release
}

if want loom; then
    loom_models loom sb-cuckoo "the cuckoo table's reader/writer protocol"
    loom_models loom-gpt sb-setsep "the live GPT's reader/writer protocol (a seqlock per block)"
    loom_models loom-tea sb-tea "the TEA table's protocol (bucket writes and moves racing lookups)"
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
    # Only the test targets that hold a `large_` test are built for it (`--workspace
    # --release` built and linked every test binary of every crate in release mode, most of
    # them to run nothing). They are found from the sources (a test function `fn large_...()`
    # in `crates/C/tests/T.rs` or in `crates/C/src`), so a new one is never skipped.
    large_pkgs=()
    large_targets=()
    for f in $(grep -rlE --include='*.rs' '^\s*fn large_[A-Za-z0-9_]*\(\)\s*\{' crates | sort); do
        d=$(echo "$f" | cut -d/ -f1-2)
        p=(-p "$(sed -n 's/^name = "\(.*\)"/\1/p' "$d/Cargo.toml" | head -1)")
        [[ " ${large_pkgs[*]} " == *" ${p[*]} "* ]] || large_pkgs+=("${p[@]}")
        case $f in
            "$d"/tests/*.rs) t=$(basename "$f" .rs); large_targets+=(--test "$t") ;;
            *) large_targets+=(--lib) ;;
        esac
    done
    [ ${#large_pkgs[@]} -gt 0 ] || { echo "no large_ tests found under crates/"; exit 1; }
    echo "large_ tests in: ${large_pkgs[*]} (${large_targets[*]})"
    # `--all-features` applies to the packages selected; the XDP features name other packages
    # (cargo refuses those) and no large_ test needs them.
    large_features=()
    [ "${features[*]}" = "--all-features" ] && large_features=(--all-features)
    "${fast_release[@]}" cargo test --release "${large_pkgs[@]}" "${large_targets[@]}" \
        "${large_features[@]}" -- --ignored large_
fi

if want demo; then
    mkdir -p target
    if [ -n "$demo_bin" ]; then
        # The binary the test build made (the test profile: our crates at opt-level 1, their
        # dependencies at 2, debug assertions on): the same code as the release build, whose
        # build took 313 s of a cold run on this VM to run this for 10 s (the large step and
        # the fuzz build still compile most crates with optimizations).
        step demo "the README's main job: scalebricks demo, defaults (the test build's binary, $demo_bin)"
        "$demo_bin" demo --json >target/demo.json
    else
        step demo "the README's main job (cargo run --release --bin scalebricks -- demo)"
        "${fast_release[@]}" cargo run --release "${features[@]}" --bin scalebricks -- demo --json >target/demo.json
    fi
    grep -q '"ok": true' target/demo.json
fi
