#!/usr/bin/env bash
# Installs Debian packages that are missing, with retries (the mirrors are sometimes slow).
# Usage: scripts/apt-install.sh PKG...
set -euo pipefail
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "need root to install: ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
for attempt in 1 2 3 4 5; do
    if apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; then
        exit 0
    fi
    echo "apt-get failed (attempt $attempt), retrying" >&2
    sleep $((attempt * 5))
done
echo "could not install: ${missing[*]}" >&2
exit 1
