# tests/softroce/vm/posting.sh — inside the VM (N ranks x D devices each): what the proxy posts per call, and what
# it costs. rocenante-perf under mpirun (host executor over ibverbs, rank r on its own D rxe devices through
# rank-env.sh), bf16 one_shot, 1 KiB to 64 KiB, at 2 ranks and at N ranks: calls posted once (the default) beside
# calls posted per part (--call-post-max-bytes 0, the descriptor per part and peer that came before), in the order
# once, per part, once. From rank 0's proxy counters per call (the line under each row), checks:
#   posted once:  1 doorbell, 2 (n-1) D writes (per peer and rail one payload write and one flag write)
#   per part:     n-1 doorbells (the host executor cuts these sizes into one part), 3 (n-1) writes (the payload and
#                 the flag's two halves per peer, on one device)
# and every row #wrong 0. Receipts: posting-npN-MODE.json in $SOFTROCE_OUT; the rows and their proxy lines printed.
. "$(dirname "$0")/common.sh"
: "${SOFTROCE_PERF:?}"
unset ROCENANTE_TRANSPORT ROCENANTE_ALGO
# Writes of 32 KiB per rail: at the default ACK timeout (67 ms) a loaded VM's requesters retransmit from the middle of
# a multi-packet WRITE, which rxe (kernel 6.1) has answered with a "remote invalid request" NAK (example03.sh).
export ROCENANTE_IB_TIMEOUT=18
D=${SOFTROCE_DEVICES:-1}
perf() { # perf NP ARGS...
  local np=$1
  shift
  timeout --kill-after=5 600 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    "$SOFTROCE_SRC/rank-env.sh" "$SOFTROCE_PERF" --transport ibverbs "$@"
}
for np in 2 "$SOFTROCE_RANKS"; do
  for mode in once per_part once-again; do
    json=$SOFTROCE_OUT/posting-np$np-$mode.json
    extra=()
    [ "$mode" = per_part ] && extra=(--call-post-max-bytes 0)
    t0=$SECONDS
    out=$(perf "$np" -b 1K -e 64K -f 4 -n 20 -w 5 -d bfloat16 --algo one_shot -J "$json" "${extra[@]}" 2>&1); rc=$?
    echo "$out" | grep -E '^ +[0-9]+ |proxy of rank 0|Out of bounds|rocenante-perf:' | sed "s/^/    [np $np $mode] /"
    echo "(rocenante-perf, $np ranks, $mode: exit $rc after $((SECONDS - t0)) s)"
    [ "$rc" = 0 ] && ok "$np ranks, $mode: exit 0, every row #wrong 0" || ko "$np ranks, $mode: exit $rc"
    if [ "$mode" = per_part ]; then want_bells=$((np - 1)) want_writes=$((3 * (np - 1))) whole=0
    else want_bells=1 want_writes=$((2 * (np - 1) * D)) whole=1; fi
    # "#   proxy of rank 0, per call: B doorbells (W whole calls), X writes, C completions, busy ..."
    lines=$(grep -c 'proxy of rank 0, per call' <<<"$out")
    bad=$(awk -v b="$want_bells" -v w="$want_writes" -v c="$whole" '/proxy of rank 0, per call/ {
            line = $0; gsub(/[(),]/, " "); $0 = $0
            if ($8 + 0 != b || $10 + 0 != c || $13 + 0 != w) { bad++; print "    counters off: " line > "/dev/stderr" } }
          END { print bad + 0 }' <<<"$out")
    [ "$lines" = 4 ] && [ "$bad" = 0 ] && ok "$np ranks, $mode: every row $want_bells doorbell(s), $want_writes writes per call" ||
      ko "$np ranks, $mode: $lines proxy lines, $bad with other counts than $want_bells doorbells, $want_writes writes"
  done
done
summary
