# tests/softroce/vm/common.sh — sourced by the scripts that run inside the Soft-RoCE VM (softroce-vm.sh).
# SOFTROCE_BIN (mpi_collectives), SOFTROCE_PROBE (ibverbs_probe) and SOFTROCE_SRC come from tests/softroce/meson.build.
: "${SOFTROCE_BIN:?}" "${SOFTROCE_SRC:?}" "${SOFTROCE_RANKS:?}"
# OpenMPI as root, more ranks than vCPUs, shared memory + loopback TCP between the ranks of the VM; the ranks
# yield while they wait (2 vCPUs carry up to 4 ranks, their proxies and the kernel's rxe work).
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_orte_tmpdir_base=/run  # session files on tmpfs (the overlay on /tmp refuses some unlinks)
mpi() { # mpi NP PROGRAM-ARGS...
  local np=$1
  shift
  local t0=$SECONDS
  timeout --kill-after=5 "${SOFTROCE_STEP_TIMEOUT:-600}" \
    mpirun --allow-run-as-root --oversubscribe --bind-to none ${SOFTROCE_MPIRUN_ARGS:-} -np "$np" "$SOFTROCE_SRC/rank-env.sh" "$SOFTROCE_BIN" "$@"
  local rc=$?
  echo "(mpirun -np $np ${1:-}: exit $rc after $((SECONDS - t0)) s)"
  return $rc
}

# Checks: ok/ko count a check and print its PASS or FAIL line; has TEXT PART: TEXT contains PART; ranks: 0..n-1.
# A script ends with `summary`, whose status fails when any check failed.
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $*"; }
ko() { fail=$((fail + 1)); echo "FAIL $*"; }
has() { grep -qF -- "$2" <<<"$1"; }
ranks() { seq 0 $((SOFTROCE_RANKS - 1)); }
summary() {
  echo "$pass passed, $fail failed"
  [ $fail = 0 ]
}

# cut_pair A B: cut ranks A and B apart (198.18.0.<A+1> <-> 198.18.0.<B+1>) with policy-routing blackhole rules,
# both ways (preferences 5-8), as a dead switch port between two nodes would; uncut_pair removes the rules. The VM's
# initramfs has no tc classifier modules (only sch_netem), and netem on a veth would cut every peer of that rank.
cut_pair() {
  local a=198.18.0.$(($1 + 1)) b=198.18.0.$(($2 + 1))
  ip rule add pref 5 from "$a" to "$b" blackhole
  ip rule add pref 6 from "$b" to "$a" blackhole
  ip rule add pref 7 to "$b" iif "r$1" blackhole
  ip rule add pref 8 to "$a" iif "r$2" blackhole
  ip rule show | sed 's/^/    rule: /' | head -6
}
uncut_pair() { for p in 5 6 7 8; do ip rule del pref $p; done; }

# select_collectives_on_socket OUT R: rank R's auto all-reduce and its collectives after start-up (mpi_collectives
# select) were exact on the socket transport, as OUT reports.
select_collectives_on_socket() {
  if has "$1" "PASS rank $2: auto all-reduce of 1000 fp32 on transport socket exact" &&
     has "$1" "PASS rank $2: 32 collectives after start-up on transport socket exact and identical on every rank"; then
    ok "rank $2: all-reduce and 32 collectives after start-up on socket exact"
  else
    ko "rank $2: collectives on socket not exact"
  fi
}
