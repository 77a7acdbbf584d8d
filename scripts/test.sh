#!/usr/bin/env bash
# The whole test suite: formatting, lints, every test (unit, property, loom-free stress,
# network-namespace end-to-end as root), and the release-mode large-size tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" -eq 0 ]; then
    step "installing test tools (tshark, scapy, tcpreplay, iproute2, DPDK, libcuckoo)"
    scripts/apt-install.sh tshark python3-scapy tcpreplay iproute2 pkg-config build-essential \
        libdpdk-dev libcuckoo-dev
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test (debug)"
cargo test --workspace

step "release-mode large tests"
SB_LARGE_TESTS=1 cargo test --workspace --release -- large_
