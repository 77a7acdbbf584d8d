# Step bookkeeping shared by scripts/test.sh and scripts/reproduce.sh (sourced, not run):
# `step NAME "what"` closes the step before it and prints its heading (to the descriptor
# STEPS_FD, default 1); the EXIT trap closes the last one and prints the table of wall seconds
# per step, so a failing run still says where its time went. `steps`/`secs` hold the closed
# steps, `run_start` the start.
steps=()
secs=()
cur=""
cur_start=0
run_start=$(date +%s)
step_end() {
    if [ -n "$cur" ]; then
        steps+=("$cur")
        secs+=($(($(date +%s) - cur_start)))
        cur=""
    fi
}
step() {
    step_end
    cur=$1
    cur_start=$(date +%s)
    printf '\n==> %s\n' "$2" >&"${STEPS_FD:-1}"
}
summary() {
    local rc=$? failed=""
    [ "$rc" -ne 0 ] && failed=$cur
    step_end
    printf '\n==> wall seconds per step\n'
    local i
    for i in "${!steps[@]}"; do
        printf '%-10s %6s%s\n' "${steps[$i]}" "${secs[$i]}" \
            "$([ "${steps[$i]}" = "$failed" ] && echo '  FAILED')"
    done
    printf '%-10s %6s%s\n' total $(($(date +%s) - run_start)) "$([ "$rc" -ne 0 ] && echo "  (exit $rc)")"
}
trap summary EXIT
