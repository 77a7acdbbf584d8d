#!/usr/bin/env bash
# Runs a command with 2 MB hugepages reserved and a hugetlbfs of its own mounted, then undoes both.
#
#   scripts/hugepages.sh MB COMMAND [ARGS...]
#
# As root: raises vm.nr_hugepages by MB/2 pages (2 MB each), mounts a hugetlbfs of 2 MB pages at
# /run/scalebricks-huge.PID, exports SB_HUGE_DIR=that mount (sb_peers' DPDK EAL takes its memory
# from there: the DPDK peers of `bench fib` and `bench gpt` run on hugepages) and runs COMMAND.
# On exit, however it ends (the command fails, the script is interrupted or terminated), the
# mount is unmounted and removed and vm.nr_hugepages is set back to its value before. Prints what
# it did on stderr; exits with COMMAND's status.
# Not root, or MB = 0: runs COMMAND as it is (DPDK then runs with --no-huge and says so).
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 MB COMMAND [ARGS...]" >&2
    exit 2
fi
MB=$1
shift
case $MB in '' | *[!0-9]*) echo "$0: MB must be a number, got '$MB'" >&2; exit 2 ;; esac

say() { printf 'hugepages: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ] || [ "$MB" = 0 ]; then
    say "not root or 0 MB asked: running without hugepages"
    exec "$@"
fi

SYS=/proc/sys/vm/nr_hugepages
PREV=$(cat "$SYS")
NEED=$(((MB + 1) / 2))
DIR=/run/scalebricks-huge.$$
CHILD=
MOUNTED=0

undo() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
        kill -TERM "$CHILD" 2>/dev/null || true
        wait "$CHILD" 2>/dev/null || true
    fi
    if [ "$MOUNTED" = 1 ]; then
        umount "$DIR" || say "umount $DIR failed"
    fi
    rmdir "$DIR" 2>/dev/null || true
    echo "$PREV" > "$SYS" || say "could not restore vm.nr_hugepages=$PREV"
    say "undone: $DIR unmounted, vm.nr_hugepages $(cat "$SYS") (was $PREV)"
    exit "$rc"
}
trap undo EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

echo $((PREV + NEED)) > "$SYS"
GOT=$(($(cat "$SYS") - PREV))
if [ "$GOT" -lt "$NEED" ]; then
    say "the kernel gave $GOT of $NEED 2 MB pages (memory fragmented or short); DPDK falls back to --no-huge if that is too few"
fi
mkdir -p "$DIR"
mount -t hugetlbfs -o pagesize=2M,mode=0700 nodev "$DIR"
MOUNTED=1
say "vm.nr_hugepages $PREV -> $(cat "$SYS") (+$GOT for ${MB} MB), hugetlbfs at $DIR"
export SB_HUGE_DIR=$DIR
# In the background, so a signal to this script is handled (and the child stopped) at once.
"$@" &
CHILD=$!
set +e
wait "$CHILD"
rc=$?
set -e
CHILD=
exit "$rc"
