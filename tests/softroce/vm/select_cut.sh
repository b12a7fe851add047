# tests/softroce/vm/select_cut.sh — inside the VM (4 ranks x 1 device): the ibverbs transport's start-up probe
# (one signalled zero-length RDMA WRITE per queue pair, transport::ibverbs::reachable) finds a cut pair, and
# host::selected_communicator turns it into the connectivity report: ring allowed, one_shot refused.
# The cut: blackhole rules between ranks 0 and 2 (198.18.0.1 <-> 198.18.0.3), both ways (common.sh's cut_pair): exactly
# one pair dropped, like a dead switch port between two nodes. 0 and 2 are not ring neighbours at 4 ranks
# (0-1-2-3-0), so the ring still closes.
#   1. auto:                 every rank logs "pairs that failed: 0-2" and "ring only", the all-reduce (ring) is exact
#   2. ring named:           exact on every rank
#   3. one_shot named:       refused on every rank (not_supported, naming the pair), nothing hangs
#   4. ROCENANTE_ALGO=one_shot: set-up refuses it on every rank (config_error naming the pair, ring suggested)
. "$(dirname "$0")/common.sh"
export ROCENANTE_DEBUG=INFO
unset ROCENANTE_TRANSPORT ROCENANTE_ALGO
n=$SOFTROCE_RANKS
[ "$n" = 4 ] || { echo "select_cut.sh needs 4 ranks"; exit 1; }

cut_pair 0 2

# 1. auto
out=$(mpi "$n" select 2>&1); rc=$?
echo "$out" | sed 's/^/    /' | cut -c1-400
[ "$rc" = 0 ] && ok "auto: exit 0" || ko "auto: exit $rc, want 0"
for r in $(ranks); do
  log=$(grep -F "[rank $r] ROCENANTE " <<<"$out")
  if has "$log" "transport ibverbs (ROCENANTE_TRANSPORT=auto" && has "$log" "connectivity: pairs that failed: 0-2;" &&
     has "$log" "(ring only: one_shot refused by connectivity)" &&
     has "$out" "PASS rank $r: auto all-reduce of 1000 fp32 on transport ibverbs exact"; then
    ok "rank $r: ibverbs, pairs that failed: 0-2, ring only, all-reduce exact"
  else
    ko "rank $r: log or all-reduce not as expected"
  fi
done

# 2. ring named
out=$(mpi "$n" select ring 2>&1); rc=$?
echo "$out" | grep -E '^(PASS|FAIL|REFUSED)' | sed 's/^/    /' | cut -c1-300
[ "$rc" = 0 ] && ok "ring: exit 0" || ko "ring: exit $rc, want 0"
for r in $(ranks); do
  has "$out" "PASS rank $r: ring all-reduce of 1000 fp32 on transport ibverbs exact" && ok "rank $r: ring exact" || ko "rank $r: ring not exact"
done

# 3. one_shot named: refused
out=$(mpi "$n" select one_shot 2>&1); rc=$?
echo "$out" | grep -E '^(PASS|FAIL|REFUSED)' | sed 's/^/    /' | cut -c1-300
[ "$rc" = 0 ] && ok "one_shot: exit 0 (refusal is the expected outcome)" || ko "one_shot: exit $rc, want 0"
for r in $(ranks); do
  line=$(grep -F "REFUSED rank $r: one_shot all-reduce: not_supported" <<<"$out")
  has "$line" "one_shot needs every pair of ranks connected, and start-up found pairs that failed: 0-2" && ok "rank $r: one_shot refused naming 0-2" ||
    ko "rank $r: one_shot not refused as expected"
done

# 4. ROCENANTE_ALGO=one_shot: refused at set-up
out=$(ROCENANTE_ALGO=one_shot mpi "$n" select 2>&1); rc=$?
echo "$out" | grep -E '^(PASS|FAIL|REFUSED)' | sed 's/^/    /' | cut -c1-300
[ "$rc" != 0 ] && ok "ROCENANTE_ALGO=one_shot: exit $rc (not 0)" || ko "ROCENANTE_ALGO=one_shot: exit 0"
for r in $(ranks); do
  line=$(grep -F "FAIL rank $r: select: rank $r: ROCENANTE_ALGO=one_shot refused on transport ibverbs" <<<"$out")
  has "$line" "pairs that failed: 0-2" && has "$line" "ring needs only ring neighbours and is allowed" &&
    ok "rank $r: set-up refuses one_shot naming 0-2" || ko "rank $r: set-up did not refuse one_shot as expected"
done

uncut_pair
summary
