# tests/softroce/vm/select_cut_neighbours.sh — inside the VM (4 ranks x 1 device): a cut between ring NEIGHBOURS
# (ranks 0 and 1) leaves ibverbs unusable — not even the ring closes — and every rank falls back to the socket
# transport together.
# The cut: blackhole rules between 198.18.0.1 and 198.18.0.2, both ways (common.sh's cut_pair), as select_cut.sh
# does for 0-2. The ibverbs transport's start-up probe (one signalled zero-length RDMA WRITE per queue pair) marks the pair;
# host::selected_communicator's connectivity report finds ring neighbours that do not connect, marks ibverbs
# unusable on every rank and moves every rank to the next candidate. The socket transport connects the ranks over
# 127.0.0.1: all ranks share the VM's one network namespace, so its traffic never takes the blackholed
# 198.18.0.x routes and is not cut (on real nodes the two transports would share the cut link; this test shows the
# decision, not a second network path).
#   1. auto: every rank logs "transport socket", "ibverbs unusable: ranks 0, 1, 2, 3: ring neighbours do not
#      connect: pairs that failed: 0-1", "every rank falls back to socket together" and "every pair of 4 ranks
#      connects" (socket); the all-reduce and the collectives after start-up are exact on every rank
#   2. ring named: exact on every rank, on socket
. "$(dirname "$0")/common.sh"
export ROCENANTE_DEBUG=INFO
unset ROCENANTE_TRANSPORT ROCENANTE_ALGO
n=$SOFTROCE_RANKS
[ "$n" = 4 ] || { echo "select_cut_neighbours.sh needs 4 ranks"; exit 1; }

cut_pair 0 1

# 1. auto
out=$(mpi "$n" select 2>&1); rc=$?
echo "$out" | sed 's/^/    /' | cut -c1-500
[ "$rc" = 0 ] && ok "auto: exit 0" || ko "auto: exit $rc, want 0"
for r in $(ranks); do
  log=$(grep -F "[rank $r] ROCENANTE " <<<"$out")
  if has "$log" "transport socket (ROCENANTE_TRANSPORT=auto" &&
     has "$log" "ibverbs unusable: ranks 0, 1, 2, 3: ring neighbours do not connect: pairs that failed: 0-1;" &&
     has "$log" "every rank falls back to socket together" && has "$log" "connectivity: every pair of 4 ranks connects"; then
    ok "rank $r: log names the failing pair 0-1 and the fallback of every rank to socket"
  else
    ko "rank $r: log does not name pair 0-1 and the fallback to socket"
  fi
  select_collectives_on_socket "$out" "$r"
done
has "$out" "PASS select: 0 failed check(s) over $n ranks" && ok "no failed check on any rank" || ko "failed checks"

# 2. ring named
out=$(mpi "$n" select ring 2>&1); rc=$?
echo "$out" | grep -E '^(PASS|FAIL|REFUSED)' | sed 's/^/    /' | cut -c1-300
[ "$rc" = 0 ] && ok "ring: exit 0" || ko "ring: exit $rc, want 0"
for r in $(ranks); do
  has "$out" "PASS rank $r: ring all-reduce of 1000 fp32 on transport socket exact" && ok "rank $r: ring exact on socket" ||
    ko "rank $r: ring not exact on socket"
done

uncut_pair
summary
