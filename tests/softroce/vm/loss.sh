# tests/softroce/vm/loss.sh — inside the VM with tc netem loss on every rank's link: exact collectives, counting
# wrong results (must be 0) and fail-stops (a queue pair out of retries: allowed, counted, named). 10,000
# collectives at under 5% loss, 1,000 above. The VM's host-side timeout catches a hang.
. "$(dirname "$0")/common.sh"
spec=$(tc qdisc show dev r0 | grep -o 'loss [0-9.]*%' | head -1)
pct=$(grep -o '[0-9.]*' <<<"$spec")
n=10000
awk -v p="$pct" 'BEGIN{exit !(p >= 5)}' && n=1000
echo "netem: $spec on every rank link; $n collectives"
SOFTROCE_STEP_TIMEOUT=1400 mpi "$SOFTROCE_RANKS" loss "$n" --timeout-ms 10000
rc=$?
for d in $SOFTROCE_NETDEVS; do tc -s qdisc show dev "$d" | tr -s ' \n' ' ' | sed "s/^/qdisc $d: /"; echo; done
for d in $SOFTROCE_RXE; do
  c=/sys/class/infiniband/$d/ports/1/hw_counters
  echo "$d: retry_exceeded_err=$(cat $c/retry_exceeded_err) completer_retry_err=$(cat $c/completer_retry_err) rcvd_seq_err=$(cat $c/rcvd_seq_err) duplicate_request=$(cat $c/duplicate_request)"
done
exit $rc
