#!/usr/bin/env bash
# Installs what the `bpf` feature of sb-xdp builds with: clang (the BPF target) and libbpf-dev
# (bpf_helpers.h), from Debian, with apt-get update first and retries (scripts/apt-install.sh).
# Root only. Usage: scripts/install-bpf-tools.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install.sh clang libbpf-dev linux-libc-dev
clang --version | head -n 1
