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
