# tests/softroce/vm/routes.sh — inside the VM (4 ranks x 2 devices): per-peer routes (ROCENANTE_IB_ROUTES), the
# switchless ring of DGX Sparks: rank r reaches rank r+1 over its first device and rank r-1 over its second, and
# only those links carry traffic — every other pair of devices of different ranks is cut (blackhole rules, as
# common.sh's cut_pair). rank-env.sh sets the routes (SOFTROCE_ROUTES=ring).
#   1. 3 ranks without routes (every peer striped over both devices): the pairs do not connect, ibverbs is unusable
#      on every rank and every rank falls back to socket — the cuts bite
#   2. 3 ranks with routes (every pair has its own link): transport ibverbs, every pair connects, the start-up
#      all-reduce and the collectives after it exact on every rank; then every algorithm x dtype x count exact
#      (correctness, the transport used directly)
#   3. 4 ranks with routes (the opposite ranks have no route): transport ibverbs, "pairs that failed: 0-2, 1-3",
#      ring only, ring all-reduce exact
. "$(dirname "$0")/common.sh"
export ROCENANTE_DEBUG=INFO
unset ROCENANTE_TRANSPORT ROCENANTE_ALGO ROCENANTE_IB_ROUTES
[ "$SOFTROCE_RANKS" = 4 ] && [ "${SOFTROCE_DEVICES:-1}" = 2 ] || { echo "routes.sh needs 4 ranks x 2 devices"; exit 1; }
# cut_devices A B: devices A and B (198.18.0.<A+1>, 198.18.0.<B+1>) apart, both ways, with rules ahead of the VM's
# own routing (preferences 10 and up): many rules may share a preference
cuts=0
cut_devices() {
  local a=198.18.0.$(($1 + 1)) b=198.18.0.$(($2 + 1))
  ip rule add pref 5 from "$a" to "$b" blackhole
  ip rule add pref 5 from "$b" to "$a" blackhole
  ip rule add pref 6 to "$b" iif "r$1" blackhole
  ip rule add pref 6 to "$a" iif "r$2" blackhole
  cuts=$((cuts + 1))
}
uncut_all() {
  local p
  for p in 5 6; do while ip rule del pref $p 2>/dev/null; do :; done; done
  cuts=0
}
# ring N: keep device (r, 0) <-> device (r+1, 1) for every rank r < N; cut every other pair of devices of two ranks
ring() {
  local n=$1 a b ra rb
  for a in $(seq 0 $((2 * n - 1))); do
    for b in $(seq $((a + 1)) $((2 * n - 1))); do
      ra=$((a / 2)) rb=$((b / 2))
      [ $ra = $rb ] && continue
      { [ $((a % 2)) = 0 ] && [ $b = $((2 * ((ra + 1) % n) + 1)) ]; } && continue
      { [ $((b % 2)) = 0 ] && [ $a = $((2 * ((rb + 1) % n) + 1)) ]; } && continue
      cut_devices "$a" "$b"
    done
  done
  echo "    ring of $n: $cuts device pairs cut"
}

# 1 and 2: three ranks
ring 3
out=$(mpi 3 select 2>&1); rc=$?
echo "$out" | grep -E 'ROCENANTE (INFO|WARN) transport' | head -3 | sed 's/^/    /' | cut -c1-400
[ "$rc" = 0 ] && has "$out" "every rank falls back to socket together" && has "$out" "transport socket (ROCENANTE_TRANSPORT=auto" &&
  ok "3 ranks without routes: ibverbs unusable on every rank, socket together (the cuts bite)" ||
  ko "3 ranks without routes: rc $rc, no fallback to socket"
export SOFTROCE_ROUTES=ring
out=$(mpi 3 select 2>&1); rc=$?
echo "$out" | grep -E 'ROCENANTE (INFO|WARN) transport|^(PASS|FAIL)' | head -12 | sed 's/^/    /' | cut -c1-400
[ "$rc" = 0 ] && ok "3 ranks with routes: exit 0" || ko "3 ranks with routes: exit $rc"
for r in 0 1 2; do
  log=$(grep -F "[rank $r] ROCENANTE " <<<"$out")
  if has "$log" "transport ibverbs (ROCENANTE_TRANSPORT=auto" && has "$log" "connectivity: every pair of 3 ranks connects" &&
     has "$out" "PASS rank $r: auto all-reduce of 1000 fp32 on transport ibverbs exact"; then
    ok "rank $r: ibverbs over its routes, every pair connects, all-reduce exact"
  else
    ko "rank $r: not ibverbs with every pair connected"
  fi
done
has "$out" "PASS select: 0 failed check(s) over 3 ranks" && ok "3 ranks: no failed check" || ko "3 ranks: failed checks"
mpi 3 correctness >/tmp/routes-correctness.log 2>&1 && ok "3 ranks with routes: every algorithm x dtype x count exact" ||
  { ko "3 ranks with routes: correctness failed"; grep -E '^FAIL' /tmp/routes-correctness.log | head -5; }
uncut_all

# 3: four ranks, the opposite ranks without a route
ring 4
out=$(mpi 4 select 2>&1); rc=$?
echo "$out" | grep -E 'ROCENANTE (INFO|WARN) transport|^(PASS|FAIL)' | head -12 | sed 's/^/    /' | cut -c1-400
[ "$rc" = 0 ] && ok "4 ranks with routes: exit 0" || ko "4 ranks with routes: exit $rc"
for r in 0 1 2 3; do
  log=$(grep -F "[rank $r] ROCENANTE " <<<"$out")
  if has "$log" "transport ibverbs (ROCENANTE_TRANSPORT=auto" && has "$log" "connectivity: pairs that failed: 0-2, 1-3;" &&
     has "$log" "(ring only: one_shot refused by connectivity)" &&
     has "$out" "PASS rank $r: auto all-reduce of 1000 fp32 on transport ibverbs exact"; then
    ok "rank $r: ibverbs, the opposite pairs without a route, ring only, all-reduce exact"
  else
    ko "rank $r: not ibverbs ring-only with pairs 0-2, 1-3 failed"
  fi
done
uncut_all
summary
