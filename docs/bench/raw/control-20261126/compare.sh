#!/bin/bash
# Interleaved runs of several builds of `scalebricks-bench update --cluster` (and optionally
# `bench pfcp`), as root. Each BUILD is a directory holding that build's `scalebricks` and
# `scalebricks-bench` (from `cargo build --release -p scalebricks -p sb-bench` on that commit;
# the bench runs the `scalebricks` beside it). Output: PREFIX-BUILD-rN.json here.
#
#   compare.sh update PREFIX BUILD...      # 3 rounds of the cluster update bench
#   compare.sh pfcp PREFIX BUILD...        # 3 rounds of bench pfcp, 100K sessions
#
# The files here came from (2026-11-26; builds: before = c632ab9, after = d9e249c,
# mi = d9e249c + mimalloc as global allocator, fold = mi + foldhash in sb-control,
# fo = d9e249c + foldhash = ca31e73):
#   compare.sh update raw before after; compare.sh update u after mi fold;
#   compare.sh pfcp p after fold; compare.sh update v after fo; compare.sh pfcp q after fo
set -euo pipefail
# Three rounds of the same runs as ../control-20261126b/compare.sh, written here.
here=$(cd "$(dirname "$0")" && pwd)
mode=$1 prefix=$2
shift 2
OUT=$here exec "$here/../control-20261126b/compare.sh" "$mode" "$prefix" 3 "$@"
