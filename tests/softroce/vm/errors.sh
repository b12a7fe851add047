# tests/softroce/vm/errors.sh — inside the VM: set-up errors must name the device (HAZARDS #19).
#   1. a GID index with no address      -> transport_error naming rxe1 and the index
#   2. a device whose link is DOWN      -> transport_error naming rxe0 and DOWN
#   3. a device that does not exist     -> transport_error naming it and listing the devices present
#   4. control: rxe1 as it is           -> set-up works, a one-rank all-reduce is right
#   5. a two-rank job where rank 0's device is DOWN -> both ranks fail set-up (no rank left waiting), each message
#      names rank 0 and the device
. "$(dirname "$0")/common.sh"
: "${SOFTROCE_PROBE:?}"
pass=0 fail=0
expect() { # expect NAME CODE PATTERN... -- COMMAND...
  local name=$1 code=$2 pats=()
  shift 2
  while [ "$1" != -- ]; do pats+=("$1"); shift; done
  shift
  local out rc ok=1
  out=$("$@" 2>&1); rc=$?
  [ "$rc" = "$code" ] || ok=0
  for p in "${pats[@]}"; do grep -qF -- "$p" <<<"$out" || ok=0; done
  if [ $ok = 1 ]; then pass=$((pass + 1)); echo "PASS $name"; else fail=$((fail + 1)); echo "FAIL $name (exit $rc, want $code; patterns: ${pats[*]})"; fi
  grep -v -E '^ *$|^-+$' <<<"$out" | sed 's/^/    /' | head -6
}
expect "control: rxe1 works" 0 "ibverbs set-up ok on rxe1" -- env ROCENANTE_IB_HCA=rxe1 "$SOFTROCE_PROBE" comm
expect "GID index with no address names the device" 3 "rxe1" "GID index 7 has no address" -- \
  env ROCENANTE_IB_HCA=rxe1 ROCENANTE_IB_GID_INDEX=7 "$SOFTROCE_PROBE" comm
expect "GID index outside the table names the device" 3 "rxe1" "outside the GID table" -- \
  env ROCENANTE_IB_HCA=rxe1 ROCENANTE_IB_GID_INDEX=4000 "$SOFTROCE_PROBE" comm
expect "unknown device is named" 3 "RDMA device mlx5_9 not found" "rxe0" -- env ROCENANTE_IB_HCA=mlx5_9 "$SOFTROCE_PROBE" comm
ip link set r0 down
sleep 1
expect "DOWN device names the device" 3 "RDMA device rxe0 port 1: port is DOWN" -- env ROCENANTE_IB_HCA=rxe0 "$SOFTROCE_PROBE" comm
expect "two ranks, rank 0's device DOWN: both fail set-up naming it" 3 \
  "FAIL rank 0: correctness: set-up step 'connection cards' failed on rank 0: RDMA device rxe0 port 1: port is DOWN" \
  "FAIL rank 1: correctness: set-up step 'connection cards' failed on rank 0: RDMA device rxe0 port 1: port is DOWN" \
  -- mpi 2 correctness
ip link set r0 up
echo "$pass passed, $fail failed"
[ $fail = 0 ]
