#!/usr/bin/env bash
# Installs what the benchmark peers behind cargo features link against:
# DPDK (EFD, rte_hash) and libcuckoo, plus pkg-config and a C++ compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install.sh pkg-config build-essential libdpdk-dev libcuckoo-dev
