#!/usr/bin/env bash
# The whole test suite, as README.md gives it and .ci/run calls it:
#   formatting, clippy with warnings denied (default and all features), the API docs with
#   warnings denied, every test in debug mode
#   (unit, property tests against HashMap oracles, CLI tests from outside, network-namespace
#   end-to-end tests checked by tshark and scapy), loom models of the cuckoo table's and the live GPT's reader/writer
#   protocol, a short run of every cargo-fuzz target, and the release-mode `large_` tests (16M keys;
#   `#[ignore]`d, so the debug step does not run them; the last step runs them with `--ignored`).
# Run as root it first installs what the tests need from Debian; the namespace tests need root.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
FUZZ_SECONDS=${FUZZ_SECONDS:-15}

features=()
if [ "$(id -u)" -eq 0 ]; then
    step "installing test tools and peer libraries from Debian"
    scripts/apt-install.sh tshark prometheus python3-prometheus-client python3-scapy tcpreplay \
        tcpdump iproute2 procps pkg-config build-essential libdpdk-dev libcuckoo-dev
fi
if pkg-config --exists libdpdk 2>/dev/null && [ -d /usr/include/libcuckoo ]; then
    features=(--all-features)
else
    echo "note: libdpdk-dev/libcuckoo-dev missing (not root?): peers behind features are not tested"
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (default features, warnings denied)"
cargo clippy --workspace --all-targets -- -D warnings
if [ ${#features[@]} -gt 0 ]; then
    step "cargo clippy (all features: dpdk, libcuckoo, xdp; warnings denied)"
    cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
fi

step "cargo doc (warnings denied: broken and private intra-doc links)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace

step "cargo test (debug)"
cargo test --workspace "${features[@]}"

step "loom models of the cuckoo table's reader/writer protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p sb-cuckoo --test loom --release

step "loom models of the live GPT's reader/writer protocol (a seqlock per block)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p sb-setsep --test loom --release

step "fuzz targets, ${FUZZ_SECONDS}s each"
if rustup toolchain list 2>/dev/null | grep -q nightly; then
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    for dir in crates/*/fuzz; do
        [ -f "$dir/Cargo.toml" ] || continue
        crate_dir=$(dirname "$dir")
        for target in $(cd "$crate_dir" && cargo +nightly fuzz list); do
            echo "--- $crate_dir: $target"
            log=$(mktemp)
            if ! (cd "$crate_dir" && cargo +nightly fuzz run "$target" -- \
                -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048) >"$log" 2>&1; then
                tail -n 40 "$log"
                echo "fuzz target $target failed"
                exit 1
            fi
            grep -E '^Done|^#[0-9]+ +DONE' "$log" | tail -n 1 || true
            rm -f "$log"
        done
    done
else
    echo "note: no nightly toolchain, fuzz targets not run (their logic still runs in proptests)"
fi

step "release-mode large tests"
cargo test --workspace --release "${features[@]}" -- --ignored large_

step "the README's main job (cargo run --release --bin scalebricks -- demo)"
# The same release build as the step above (its features), so nothing is built again.
cargo run --release "${features[@]}" --bin scalebricks -- demo --json > target/demo.json
grep -q '"ok": true' target/demo.json
