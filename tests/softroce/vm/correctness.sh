# tests/softroce/vm/correctness.sh — inside the VM: every algorithm x dtype x count over the ibverbs transport,
# ranks as processes (mpirun), set up through bootstrap::mpi and, at 2 ranks, also through bootstrap::callback.
. "$(dirname "$0")/common.sh"
rc=0
mpi "$SOFTROCE_RANKS" correctness || rc=1
if [ "$SOFTROCE_RANKS" = 2 ] && [ "${SOFTROCE_DEVICES:-1}" = 1 ]; then
  mpi 2 correctness --callback || rc=1
fi
exit $rc
