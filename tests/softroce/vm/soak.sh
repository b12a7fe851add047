# tests/softroce/vm/soak.sh — inside the Soft-RoCE VM (softroce-vm.sh): rocenante-soak's launcher, rank r on rxe<r>
# over the ibverbs transport (forced: a fall-back to sockets would not be a Soft-RoCE soak), receipt in
# $SOFTROCE_OUT/soak.json; then the netem and rxe counters (retransmissions, retry exhaustion) beside it.
# Not a CI test: docs/performance.md "Soak" has the command. Extra arguments go to rocenante-soak.
: "${SOFTROCE_SOAK:?path of the rocenante-soak binary}" "${SOFTROCE_RANKS:?}" "${SOFTROCE_OUT:?}"
export ROCENANTE_TRANSPORT=${ROCENANTE_TRANSPORT:-ibverbs}
counters() {
  for d in $SOFTROCE_NETDEVS; do tc -s qdisc show dev "$d" | tr -s ' \n' ' ' | sed "s/^/qdisc $d: /"; echo; done
  for d in $SOFTROCE_RXE; do
    c=/sys/class/infiniband/$d/ports/1/hw_counters
    echo "$d: retry_exceeded_err=$(cat $c/retry_exceeded_err) completer_retry_err=$(cat $c/completer_retry_err) rcvd_seq_err=$(cat $c/rcvd_seq_err) duplicate_request=$(cat $c/duplicate_request) sent_pkts=$(cat $c/sent_pkts) rcvd_pkts=$(cat $c/rcvd_pkts)"
  done
}
echo "netem: $(tc qdisc show dev r0 | grep -o 'netem.*' | head -1); $SOFTROCE_RANKS ranks; $(nproc) vCPUs"
counters | sed 's/^/before: /'
"$SOFTROCE_SOAK" --launch "$SOFTROCE_RANKS" --hca-prefix rxe --json "$SOFTROCE_OUT/soak.json" "$@"
rc=$?
counters | tee "$SOFTROCE_OUT/counters.txt"
exit $rc
