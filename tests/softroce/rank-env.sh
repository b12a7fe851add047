#!/usr/bin/env bash
# tests/softroce/rank-env.sh — mpirun wrapper used inside the Soft-RoCE VM: gives each rank its own rxe devices
# (rank r: rxe(r*D) .. rxe(r*D+D-1), D = $SOFTROCE_DEVICES) through ROCENANTE_IB_HCA, then execs the program.
# On real clusters (one rank per node) every rank sets the same ROCENANTE_IB_HCA and needs no wrapper.
#   mpirun -np 2 tests/softroce/rank-env.sh PROGRAM ARGS...
r=${OMPI_COMM_WORLD_RANK:?not started by OpenMPI mpirun}
d=${SOFTROCE_DEVICES:-1}
hca=""
for k in $(seq 0 $((d - 1))); do hca="$hca${hca:+,}rxe$((r * d + k))"; done
export ROCENANTE_IB_HCA=$hca
# SOFTROCE_ROUTES=ring (2 devices per rank): a switchless ring — the next rank over this rank's first device, the
# previous one over its second, no route to any other rank (tests/softroce/vm/routes.sh).
if [ "${SOFTROCE_ROUTES:-}" = ring ]; then
  n=${OMPI_COMM_WORLD_SIZE:?}
  export ROCENANTE_IB_ROUTES="$(((r + 1) % n))=rxe$((r * d));$(((r + n - 1) % n))=rxe$((r * d + 1))"
fi
exec "$@"
