# tests/softroce/vm/select.sh — inside the VM: the start-up transport decision (host::selected_communicator over
# bootstrap::mpi, ROCENANTE_DEBUG=INFO, ROCENANTE_TRANSPORT unset = auto), checked on every rank's own lines.
#   1. every device up: every rank's log says ibverbs was chosen, and one all-reduce is exact on every rank
#   2. rank 0's netdev down (r0, as errors.sh): rank 0's probe fails (port DOWN); the vote is the same on every
#      rank, and every rank falls back to the socket transport together (the ranks are processes, so loopback is
#      no candidate): every rank's log line (WARN: the other ranks could have used ibverbs) names rank 0, rxe0 and
#      DOWN and says every rank falls back to socket together; the all-reduce and the collectives after start-up
#      (fp32/bf16, auto/ring/one_shot all-reduce, all-gather, counts 1, 7, 4099, 16384) are exact on every rank.
#      The socket transport connects the ranks over 127.0.0.1 (one VM, one network namespace), so r0 being down
#      does not touch it.
#   3. the same with ROCENANTE_TRANSPORT=ibverbs (forced: no fallback): every rank fails set-up with the same
#      transport_error naming rank 0, the device and the reason (no rank left waiting, none goes on)
. "$(dirname "$0")/common.sh"
export ROCENANTE_DEBUG=INFO
unset ROCENANTE_TRANSPORT ROCENANTE_ALGO
n=$SOFTROCE_RANKS

# 1. ibverbs chosen everywhere
out=$(mpi "$n" select 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
[ "$rc" = 0 ] && ok "all devices up: exit 0" || ko "all devices up: exit $rc, want 0"
for r in $(ranks); do
  if has "$out" "[rank $r] ROCENANTE INFO transport ibverbs (ROCENANTE_TRANSPORT=auto" &&
     has "$out" "SELECT rank $r: transport ibverbs (ROCENANTE_TRANSPORT=auto" &&
     has "$out" "PASS rank $r: auto all-reduce of 1000 fp32 on transport ibverbs exact"; then
    ok "rank $r: log says ibverbs chosen, all-reduce exact"
  else
    ko "rank $r: no INFO line choosing ibverbs, or the all-reduce was not exact"
  fi
done
has "$out" "PASS select: 0 failed check(s) over $n ranks" && ok "no failed check on any rank" || ko "failed checks"

# 2. rank 0's device down: every rank falls back to socket together, naming rank 0 and the reason
ip link set r0 down
sleep 1
out=$(mpi "$n" select 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
[ "$rc" = 0 ] && ok "rank 0 down: exit 0" || ko "rank 0 down: exit $rc, want 0"
for r in $(ranks); do
  log=$(grep -F "[rank $r] ROCENANTE WARN transport socket (ROCENANTE_TRANSPORT=auto" <<<"$out")
  if has "$log" "ibverbs unusable: rank 0: " && has "$log" "rxe0" && has "$log" "port is DOWN" &&
     has "$log" "every rank falls back to socket together" && has "$log" "connectivity: every pair of $n ranks connects"; then
    ok "rank $r: log says socket, names rank 0, rxe0 and DOWN, every rank together"
  else
    ko "rank $r: no WARN line naming rank 0, rxe0, DOWN and the fallback to socket"
  fi
  select_collectives_on_socket "$out" "$r"
done
has "$out" "PASS select: 0 failed check(s) over $n ranks" && ok "no failed check on any rank" || ko "failed checks"

# 3. rank 0's device down, ibverbs forced: every rank fails together, naming rank 0, the device and the reason
out=$(ROCENANTE_TRANSPORT=ibverbs mpi "$n" select 2>&1); rc=$?
ip link set r0 up
echo "$out" | sed 's/^/    /'
[ "$rc" != 0 ] && ok "forced ibverbs, rank 0 down: exit $rc (not 0)" || ko "forced ibverbs, rank 0 down: exit 0"
has "$out" "PASS rank" && ko "forced ibverbs, rank 0 down: some rank ran an all-reduce" || ok "forced ibverbs, rank 0 down: no rank went on"
for r in $(ranks); do
  line=$(grep -F "FAIL rank $r: select: " <<<"$out" | head -1)
  if has "$line" "no transport usable by every rank (ROCENANTE_TRANSPORT=ibverbs)" &&
     has "$line" "ibverbs unusable: rank 0: " && has "$line" "rxe0" && has "$line" "port is DOWN" &&
     has "$line" "the transport was forced, so there is no fallback"; then
    ok "rank $r: forced: transport_error names rank 0, rxe0 and DOWN, no fallback"
  else
    ko "rank $r: forced: no transport_error naming rank 0, rxe0 and DOWN"
  fi
done
summary
